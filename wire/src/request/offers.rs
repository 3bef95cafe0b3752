//! Everything a request hands the model or switches on at the provider that can act: tools
//! of every form, MCP servers, skills, saved prompts, server-side agents; and the models it
//! may end up served by. The proxy decides each one with Cedar (`call_tool` on a `Tool`, or
//! `invoke_model` on a `Model`), so nothing that acts goes out without a decision.
//!
//! Tool entities are named for what they are:
//!
//! | form | entity |
//! |---|---|
//! | a function or custom tool the client runs (chat `tools`, legacy `functions`, Responses `function`/`custom`, Anthropic custom tools) | its name, as the client gave it |
//! | a tool the provider defines (web search, code execution, computer use, bash, text editor, file search, image generation, …) | `openai:<type>` or `anthropic:<type>`, a trailing `_YYYYMMDD` version dropped: `anthropic:web_search`, `openai:file_search` |
//! | chat `web_search_options` | `openai:web_search` |
//! | an MCP server (Responses `mcp` tool, Anthropic `mcp_servers` and `mcp_toolset`) | `mcp:<server URL>`, or `mcp:<connector id>` for an OpenAI connector |
//! | a skill in Anthropic's `container.skills` | `skill:<skill id>` |
//! | a saved prompt (Responses `prompt`), which can carry tools of its own | `prompt:<prompt id>` |
//! | Responses `multi_agent` when enabled | `openai:multi_agent` |
//!
//! A client-run tool's name may not contain `:`, so no name can pass for a namespaced entity.
//! Anthropic's `fallbacks` name models the provider may serve instead: each is an
//! `invoke_model` decision, and `"default"` (the provider's own choice) is the model
//! `fallbacks:default`.

use serde_json::{Map, Value};

use super::{field_path, object, optional_array, optional_str, required_str};
use crate::{ApiKind, WireError};

/// What kind of thing an offer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfferKind {
    /// A tool the client runs, described by name (function and custom tools).
    Function,
    /// A tool the provider defines and, for most, runs.
    Provider,
    /// An MCP server the provider connects to.
    McpServer,
    /// An Anthropic skill loaded into the code-execution container.
    Skill,
    /// A saved prompt, which can carry tools of its own.
    SavedPrompt,
    /// Server-side multi-agent execution.
    Agents,
}

impl OfferKind {
    /// As written in audit events.
    pub fn name(self) -> &'static str {
        match self {
            OfferKind::Function => "function",
            OfferKind::Provider => "provider_tool",
            OfferKind::McpServer => "mcp_server",
            OfferKind::Skill => "skill",
            OfferKind::SavedPrompt => "saved_prompt",
            OfferKind::Agents => "agents",
        }
    }
}

/// One tool-like thing a request offers or enables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The Cedar `Tool` entity id.
    pub entity: String,
    /// What it is.
    pub kind: OfferKind,
    /// Where in the request: `tools[2]`, `mcp_servers[0]`, `functions[1]`.
    pub field: String,
}

/// The offers of a request body and the extra models it may be served by.
pub(crate) fn offers(
    api: ApiKind,
    obj: &Map<String, Value>,
) -> Result<(Vec<Offer>, Vec<String>), WireError> {
    let mut found = Vec::new();
    let mut models = Vec::new();
    match api {
        ApiKind::OpenAiChat => chat(obj, &mut found)?,
        ApiKind::OpenAiResponses => responses(obj, &mut found)?,
        ApiKind::AnthropicMessages => anthropic(obj, &mut found, &mut models)?,
    }
    Ok((found, models))
}

/// `web_search_20250305` → `web_search`: a trailing `_` and eight digits is a version.
fn without_version(kind: &str) -> &str {
    match kind.rsplit_once('_') {
        Some((base, date))
            if !base.is_empty() && date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => kind,
    }
}

fn provider(family: &str, kind: &str, field: String) -> Offer {
    Offer {
        entity: format!("{family}:{}", without_version(kind)),
        kind: OfferKind::Provider,
        field,
    }
}

/// A client-run tool, by its name; a name with `:` or none at all is refused.
fn function(name: &str, field: String) -> Result<Offer, WireError> {
    if name.is_empty() || name.contains(':') {
        return Err(WireError::Invalid {
            field: format!("{field}.name"),
            why: "a tool name must be non-empty and may not contain `:`",
        });
    }
    Ok(Offer {
        entity: name.to_owned(),
        kind: OfferKind::Function,
        field,
    })
}

fn named(kind: OfferKind, prefix: &str, id: &str, field: String) -> Result<Offer, WireError> {
    if id.is_empty() {
        return Err(WireError::Invalid {
            field,
            why: "must name what it refers to",
        });
    }
    Ok(Offer {
        entity: format!("{prefix}:{id}"),
        kind,
        field,
    })
}

/// Chat completions: `tools` (function and custom), the legacy `functions`, and
/// `web_search_options`.
fn chat(obj: &Map<String, Value>, found: &mut Vec<Offer>) -> Result<(), WireError> {
    for (i, tool) in optional_array(obj, "tools", "")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let tool = object(tool, &path)?;
        let kind = optional_str(tool, "type", &path)?.unwrap_or("function");
        match kind {
            "function" | "custom" => {
                let definition_path = field_path(&path, kind);
                let definition = match tool.get(kind) {
                    Some(definition) => object(definition, &definition_path)?,
                    None => return Err(WireError::missing(definition_path)),
                };
                let name = required_str(definition, "name", &definition_path)?;
                found.push(function(name, path)?);
            }
            other => found.push(provider("openai", other, path)),
        }
    }
    for (i, legacy) in optional_array(obj, "functions", "")?.iter().enumerate() {
        let path = format!("functions[{i}]");
        let legacy = object(legacy, &path)?;
        found.push(function(required_str(legacy, "name", &path)?, path)?);
    }
    if obj.get("web_search_options").is_some_and(|o| !o.is_null()) {
        found.push(provider(
            "openai",
            "web_search",
            "web_search_options".into(),
        ));
    }
    Ok(())
}

/// Responses: `tools` of every type, a saved `prompt`, `multi_agent`.
fn responses(obj: &Map<String, Value>, found: &mut Vec<Offer>) -> Result<(), WireError> {
    for (i, tool) in optional_array(obj, "tools", "")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let tool = object(tool, &path)?;
        match optional_str(tool, "type", &path)?.unwrap_or("function") {
            "function" | "custom" => {
                let name = required_str(tool, "name", &path)?;
                found.push(function(name, path)?);
            }
            "mcp" => {
                let target = match optional_str(tool, "server_url", &path)? {
                    Some(url) => url,
                    None => optional_str(tool, "connector_id", &path)?.unwrap_or_default(),
                };
                found.push(named(OfferKind::McpServer, "mcp", target, path)?);
            }
            other => found.push(provider("openai", other, path)),
        }
    }
    if let Some(prompt) = obj.get("prompt").filter(|p| !p.is_null()) {
        let prompt = object(prompt, "prompt")?;
        let id = required_str(prompt, "id", "prompt")?;
        found.push(named(
            OfferKind::SavedPrompt,
            "prompt",
            id,
            "prompt".into(),
        )?);
    }
    if let Some(agents) = obj.get("multi_agent").filter(|a| !a.is_null()) {
        let enabled = object(agents, "multi_agent")?.get("enabled");
        if enabled != Some(&Value::Bool(false)) {
            found.push(Offer {
                entity: "openai:multi_agent".into(),
                kind: OfferKind::Agents,
                field: "multi_agent".into(),
            });
        }
    }
    Ok(())
}

/// Messages: `tools` (custom and Anthropic-defined, `mcp_toolset`), `mcp_servers`,
/// `container.skills`, and the models of `fallbacks`.
fn anthropic(
    obj: &Map<String, Value>,
    found: &mut Vec<Offer>,
    models: &mut Vec<String>,
) -> Result<(), WireError> {
    let mut servers: Vec<(&str, &str)> = Vec::new();
    for (i, server) in optional_array(obj, "mcp_servers", "")?.iter().enumerate() {
        let path = format!("mcp_servers[{i}]");
        let server = object(server, &path)?;
        let name = required_str(server, "name", &path)?;
        let url = required_str(server, "url", &path)?;
        servers.push((name, url));
        found.push(named(OfferKind::McpServer, "mcp", url, path)?);
    }
    for (i, tool) in optional_array(obj, "tools", "")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let tool = object(tool, &path)?;
        match optional_str(tool, "type", &path)? {
            None | Some("custom") => {
                let name = required_str(tool, "name", &path)?;
                found.push(function(name, path)?);
            }
            Some("mcp_toolset") => {
                let server = required_str(tool, "mcp_server_name", &path)?;
                let Some((_, url)) = servers.iter().find(|(name, _)| *name == server) else {
                    return Err(WireError::Invalid {
                        field: format!("{path}.mcp_server_name"),
                        why: "must name a server of `mcp_servers`",
                    });
                };
                found.push(named(OfferKind::McpServer, "mcp", url, path)?);
            }
            Some(other) => found.push(provider("anthropic", other, path)),
        }
    }
    if let Some(container) = obj.get("container").filter(|c| c.is_object()) {
        let container = object(container, "container")?;
        for (i, skill) in optional_array(container, "skills", "container")?
            .iter()
            .enumerate()
        {
            let path = format!("container.skills[{i}]");
            let skill = object(skill, &path)?;
            let id = required_str(skill, "skill_id", &path)?;
            found.push(named(OfferKind::Skill, "skill", id, path)?);
        }
    }
    match obj.get("fallbacks") {
        None | Some(Value::Null) => {}
        Some(Value::String(default)) if default == "default" => {
            models.push("fallbacks:default".into());
        }
        Some(Value::Array(entries)) => {
            for (i, entry) in entries.iter().enumerate() {
                let path = format!("fallbacks[{i}]");
                models.push(required_str(object(entry, &path)?, "model", &path)?.to_owned());
            }
        }
        Some(_) => {
            return Err(WireError::wrong_type(
                "fallbacks",
                "an array of {model} objects or \"default\"",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entities(api: ApiKind, body: Value) -> Vec<String> {
        let (offers, _) = offers(api, body.as_object().unwrap()).unwrap();
        offers.into_iter().map(|o| o.entity).collect()
    }

    #[test]
    fn every_chat_tool_form_is_an_offer() {
        let body = json!({
            "tools": [
                {"type": "function", "function": {"name": "lookup"}},
                {"type": "custom", "custom": {"name": "grep"}},
                {"type": "allowed_future_tool"}
            ],
            "functions": [{"name": "legacy_refund", "parameters": {}}],
            "web_search_options": {}
        });
        assert_eq!(
            entities(ApiKind::OpenAiChat, body),
            [
                "lookup",
                "grep",
                "openai:allowed_future_tool",
                "legacy_refund",
                "openai:web_search"
            ]
        );
    }

    #[test]
    fn every_responses_tool_form_is_an_offer() {
        let body = json!({
            "tools": [
                {"type": "function", "name": "lookup"},
                {"type": "web_search_preview"},
                {"type": "code_interpreter", "container": {"type": "auto"}},
                {"type": "mcp", "server_label": "crm", "server_url": "https://mcp.example.com/sse"},
                {"type": "mcp", "server_label": "mail", "connector_id": "connector_gmail"},
                {"type": "computer_use_preview"}
            ],
            "prompt": {"id": "pmpt_123", "version": "2"},
            "multi_agent": {"enabled": true}
        });
        assert_eq!(
            entities(ApiKind::OpenAiResponses, body),
            [
                "lookup",
                "openai:web_search_preview",
                "openai:code_interpreter",
                "mcp:https://mcp.example.com/sse",
                "mcp:connector_gmail",
                "openai:computer_use_preview",
                "prompt:pmpt_123",
                "openai:multi_agent"
            ]
        );
        let off = json!({"multi_agent": {"enabled": false}});
        assert!(entities(ApiKind::OpenAiResponses, off).is_empty());
    }

    #[test]
    fn every_anthropic_tool_form_is_an_offer_and_fallbacks_are_models() {
        let body = json!({
            "tools": [
                {"name": "lookup", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search"},
                {"type": "bash_20250124", "name": "bash"},
                {"type": "mcp_toolset", "mcp_server_name": "crm"}
            ],
            "mcp_servers": [{"type": "url", "name": "crm", "url": "https://mcp.example.com/crm"}],
            "container": {"skills": [{"type": "anthropic", "skill_id": "pptx"}]},
            "fallbacks": [{"model": "claude-haiku-4-5"}]
        });
        let (offers, models) =
            offers(ApiKind::AnthropicMessages, body.as_object().unwrap()).unwrap();
        let names: Vec<&str> = offers.iter().map(|o| o.entity.as_str()).collect();
        assert_eq!(
            names,
            [
                "mcp:https://mcp.example.com/crm",
                "lookup",
                "anthropic:web_search",
                "anthropic:bash",
                "mcp:https://mcp.example.com/crm",
                "skill:pptx"
            ]
        );
        assert_eq!(models, ["claude-haiku-4-5"]);
        let (_, models) = super::offers(
            ApiKind::AnthropicMessages,
            json!({"fallbacks": "default"}).as_object().unwrap(),
        )
        .unwrap();
        assert_eq!(models, ["fallbacks:default"]);
    }

    #[test]
    fn a_tool_name_cannot_pass_for_a_namespaced_entity() {
        for (api, body) in [
            (
                ApiKind::OpenAiChat,
                json!({"tools": [{"type": "function", "function": {"name": "mcp:https://x"}}]}),
            ),
            (
                ApiKind::OpenAiResponses,
                json!({"tools": [{"type": "function", "name": "openai:web_search"}]}),
            ),
            (
                ApiKind::AnthropicMessages,
                json!({"tools": [{"name": "skill:pptx"}]}),
            ),
            (ApiKind::AnthropicMessages, json!({"tools": [{"name": ""}]})),
            (
                ApiKind::AnthropicMessages,
                json!({"tools": [{"type": "mcp_toolset", "mcp_server_name": "nowhere"}]}),
            ),
        ] {
            assert!(offers(api, body.as_object().unwrap()).is_err(), "{body}");
        }
    }

    #[test]
    fn versions_are_dropped_from_provider_tool_types_only() {
        assert_eq!(without_version("web_search_20250305"), "web_search");
        assert_eq!(without_version("text_editor_20250728"), "text_editor");
        assert_eq!(
            without_version("tool_search_tool_bm25_20251119"),
            "tool_search_tool_bm25"
        );
        assert_eq!(without_version("web_search_preview"), "web_search_preview");
        assert_eq!(without_version("_20250305"), "_20250305");
        assert_eq!(without_version("x_2025030"), "x_2025030");
    }
}
