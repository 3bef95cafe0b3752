//! What a request's content holds besides text: the block, part and item types each API
//! knows, and the parts the detectors cannot read.
//!
//! - **Known types.** Every content block (Anthropic), content part (OpenAI) and input item
//!   (Responses) is checked against the types the official SDKs send at that place (beta
//!   surfaces included). A type outside the list is one the proxy cannot judge: it could carry
//!   a tool, a file or a setting the proxy does not read. It is reported in
//!   [`Content::unknown`], and the proxy refuses it towards `external` upstreams unless the
//!   policy directory allows it by name, as it does unknown top-level fields.
//! - **Unscannable parts.** Images, audio, files and documents other than plain text are
//!   forwarded as they are: no detector reads pixels, sound or a PDF. Each one the client sends
//!   is named in [`Content::unscannable`] by its kind (`image`, `audio`, `file`, `document`)
//!   and, when the request states a media type, by that type and by kind and type
//!   (`image/png` and `image:image/png`; `application/pdf` whether it came as an OpenAI file or
//!   an Anthropic document), so that a Cedar rule decides it (`context.unscannable`).
//!
//! Tools that content defines are read by `offers::inline`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{field_path, object, optional_str};
use crate::{ApiKind, WireError};

/// Anthropic: blocks of a `user` or `assistant` message (the request blocks of the current
/// SDK, and the response blocks it lets a client send back).
const ANTHROPIC_MESSAGE: &[&str] = &[
    "advisor_tool_result",
    "bash_code_execution_tool_result",
    "code_execution_tool_result",
    "compaction",
    "container_upload",
    "document",
    "fallback",
    "image",
    "mcp_tool_listing",
    "mcp_tool_result",
    "mcp_tool_use",
    "redacted_thinking",
    "search_result",
    "server_tool_use",
    "text",
    "text_editor_code_execution_tool_result",
    "thinking",
    "tool_addition",
    "tool_removal",
    "tool_result",
    "tool_search_tool_result",
    "tool_use",
    "web_fetch_tool_result",
    "web_search_tool_result",
];

/// Anthropic: blocks of a `system` message inside `messages`.
const ANTHROPIC_SYSTEM_MESSAGE: &[&str] = &["text", "tool_addition", "tool_removal"];

/// Anthropic: blocks of the top-level `system`.
const ANTHROPIC_SYSTEM: &[&str] = &["text"];

/// Anthropic: parts of a `tool_result`'s content.
const ANTHROPIC_TOOL_RESULT: &[&str] = &[
    "browser_state",
    "document",
    "image",
    "search_result",
    "text",
    "tool_reference",
];

/// OpenAI chat: parts of a message's content.
const CHAT_PARTS: &[&str] = &["file", "image_url", "input_audio", "refusal", "text"];

/// OpenAI responses: the items of `input`.
const RESPONSES_ITEMS: &[&str] = &[
    "additional_tools",
    "apply_patch_call",
    "apply_patch_call_output",
    "code_interpreter_call",
    "compaction",
    "compaction_trigger",
    "computer_call",
    "computer_call_output",
    "configuration_update",
    "custom_tool_call",
    "custom_tool_call_output",
    "file_search_call",
    "function_call",
    "function_call_output",
    "image_generation_call",
    "item_reference",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "mcp_list_tools",
    "message",
    "program",
    "program_output",
    "reasoning",
    "shell_call",
    "shell_call_output",
    "tool_search_call",
    "tool_search_output",
    "web_search_call",
];

/// OpenAI responses: parts of a message item's content.
const RESPONSES_PARTS: &[&str] = &[
    "input_file",
    "input_image",
    "input_text",
    "output_text",
    "refusal",
];

/// OpenAI responses: parts of a tool output (`function_call_output`,
/// `custom_tool_call_output`).
const RESPONSES_OUTPUT_PARTS: &[&str] = &["input_file", "input_image", "input_text"];

/// A content type the proxy does not know, and where it sat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownContent {
    /// Where: `messages[2].content[0]`.
    pub field: String,
    /// Its `type`, as sent.
    pub kind: String,
}

/// What [`read`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Content {
    /// Content types the proxy does not know, in the body's order.
    pub(crate) unknown: Vec<UnknownContent>,
    /// The unscannable parts, by kind and by kind and media type.
    pub(crate) unscannable: BTreeSet<String>,
}

impl Content {
    fn check(&mut self, known: &[&str], kind: &str, field: &str) {
        if !known.contains(&kind) {
            self.unknown.push(UnknownContent {
                field: field.to_owned(),
                kind: kind.to_owned(),
            });
        }
    }

    fn unscannable(&mut self, kind: &str, media: Option<&str>) {
        self.unscannable.insert(kind.to_owned());
        if let Some(media) = media.and_then(media_type) {
            self.unscannable.insert(format!("{kind}:{media}"));
            self.unscannable.insert(media);
        }
    }
}

/// A media type as RFC 6838 writes one (`type/subtype`, each a restricted name of at most 64
/// characters), in lower case; `None` for anything else, and the part is then named by its
/// kind alone. The names are decided on, audited and stored as given, so what is not a media
/// type (free text, an address) is not carried into them.
fn media_type(text: &str) -> Option<String> {
    let media = text.trim().to_ascii_lowercase();
    let (top, sub) = media.split_once('/')?;
    let name = |part: &str| {
        part.len() <= 64
            && part
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    (name(top) && name(sub)).then_some(media)
}

/// Reads the content of a request body of `api`. The body's shape was checked by the
/// request reader; what is not an array of objects here is skipped.
pub(crate) fn read(api: ApiKind, obj: &Map<String, Value>) -> Result<Content, WireError> {
    let mut content = Content::default();
    match api {
        ApiKind::OpenAiChat => chat(obj, &mut content)?,
        ApiKind::OpenAiResponses => responses(obj, &mut content)?,
        ApiKind::AnthropicMessages => anthropic(obj, &mut content)?,
    }
    Ok(content)
}

/// An object of an array with its path and its `type` (`None` when absent).
type Typed<'a> = (String, &'a Map<String, Value>, Option<&'a str>);

/// The objects of an array field with each one's path and `type`.
fn typed<'a>(value: Option<&'a Value>, path: &str) -> Result<Vec<Typed<'a>>, WireError> {
    let Some(Value::Array(items)) = value else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let item_path = format!("{path}[{i}]");
            let item = object(item, &item_path)?;
            let kind = optional_str(item, "type", &item_path)?;
            Ok((item_path, item, kind))
        })
        .collect()
}

/// The media type of a `data:` URL (`data:image/png;base64,…` → `image/png`).
fn data_url_media(url: Option<&str>) -> Option<&str> {
    let rest = url?.strip_prefix("data:")?;
    let end = rest.find([';', ','])?;
    Some(&rest[..end])
}

fn chat(obj: &Map<String, Value>, content: &mut Content) -> Result<(), WireError> {
    for (path, message, _) in typed(obj.get("messages"), "messages")? {
        let parts_path = field_path(&path, "content");
        for (part_path, part, kind) in typed(message.get("content"), &parts_path)? {
            let kind = kind.unwrap_or_default();
            content.check(CHAT_PARTS, kind, &part_path);
            chat_part(kind, part, content);
        }
    }
    Ok(())
}

fn chat_part(kind: &str, part: &Map<String, Value>, content: &mut Content) {
    let text = |outer: &str, key: &str| {
        part.get(outer)
            .and_then(|o| o.get(key))
            .and_then(Value::as_str)
    };
    match kind {
        "image_url" => content.unscannable("image", data_url_media(text("image_url", "url"))),
        "input_audio" => {
            let media = text("input_audio", "format").and_then(audio_media);
            content.unscannable("audio", media);
        }
        "file" => content.unscannable("file", data_url_media(text("file", "file_data"))),
        _ => {}
    }
}

/// An OpenAI audio format as a media type; `None` for a format the API does not define.
fn audio_media(format: &str) -> Option<&'static str> {
    Some(match format {
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        "flac" => "audio/flac",
        "opus" => "audio/opus",
        "pcm16" => "audio/pcm",
        "aac" => "audio/aac",
        _ => return None,
    })
}

fn responses(obj: &Map<String, Value>, content: &mut Content) -> Result<(), WireError> {
    for (path, item, kind) in typed(obj.get("input"), "input")? {
        let kind = kind.unwrap_or("message");
        content.check(RESPONSES_ITEMS, kind, &path);
        match kind {
            "message" => {
                let parts_path = field_path(&path, "content");
                for (part_path, part, part_kind) in typed(item.get("content"), &parts_path)? {
                    let part_kind = part_kind.unwrap_or_default();
                    content.check(RESPONSES_PARTS, part_kind, &part_path);
                    responses_part(part_kind, part, content);
                }
            }
            "function_call_output" | "custom_tool_call_output" => {
                let parts_path = field_path(&path, "output");
                for (part_path, part, part_kind) in typed(item.get("output"), &parts_path)? {
                    let part_kind = part_kind.unwrap_or_default();
                    content.check(RESPONSES_OUTPUT_PARTS, part_kind, &part_path);
                    responses_part(part_kind, part, content);
                }
            }
            "computer_call_output" => {
                if let Some(output) = item.get("output").and_then(Value::as_object) {
                    let url = output.get("image_url").and_then(Value::as_str);
                    content.unscannable("image", data_url_media(url));
                }
            }
            "image_generation_call" if item.get("result").is_some_and(|r| !r.is_null()) => {
                content.unscannable("image", None);
            }
            "code_interpreter_call" => {
                let outputs = field_path(&path, "outputs");
                for (_, output, output_kind) in typed(item.get("outputs"), &outputs)? {
                    if output_kind == Some("image") {
                        let url = output.get("url").and_then(Value::as_str);
                        content.unscannable("image", data_url_media(url));
                    }
                }
            }
            _ => {}
        }
    }
    // A saved prompt's variables may be images and files as well as text.
    if let Some(variables) = obj
        .get("prompt")
        .and_then(|p| p.get("variables"))
        .and_then(Value::as_object)
    {
        for variable in variables.values().filter_map(Value::as_object) {
            let kind = variable.get("type").and_then(Value::as_str);
            responses_part(kind.unwrap_or_default(), variable, content);
        }
    }
    // The image generation tool's mask is an image sent with the request.
    for tool in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if tool.get("type").and_then(Value::as_str) == Some("image_generation")
            && let Some(mask) = tool.get("input_image_mask").and_then(Value::as_object)
        {
            let url = mask.get("image_url").and_then(Value::as_str);
            content.unscannable("image", data_url_media(url));
        }
    }
    Ok(())
}

fn responses_part(kind: &str, part: &Map<String, Value>, content: &mut Content) {
    let text = |key: &str| part.get(key).and_then(Value::as_str);
    match kind {
        "input_image" => content.unscannable("image", data_url_media(text("image_url"))),
        "input_file" => content.unscannable("file", data_url_media(text("file_data"))),
        _ => {}
    }
}

fn anthropic(obj: &Map<String, Value>, content: &mut Content) -> Result<(), WireError> {
    for (path, _, kind) in typed(obj.get("system"), "system")? {
        content.check(ANTHROPIC_SYSTEM, kind.unwrap_or_default(), &path);
    }
    for (path, message, _) in typed(obj.get("messages"), "messages")? {
        let known = match message.get("role").and_then(Value::as_str) {
            Some("system") => ANTHROPIC_SYSTEM_MESSAGE,
            _ => ANTHROPIC_MESSAGE,
        };
        let blocks_path = field_path(&path, "content");
        for (block_path, block, kind) in typed(message.get("content"), &blocks_path)? {
            let kind = kind.unwrap_or_default();
            content.check(known, kind, &block_path);
            anthropic_block(kind, block, &block_path, content)?;
        }
    }
    Ok(())
}

fn anthropic_block(
    kind: &str,
    block: &Map<String, Value>,
    path: &str,
    content: &mut Content,
) -> Result<(), WireError> {
    match kind {
        "image" | "document" => anthropic_source(kind, block, path, content)?,
        "container_upload" => content.unscannable("file", None),
        "tool_result" => {
            let parts_path = field_path(path, "content");
            for (part_path, part, part_kind) in typed(block.get("content"), &parts_path)? {
                let part_kind = part_kind.unwrap_or_default();
                content.check(ANTHROPIC_TOOL_RESULT, part_kind, &part_path);
                if matches!(part_kind, "image" | "document") {
                    anthropic_source(part_kind, part, &part_path, content)?;
                }
            }
        }
        // A web fetch result sent back carries the fetched document.
        "web_fetch_tool_result" => {
            let result = block.get("content").and_then(Value::as_object);
            if let Some(document) = result
                .and_then(|r| r.get("content"))
                .and_then(Value::as_object)
            {
                anthropic_source("document", document, path, content)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// An image or document block by its `source`: plain text (`text`) is read by the detectors;
/// `content` blocks are read one by one; anything else (base64 data, a URL, a file id) is
/// unscannable.
fn anthropic_source(
    kind: &str,
    block: &Map<String, Value>,
    path: &str,
    content: &mut Content,
) -> Result<(), WireError> {
    let source = block.get("source").and_then(Value::as_object);
    let source_kind = source.and_then(|s| s.get("type")).and_then(Value::as_str);
    match (kind, source_kind) {
        ("document", Some("text")) => {}
        ("document", Some("content")) => {
            let parts_path = format!("{path}.source.content");
            let parts = source.and_then(|s| s.get("content"));
            for (part_path, part, part_kind) in typed(parts, &parts_path)? {
                let part_kind = part_kind.unwrap_or_default();
                content.check(&["image", "text"], part_kind, &part_path);
                if part_kind == "image" {
                    anthropic_source("image", part, &part_path, content)?;
                }
            }
        }
        _ => {
            let media = source
                .and_then(|s| s.get("media_type"))
                .and_then(Value::as_str);
            content.unscannable(kind, media);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read_body(api: ApiKind, body: Value) -> Content {
        read(api, body.as_object().unwrap()).unwrap()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn unknown(content: &Content) -> Vec<(&str, &str)> {
        content
            .unknown
            .iter()
            .map(|u| (u.field.as_str(), u.kind.as_str()))
            .collect()
    }

    #[test]
    fn every_unscannable_chat_part_is_named_by_kind_and_media_type() {
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,AAAA"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"}}
        ]}]});
        let content = read_body(ApiKind::OpenAiChat, body);
        assert_eq!(
            content.unscannable,
            set(&[
                "application/pdf",
                "audio",
                "audio/wav",
                "audio:audio/wav",
                "file",
                "file:application/pdf",
                "image",
                "image/png",
                "image:image/png"
            ])
        );
        assert!(content.unknown.is_empty());
    }

    #[test]
    fn every_unscannable_responses_part_is_named() {
        let body = json!({"input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "data:image/jpeg;base64,AAAA"},
                {"type": "input_file", "file_id": "file-1"}
            ]},
            {"type": "function_call_output", "call_id": "c", "output": [
                {"type": "input_file", "file_data": "data:text/csv;base64,AAAA"}
            ]},
            {"type": "computer_call_output", "call_id": "c2", "output": {"type": "computer_screenshot", "image_url": "data:image/webp;base64,AA"}}
        ]});
        let content = read_body(ApiKind::OpenAiResponses, body);
        assert_eq!(
            content.unscannable,
            set(&[
                "file",
                "file:text/csv",
                "image",
                "image/jpeg",
                "image/webp",
                "image:image/jpeg",
                "image:image/webp",
                "text/csv"
            ])
        );
    }

    #[test]
    fn images_and_files_outside_the_input_are_named() {
        let body = json!({
            "input": [
                {"type": "code_interpreter_call", "id": "ci", "container_id": "c", "code": "plot()",
                 "status": "completed",
                 "outputs": [{"type": "logs", "logs": "ok"}, {"type": "image", "url": "data:image/png;base64,AA"}]}
            ],
            "prompt": {"id": "pmpt_1", "variables": {
                "name": "text",
                "scan": {"type": "input_image", "image_url": "data:image/tiff;base64,AA"},
                "doc": {"type": "input_file", "file_id": "file-1"}
            }},
            "tools": [{"type": "image_generation", "input_image_mask": {"file_id": "file-2"}}]
        });
        let content = read_body(ApiKind::OpenAiResponses, body);
        assert_eq!(
            content.unscannable,
            set(&[
                "file",
                "image",
                "image/png",
                "image/tiff",
                "image:image/png",
                "image:image/tiff"
            ])
        );
    }

    #[test]
    fn what_is_not_a_media_type_names_the_part_by_its_kind_alone() {
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "jane@example.com"}},
            {"type": "image_url", "image_url": {"url": "data:image/call me on 415 555 0172;base64,AA"}},
            {"type": "file", "file": {"file_data": "data:Jane Doe;base64,AA"}}
        ]}]});
        assert_eq!(
            read_body(ApiKind::OpenAiChat, body).unscannable,
            set(&["audio", "file", "image"])
        );
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jane@example.com", "data": "AA"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/vnd.ms-excel", "data": "AA"}}
        ]}]});
        assert_eq!(
            read_body(ApiKind::AnthropicMessages, body).unscannable,
            set(&[
                "application/vnd.ms-excel",
                "document",
                "document:application/vnd.ms-excel",
                "image"
            ])
        );
    }

    #[test]
    fn anthropic_images_and_documents_are_named_and_text_documents_are_not() {
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain"}},
            {"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "AA"}}
            ]},
            {"type": "document", "source": {"type": "content", "content": [
                {"type": "text", "text": "x"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/i.png"}}
            ]}}
        ]}]});
        let content = read_body(ApiKind::AnthropicMessages, body);
        assert_eq!(
            content.unscannable,
            set(&["image", "image/gif", "image:image/gif"])
        );
        let pdf = json!({"messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA"}},
            {"type": "container_upload", "file_id": "f"}
        ]}]});
        assert_eq!(
            read_body(ApiKind::AnthropicMessages, pdf).unscannable,
            set(&[
                "application/pdf",
                "document",
                "document:application/pdf",
                "file"
            ])
        );
        let clean = json!({"messages": [{"role": "user", "content": "just text"}]});
        assert!(
            read_body(ApiKind::AnthropicMessages, clean)
                .unscannable
                .is_empty()
        );
    }

    #[test]
    fn content_types_outside_the_sdks_lists_are_reported_where_they_sit() {
        let anthropic = json!({
            "system": [{"type": "text", "text": "s"}, {"type": "tool_addition"}],
            "messages": [
                {"role": "system", "content": [{"type": "image", "source": {}}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "a"},
                    {"type": "secret_tools", "tools": []},
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}
                ]}
            ]
        });
        assert_eq!(
            unknown(&read_body(ApiKind::AnthropicMessages, anthropic)),
            [
                ("system[1]", "tool_addition"),
                ("messages[0].content[0]", "image"),
                ("messages[1].content[1]", "secret_tools"),
                ("messages[1].content[2].content[0]", "tool_use")
            ]
        );
        let chat = json!({"messages": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}]});
        assert_eq!(
            unknown(&read_body(ApiKind::OpenAiChat, chat)),
            [("messages[0].content[0]", "input_text")]
        );
        let responses = json!({"input": [
            {"type": "tool_definitions", "tools": []},
            {"role": "user", "content": [{"type": "text", "text": "a"}]}
        ]});
        assert_eq!(
            unknown(&read_body(ApiKind::OpenAiResponses, responses)),
            [
                ("input[0]", "tool_definitions"),
                ("input[1].content[0]", "text")
            ]
        );
    }
}
