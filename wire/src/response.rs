//! Reading a (non-streamed) response body into the normalised view a step record is made
//! of. Never fails: what is absent or of an unexpected shape is left `None`.

use atdp_schema::{Message, ToolCall};
use serde_json::Value;

use super::ApiKind;

/// What the proxy records of a reply, the same for every API, streamed or not.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResponseView {
    /// The assistant's message (text joined, tool calls); `None` for an error body or a
    /// stream that carried no message.
    pub message: Option<Message>,
    /// Why generation stopped, as the API reports it (`stop`, `length`, `tool_calls`,
    /// `end_turn`, `tool_use`, …). For the responses API, which reports a status instead:
    /// `tool_calls` when the output calls a function, else `stop` for `completed`, `length`
    /// or `content_filter` for `incomplete`, or the raw status or incomplete reason.
    pub finish_reason: Option<String>,
    /// The model the upstream reports having served.
    pub model: Option<String>,
    /// Prompt tokens (Anthropic: input tokens plus cache writes and reads).
    pub prompt_tokens: Option<i64>,
    /// Completion tokens.
    pub completion_tokens: Option<i64>,
    /// Completion token ids, when the upstream returns them (vLLM `token_ids`, or
    /// `token_id:N` tokens in the logprobs).
    pub token_ids: Option<Vec<i32>>,
    /// Log-probability of each completion token (OpenAI chat `logprobs.content`).
    pub logprobs: Option<Vec<f32>>,
    /// The error type (or code) of an upstream error body or error event.
    pub error_type: Option<String>,
    /// Whether the reply is whole: a response document, or a stream that reached its
    /// terminal event (`[DONE]`, `response.completed`, `message_stop`).
    pub complete: bool,
}

/// Reads a response body of `api`. An error body gives a view with no message and its
/// `error_type` set.
pub fn parse_response(api: ApiKind, body: &Value) -> ResponseView {
    let mut view = ResponseView {
        model: str_at(body, "model"),
        error_type: error_type(body),
        ..ResponseView::default()
    };
    if view.error_type.is_some() && !is_response_document(api, body) {
        return view;
    }
    match api {
        ApiKind::OpenAiChat => chat(body, &mut view),
        ApiKind::OpenAiResponses => responses(body, &mut view),
        ApiKind::AnthropicMessages => anthropic(body, &mut view),
    }
    view
}

fn is_response_document(api: ApiKind, body: &Value) -> bool {
    match api {
        ApiKind::OpenAiChat => body.get("choices").is_some_and(Value::is_array),
        ApiKind::OpenAiResponses => body.get("output").is_some_and(Value::is_array),
        ApiKind::AnthropicMessages => body.get("type").and_then(Value::as_str) == Some("message"),
    }
}

/// `error.type` (or `error.code`) of an OpenAI or Anthropic error body.
pub(crate) fn error_type(body: &Value) -> Option<String> {
    let error = body.get("error").filter(|e| e.is_object())?;
    str_at(error, "type")
        .or_else(|| str_at(error, "code"))
        .or_else(|| Some("error".to_owned()))
}

fn chat(body: &Value, view: &mut ResponseView) {
    let usage = body.get("usage");
    view.prompt_tokens = usage.and_then(|u| i64_at(u, "prompt_tokens"));
    view.completion_tokens = usage.and_then(|u| i64_at(u, "completion_tokens"));
    let Some(choice) = body.pointer("/choices/0") else {
        return;
    };
    view.complete = true;
    view.finish_reason = str_at(choice, "finish_reason");
    let mut tokens = TokenTrace::default();
    tokens.add_choice(choice);
    (view.token_ids, view.logprobs) = tokens.finish();
    let Some(message) = choice.get("message") else {
        return;
    };
    let content = str_at(message, "content").or_else(|| str_at(message, "refusal"));
    let tool_calls = array_at(message, "tool_calls")
        .iter()
        .map(|call| ToolCall {
            id: str_at(call, "id").unwrap_or_default(),
            name: call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            arguments: call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
        .collect();
    view.message = Some(assistant(content, tool_calls));
}

fn responses(body: &Value, view: &mut ResponseView) {
    let usage = body.get("usage");
    view.prompt_tokens = usage.and_then(|u| i64_at(u, "input_tokens"));
    view.completion_tokens = usage.and_then(|u| i64_at(u, "output_tokens"));
    if let Some(code) = body.get("error").and_then(|e| str_at(e, "code")) {
        view.error_type = Some(code);
    }
    let Some(output) = body.get("output").and_then(Value::as_array) else {
        return;
    };
    let mut text = String::new();
    let mut has_text = false;
    let mut tool_calls = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in array_at(item, "content") {
                    let field = match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => "text",
                        Some("refusal") => "refusal",
                        _ => continue,
                    };
                    if let Some(part_text) = part.get(field).and_then(Value::as_str) {
                        // Parts are joined with a newline, as request parts are (so a
                        // replayed reply matches what was recorded).
                        if has_text {
                            text.push('\n');
                        }
                        text.push_str(part_text);
                        has_text = true;
                    }
                }
            }
            Some("function_call") => tool_calls.push(ToolCall {
                id: str_at(item, "call_id")
                    .or_else(|| str_at(item, "id"))
                    .unwrap_or_default(),
                name: str_at(item, "name").unwrap_or_default(),
                arguments: str_at(item, "arguments").unwrap_or_default(),
            }),
            _ => {}
        }
    }
    let status = str_at(body, "status");
    view.complete = true;
    view.finish_reason = responses_finish_reason(
        status.as_deref(),
        body.pointer("/incomplete_details/reason")
            .and_then(Value::as_str),
        !tool_calls.is_empty(),
    );
    view.message = Some(assistant(has_text.then_some(text), tool_calls));
}

/// The finish reason of a responses-API reply, from its status.
pub(crate) fn responses_finish_reason(
    status: Option<&str>,
    incomplete_reason: Option<&str>,
    calls_tools: bool,
) -> Option<String> {
    let reason = match (status?, incomplete_reason) {
        ("completed", _) if calls_tools => "tool_calls",
        ("completed", _) => "stop",
        ("incomplete", Some("max_output_tokens")) => "length",
        ("incomplete", Some(reason)) => reason,
        (status, _) => status,
    };
    Some(reason.to_owned())
}

fn anthropic(body: &Value, view: &mut ResponseView) {
    if let Some(usage) = body.get("usage") {
        view.prompt_tokens = anthropic_input_tokens(usage);
        view.completion_tokens = i64_at(usage, "output_tokens");
    }
    let Some(blocks) = body.get("content").and_then(Value::as_array) else {
        return;
    };
    view.complete = true;
    view.finish_reason = str_at(body, "stop_reason");
    let mut text: Option<String> = None;
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let block_text = block.get("text").and_then(Value::as_str).unwrap_or("");
                let joined = text.get_or_insert_with(String::new);
                if !joined.is_empty() {
                    joined.push('\n');
                }
                joined.push_str(block_text);
            }
            Some("tool_use") => tool_calls.push(ToolCall {
                id: str_at(block, "id").unwrap_or_default(),
                name: str_at(block, "name").unwrap_or_default(),
                arguments: block
                    .get("input")
                    .map_or_else(|| "{}".to_owned(), Value::to_string),
            }),
            _ => {}
        }
    }
    view.message = Some(assistant(text, tool_calls));
}

/// Anthropic's prompt size: `input_tokens` counts only the uncached part, so cache writes
/// and reads are added.
pub(crate) fn anthropic_input_tokens(usage: &Value) -> Option<i64> {
    let input = i64_at(usage, "input_tokens")?;
    let cached = ["cache_creation_input_tokens", "cache_read_input_tokens"]
        .iter()
        .filter_map(|key| i64_at(usage, key))
        .sum::<i64>();
    Some(input.saturating_add(cached))
}

/// An assistant message.
pub(crate) fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Message {
    Message {
        role: "assistant".to_owned(),
        content,
        tool_calls,
        ..Message::default()
    }
}

/// Token ids and logprobs of an OpenAI chat choice, gathered over one or many chunks.
#[derive(Debug, Default)]
pub(crate) struct TokenTrace {
    logprobs: Vec<f32>,
    ids: Vec<i32>,
    /// Every logprob entry so far named its token as `token_id:N`.
    ids_from_tokens: bool,
    seen_logprobs: bool,
    seen_ids: bool,
    /// A message or delta held something besides what is recorded (`reasoning_content`, …):
    /// the ids then cover text the record does not hold, which no masking has read.
    unrecorded: bool,
    /// Text was seen in `content`, and in `refusal`: the record holds one of them only.
    content: bool,
    refusal: bool,
}

/// The members of a chat message or delta that the record holds.
const RECORDED_MEMBERS: &[&str] = &["role", "content", "refusal", "tool_calls"];

/// Whether `value` holds nothing: null, or an empty string, list or object.
fn empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(members) => members.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

impl TokenTrace {
    /// Adds a choice's (vLLM) `token_ids` and `logprobs.content`.
    pub(crate) fn add_choice(&mut self, choice: &Value) {
        let message = choice.get("message").or_else(|| choice.get("delta"));
        if let Some(members) = message.and_then(Value::as_object) {
            let text = |key: &str| members.get(key).filter(|v| !empty(v));
            // The record holds `content` when it is text, else `refusal`: content of another
            // shape, or both, leave text out.
            let content = text("content");
            self.content |= content.is_some();
            self.refusal |= text("refusal").is_some();
            if content.is_some_and(|c| !c.is_string())
                || members
                    .iter()
                    .any(|(key, value)| !RECORDED_MEMBERS.contains(&key.as_str()) && !empty(value))
            {
                self.unrecorded = true;
            }
        }
        if let Some(ids) = choice.get("token_ids").and_then(Value::as_array) {
            if !self.seen_ids {
                self.seen_ids = true;
                self.ids.clear();
            }
            let ids = ids.iter().filter_map(Value::as_i64);
            self.ids.extend(ids.filter_map(|id| i32::try_from(id).ok()));
        }
        let Some(entries) = choice
            .pointer("/logprobs/content")
            .and_then(Value::as_array)
        else {
            return;
        };
        if !self.seen_logprobs {
            self.seen_logprobs = true;
            self.ids_from_tokens = true;
        }
        for entry in entries {
            // f32 is the column's precision.
            let logprob = entry.get("logprob").and_then(Value::as_f64);
            self.logprobs.push(logprob.map_or(f32::NAN, |l| l as f32));
            if self.seen_ids || !self.ids_from_tokens {
                continue;
            }
            let id = entry
                .get("token")
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("token_id:"))
                .and_then(|n| n.parse::<i32>().ok());
            match id {
                Some(id) => self.ids.push(id),
                None => self.ids_from_tokens = false,
            }
        }
    }

    /// `(token_ids, logprobs)`, each `None` when the upstream sent none, and both `None` when
    /// the reply held text the record does not (the ids and log-probs cover it: they would
    /// carry text into the lake that no masking read, and would not match what is stored).
    pub(crate) fn finish(self) -> (Option<Vec<i32>>, Option<Vec<f32>>) {
        if self.unrecorded || (self.content && self.refusal) {
            return (None, None);
        }
        let from_tokens = self.ids_from_tokens && !self.ids.is_empty();
        let ids = (self.seen_ids || from_tokens).then_some(self.ids);
        (ids, self.seen_logprobs.then_some(self.logprobs))
    }
}

pub(crate) fn str_at(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn i64_at(value: &Value, key: &str) -> Option<i64> {
    value.get(key).and_then(Value::as_i64)
}

pub(crate) fn array_at<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}
