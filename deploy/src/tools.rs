//! Function tools in the Qwen2.5 / Hermes format, the one the trainer renders: the model's
//! chat template lists the tools in the system turn, and the model answers a call as
//! `<tool_call>\n{"name": "<function>", "arguments": <JSON object>}\n</tool_call>`, one block per
//! call, after any text.
//!
//! - [`Tools::parse`] reads OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`;
//! - [`Tools::grammar`] is the Lark grammar (llguidance) that forces a call when the choice is
//!   `required` or a named function, and keeps arguments inside their JSON schema when a
//!   function is `strict`;
//! - [`ReplyParser`] turns the reply text into content and calls, as the text arrives: bytes
//!   that may begin a `<tool_call>` are held back until they are decided, so a stream splits
//!   the same way as the whole reply wherever its pieces are cut. A block that is not a call of
//!   an offered function with an object of arguments (bad JSON, an unknown name, a block left
//!   open at the end) stays in the content as the text the model wrote: nothing is dropped.
//!   Whitespace between text and a call, and between calls, is the template's separator and
//!   belongs to neither.

use atdp_schema::Tool;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// Opens a call.
pub(crate) const OPEN: &str = "<tool_call>";
/// Closes a call.
pub(crate) const CLOSE: &str = "</tool_call>";

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Choice {
    /// No call: the reply is text.
    None,
    /// The model decides.
    Auto,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// One function tool.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Function {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
    strict: bool,
}

/// The tools of a request and how they may be used.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tools {
    functions: Vec<Function>,
    choice: Choice,
    parallel: bool,
}

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    /// The function.
    pub name: String,
    /// The arguments: a JSON object, as the model wrote it.
    pub arguments: String,
}

/// A piece of a reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    /// Content text.
    Text(String),
    /// A call.
    Call(Call),
}

/// How the grammar names the tokens it needs: `<[id]>` for a token of the vocabulary, or
/// the text itself (a JSON string literal) when the tokenizer has no such token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Markers {
    /// `<tool_call>`.
    pub open: String,
    /// `</tool_call>`.
    pub close: String,
    /// The template's end-of-turn token, written after the calls so that a constrained reply
    /// ends as the template ends a turn (llguidance would otherwise end it with the
    /// tokenizer's end-of-text token, which is not what the trainer renders).
    pub end_of_turn: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::invalid(message, Some("tools"))
}

impl Tools {
    /// Reads `tools`, `tool_choice` and `parallel_tool_calls`. `None` when the request offers
    /// no tools.
    pub(crate) fn parse(
        tools: Option<&Value>,
        choice: Option<&Value>,
        parallel: Option<bool>,
    ) -> Result<Option<Tools>, ApiError> {
        let list = match tools {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(list)) => list.as_slice(),
            Some(_) => return Err(invalid("`tools` must be a list")),
        };
        let mut functions: Vec<Function> = Vec::with_capacity(list.len());
        for tool in list {
            let function = function(tool)?;
            if functions.iter().any(|f| f.name == function.name) {
                return Err(invalid(format!(
                    "two tools are named `{}`; names must be unique",
                    function.name
                )));
            }
            functions.push(function);
        }
        let choice = match choice {
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => Choice::None,
                "auto" => Choice::Auto,
                "required" => Choice::Required,
                _ => return Err(bad_choice()),
            },
            Some(Value::Object(o)) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .filter(|_| o.get("type").and_then(Value::as_str) == Some("function"))
                    .ok_or_else(bad_choice)?;
                Choice::Named(name.to_owned())
            }
            Some(_) => return Err(bad_choice()),
        };
        if functions.is_empty() {
            return match choice {
                Choice::None | Choice::Auto => Ok(None),
                Choice::Required | Choice::Named(_) => Err(ApiError::invalid(
                    "`tool_choice` asks for a tool call but `tools` offers none",
                    Some("tool_choice"),
                )),
            };
        }
        if let Choice::Named(name) = &choice
            && !functions.iter().any(|f| &f.name == name)
        {
            return Err(ApiError::invalid(
                format!("`tool_choice` names `{name}`, which is not in `tools`"),
                Some("tool_choice"),
            ));
        }
        Ok(Some(Tools {
            functions,
            choice,
            parallel: parallel.unwrap_or(true),
        }))
    }

    /// The tools as the chat template gets them, shaped exactly as the proxy records them
    /// (`parameters` as compact JSON text in the order the client sent), so that the served
    /// prompt is the prompt the trainer renders from the recorded step. With `tool_choice`
    /// `none` they are still in the prompt: the trainer sees them there too.
    pub(crate) fn for_template(&self) -> Vec<Tool> {
        self.functions
            .iter()
            .map(|f| Tool {
                kind: "function".to_owned(),
                name: f.name.clone(),
                description: f.description.clone(),
                parameters: f.parameters.as_ref().map(Value::to_string),
            })
            .collect()
    }

    /// Whether the reply must be a call.
    pub(crate) fn forced(&self) -> bool {
        matches!(self.choice, Choice::Required | Choice::Named(_))
    }

    /// Whether the model may call at all.
    pub(crate) fn callable(&self) -> bool {
        self.choice != Choice::None
    }

    /// Whether decoding is constrained: a forced call, or a `strict` function under `auto`.
    pub(crate) fn constrained(&self) -> bool {
        self.forced() || (self.choice == Choice::Auto && self.functions.iter().any(|f| f.strict))
    }

    /// The parser of this request's replies.
    pub(crate) fn parser(&self) -> ReplyParser {
        let names = if self.callable() {
            self.functions.iter().map(|f| f.name.clone()).collect()
        } else {
            Vec::new()
        };
        ReplyParser::new(names, if self.parallel { usize::MAX } else { 1 })
    }

    /// The Lark grammar for a constrained reply (see [`Tools::constrained`]), else `None`.
    ///
    /// A forced reply is one call (several, separated by a newline, when parallel calls are
    /// allowed) of the offered functions (the named one only), each written exactly as the
    /// template renders a call, with arguments that follow the function's JSON schema in the
    /// template's own separators (`", "`, `": "`). Under `auto`, text may come first and the
    /// calls are optional; a `strict` function's arguments follow its schema, another's are
    /// any object. The reply then ends with the end-of-turn token.
    pub(crate) fn grammar(&self, markers: &Markers) -> Option<String> {
        if !self.constrained() {
            return None;
        }
        let forced = self.forced();
        let chosen: Vec<&Function> = self
            .functions
            .iter()
            .filter(|f| match &self.choice {
                Choice::Named(name) => &f.name == name,
                _ => true,
            })
            .collect();
        let mut lark = String::new();
        let end = markers.end_of_turn.as_deref().unwrap_or("");
        let calls = if self.parallel {
            "call (\"\\n\" call)*"
        } else {
            "call"
        };
        if forced {
            lark.push_str(&format!("start: {calls} {end}\n"));
        } else {
            lark.push_str(&format!(
                "start: TEXT {end} | TEXT? {calls} {end}\nTEXT: /(.|\\n)+/\n"
            ));
        }
        let alternatives: Vec<String> = (0..chosen.len()).map(|i| format!("call_{i}")).collect();
        lark.push_str(&format!("call: {}\n", alternatives.join(" | ")));
        for (i, function) in chosen.iter().enumerate() {
            let head = format!("\n{{\"name\": {}, \"arguments\": ", json!(function.name));
            let schema = if forced || function.strict {
                function.schema()
            } else {
                json!({"type": "object"})
            };
            lark.push_str(&format!(
                "call_{i}: {open} {head} %json {schema} \"}}\\n\" {close}\n",
                open = markers.open,
                head = json!(head),
                schema = with_separators(schema, !function.strict),
                close = markers.close,
            ));
        }
        Some(lark)
    }
}

fn bad_choice() -> ApiError {
    ApiError::invalid(
        "`tool_choice` must be `none`, `auto`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        Some("tool_choice"),
    )
}

/// `{"type": "function", "function": {name, description, parameters, strict}}`.
fn function(tool: &Value) -> Result<Function, ApiError> {
    if tool.get("type").and_then(Value::as_str) != Some("function") {
        return Err(invalid(
            "atdp-serve runs function tools only (`\"type\": \"function\"`)",
        ));
    }
    let Some(definition) = tool.get("function").and_then(Value::as_object) else {
        return Err(invalid("a function tool needs a `function` object"));
    };
    let name = definition
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("a function tool needs a `name`"))?;
    let parameters = match definition.get("parameters") {
        None | Some(Value::Null) => None,
        Some(p @ Value::Object(_)) => Some(p.clone()),
        Some(_) => {
            return Err(invalid(format!(
                "the parameters of `{name}` must be a JSON schema object"
            )));
        }
    };
    Ok(Function {
        name: name.to_owned(),
        description: definition
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        parameters,
        strict: definition.get("strict").and_then(Value::as_bool) == Some(true),
    })
}

impl Function {
    /// The arguments' schema: the parameters, or an empty object when there are none.
    fn schema(&self) -> Value {
        self.parameters.clone().unwrap_or_else(
            || json!({"type": "object", "properties": {}, "additionalProperties": false}),
        )
    }
}

/// `schema` with llguidance's formatting options: the template's separators and no other
/// whitespace; `lenient` ignores keywords llguidance cannot enforce (a `strict` function's
/// schema must be enforceable whole, so it is not lenient).
fn with_separators(schema: Value, lenient: bool) -> Value {
    let mut schema = match schema {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    schema.insert(
        "x-guidance".into(),
        json!({
            "item_separator": ", ",
            "key_separator": ": ",
            "whitespace_flexible": false,
            "lenient": lenient,
        }),
    );
    Value::Object(schema)
}

/// One `<tool_call>` block's JSON. Duplicate keys make it malformed.
#[derive(Deserialize)]
struct RawCall<'a> {
    name: String,
    #[serde(borrow)]
    arguments: &'a RawValue,
}

/// The call in a block's text, when it is a call of one of `names` with an object of
/// arguments.
fn call(block: &str, names: &[String]) -> Option<Call> {
    let raw: RawCall<'_> = serde_json::from_str(block.trim()).ok()?;
    if !names.contains(&raw.name) {
        return None;
    }
    let arguments = raw.arguments.get();
    serde_json::from_str::<Map<String, Value>>(arguments).ok()?;
    Some(Call {
        name: raw.name,
        arguments: arguments.to_owned(),
    })
}

/// The length of the longest end of `text` that is a proper beginning of `marker`.
fn partial_marker(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.ends_with(&marker[..n]))
        .unwrap_or(0)
}

/// `text` split into itself without its trailing whitespace, and that whitespace.
fn split_trailing_whitespace(text: &str) -> (&str, &str) {
    let body = text.trim_end();
    (body, &text[body.len()..])
}

/// Splits reply text into content and calls as it arrives (see the module header).
#[derive(Debug)]
pub(crate) struct ReplyParser {
    names: Vec<String>,
    max_calls: usize,
    calls: usize,
    /// Text received and not yet decided.
    pending: String,
    /// Inside a block (`<tool_call>` seen, `</tool_call>` not yet).
    in_call: bool,
    /// Whitespace at the end of the text so far: content if text follows, a separator if a
    /// call does.
    held_whitespace: String,
    /// The whitespace before the open block: content again if the block is not a call.
    separator: String,
    /// The last piece was a call: whitespace that follows it is a separator.
    after_call: bool,
}

impl ReplyParser {
    /// A parser for calls of `names` (none: every reply is text), at most `max_calls` of
    /// them (blocks after that stay text).
    pub(crate) fn new(names: Vec<String>, max_calls: usize) -> Self {
        ReplyParser {
            names,
            max_calls,
            calls: 0,
            pending: String::new(),
            in_call: false,
            held_whitespace: String::new(),
            separator: String::new(),
            after_call: false,
        }
    }

    /// Adds the next piece of the reply; returns what it decides.
    pub(crate) fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.names.is_empty() {
            if !text.is_empty() {
                out.push(Piece::Text(text.to_owned()));
            }
            return out;
        }
        self.pending.push_str(text);
        loop {
            if self.in_call {
                let Some(end) = self.pending.find(CLOSE) else {
                    break;
                };
                let block = self.pending[..end].to_owned();
                self.pending.drain(..end + CLOSE.len());
                self.in_call = false;
                self.close_block(&block, &mut out);
            } else if let Some(start) = self.pending.find(OPEN) {
                let before = self.pending[..start].to_owned();
                self.pending.drain(..start + OPEN.len());
                let text = self.text(&before);
                if text.is_empty() {
                    self.separator = std::mem::take(&mut self.held_whitespace);
                } else {
                    let (body, whitespace) = split_trailing_whitespace(&text);
                    if !body.is_empty() {
                        out.push(Piece::Text(body.to_owned()));
                    }
                    self.separator = whitespace.to_owned();
                }
                self.in_call = true;
            } else {
                let keep = partial_marker(&self.pending, OPEN);
                let ready: String = self.pending.drain(..self.pending.len() - keep).collect();
                let text = self.text(&ready);
                if !text.is_empty() {
                    let (body, whitespace) = split_trailing_whitespace(&text);
                    if !body.is_empty() {
                        out.push(Piece::Text(body.to_owned()));
                    }
                    self.held_whitespace = whitespace.to_owned();
                }
                break;
            }
        }
        out
    }

    /// Ends the reply: what is still undecided is text.
    pub(crate) fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.in_call {
            self.in_call = false;
            let text = format!("{}{OPEN}{}", self.separator, self.pending);
            self.pending.clear();
            self.after_call = false;
            out.push(Piece::Text(text));
            return out;
        }
        let rest = std::mem::take(&mut self.pending);
        let text = self.text(&rest);
        if !text.is_empty() {
            out.push(Piece::Text(text));
        }
        out
    }

    /// `piece` with the whitespace held before it; right after a call, without its leading
    /// whitespace (a separator: held, and empty text returned, while nothing else came).
    fn text(&mut self, piece: &str) -> String {
        let mut text = std::mem::take(&mut self.held_whitespace);
        text.push_str(piece);
        if self.after_call {
            let rest = text.trim_start();
            if rest.is_empty() {
                self.held_whitespace = text;
                return String::new();
            }
            self.after_call = false;
            return rest.to_owned();
        }
        text
    }

    fn close_block(&mut self, block: &str, out: &mut Vec<Piece>) {
        let parsed = (self.calls < self.max_calls)
            .then(|| call(block, &self.names))
            .flatten();
        let separator = std::mem::take(&mut self.separator);
        match parsed {
            Some(call) => {
                self.calls += 1;
                self.after_call = true;
                out.push(Piece::Call(call));
            }
            None => {
                self.after_call = false;
                self.held_whitespace.clear();
                out.push(Piece::Text(format!("{separator}{OPEN}{block}{CLOSE}")));
            }
        }
    }
}

/// A whole reply's content (text pieces joined; `None` when there is no text and at least
/// one call) and calls.
pub(crate) fn split_reply(parser: &mut ReplyParser, text: &str) -> (Option<String>, Vec<Call>) {
    let mut pieces = parser.push(text);
    pieces.extend(parser.finish());
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => content.push_str(&t),
            Piece::Call(c) => calls.push(c),
        }
    }
    let content = (!content.is_empty() || calls.is_empty()).then_some(content);
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["get_weather".into(), "lookup".into()]
    }

    const WEATHER: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const LOOKUP: &str =
        "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"id\": 7}}\n</tool_call>";

    fn whole(text: &str, max_calls: usize) -> (Option<String>, Vec<Call>) {
        split_reply(&mut ReplyParser::new(names(), max_calls), text)
    }

    fn weather() -> Call {
        Call {
            name: "get_weather".into(),
            arguments: "{\"city\": \"Paris\"}".into(),
        }
    }

    #[test]
    fn calls_text_around_them_and_parallel_calls() {
        assert_eq!(whole(WEATHER, usize::MAX), (None, vec![weather()]));
        let text = format!("Let me check.\n{WEATHER}\n{LOOKUP}");
        let lookup = Call {
            name: "lookup".into(),
            arguments: "{\"id\": 7}".into(),
        };
        assert_eq!(
            whole(&text, usize::MAX),
            (
                Some("Let me check.".into()),
                vec![weather(), lookup.clone()]
            )
        );
        // With parallel calls off, the second block stays text.
        assert_eq!(
            whole(&text, 1),
            (Some(format!("Let me check.\n{LOOKUP}")), vec![weather()])
        );
        // Text after a call is content too.
        assert_eq!(
            whole(&format!("{WEATHER}\nDone."), usize::MAX),
            (Some("Done.".into()), vec![weather()])
        );
        // No call: the text is kept as written, whitespace included.
        assert_eq!(
            whole("  plain <tool text>\n", usize::MAX),
            (Some("  plain <tool text>\n".into()), vec![])
        );
    }

    #[test]
    fn malformed_calls_stay_text() {
        let cases = [
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
            "<tool_call>\n{\"name\": \"delete_all\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{}\"}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>",
            "<tool_call>\n{\"name\": \"lookup\", \"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        ];
        for case in cases {
            let text = format!("Hi\n{case}");
            assert_eq!(
                whole(&text, usize::MAX),
                (Some(text.clone()), vec![]),
                "{case}"
            );
        }
        // A good call after a bad one is still a call.
        let text = format!("{}\n{WEATHER}", cases[1]);
        assert_eq!(
            whole(&text, usize::MAX),
            (Some(cases[1].to_owned()), vec![weather()])
        );
    }

    #[test]
    fn no_names_means_no_parsing() {
        let mut parser = ReplyParser::new(Vec::new(), usize::MAX);
        assert_eq!(
            split_reply(&mut parser, WEATHER),
            (Some(WEATHER.to_owned()), vec![])
        );
    }

    /// Every way of cutting a reply in two, or into single characters, gives the pieces of
    /// the whole reply.
    #[test]
    fn a_stream_split_anywhere_gives_the_whole_reply() {
        let replies = [
            format!("Let me check.\n{WEATHER}\n{LOOKUP}"),
            format!("a <tool_ b\n\n{WEATHER} tail <tool_call"),
            format!("{WEATHER}\n<tool_call>\n{{\"name\": \"nope\"}}\n</tool_call>\nünï ✓"),
        ];
        for reply in replies {
            let expected = whole(&reply, usize::MAX);
            let bounds: Vec<usize> = (0..=reply.len())
                .filter(|&i| reply.is_char_boundary(i))
                .collect();
            for &cut in &bounds {
                let mut parser = ReplyParser::new(names(), usize::MAX);
                let mut pieces = parser.push(&reply[..cut]);
                pieces.extend(parser.push(&reply[cut..]));
                pieces.extend(parser.finish());
                assert_eq!(joined(pieces), expected, "cut at {cut} of {reply:?}");
            }
            let mut parser = ReplyParser::new(names(), usize::MAX);
            let mut pieces = Vec::new();
            for c in reply.chars() {
                pieces.extend(parser.push(&c.to_string()));
            }
            pieces.extend(parser.finish());
            assert_eq!(joined(pieces), expected, "char by char: {reply:?}");
        }
    }

    fn joined(pieces: Vec<Piece>) -> (Option<String>, Vec<Call>) {
        let mut content = String::new();
        let mut calls = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Text(t) => content.push_str(&t),
                Piece::Call(c) => calls.push(c),
            }
        }
        (
            (!content.is_empty() || calls.is_empty()).then_some(content),
            calls,
        )
    }

    #[test]
    fn tools_and_choices_are_read_or_refused() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let parsed = Tools::parse(Some(&tools), Some(&json!("required")), Some(false));
        let parsed = parsed.ok().flatten();
        assert_eq!(
            parsed.as_ref().map(|t| (t.forced(), t.parallel)),
            Some((true, false))
        );
        let rendered = parsed.map(|t| t.for_template()).unwrap_or_default();
        assert_eq!(
            rendered[0].parameters.as_deref(),
            Some(r#"{"type":"object","properties":{"city":{"type":"string"}}}"#)
        );
        assert!(matches!(
            Tools::parse(None, Some(&json!("none")), None),
            Ok(None)
        ));
        let refused = [
            (json!([{"type": "web_search"}]), json!("auto"), "tools"),
            (json!([{"type": "function"}]), json!("auto"), "tools"),
            (tools.clone(), json!("always"), "tool_choice"),
            (
                tools.clone(),
                json!({"type": "function", "function": {"name": "x"}}),
                "tool_choice",
            ),
            (json!([]), json!("required"), "tool_choice"),
        ];
        for (tools, choice, param) in refused {
            let err = Tools::parse(Some(&tools), Some(&choice), None).err();
            assert_eq!(err.and_then(|e| e.param), Some(param), "{tools} {choice}");
        }
    }

    #[test]
    fn grammars_force_the_template_form() {
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris"]}}}}},
            {"type": "function", "function": {"name": "lookup", "strict": true}},
        ]);
        let markers = Markers {
            open: "<[298]>".into(),
            close: "<[299]>".into(),
            end_of_turn: Some("<[297]>".into()),
        };
        let named = json!({"type": "function", "function": {"name": "lookup"}});
        let grammar = Tools::parse(Some(&tools), Some(&named), Some(false))
            .ok()
            .flatten()
            .and_then(|t| t.grammar(&markers));
        let expected = concat!(
            "start: call <[297]>\n",
            "call: call_0\n",
            r#"call_0: <[298]> "\n{\"name\": \"lookup\", \"arguments\": " %json {"type":"object","properties":{},"additionalProperties":false,"x-guidance":{"item_separator":", ","key_separator":": ","whitespace_flexible":false,"lenient":false}} "}\n" <[299]>"#,
            "\n"
        );
        assert_eq!(grammar.as_deref(), Some(expected));
        // Auto: no grammar unless a function is strict; then text may come first.
        let auto = Tools::parse(Some(&tools), None, None).ok().flatten();
        let grammar = auto.and_then(|t| t.grammar(&markers)).unwrap_or_default();
        assert!(
            grammar.starts_with("start: TEXT <[297]> | TEXT? call (\"\\n\" call)* <[297]>\n"),
            "{grammar}"
        );
        // The non-strict function's arguments are any object; the strict one's its schema.
        assert!(
            grammar.contains(r#"%json {"type":"object","x-guidance""#),
            "{grammar}"
        );
        let none = Tools::parse(Some(&tools), Some(&json!("none")), None)
            .ok()
            .flatten();
        assert_eq!(none.as_ref().and_then(|t| t.grammar(&markers)), None);
        assert!(none.is_some_and(|t| !t.callable() && t.for_template().len() == 2));
    }
}
