//! Anthropic messages request bodies: `system`, `messages` and `tools`.

use atdp_schema::{Message, Tool, ToolCall};
use serde_json::{Map, Value};

use super::{
    JoinedText, NonText, content_text, field_path, json_text, object, optional_str, other_tool,
    required_array, required_str,
};
use crate::WireError;

/// Content block types that carry text, and the field holding it.
const TEXT: &[(&str, &str)] = &[("text", "text")];

/// `system` (a string or text blocks) as a system message, then `messages`.
pub(super) fn messages(
    obj: &Map<String, Value>,
    non_text: &mut NonText,
) -> Result<Vec<Message>, WireError> {
    let mut messages = Vec::new();
    if let Some(system) = content_text(obj.get("system"), "system", TEXT, non_text)? {
        messages.push(Message {
            role: "system".to_owned(),
            content: Some(system),
            ..Message::default()
        });
    }
    for (i, message) in required_array(obj, "messages")?.iter().enumerate() {
        push_message(message, &format!("messages[{i}]"), &mut messages, non_text)?;
    }
    Ok(messages)
}

/// One message. Its `tool_result` blocks become `tool` messages, placed before the rest of
/// the message (the API requires them to come first in a user turn); `tool_use` blocks
/// become tool calls; adjacent text blocks are joined as the provider reads them, with
/// nothing between them, and text on either side of another block with `\n`; other blocks
/// are counted.
fn push_message(
    message: &Value,
    path: &str,
    messages: &mut Vec<Message>,
    non_text: &mut NonText,
) -> Result<(), WireError> {
    let message = object(message, path)?;
    let role = required_str(message, "role", path)?.to_owned();
    let content_path = field_path(path, "content");
    let blocks = match message.get("content") {
        Some(Value::Array(blocks)) => blocks,
        other => {
            let content = content_text(other, &content_path, TEXT, non_text)?;
            messages.push(Message {
                role,
                content,
                ..Message::default()
            });
            return Ok(());
        }
    };
    let mut text = JoinedText::default();
    let mut tool_calls = Vec::new();
    let mut results = 0;
    for (i, block) in blocks.iter().enumerate() {
        let block_path = format!("{content_path}[{i}]");
        let block = object(block, &block_path)?;
        let kind = required_str(block, "type", &block_path)?;
        if kind == "text" {
            text.push(required_str(block, "text", &block_path)?);
            continue;
        }
        text.gap();
        match kind {
            "tool_use" => tool_calls.push(ToolCall {
                id: required_str(block, "id", &block_path)?.to_owned(),
                name: required_str(block, "name", &block_path)?.to_owned(),
                arguments: block
                    .get("input")
                    .map(json_text)
                    .unwrap_or_else(|| "{}".to_owned()),
            }),
            "tool_result" => {
                results += 1;
                messages.push(Message {
                    role: "tool".to_owned(),
                    content: content_text(
                        block.get("content"),
                        &field_path(&block_path, "content"),
                        TEXT,
                        non_text,
                    )?,
                    tool_call_id: Some(required_str(block, "tool_use_id", &block_path)?.to_owned()),
                    ..Message::default()
                });
            }
            other => non_text.count(other),
        }
    }
    // A user turn made only of tool results has nothing left to record as its own message.
    let text = text.finish();
    if text.is_some() || !tool_calls.is_empty() || results == 0 {
        messages.push(Message {
            role,
            content: text,
            tool_calls,
            ..Message::default()
        });
    }
    Ok(())
}

/// One tool definition as recorded.
pub(super) fn tool_of(tool: &Map<String, Value>, path: &str) -> Result<Tool, WireError> {
    Ok(match optional_str(tool, "type", path)? {
        None | Some("custom") => Tool {
            kind: "function".to_owned(),
            name: required_str(tool, "name", path)?.to_owned(),
            description: optional_str(tool, "description", path)?.map(str::to_owned),
            parameters: tool
                .get("input_schema")
                .filter(|s| !s.is_null())
                .map(json_text),
        },
        Some(kind) => other_tool(kind, tool, path)?,
    })
}
