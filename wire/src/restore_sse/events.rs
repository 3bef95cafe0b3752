//! The events of each API that carry text: which fields are streamed, which events end
//! them, and the delta events that carry held text out.

use serde_json::{Map, Value, json};

use super::{Ending, Frame, State, restore_whole};
use crate::WireError;
use crate::restore::{Originals, TextMode};

/// One streamed text field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum FieldKey {
    /// OpenAI chat `choices[choice].delta.content`.
    ChatContent { choice: u64 },
    /// OpenAI chat `choices[choice].delta.tool_calls[call].function.arguments`.
    ChatArguments { choice: u64, call: u64 },
    /// Responses `response.output_text.delta`.
    ResponsesText {
        output: u64,
        content: u64,
        item: String,
    },
    /// Responses `response.function_call_arguments.delta`.
    ResponsesArguments { output: u64, item: String },
    /// Anthropic `text_delta` of block `block`.
    AnthropicText { block: u64 },
    /// Anthropic `input_json_delta` of block `block`.
    AnthropicJson { block: u64 },
}

impl FieldKey {
    /// The least key of all (the first variant, with the least index).
    pub(super) const LEAST: FieldKey = FieldKey::ChatContent { choice: 0 };

    /// The kind of text the field carries: tool-call arguments are JSON text.
    pub(super) fn mode(&self) -> TextMode {
        match self {
            FieldKey::ChatArguments { .. }
            | FieldKey::ResponsesArguments { .. }
            | FieldKey::AnthropicJson { .. } => TextMode::JsonText,
            FieldKey::ChatContent { .. }
            | FieldKey::ResponsesText { .. }
            | FieldKey::AnthropicText { .. } => TextMode::Plain,
        }
    }

    /// The choice, output item or content block the field belongs to.
    pub(super) fn group(&self) -> u64 {
        match self {
            FieldKey::ChatContent { choice } | FieldKey::ChatArguments { choice, .. } => *choice,
            FieldKey::ResponsesText { output, .. }
            | FieldKey::ResponsesArguments { output, .. } => *output,
            FieldKey::AnthropicText { block } | FieldKey::AnthropicJson { block } => *block,
        }
    }
}

/// An unsigned index field, or `default` when it is absent.
fn index(value: &Value, key: &str, default: usize) -> u64 {
    value
        .get(key)
        .and_then(Value::as_u64)
        .unwrap_or(default as u64)
}

impl State {
    /// An OpenAI `chat.completion.chunk`.
    pub(super) fn chat(
        &mut self,
        chunk: &mut Value,
        originals: Originals<'_>,
        frame: Frame,
        out: &mut Vec<u8>,
    ) -> Result<bool, WireError> {
        let mut changed = false;
        let mut ended = Vec::new();
        if let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) {
            for (pos, choice) in choices.iter_mut().enumerate() {
                let number = index(choice, "index", pos);
                let ends = choice.get("finish_reason").is_some_and(|r| !r.is_null());
                if let Some(delta) = choice.get_mut("delta") {
                    let key = FieldKey::ChatContent { choice: number };
                    changed |= self.rewrite(delta.get_mut("content"), key, ends, originals)?;
                    let calls = delta.get_mut("tool_calls").and_then(Value::as_array_mut);
                    for (call_pos, call) in calls.into_iter().flatten().enumerate() {
                        let key = FieldKey::ChatArguments {
                            choice: number,
                            call: index(call, "index", call_pos),
                        };
                        let slot = call
                            .get_mut("function")
                            .and_then(|f| f.get_mut("arguments"));
                        changed |= self.rewrite(slot, key, ends, originals)?;
                    }
                }
                if ends {
                    ended.push(number);
                }
            }
        }
        // Fields of an ending choice that this chunk does not carry: their held text goes
        // in a chunk of its own, before this one.
        for number in ended {
            self.flush(&Ending::Group(number), Some(chunk), originals, frame, out)?;
        }
        self.last_chunk = Some(chunk.clone());
        Ok(changed)
    }

    /// An OpenAI responses-API event.
    pub(super) fn responses(
        &mut self,
        event: &mut Value,
        originals: Originals<'_>,
        frame: Frame,
        out: &mut Vec<u8>,
    ) -> Result<bool, WireError> {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = kind.to_owned();
        let output = index(event, "output_index", 0);
        let item = event
            .get("item_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let text_key = FieldKey::ResponsesText {
            output,
            content: index(event, "content_index", 0),
            item: item.to_owned(),
        };
        let arguments_key = FieldKey::ResponsesArguments {
            output,
            item: item.to_owned(),
        };
        match kind.as_str() {
            "response.output_text.delta" => {
                return self.rewrite(event.get_mut("delta"), text_key, false, originals);
            }
            "response.function_call_arguments.delta" => {
                return self.rewrite(event.get_mut("delta"), arguments_key, false, originals);
            }
            "response.output_text.done" => {
                self.flush(&Ending::Field(text_key), Some(event), originals, frame, out)?;
            }
            "response.function_call_arguments.done" => {
                let ending = Ending::Field(arguments_key);
                self.flush(&ending, Some(event), originals, frame, out)?;
            }
            "response.content_part.done" | "response.output_item.done" => {
                self.flush(&Ending::Group(output), Some(event), originals, frame, out)?;
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.flush(&Ending::All, Some(event), originals, frame, out)?;
            }
            _ => {}
        }
        restore_whole(event, originals)
    }

    /// An Anthropic messages event.
    pub(super) fn anthropic(
        &mut self,
        event: &mut Value,
        originals: Originals<'_>,
        frame: Frame,
        out: &mut Vec<u8>,
    ) -> Result<bool, WireError> {
        let block = index(event, "index", 0);
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "content_block_delta" => {
                let Some(delta) = event.get_mut("delta") else {
                    return Ok(false);
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let key = FieldKey::AnthropicText { block };
                        self.rewrite(delta.get_mut("text"), key, false, originals)
                    }
                    Some("input_json_delta") => {
                        let key = FieldKey::AnthropicJson { block };
                        self.rewrite(delta.get_mut("partial_json"), key, false, originals)
                    }
                    // Thinking and its signature are signed: never touched.
                    _ => Ok(false),
                }
            }
            "content_block_stop" => {
                self.flush(&Ending::Group(block), None, originals, frame, out)?;
                Ok(false)
            }
            "message_delta" | "message_stop" => {
                self.flush(&Ending::All, None, originals, frame, out)?;
                Ok(false)
            }
            "ping" => Ok(false),
            "content_block_start" if is_thinking(event.get("content_block")) => Ok(false),
            _ => restore_whole(event, originals),
        }
    }
}

fn is_thinking(block: Option<&Value>) -> bool {
    matches!(
        block.and_then(|b| b.get("type")).and_then(Value::as_str),
        Some("thinking" | "redacted_thinking")
    )
}

/// An OpenAI chat chunk that carries `held` text of choice `choice`, modelled on
/// `template` (id, created, model, …); its usage, if any, is nulled.
pub(super) fn chat_flush_chunk(
    template: Option<&Value>,
    choice: u64,
    held: &[(FieldKey, String)],
) -> Value {
    let mut chunk = match template {
        Some(Value::Object(fields)) => fields.clone(),
        _ => Map::from_iter([("object".to_owned(), json!("chat.completion.chunk"))]),
    };
    if chunk.contains_key("usage") {
        chunk.insert("usage".to_owned(), Value::Null);
    }
    let mut delta = Map::new();
    let mut calls = Vec::new();
    for (key, text) in held {
        match key {
            FieldKey::ChatContent { .. } => {
                delta.insert("content".to_owned(), json!(text));
            }
            FieldKey::ChatArguments { call, .. } => {
                calls.push(json!({"index": call, "function": {"arguments": text}}));
            }
            _ => {}
        }
    }
    if !calls.is_empty() {
        delta.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    chunk.insert(
        "choices".to_owned(),
        json!([{"index": choice, "delta": delta, "logprobs": null, "finish_reason": null}]),
    );
    Value::Object(chunk)
}

/// A responses-API delta event (name, data) carrying held text; its sequence number is
/// the current event's (the API has no number to spare).
pub(super) fn responses_flush_event(
    key: &FieldKey,
    text: &str,
    current: Option<&Value>,
) -> Option<(&'static str, Value)> {
    let (name, mut event) = match key {
        FieldKey::ResponsesText {
            output,
            content,
            item,
        } => (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "item_id": item,
                   "output_index": output, "content_index": content, "delta": text,
                   "logprobs": []}),
        ),
        FieldKey::ResponsesArguments { output, item } => (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "item_id": item,
                   "output_index": output, "delta": text}),
        ),
        _ => return None,
    };
    let sequence = current.and_then(|c| c.get("sequence_number")).cloned();
    if let (Some(sequence), Some(fields)) = (sequence, event.as_object_mut()) {
        fields.insert("sequence_number".to_owned(), sequence);
    }
    Some((name, event))
}

/// An Anthropic `content_block_delta` event (name, data) carrying held text.
pub(super) fn anthropic_flush_event(key: &FieldKey, text: &str) -> Option<(&'static str, Value)> {
    let delta = match key {
        FieldKey::AnthropicText { .. } => json!({"type": "text_delta", "text": text}),
        FieldKey::AnthropicJson { .. } => json!({"type": "input_json_delta", "partial_json": text}),
        _ => return None,
    };
    let block = key.group();
    let event = json!({"type": "content_block_delta", "index": block, "delta": delta});
    Some(("content_block_delta", event))
}
