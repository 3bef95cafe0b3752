//! Reading a request body into the normalised view a step record is made of.

mod anthropic;
mod content;
pub(crate) mod fields;
mod offers;
mod openai;

pub use content::UnknownContent;
pub use offers::{Offer, OfferKind};

use std::collections::BTreeMap;

use atdp_schema::{Message, Tool};
use serde_json::{Map, Value};

use super::{ApiKind, WireError};

/// Sampling parameters: the top-level fields copied into a step's `params`.
const PARAMS: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stop",
    "stop_sequences",
    "seed",
    "n",
    "tool_choice",
    "parallel_tool_calls",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
    "reasoning",
];

/// Top-level fields with a column of their own; neither `params` nor `extra`.
const MODELLED: &[&str] = &[
    "model",
    "messages",
    "input",
    "system",
    "instructions",
    "tools",
    "stream",
    "stream_options",
];

/// The key of `extra` that counts content parts with no text (images, files, reasoning
/// items, …) by type.
pub(crate) const NON_TEXT_PARTS: &str = "non_text_parts";

/// What the proxy records of a request, the same for every API.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestView {
    /// The model string the client sent.
    pub model: String,
    /// Whether the client asked for a server-sent-event stream.
    pub stream: bool,
    /// OpenAI chat `stream_options.include_usage`: the stream's last chunk carries usage.
    pub include_usage: bool,
    /// The conversation: system prompt (`instructions`, `system`) first, then the messages
    /// in order; tool results are `tool` messages.
    pub messages: Vec<Message>,
    /// The tools offered, as recorded (function tools with their schema; other tools by type).
    pub tools: Vec<Tool>,
    /// Everything the request offers or enables that can act (tools of every form, MCP
    /// servers, skills, saved prompts), each with the Cedar `Tool` entity that decides it.
    pub offers: Vec<Offer>,
    /// Models other than `model` the provider may serve the call with (Anthropic
    /// `fallbacks`).
    pub extra_models: Vec<String>,
    /// Top-level fields the API's known list does not have ([`fields`]).
    pub unknown_fields: Vec<String>,
    /// Content blocks, parts and items of a type the API's known lists do not have.
    pub unknown_content: Vec<UnknownContent>,
    /// The parts no detector can read (images, audio, files, documents other than text),
    /// each by kind (`image`) and, when the request states a media type, by that type and by
    /// kind and type (`image/png`, `image:image/png`); sorted, without repeats.
    pub unscannable: Vec<String>,
    /// The sampling parameters present, as a JSON object's text.
    pub params: Option<String>,
    /// Top-level fields not otherwise modelled, and a count of non-text content parts
    /// (under `non_text_parts`), as a JSON object's text.
    pub extra: Option<String>,
}

/// Reads a request body of `api` into its [`RequestView`].
pub fn parse_request(api: ApiKind, body: &Value) -> Result<RequestView, WireError> {
    let obj = object(body, "(body)")?;
    let model = required_str(obj, "model", "")?.to_owned();
    let stream = optional_bool(obj, "stream", "")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        Some(options) if api == ApiKind::OpenAiChat && !options.is_null() => {
            let options = object(options, "stream_options")?;
            optional_bool(options, "include_usage", "stream_options")?.unwrap_or(false)
        }
        _ => false,
    };
    let mut non_text = NonText::default();
    let messages = match api {
        ApiKind::OpenAiChat => openai::chat_messages(obj, &mut non_text)?,
        ApiKind::OpenAiResponses => openai::responses_input(obj, &mut non_text)?,
        ApiKind::AnthropicMessages => anthropic::messages(obj, &mut non_text)?,
    };
    // The tools recorded are the definitions of the walk that decides them.
    let offers::Found {
        offers,
        tools,
        models: extra_models,
    } = offers::offers(api, obj)?;
    let content = content::read(api, obj)?;
    let params = select(obj, |key| PARAMS.contains(&key));
    let mut extra = select(obj, |key| {
        !PARAMS.contains(&key) && !MODELLED.contains(&key)
    });
    if !non_text.0.is_empty() {
        let counts = non_text.0.into_iter().map(|(k, n)| (k, Value::from(n)));
        extra.insert(NON_TEXT_PARTS.to_owned(), Value::Object(counts.collect()));
    }
    Ok(RequestView {
        model,
        stream,
        include_usage,
        messages,
        tools,
        offers,
        extra_models,
        unknown_fields: fields::unknown(api, obj),
        unknown_content: content.unknown,
        unscannable: content.unscannable.into_iter().collect(),
        params: object_text(params),
        extra: object_text(extra),
    })
}

/// Counts of content parts that carry no text, by type.
#[derive(Debug, Default)]
pub(crate) struct NonText(BTreeMap<String, u64>);

impl NonText {
    pub(crate) fn count(&mut self, kind: &str) {
        *self.0.entry(kind.to_owned()).or_default() += 1;
    }
}

/// The fields of `obj` whose key passes `keep`, in the body's order.
fn select(obj: &Map<String, Value>, keep: impl Fn(&str) -> bool) -> Map<String, Value> {
    obj.iter()
        .filter(|(k, _)| keep(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn object_text(map: Map<String, Value>) -> Option<String> {
    (!map.is_empty()).then(|| Value::Object(map).to_string())
}

/// Text of `content`: a string, `null`, or an array of parts whose `type` is one of
/// `text_parts` (`(type, field holding the text)`). Adjacent text parts are joined as the
/// provider reads them, with nothing between them; text parts on either side of another part
/// (an image) are joined with `\n`. Other parts are counted in `non_text`. `None` when there is
/// no text part at all.
pub(crate) fn content_text(
    content: Option<&Value>,
    path: &str,
    text_parts: &[(&str, &str)],
    non_text: &mut NonText,
) -> Result<Option<String>, WireError> {
    match content {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Array(parts)) => {
            let mut text = JoinedText::default();
            for (i, part) in parts.iter().enumerate() {
                let part_path = format!("{path}[{i}]");
                let part = object(part, &part_path)?;
                let kind = required_str(part, "type", &part_path)?;
                match text_parts.iter().find(|(t, _)| *t == kind) {
                    Some((_, field)) => text.push(required_str(part, field, &part_path)?),
                    None => {
                        non_text.count(kind);
                        text.gap();
                    }
                }
            }
            Ok(text.finish())
        }
        Some(_) => Err(WireError::wrong_type(
            path,
            "a string, null or an array of content parts",
        )),
    }
}

/// The text parts of one message joined as the provider reads them: adjacent parts with
/// nothing between them (a value cut across two parts is whole again, for the detectors and
/// in the record), parts on either side of another part with `\n`.
#[derive(Debug, Default)]
pub(crate) struct JoinedText {
    text: Option<String>,
    adjacent: bool,
}

impl JoinedText {
    /// The next text part.
    pub(crate) fn push(&mut self, part: &str) {
        match self.text.as_mut() {
            Some(text) => {
                if !self.adjacent {
                    text.push('\n');
                }
                text.push_str(part);
            }
            None => self.text = Some(part.to_owned()),
        }
        self.adjacent = true;
    }

    /// A part without text.
    pub(crate) fn gap(&mut self) {
        self.adjacent = false;
    }

    /// The joined text; `None` when there was no text part.
    pub(crate) fn finish(self) -> Option<String> {
        self.text
    }
}

/// `path.key`, or `key` at the top level.
pub(crate) fn field_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(crate) fn object<'a>(
    value: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, WireError> {
    value
        .as_object()
        .ok_or_else(|| WireError::wrong_type(path, "an object"))
}

pub(crate) fn required_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, WireError> {
    optional_str(obj, key, path)?.ok_or_else(|| WireError::missing(field_path(path, key)))
}

/// A string field; absent or `null` is `None`.
pub(crate) fn optional_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, WireError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(WireError::wrong_type(field_path(path, key), "a string")),
    }
}

fn optional_bool(
    obj: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<bool>, WireError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(WireError::wrong_type(field_path(path, key), "a boolean")),
    }
}

/// An array field that must be present.
pub(crate) fn required_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a [Value], WireError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(WireError::missing(key)),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(WireError::wrong_type(key, "an array")),
    }
}

/// An optional array field; absent or `null` is empty.
pub(crate) fn optional_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a [Value], WireError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(WireError::wrong_type(field_path(path, key), "an array")),
    }
}

/// JSON text of a value that the API carries as an object (tool input, parameters); a
/// string is taken as the JSON text itself.
pub(crate) fn json_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A tool that is not a plain function tool: the provider's type, and the name it gives
/// (or its type when it has none).
pub(crate) fn other_tool(
    kind: &str,
    obj: &Map<String, Value>,
    path: &str,
) -> Result<Tool, WireError> {
    let name = optional_str(obj, "name", path)?.unwrap_or(kind).to_owned();
    Ok(Tool {
        kind: kind.to_owned(),
        name,
        description: optional_str(obj, "description", path)?.map(str::to_owned),
        parameters: None,
    })
}
