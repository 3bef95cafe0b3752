//! OpenAI request bodies: chat completions `messages` and responses `instructions`/`input`,
//! and both APIs' `tools`.

use atdp_schema::{Message, Tool, ToolCall};
use serde_json::{Map, Value};

use super::{
    NonText, content_text, field_path, json_text, object, optional_array, optional_str,
    required_array, required_str,
};
use crate::WireError;

/// Chat content part types that carry text, and the field holding it.
const CHAT_TEXT: &[(&str, &str)] = &[("text", "text"), ("refusal", "refusal")];

/// Responses content part types that carry text, and the field holding it.
const RESPONSES_TEXT: &[(&str, &str)] = &[
    ("input_text", "text"),
    ("output_text", "text"),
    ("text", "text"),
    ("refusal", "refusal"),
];

/// Chat completions `messages`.
pub(super) fn chat_messages(
    obj: &Map<String, Value>,
    non_text: &mut NonText,
) -> Result<Vec<Message>, WireError> {
    let list = required_array(obj, "messages")?;
    let mut messages = Vec::with_capacity(list.len());
    for (i, message) in list.iter().enumerate() {
        let path = format!("messages[{i}]");
        let message = object(message, &path)?;
        let role = required_str(message, "role", &path)?;
        let mut content = content_text(
            message.get("content"),
            &field_path(&path, "content"),
            CHAT_TEXT,
            non_text,
        )?;
        if content.is_none() {
            content = optional_str(message, "refusal", &path)?.map(str::to_owned);
        }
        let mut tool_calls = Vec::new();
        for (j, call) in optional_array(message, "tool_calls", &path)?
            .iter()
            .enumerate()
        {
            tool_calls.push(chat_tool_call(call, &format!("{path}.tool_calls[{j}]"))?);
        }
        // The deprecated single `function_call` of older clients.
        if let Some(call) = message.get("function_call").filter(|c| !c.is_null()) {
            let call_path = field_path(&path, "function_call");
            tool_calls.push(function(object(call, &call_path)?, "", &call_path)?);
        }
        messages.push(Message {
            role: role.to_owned(),
            content,
            name: optional_str(message, "name", &path)?.map(str::to_owned),
            tool_call_id: optional_str(message, "tool_call_id", &path)?.map(str::to_owned),
            tool_calls,
        });
    }
    Ok(messages)
}

/// `{id, type: "function", function: {name, arguments}}`.
fn chat_tool_call(call: &Value, path: &str) -> Result<ToolCall, WireError> {
    let call = object(call, path)?;
    let id = optional_str(call, "id", path)?.unwrap_or_default();
    let function_path = field_path(path, "function");
    let Some(function_value) = call.get("function") else {
        return Err(WireError::missing(function_path));
    };
    function(object(function_value, &function_path)?, id, &function_path)
}

/// `{name, arguments}` of a function call.
fn function(obj: &Map<String, Value>, id: &str, path: &str) -> Result<ToolCall, WireError> {
    Ok(ToolCall {
        id: id.to_owned(),
        name: required_str(obj, "name", path)?.to_owned(),
        arguments: obj.get("arguments").map(json_text).unwrap_or_default(),
    })
}

/// Responses `instructions` (as a system message) and `input`.
pub(super) fn responses_input(
    obj: &Map<String, Value>,
    non_text: &mut NonText,
) -> Result<Vec<Message>, WireError> {
    let mut messages = Vec::new();
    if let Some(instructions) = optional_str(obj, "instructions", "")? {
        messages.push(text_message("system", instructions));
    }
    match obj.get("input") {
        None | Some(Value::Null) => return Err(WireError::missing("input")),
        Some(Value::String(text)) => messages.push(text_message("user", text)),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                responses_item(item, &format!("input[{i}]"), &mut messages, non_text)?;
            }
        }
        Some(_) => {
            return Err(WireError::wrong_type(
                "input",
                "a string or an array of items",
            ));
        }
    }
    Ok(messages)
}

fn text_message(role: &str, text: &str) -> Message {
    Message {
        role: role.to_owned(),
        content: Some(text.to_owned()),
        ..Message::default()
    }
}

/// One `input` item: a message, a function call (joined to the assistant message before
/// it), a function call's output (a `tool` message), or another item (counted).
fn responses_item(
    item: &Value,
    path: &str,
    messages: &mut Vec<Message>,
    non_text: &mut NonText,
) -> Result<(), WireError> {
    let item = object(item, path)?;
    match optional_str(item, "type", path)?.unwrap_or("message") {
        "message" => messages.push(Message {
            role: required_str(item, "role", path)?.to_owned(),
            content: content_text(
                item.get("content"),
                &field_path(path, "content"),
                RESPONSES_TEXT,
                non_text,
            )?,
            ..Message::default()
        }),
        "function_call" => {
            let id = match optional_str(item, "call_id", path)? {
                Some(id) => id,
                None => optional_str(item, "id", path)?.unwrap_or_default(),
            };
            let call = function(item, id, path)?;
            match messages.last_mut() {
                Some(last) if last.role == "assistant" => last.tool_calls.push(call),
                _ => messages.push(Message {
                    role: "assistant".to_owned(),
                    tool_calls: vec![call],
                    ..Message::default()
                }),
            }
        }
        "function_call_output" => messages.push(Message {
            role: "tool".to_owned(),
            content: content_text(
                item.get("output"),
                &field_path(path, "output"),
                RESPONSES_TEXT,
                non_text,
            )?,
            tool_call_id: Some(required_str(item, "call_id", path)?.to_owned()),
            ..Message::default()
        }),
        other => non_text.count(other),
    }
    Ok(())
}

/// `{name, description, parameters}`.
pub(super) fn function_tool(obj: &Map<String, Value>, path: &str) -> Result<Tool, WireError> {
    Ok(Tool {
        kind: "function".to_owned(),
        name: required_str(obj, "name", path)?.to_owned(),
        description: optional_str(obj, "description", path)?.map(str::to_owned),
        parameters: obj
            .get("parameters")
            .filter(|p| !p.is_null())
            .map(json_text),
    })
}
