//! The OpenAI chat-completions wire format: requests into mistral.rs requests, mistral.rs
//! responses into OpenAI JSON and SSE chunks, errors into OpenAI's error JSON.

use axum::http::StatusCode;
use mistralrs::{Constraint, RequestBuilder, SamplingParams, StopTokens, TextMessageRole};
use serde::Deserialize;
use serde_json::{Value, json};

/// The default `max_tokens` when the client sets none.
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// An error in OpenAI's format.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// `error.type`.
    pub kind: &'static str,
    /// `error.message`.
    pub message: String,
    /// `error.param`.
    pub param: Option<&'static str>,
}

impl ApiError {
    pub(crate) fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param,
        }
    }

    pub(crate) fn server(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({ "error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": Value::Null,
        }})
    }
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_calls: Option<Value>,
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
    response_format: Option<Value>,
    #[serde(default)]
    grammar: Option<Value>,
}

/// A checked request.
pub struct ChatRequest {
    /// The mistral.rs request.
    pub builder: RequestBuilder,
    /// Stream the reply as SSE.
    pub stream: bool,
    /// Send a final usage chunk (streaming).
    pub include_usage: bool,
}

fn text_of(content: Option<&Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            "only text content parts are supported by this model",
                            Some("messages"),
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::invalid(
            "message content must be a string or a list of text parts",
            Some("messages"),
        )),
    }
}

impl std::fmt::Debug for ChatRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The messages are prompt text: never printed.
        f.debug_struct("ChatRequest")
            .field("stream", &self.stream)
            .field("include_usage", &self.include_usage)
            .finish_non_exhaustive()
    }
}

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
    if raw.tools.as_ref().is_some_and(|t| !t.is_null()) {
        return Err(ApiError::invalid(
            "tools are not supported by atdp-serve yet; describe the actions in the prompt",
            Some("tools"),
        ));
    }
    let mut builder = RequestBuilder::new();
    for message in &raw.messages {
        if message.tool_calls.as_ref().is_some_and(|t| !t.is_null()) {
            return Err(ApiError::invalid(
                "assistant tool calls in the history are not supported by atdp-serve yet",
                Some("messages"),
            ));
        }
        let text = text_of(message.content.as_ref())?;
        builder = match message.role.as_str() {
            "system" | "developer" => builder.add_message(TextMessageRole::System, text),
            "user" => builder.add_message(TextMessageRole::User, text),
            "assistant" => builder.add_message(TextMessageRole::Assistant, text),
            "tool" => {
                builder.add_tool_message(text, message.tool_call_id.clone().unwrap_or_default())
            }
            other => {
                return Err(ApiError::invalid(
                    format!("unknown message role `{other}`"),
                    Some("messages"),
                ));
            }
        };
    }
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
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(StopTokens::Seqs(vec![s])),
        Some(Value::Array(items)) => Some(StopTokens::Seqs(
            items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::invalid("`stop` must hold strings", Some("stop")))?,
        )),
        Some(_) => {
            return Err(ApiError::invalid(
                "`stop` must be a string or a list",
                Some("stop"),
            ));
        }
    };
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
        s.top_p = raw.top_p;
        s
    };
    sampling.max_len = Some(max_tokens);
    sampling.stop_toks = stop;
    sampling.n_choices = n;
    sampling.top_n_logprobs = top_logprobs;
    sampling.frequency_penalty = raw.frequency_penalty;
    sampling.presence_penalty = raw.presence_penalty;
    let constraint = constraint(raw.response_format.as_ref(), raw.grammar.as_ref())?;
    builder = builder
        .set_sampling(sampling)
        .set_constraint(constraint)
        .return_logprobs(raw.logprobs || top_logprobs > 0);
    Ok(ChatRequest {
        builder,
        stream: raw.stream,
        include_usage: raw.stream_options.is_some_and(|o| o.include_usage),
    })
}

/// A mistral.rs log-probability as OpenAI gives it. mistral.rs 0.8.1 reports log10 of the
/// probability (`prob.log(10.0)` in its sampler); OpenAI, vLLM and the trainer use the
/// natural logarithm, and the trainer's off-policy correction reads these values.
fn natural_log(log10: Option<&Value>) -> Value {
    log10
        .and_then(Value::as_f64)
        .map_or(Value::Null, |l| json!(l * std::f64::consts::LN_10))
}

/// One token's log-probability entry as OpenAI writes it: the token as text, its UTF-8
/// bytes, the natural log-probability, and the alternatives as text too (mistral.rs gives
/// their ids). Alternatives of probability zero (masked by a decoding constraint: mistral.rs
/// reports their log-probability as null) are left out: they are not alternatives.
fn logprob_entry(entry: &Value) -> Value {
    let token = entry.get("token").and_then(Value::as_str).unwrap_or("");
    let top: Vec<Value> = entry
        .get("top_logprobs")
        .and_then(Value::as_array)
        .map(|alternatives| {
            alternatives
                .iter()
                .filter(|alt| alt.get("logprob").and_then(Value::as_f64).is_some())
                .map(|alt| {
                    let text = alt
                        .get("bytes")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| {
                            format!(
                                "token_id:{}",
                                alt.get("token").and_then(Value::as_u64).unwrap_or(0)
                            )
                        });
                    json!({
                        "token": text,
                        "logprob": natural_log(alt.get("logprob")),
                        "bytes": text.as_bytes(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "token": token,
        "logprob": natural_log(entry.get("logprob")),
        "bytes": token.as_bytes(),
        "top_logprobs": top,
    })
}

/// Only the three usage counts (mistral.rs adds timing fields).
fn usage(value: &Value) -> Value {
    json!({
        "prompt_tokens": value.get("prompt_tokens").cloned().unwrap_or(Value::Null),
        "completion_tokens": value.get("completion_tokens").cloned().unwrap_or(Value::Null),
        "total_tokens": value.get("total_tokens").cloned().unwrap_or(Value::Null),
    })
}

/// `raw.choices`, each mapped by `f`.
fn map_choices(raw: &Value, f: impl Fn(&Value) -> Value) -> Vec<Value> {
    raw.get("choices")
        .and_then(Value::as_array)
        .map(|choices| choices.iter().map(f).collect())
        .unwrap_or_default()
}

/// The fields every response and chunk carries, naming `version` as the model.
fn envelope(raw: &Value, object: &str, version: &str) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    out.insert("id".into(), raw.get("id").cloned().unwrap_or(Value::Null));
    out.insert("object".into(), json!(object));
    out.insert(
        "created".into(),
        raw.get("created").cloned().unwrap_or(json!(0)),
    );
    out.insert("model".into(), json!(version));
    out.insert("system_fingerprint".into(), json!(version));
    out
}

/// A whole response, as OpenAI writes it, naming `version` as the model.
pub fn completion(response: &mistralrs::ChatCompletionResponse, version: &str) -> Value {
    let raw = serde_json::to_value(response).unwrap_or(Value::Null);
    let choices = map_choices(&raw, |c| {
        let logprobs = c
            .pointer("/logprobs/content")
            .and_then(Value::as_array)
            .map(|entries| json!({ "content": entries.iter().map(logprob_entry).collect::<Vec<_>>() }))
            .unwrap_or(Value::Null);
        json!({
            "index": c.get("index").cloned().unwrap_or(json!(0)),
            "message": {
                "role": "assistant",
                "content": c.pointer("/message/content").cloned().unwrap_or(Value::Null),
            },
            "logprobs": logprobs,
            "finish_reason": c.get("finish_reason").cloned().unwrap_or(Value::Null),
        })
    });
    let mut out = envelope(&raw, "chat.completion", version);
    out.insert("choices".into(), Value::Array(choices));
    out.insert(
        "usage".into(),
        raw.get("usage").map(usage).unwrap_or(Value::Null),
    );
    Value::Object(out)
}

/// One streamed chunk, as OpenAI writes it, naming `version` as the model. Returns the
/// chunk and the usage it carried (mistral.rs puts it on the last chunk).
pub fn chunk(
    response: &mistralrs::ChatCompletionChunkResponse,
    version: &str,
) -> (Value, Option<Value>) {
    let raw = serde_json::to_value(response).unwrap_or(Value::Null);
    let choices = map_choices(&raw, |c| {
        // mistral.rs gives one entry per chunk; OpenAI a list.
        let logprobs = c
            .get("logprobs")
            .filter(|l| !l.is_null())
            .map(|entry| json!({ "content": [logprob_entry(entry)] }))
            .unwrap_or(Value::Null);
        json!({
            "index": c.get("index").cloned().unwrap_or(json!(0)),
            "delta": {
                "role": "assistant",
                "content": c.pointer("/delta/content").cloned().unwrap_or(Value::Null),
            },
            "logprobs": logprobs,
            "finish_reason": c.get("finish_reason").cloned().unwrap_or(Value::Null),
        })
    });
    let mut out = envelope(&raw, "chat.completion.chunk", version);
    out.insert("choices".into(), Value::Array(choices));
    (
        Value::Object(out),
        raw.get("usage").filter(|u| !u.is_null()).map(usage),
    )
}

/// The final usage chunk of a stream (`stream_options.include_usage`).
pub fn usage_chunk(id: &Value, created: &Value, version: &str, usage: Value) -> Value {
    let raw = json!({ "id": id, "created": created });
    let mut out = envelope(&raw, "chat.completion.chunk", version);
    out.insert("choices".into(), json!([]));
    out.insert("usage".into(), usage);
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_requests_are_refused_with_the_parameter_named() {
        let cases: [(&str, Option<&str>); 9] = [
            ("{", None),
            (r#"{"messages": []}"#, Some("messages")),
            (
                r#"{"messages": [{"role": "wizard", "content": "x"}]}"#,
                Some("messages"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#,
                Some("max_tokens"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "temperature": 3}"#,
                Some("temperature"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}"#,
                Some("tools"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "grammar": {"type": "regex"}}"#,
                Some("grammar"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}"#,
                Some("response_format"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}, "grammar": {"type": "regex", "value": "a"}}"#,
                Some("grammar"),
            ),
        ];
        for (body, param) in cases {
            let err = parse(body.as_bytes()).err().map(|e| (e.status, e.param));
            assert_eq!(err, Some((StatusCode::BAD_REQUEST, param)), "{body}");
        }
    }

    #[test]
    fn text_parts_are_joined() {
        let parsed = parse(
            br#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "stream": true, "stream_options": {"include_usage": true}}"#,
        );
        let parsed = parsed.map(|r| (r.stream, r.include_usage)).ok();
        assert_eq!(parsed, Some((true, true)));
        assert_eq!(
            text_of(Some(
                &json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
            ))
            .ok(),
            Some("ab".into())
        );
    }

    #[test]
    fn logprob_entries_name_alternatives_as_text() {
        let entry = json!({"token": "hi", "logprob": -0.5, "bytes": [104, 105],
            "top_logprobs": [{"token": 7, "logprob": -0.5, "bytes": "hi"}, {"token": 9, "logprob": -2.0, "bytes": null}]});
        let out = logprob_entry(&entry);
        // log10 in, natural log out.
        let ln = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        assert!((ln(&out["logprob"]) - (-0.5 * std::f64::consts::LN_10)).abs() < 1e-12);
        assert!(
            (ln(&out["top_logprobs"][1]["logprob"]) - (-2.0 * std::f64::consts::LN_10)).abs()
                < 1e-12
        );
        assert_eq!(out["token"], "hi");
        assert_eq!(out["top_logprobs"][0]["token"], "hi");
        assert_eq!(out["top_logprobs"][1]["token"], "token_id:9");
        assert_eq!(out["bytes"], json!([104, 105]));
    }
}
