//! OpenAI chat-completions replies, whole (JSON) and streamed (SSE chunks), from what the
//! engine generated: stop sequences cut, tool calls split from the content
//! ([`ReplyParser`]), log-probabilities as natural logarithms, and each choice's completion
//! token ids in `choices[i].token_ids` (the field vLLM returns and the proxy records; in a
//! stream, on the chunk that carries the finish reason).
//!
//! A call in a stream is two chunks, as OpenAI sends them: the first names the call (`index`,
//! `id`, `type`, `function.name`, empty `arguments`), the second carries the arguments. A call
//! is sent once its block is closed and parsed, so a malformed block is never half-sent as a
//! call: it arrives as content.

use mistralrs::core::ResponseLogprob;
use serde_json::{Map, Value, json};

use crate::generate::{Generated, Step};
use crate::tools::{Call, Piece, ReplyParser};

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

/// mistral.rs's entry for one token, written as OpenAI's; the token is its own text (in a
/// stream mistral.rs names it by the text delta instead).
fn entry(logprob: &ResponseLogprob) -> Value {
    let mut raw = serde_json::to_value(logprob).unwrap_or(Value::Null);
    if let Some(text) = logprob
        .bytes
        .as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
    {
        raw["token"] = json!(text);
    }
    logprob_entry(&raw)
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// Cuts the reply at the first stop sequence, holding back text that may begin one.
#[derive(Debug)]
pub(crate) struct StopCut {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopCut {
    pub(crate) fn new(stops: Vec<String>) -> Self {
        StopCut {
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    /// The text that can be sent now.
    pub(crate) fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.stopped = true;
            let out = self.held[..at].to_owned();
            self.held.clear();
            return out;
        }
        // Keep the longest end that begins a stop sequence.
        let keep = self
            .stops
            .iter()
            .map(|s| {
                (1..s.len().min(self.held.len() + 1))
                    .rev()
                    .find(|&n| s.is_char_boundary(n) && self.held.ends_with(&s[..n]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let send = self.held.len() - keep;
        self.held.drain(..send).collect()
    }

    /// What is left at the end.
    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// A call as OpenAI writes it in a message.
fn call_json(call: &Call) -> Value {
    json!({
        "id": call_id(),
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

fn call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
}

/// The fields every response and chunk carries, naming `version` as the model.
fn envelope(id: &str, created: u64, object: &str, version: &str) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("object".into(), json!(object));
    out.insert("created".into(), json!(created));
    out.insert("model".into(), json!(version));
    out.insert("system_fingerprint".into(), json!(version));
    out
}

/// What a whole or streamed reply needs from its request.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The version answering.
    pub version: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Return log-probabilities.
    pub logprobs: bool,
    /// Stop sequences.
    pub stop: Vec<String>,
}

/// A whole response from its choices, each parsed by a fresh parser from `parser`.
pub(crate) fn completion(
    shape: &Shape,
    choices: Vec<Generated>,
    parser: impl Fn() -> ReplyParser,
) -> Value {
    let mut completion_tokens = 0;
    let choices: Vec<Value> = choices
        .into_iter()
        .enumerate()
        .map(|(index, generated)| {
            completion_tokens += generated.tokens;
            let mut cut = StopCut::new(shape.stop.clone());
            let mut text = cut.push(&generated.text);
            text.push_str(&cut.finish());
            let (content, calls) = crate::tools::split_reply(&mut parser(), &text);
            let mut message = json!({"role": "assistant", "content": content});
            let finish = if calls.is_empty() {
                generated.finish
            } else {
                message["tool_calls"] = calls.iter().map(call_json).collect();
                "tool_calls".to_owned()
            };
            let logprobs = if shape.logprobs {
                json!({"content": generated.logprobs.iter().map(entry).collect::<Vec<_>>()})
            } else {
                Value::Null
            };
            let mut choice = json!({
                "index": index,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
            });
            if let Some(ids) = generated.ids {
                choice["token_ids"] = json!(ids);
            }
            choice
        })
        .collect();
    let mut out = envelope(&shape.id, shape.created, "chat.completion", &shape.version);
    out.insert("choices".into(), Value::Array(choices));
    out.insert(
        "usage".into(),
        usage(shape.prompt_tokens, completion_tokens),
    );
    Value::Object(out)
}

/// Writes a streamed reply's chunks.
#[derive(Debug)]
pub(crate) struct StreamWriter {
    shape: Shape,
    parser: ReplyParser,
    cut: StopCut,
    calls: usize,
    started: bool,
    tokens: usize,
}

impl StreamWriter {
    pub(crate) fn new(shape: Shape, parser: ReplyParser) -> Self {
        let cut = StopCut::new(shape.stop.clone());
        StreamWriter {
            shape,
            parser,
            cut,
            calls: 0,
            started: false,
            tokens: 0,
        }
    }

    fn chunk(
        &mut self,
        delta: Value,
        logprobs: Vec<Value>,
        extra: Option<Map<String, Value>>,
    ) -> Value {
        let mut delta = delta;
        if !self.started {
            self.started = true;
            delta["role"] = json!("assistant");
        }
        let logprobs = if self.shape.logprobs && !logprobs.is_empty() {
            json!({"content": logprobs})
        } else {
            Value::Null
        };
        let mut choice = json!({
            "index": 0,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": Value::Null,
        });
        if let (Some(extra), Some(o)) = (extra, choice.as_object_mut()) {
            o.extend(extra);
        }
        let mut out = envelope(
            &self.shape.id,
            self.shape.created,
            "chat.completion.chunk",
            &self.shape.version,
        );
        out.insert("choices".into(), json!([choice]));
        Value::Object(out)
    }

    fn pieces(&mut self, pieces: Vec<Piece>, out: &mut Vec<Value>, logprobs: &mut Vec<Value>) {
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    let lp = std::mem::take(logprobs);
                    out.push(self.chunk(json!({"content": text}), lp, None));
                }
                Piece::Call(call) => {
                    let index = self.calls;
                    self.calls += 1;
                    let head = json!({"tool_calls": [{
                        "index": index,
                        "id": call_id(),
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }]});
                    let lp = std::mem::take(logprobs);
                    out.push(self.chunk(head, lp, None));
                    let arguments = json!({"tool_calls": [{
                        "index": index,
                        "function": {"arguments": call.arguments},
                    }]});
                    out.push(self.chunk(arguments, Vec::new(), None));
                }
            }
        }
    }

    /// The chunks for one step of the engine (none when it decided nothing yet).
    pub(crate) fn step(&mut self, step: Step) -> Vec<Value> {
        let mut out = Vec::new();
        let mut logprobs: Vec<Value> = step.logprobs.iter().map(entry).collect();
        let text = self.cut.push(&step.text);
        let pieces = self.parser.push(&text);
        self.pieces(pieces, &mut out, &mut logprobs);
        let Some((ids, tokens, finish)) = step.end else {
            if !logprobs.is_empty() && self.shape.logprobs {
                out.push(self.chunk(json!({}), logprobs, None));
            }
            return out;
        };
        let rest = self.cut.finish();
        let mut pieces = self.parser.push(&rest);
        pieces.extend(self.parser.finish());
        self.pieces(pieces, &mut out, &mut logprobs);
        let finish = if self.calls > 0 {
            "tool_calls".to_owned()
        } else {
            finish
        };
        let mut extra = Map::new();
        extra.insert("finish_reason".into(), json!(finish));
        if let Some(ids) = ids {
            extra.insert("token_ids".into(), json!(ids));
        }
        let last = self.chunk(json!({}), logprobs, Some(extra));
        out.push(last);
        self.tokens = tokens;
        out
    }

    /// The final usage chunk (`stream_options.include_usage`).
    pub(crate) fn usage_chunk(&self) -> Value {
        let mut out = envelope(
            &self.shape.id,
            self.shape.created,
            "chat.completion.chunk",
            &self.shape.version,
        );
        out.insert("choices".into(), json!([]));
        out.insert("usage".into(), usage(self.shape.prompt_tokens, self.tokens));
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn stop_sequences_are_cut_wherever_the_text_is_split() {
        let text = "alpha END beta";
        for cut_at in 0..=text.len() {
            let mut cut = StopCut::new(vec!["END".into(), "ZZZ".into()]);
            let mut out = cut.push(&text[..cut_at]);
            out.push_str(&cut.push(&text[cut_at..]));
            out.push_str(&cut.finish());
            assert_eq!(out, "alpha ", "split at {cut_at}");
        }
        let mut cut = StopCut::new(vec!["END".into()]);
        let mut out = cut.push("no E");
        out.push_str(&cut.push("N"));
        out.push_str(&cut.finish());
        assert_eq!(out, "no EN");
    }
}
