//! OpenAI chat-completions requests: the body read into the conversation (messages and tools
//! shaped as the proxy records them, so that the trainer renders the same prompt from the
//! recorded step), the sampling settings and the decoding constraint; and errors in OpenAI's
//! error JSON. Replies are written by `reply`.

use std::sync::Arc;

use atdp_schema::{Message, ToolCall};
use axum::http::StatusCode;
use mistralrs::{Constraint, SamplingParams, StopTokens};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::generate::Job;
use crate::prompt::PromptFormat;
use crate::tools::Tools;

/// The default `max_tokens` when the client sets none.
pub const DEFAULT_MAX_TOKENS: usize = 256;

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<RawToolCall>>,
    #[serde(default)]
    function_call: Option<RawFunction>,
}

#[derive(Debug, Deserialize)]
struct RawToolCall {
    #[serde(default)]
    id: Option<String>,
    function: RawFunction,
}

#[derive(Debug, Deserialize)]
struct RawFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The fields of a chat-completions request this server reads; others are ignored, as
/// OpenAI-compatible servers do.
#[derive(Debug, Deserialize)]
struct RawRequest {
    messages: Vec<RawMessage>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    max_completion_tokens: Option<usize>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    n: Option<usize>,
    #[serde(default)]
    stop: Option<Value>,
    #[serde(default)]
    logprobs: bool,
    #[serde(default)]
    top_logprobs: Option<usize>,
    #[serde(default)]
    frequency_penalty: Option<f32>,
    #[serde(default)]
    presence_penalty: Option<f32>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    grammar: Option<Value>,
}

/// A checked request.
pub struct ChatRequest {
    /// The policy asked for (`support`, `support@v7`).
    pub model: Option<String>,
    pub(crate) messages: Vec<Message>,
    pub(crate) tools: Option<Tools>,
    pub(crate) sampling: SamplingParams,
    pub(crate) constraint: Constraint,
    pub(crate) max_tokens: usize,
    /// Whether the client set `max_tokens` (else it is the default, shortened to fit).
    pub(crate) max_tokens_given: bool,
    /// Completions asked for.
    pub(crate) n: usize,
    /// Stop sequences (cut from the reply text).
    pub(crate) stop: Vec<String>,
    /// The client asked for log-probabilities.
    pub(crate) logprobs: bool,
    /// Stream the reply as SSE.
    pub stream: bool,
    /// Send a final usage chunk (streaming).
    pub include_usage: bool,
}

impl std::fmt::Debug for ChatRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The messages are prompt text: never printed.
        f.debug_struct("ChatRequest")
            .field("stream", &self.stream)
            .field("include_usage", &self.include_usage)
            .field("n", &self.n)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

impl ChatRequest {
    /// What the engine generates for one choice: the prompt rendered with `format`, and a
    /// forced tool call's grammar, within a model `context` of that many tokens.
    pub(crate) fn job(&self, format: &PromptFormat, context: usize) -> Result<Job, ApiError> {
        let offered = self
            .tools
            .as_ref()
            .map(Tools::for_template)
            .unwrap_or_default();
        let prompt = format.prompt(&self.messages, &offered)?;
        let constraint = match self
            .tools
            .as_ref()
            .and_then(|t| t.grammar(format.markers()))
        {
            Some(lark) => Constraint::Lark(lark),
            None => self.constraint.clone(),
        };
        let ban = self
            .tools
            .as_ref()
            .filter(|t| !t.callable())
            .and_then(|_| format.open_id());
        // The prompt and the completion share the model's context. A completion that would
        // not fit is refused when the client asked for its length, and shortened to fit when
        // the length is the default.
        let room = context.saturating_sub(prompt.len());
        let too_long = |completion: usize| ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: format!(
                "This model's maximum context length is {context} tokens. However, you requested {} tokens ({} in the messages, {completion} in the completion). Please reduce the length of the messages or completion.",
                prompt.len() + completion,
                prompt.len()
            ),
            param: Some("messages"),
            code: Some("context_length_exceeded"),
        };
        let max_tokens = if room == 0 || (self.max_tokens_given && self.max_tokens > room) {
            return Err(too_long(self.max_tokens));
        } else {
            self.max_tokens.min(room)
        };
        Ok(Job {
            prompt: Arc::new(prompt),
            sampling: self.sampling.clone(),
            constraint,
            max_tokens,
            room,
            ban,
        })
    }
}

/// Text of `content` as the proxy records it: a string, or text (and refusal) parts joined
/// with nothing between them. Other parts are refused: this model reads text only.
fn text_of(content: Option<&Value>) -> Result<Option<String>, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut text: Option<String> = None;
            for part in parts {
                let kind = part.get("type").and_then(Value::as_str);
                let field = match kind {
                    Some("text") => "text",
                    Some("refusal") => "refusal",
                    _ => {
                        return Err(ApiError::invalid(
                            "only text content parts are supported by this model",
                            Some("messages"),
                        ));
                    }
                };
                let Some(t) = part.get(field).and_then(Value::as_str) else {
                    return Err(ApiError::invalid(
                        format!("a `{field}` content part needs its `{field}` string"),
                        Some("messages"),
                    ));
                };
                text.get_or_insert_with(String::new).push_str(t);
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::invalid(
            "message content must be a string or a list of text parts",
            Some("messages"),
        )),
    }
}

/// A function call's arguments as the proxy records them: a string as it is, anything else
/// as its JSON text.
fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// One message, shaped as the proxy records it. The role goes to the chat template as sent
/// (a template that does not know a role, such as Qwen2.5's for `developer`, leaves the
/// message out, for the served model and for the trainer alike).
fn message(raw: RawMessage) -> Result<Message, ApiError> {
    if !matches!(
        raw.role.as_str(),
        "system" | "developer" | "user" | "assistant" | "tool"
    ) {
        return Err(ApiError::invalid(
            format!("unknown message role `{}`", raw.role),
            Some("messages"),
        ));
    }
    let content = text_of(raw.content.as_ref())?.or(raw.refusal);
    let mut tool_calls: Vec<ToolCall> = raw
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| ToolCall {
            id: c.id.unwrap_or_default(),
            name: c.function.name,
            arguments: arguments_text(c.function.arguments.as_ref()),
        })
        .collect();
    if let Some(f) = raw.function_call {
        tool_calls.push(ToolCall {
            id: String::new(),
            name: f.name,
            arguments: arguments_text(f.arguments.as_ref()),
        });
    }
    Ok(Message {
        role: raw.role,
        content,
        name: raw.name,
        tool_call_id: raw.tool_call_id,
        tool_calls,
    })
}

/// The most stop sequences a request may set, and the longest.
const MAX_STOP_SEQUENCES: usize = 64;
const MAX_STOP_BYTES: usize = 1024;
/// The largest `grammar` or `response_format`, as JSON text.
const MAX_GRAMMAR_BYTES: usize = 256 << 10;

/// The decoding constraint of a request: OpenAI's `response_format` (`json_object`,
/// `json_schema`) or mistral.rs's `grammar` extension (`{"type": "regex" | "lark" |
/// "json_schema", "value": ...}`), enforced token by token by mistral.rs (llguidance).
fn constraint(
    response_format: Option<&Value>,
    grammar: Option<&Value>,
) -> Result<Constraint, ApiError> {
    let format = response_format.filter(|v| !v.is_null());
    let grammar = grammar.filter(|v| !v.is_null());
    match (format, grammar) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "set `response_format` or `grammar`, not both",
            Some("grammar"),
        )),
        (Some(format), None) => match format.get("type").and_then(Value::as_str) {
            Some("text") => Ok(Constraint::None),
            Some("json_object") => Ok(Constraint::JsonSchema(json!({"type": "object"}))),
            Some("json_schema") => format
                .pointer("/json_schema/schema")
                .filter(|s| s.is_object())
                .map(|s| Constraint::JsonSchema(s.clone()))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "`response_format.json_schema.schema` must be a JSON schema object",
                        Some("response_format"),
                    )
                }),
            _ => Err(ApiError::invalid(
                "`response_format.type` must be `text`, `json_object` or `json_schema`",
                Some("response_format"),
            )),
        },
        (None, Some(grammar)) => {
            let value = grammar.get("value");
            match (grammar.get("type").and_then(Value::as_str), value) {
                (Some("regex"), Some(Value::String(r))) => Ok(Constraint::Regex(r.clone())),
                (Some("lark"), Some(Value::String(g))) => Ok(Constraint::Lark(g.clone())),
                (Some("json_schema"), Some(s)) if s.is_object() => {
                    Ok(Constraint::JsonSchema(s.clone()))
                }
                _ => Err(ApiError::invalid(
                    "`grammar` must be {\"type\": \"regex\" | \"lark\", \"value\": <string>} or {\"type\": \"json_schema\", \"value\": <schema>}",
                    Some("grammar"),
                )),
            }
        }
        (None, None) => Ok(Constraint::None),
    }
}

/// Reads a request body.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let raw: RawRequest = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            format!("the request body is not a valid chat completion request: {e}"),
            None,
        )
    })?;
    if raw.messages.is_empty() {
        return Err(ApiError::invalid(
            "`messages` must not be empty",
            Some("messages"),
        ));
    }
    let tools = Tools::parse(
        raw.tools.as_ref(),
        raw.tool_choice.as_ref(),
        raw.parallel_tool_calls,
    )?;
    let messages = raw
        .messages
        .into_iter()
        .map(message)
        .collect::<Result<Vec<_>, _>>()?;
    let max_tokens_given = raw.max_completion_tokens.or(raw.max_tokens).is_some();
    let max_tokens = raw
        .max_completion_tokens
        .or(raw.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return Err(ApiError::invalid(
            "`max_tokens` must be at least 1",
            Some("max_tokens"),
        ));
    }
    let n = raw.n.unwrap_or(1);
    if !(1..=16).contains(&n) {
        return Err(ApiError::invalid("`n` must be 1 to 16", Some("n")));
    }
    if raw.stream && n > 1 {
        return Err(ApiError::invalid(
            "streaming supports `n` = 1 only",
            Some("n"),
        ));
    }
    let top_logprobs = raw.top_logprobs.unwrap_or(0);
    if top_logprobs > 20 {
        return Err(ApiError::invalid(
            "`top_logprobs` must be 0 to 20",
            Some("top_logprobs"),
        ));
    }
    let stop = match raw.stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::invalid("`stop` must hold strings", Some("stop")))?,
        Some(_) => {
            return Err(ApiError::invalid(
                "`stop` must be a string or a list",
                Some("stop"),
            ));
        }
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "`stop` sequences must not be empty",
            Some("stop"),
        ));
    }
    // Stop sequences and grammars are matched and compiled on the engine's thread, where
    // every request of the policy waits for them.
    if stop.len() > MAX_STOP_SEQUENCES || stop.iter().any(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::invalid(
            format!(
                "`stop` holds at most {MAX_STOP_SEQUENCES} sequences of at most {MAX_STOP_BYTES} bytes"
            ),
            Some("stop"),
        ));
    }
    for (name, value) in [
        ("grammar", raw.grammar.as_ref()),
        ("response_format", raw.response_format.as_ref()),
    ] {
        if value.is_some_and(|v| v.to_string().len() > MAX_GRAMMAR_BYTES) {
            return Err(ApiError::invalid(
                format!("`{name}` may take at most {MAX_GRAMMAR_BYTES} bytes"),
                Some(name),
            ));
        }
    }
    if raw.top_p.is_some_and(|p| !(0.0..=1.0).contains(&p)) {
        return Err(ApiError::invalid("`top_p` must be 0 to 1", Some("top_p")));
    }
    for (name, penalty) in [
        ("frequency_penalty", raw.frequency_penalty),
        ("presence_penalty", raw.presence_penalty),
    ] {
        if penalty.is_some_and(|p| !(-2.0..=2.0).contains(&p)) {
            return Err(ApiError::invalid(
                format!("`{name}` must be -2 to 2"),
                Some(name),
            ));
        }
    }
    let temperature = raw.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "`temperature` must be 0 to 2",
            Some("temperature"),
        ));
    }
    // Temperature 0 is greedy decoding: the same prompt gives the same reply on the same
    // weights, which the rollback check relies on.
    let mut sampling = if temperature == 0.0 {
        SamplingParams::deterministic()
    } else {
        let mut s = SamplingParams::neutral();
        s.temperature = Some(temperature);
        // 0, which OpenAI accepts, keeps only the likeliest token: left to the temperature.
        s.top_p = raw.top_p.filter(|p| *p > 0.0);
        s
    };
    sampling.stop_toks = (!stop.is_empty()).then(|| StopTokens::Seqs(stop.clone()));
    sampling.n_choices = 1;
    sampling.top_n_logprobs = top_logprobs;
    sampling.frequency_penalty = raw.frequency_penalty;
    sampling.presence_penalty = raw.presence_penalty;
    let constraint = constraint(raw.response_format.as_ref(), raw.grammar.as_ref())?;
    if tools.as_ref().is_some_and(Tools::constrained) && !matches!(constraint, Constraint::None) {
        return Err(ApiError::invalid(
            "`tool_choice` `required` or a named function, and `strict` functions, constrain the reply to tool calls: they cannot be combined with `grammar` or `response_format`",
            Some("tool_choice"),
        ));
    }
    Ok(ChatRequest {
        model: raw.model,
        messages,
        tools,
        sampling,
        constraint,
        max_tokens,
        max_tokens_given,
        n,
        stop,
        logprobs: raw.logprobs || top_logprobs > 0,
        stream: raw.stream,
        include_usage: raw.stream_options.is_some_and(|o| o.include_usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_requests_are_refused_with_the_parameter_named() {
        let user = r#""messages": [{"role": "user", "content": "x"}]"#;
        let tool = r#""tools": [{"type": "function", "function": {"name": "f"}}]"#;
        let cases: Vec<(String, Option<&str>)> = vec![
            ("{".into(), None),
            (r#"{"messages": []}"#.into(), Some("messages")),
            (
                r#"{"messages": [{"role": "wizard", "content": "x"}]}"#.into(),
                Some("messages"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#.into(),
                Some("messages"),
            ),
            (
                format!(r#"{{{user}, "max_tokens": 0}}"#),
                Some("max_tokens"),
            ),
            (
                format!(r#"{{{user}, "temperature": 3}}"#),
                Some("temperature"),
            ),
            (format!(r#"{{{user}, "stop": [""]}}"#), Some("stop")),
            (
                format!(r#"{{{user}, "tools": [{{"type": "function"}}]}}"#),
                Some("tools"),
            ),
            (
                format!(r#"{{{user}, "grammar": {{"type": "regex"}}}}"#),
                Some("grammar"),
            ),
            (
                format!(r#"{{{user}, "response_format": {{"type": "xml"}}}}"#),
                Some("response_format"),
            ),
            (
                format!(
                    r#"{{{user}, "response_format": {{"type": "text"}}, "grammar": {{"type": "regex", "value": "a"}}}}"#
                ),
                Some("grammar"),
            ),
            // A forced call and another constraint.
            (
                format!(
                    r#"{{{user}, {tool}, "tool_choice": "required", "grammar": {{"type": "regex", "value": "a"}}}}"#
                ),
                Some("tool_choice"),
            ),
            (
                format!(
                    r#"{{{user}, {tool}, "tool_choice": {{"type": "function", "function": {{"name": "f"}}}}, "response_format": {{"type": "json_object"}}}}"#
                ),
                Some("tool_choice"),
            ),
        ];
        for (body, param) in cases {
            let err = parse(body.as_bytes()).err().map(|e| (e.status, e.param));
            assert_eq!(err, Some((StatusCode::BAD_REQUEST, param)), "{body}");
        }
        // Under `auto` a grammar still applies.
        let body = format!(r#"{{{user}, {tool}, "grammar": {{"type": "regex", "value": "a"}}}}"#);
        assert!(parse(body.as_bytes()).is_ok());
    }

    #[test]
    fn messages_are_shaped_as_the_proxy_records_them() {
        let parsed = parse(
            br#"{"messages": [
                {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": "Weather?", "name": "ann"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": {"city": "Rome"}}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "assistant", "refusal": "no"}
            ], "stream": true, "stream_options": {"include_usage": true}}"#,
        );
        let request = parsed.ok();
        let flags = request.as_ref().map(|r| (r.stream, r.include_usage));
        assert_eq!(flags, Some((true, true)));
        let messages = request.map(|r| r.messages).unwrap_or_default();
        let call = |id: &str, arguments: &str| ToolCall {
            id: id.into(),
            name: "w".into(),
            arguments: arguments.into(),
        };
        let expected = vec![
            Message {
                role: "developer".into(),
                content: Some("ab".into()),
                ..Message::default()
            },
            Message {
                role: "user".into(),
                content: Some("Weather?".into()),
                name: Some("ann".into()),
                ..Message::default()
            },
            Message {
                role: "assistant".into(),
                tool_calls: vec![
                    call("call_1", r#"{"city": "Oslo"}"#),
                    call("call_2", r#"{"city":"Rome"}"#),
                ],
                ..Message::default()
            },
            Message {
                role: "tool".into(),
                content: Some("sunny".into()),
                tool_call_id: Some("call_1".into()),
                ..Message::default()
            },
            Message {
                role: "assistant".into(),
                content: Some("no".into()),
                ..Message::default()
            },
        ];
        assert_eq!(messages, expected);
    }
}
