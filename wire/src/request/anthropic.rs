//! Anthropic messages request bodies: `system`, `messages` and `tools`.

use atdp_schema::{Message, Tool, ToolCall};
use serde_json::{Map, Value};

use super::{
    JoinedText, NonText, content_text, field_path, json_text, object, optional_array, optional_str,
    other_tool, required_array, required_str,
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

/// `tools`, then the tools that `tool_addition` blocks of the top-level `system` and of the
/// messages define (as a block or in a `compaction` block's `tool_changes`), in the body's
/// order: custom tools `{name, description, input_schema}` are function tools; server tools
/// (`web_search_20250305`, `bash_20250124`, …) keep their type.
pub(super) fn tools(obj: &Map<String, Value>) -> Result<Vec<Tool>, WireError> {
    let mut tools = Vec::new();
    for (i, tool) in optional_array(obj, "tools", "")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        tools.push(tool_of(object(tool, &path)?, &path)?);
    }
    let system = match obj.get("system") {
        Some(Value::Array(blocks)) => Some(("system".to_owned(), blocks)),
        _ => None,
    };
    let messages = optional_array(obj, "messages", "")?
        .iter()
        .enumerate()
        .filter_map(|(i, message)| match message.get("content") {
            Some(Value::Array(blocks)) => Some((format!("messages[{i}].content"), blocks)),
            _ => None,
        });
    for (at, blocks) in system.into_iter().chain(messages) {
        for (j, value) in blocks.iter().enumerate() {
            let path = format!("{at}[{j}]");
            let Some(block) = value.as_object() else {
                continue;
            };
            let changes = match block.get("type").and_then(Value::as_str) {
                Some("tool_addition") => std::slice::from_ref(value),
                Some("compaction") => optional_array(block, "tool_changes", &path)?,
                _ => continue,
            };
            for change in changes {
                let definition = change
                    .get("tool")
                    .filter(|t| t.get("type").and_then(Value::as_str) == Some("tool_definition"))
                    .and_then(|t| t.get("definition"))
                    .and_then(Value::as_object);
                if let Some(definition) = definition {
                    tools.push(tool_of(definition, &path)?);
                }
            }
        }
    }
    Ok(tools)
}

/// One tool definition as recorded.
fn tool_of(tool: &Map<String, Value>, path: &str) -> Result<Tool, WireError> {
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
