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
//! | an MCP server (Responses `mcp` tool, Anthropic `mcp_servers` and `mcp_toolset`) | `mcp:<server URL>` (scheme and host in lower case, no user information, trailing dot or default port; an http(s) URL as WHATWG reads it, its host percent-decoded and mapped to ASCII), and `mcp:<connector id>` for an OpenAI connector (both when both are given) |
//! | a Responses `namespace` of tools | `openai:namespace`, and each tool inside it as its own offer |
//! | a skill in Anthropic's `container.skills` | `skill:<skill id>` |
//! | a saved prompt (Responses `prompt`), which can carry tools of its own | `prompt:<prompt id>` |
//! | Responses `multi_agent` when enabled | `openai:multi_agent` |
//!
//! Responses tools are read wherever a list of them sits: the top level, any `input` item that
//! carries `tools` (`additional_tools`, `tool_search_output`), and `namespace` tools.
//! A client-run tool's name may not contain `:`, so no name can pass for a namespaced entity.
//! Anthropic's `fallbacks` name models the provider may serve instead: each is an
//! `invoke_model` decision, and `"default"` (the provider's own choice) is the model
//! `fallbacks:default`.

use serde_json::{Map, Value};

mod inline;

use atdp_schema::Tool;

use super::anthropic::tool_of;
use super::openai::function_tool;
use super::{field_path, object, optional_array, optional_str, other_tool, required_str};
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

/// What one walk of a request finds: the offers it decides, the tools it defines, and the
/// extra models it may be served by.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Everything that can act, in the body's order.
    pub(crate) offers: Vec<Offer>,
    /// Every tool definition among them, as recorded with the step, in the body's order:
    /// the walk that decides a definition is the one that records it, so a tool the model was
    /// handed is in the step's tool list wherever the request defined it.
    pub(crate) tools: Vec<Tool>,
    /// The models of Anthropic `fallbacks`.
    pub(crate) models: Vec<String>,
}

impl Found {
    fn push(&mut self, offer: Offer) {
        self.offers.push(offer);
    }

    /// `offer`, and the definition it was read from.
    fn define(&mut self, offer: Offer, tool: Tool) {
        self.offers.push(offer);
        self.tools.push(tool);
    }
}

/// The offers, tool definitions and extra models of a request body.
pub(crate) fn offers(api: ApiKind, obj: &Map<String, Value>) -> Result<Found, WireError> {
    let mut found = Found::default();
    match api {
        ApiKind::OpenAiChat => chat(obj, &mut found)?,
        ApiKind::OpenAiResponses => responses(obj, &mut found)?,
        ApiKind::AnthropicMessages => anthropic(obj, &mut found)?,
    }
    Ok(found)
}

/// `web_search_20250305` → `web_search`, `web_search_2025_08_26` → `web_search`: a trailing
/// date, as Anthropic (`_YYYYMMDD`) or OpenAI (`_YYYY_MM_DD`) writes it, is a version.
fn without_version(kind: &str) -> &str {
    let digits = |text: &str, n: usize| text.len() == n && text.bytes().all(|b| b.is_ascii_digit());
    let bytes = kind.len();
    // `_YYYY_MM_DD`: eleven bytes.
    if bytes > 11
        && let (Some(base), Some(date)) = (kind.get(..bytes - 11), kind.get(bytes - 11..))
    {
        let parts: Vec<&str> = date.split('_').collect();
        if let ["", year, month, day] = parts.as_slice()
            && digits(year, 4)
            && digits(month, 2)
            && digits(day, 2)
        {
            return base;
        }
    }
    match kind.rsplit_once('_') {
        Some((base, date)) if !base.is_empty() && digits(date, 8) => base,
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
fn chat(obj: &Map<String, Value>, found: &mut Found) -> Result<(), WireError> {
    chat_tools(optional_array(obj, "tools", "")?, "tools", false, found)?;
    // Servers that render the chat template themselves (vLLM, SGLang) hand
    // `chat_template_kwargs` to the template, where its `tools` stand for the request's own.
    // The templates of gpt-oss and Llama 3 also switch on their built-in tools by name
    // (`builtin_tools: ["browser", "python"]`): each is a provider tool of the template.
    if let Some(Value::Object(kwargs)) = obj.get("chat_template_kwargs") {
        let at = "chat_template_kwargs";
        let tools = optional_array(kwargs, "tools", at)?;
        chat_tools(tools, &field_path(at, "tools"), true, found)?;
        let builtin = field_path(at, "builtin_tools");
        for (i, tool) in optional_array(kwargs, "builtin_tools", at)?
            .iter()
            .enumerate()
        {
            let path = format!("{builtin}[{i}]");
            let name = tool.as_str().ok_or_else(|| WireError::Invalid {
                field: path.clone(),
                why: "a built-in tool is named by a string",
            })?;
            found.push(named(OfferKind::Provider, "template", name, path)?);
        }
    }
    for (i, legacy) in optional_array(obj, "functions", "")?.iter().enumerate() {
        let path = format!("functions[{i}]");
        let legacy = object(legacy, &path)?;
        let offer = function(required_str(legacy, "name", &path)?, path.clone())?;
        found.define(offer, function_tool(legacy, &path)?);
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

/// Chat tools of the list at `at`: functions and custom tools by name, others as provider
/// tools of their type; with `bare`, also a `{"name": …}` function without its `function`
/// wrapper (as a chat template reads them).
fn chat_tools(tools: &[Value], at: &str, bare: bool, found: &mut Found) -> Result<(), WireError> {
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("{at}[{i}]");
        let tool = object(tool, &path)?;
        let kind = optional_str(tool, "type", &path)?.unwrap_or("function");
        // The definition sits under a key named like the type (`function`, `custom`).
        let definition_path = field_path(&path, kind);
        match kind {
            "function" | "custom" => {
                let (definition, at) = match tool.get(kind) {
                    Some(definition) => (object(definition, &definition_path)?, &definition_path),
                    None if bare && tool.contains_key("name") => (tool, &path),
                    None => return Err(WireError::missing(definition_path)),
                };
                let offer = function(required_str(definition, "name", at)?, path.clone())?;
                let recorded = if kind == "function" {
                    function_tool(definition, at)?
                } else {
                    other_tool(kind, definition, at)?
                };
                found.define(offer, recorded);
            }
            other => {
                let (definition, at) = match tool.get(other) {
                    Some(definition) => (object(definition, &definition_path)?, &definition_path),
                    None => (tool, &path),
                };
                let recorded = other_tool(other, definition, at)?;
                found.define(provider("openai", other, path), recorded);
            }
        }
    }
    Ok(())
}

/// Responses: `tools` of every type, wherever a list of them sits (the top level, an `input`
/// item such as `additional_tools` or `tool_search_output`, a `namespace` tool), a saved
/// `prompt`, `multi_agent`.
fn responses(obj: &Map<String, Value>, found: &mut Found) -> Result<(), WireError> {
    responses_tools(optional_array(obj, "tools", "")?, "tools", found)?;
    if let Some(Value::Array(items)) = obj.get("input") {
        for (i, item) in items.iter().enumerate() {
            let Some(item) = item.as_object() else {
                continue;
            };
            // An `mcp_list_tools` item lists what an MCP server (offered and decided as an
            // `mcp` tool) said it has; it offers nothing of its own.
            if item.get("type").and_then(Value::as_str) == Some("mcp_list_tools") {
                continue;
            }
            let path = format!("input[{i}]");
            let tools = optional_array(item, "tools", &path)?;
            responses_tools(tools, &format!("{path}.tools"), found)?;
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

/// A list of Responses tools at `at`; a `namespace` tool is an offer of its own and so is each
/// tool inside it.
fn responses_tools(tools: &[Value], at: &str, found: &mut Found) -> Result<(), WireError> {
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("{at}[{i}]");
        let tool = object(tool, &path)?;
        match optional_str(tool, "type", &path)?.unwrap_or("function") {
            kind @ ("function" | "custom") => {
                let offer = function(required_str(tool, "name", &path)?, path.clone())?;
                let recorded = if kind == "function" {
                    function_tool(tool, &path)?
                } else {
                    other_tool(kind, tool, &path)?
                };
                found.define(offer, recorded);
            }
            "mcp" => {
                let mut recorded = other_tool("mcp", tool, &path)?;
                if let Some(label) = optional_str(tool, "server_label", &path)? {
                    recorded.name = label.to_owned();
                }
                found.tools.push(recorded);
                let url = optional_str(tool, "server_url", &path)?;
                let connector = optional_str(tool, "connector_id", &path)?;
                // A tunnel reaches a private server in place of the URL: the tunnel is
                // decided too, whatever URL stands beside it.
                let tunnel = optional_str(tool, "tunnel_id", &path)?;
                if url.is_none() && connector.is_none() && tunnel.is_none() {
                    return Err(WireError::Invalid {
                        field: path,
                        why: "an MCP tool must name its `server_url`, `connector_id` or `tunnel_id`",
                    });
                }
                if let Some(tunnel) = tunnel {
                    if tunnel.is_empty() || connector.is_some_and(|c| c.contains(':')) {
                        return Err(WireError::Invalid {
                            field: path,
                            why: "an MCP tunnel or connector id must be a plain, non-empty name",
                        });
                    }
                    let target = format!("tunnel:{tunnel}");
                    found.push(named(OfferKind::McpServer, "mcp", &target, path.clone())?);
                }
                if let Some(url) = url {
                    let target = mcp_url(url, &format!("{path}.server_url"))?;
                    found.push(named(OfferKind::McpServer, "mcp", &target, path.clone())?);
                }
                if let Some(connector) = connector {
                    found.push(named(OfferKind::McpServer, "mcp", connector, path)?);
                }
            }
            "namespace" => {
                let recorded = other_tool("namespace", tool, &path)?;
                found.define(provider("openai", "namespace", path.clone()), recorded);
                let inner = optional_array(tool, "tools", &path)?;
                responses_tools(inner, &format!("{path}.tools"), found)?;
            }
            other => {
                let recorded = other_tool(other, tool, &path)?;
                found.define(provider("openai", other, path), recorded);
            }
        }
    }
    Ok(())
}

/// An MCP server URL as one name for one server: scheme and host in lower case, without a
/// trailing dot of the host or the scheme's default port. An `http` or `https` URL is read as
/// a browser and the providers read it (WHATWG): its host percent-decoded and mapped to ASCII
/// (`%65vil.example`, fullwidth letters and ideographic full stops all name `evil.example`),
/// its path normalised, and a bare `/` path dropped. A URL whose authority carries user
/// information, a backslash, whitespace or a control character, or an `http(s):` URL not
/// followed by `//`, is refused: URL readers disagree on where such a host begins, so the
/// server decided might not be the one reached. What does not look like `scheme://host…` is
/// kept as given.
fn mcp_url(url: &str, field: &str) -> Result<String, WireError> {
    let invalid = |why: &'static str| WireError::Invalid {
        field: field.to_owned(),
        why,
    };
    // A WHATWG reader drops leading and trailing spaces and controls and every tab and line
    // break, so ` https://h` and `ht\ttps://h` would name `https://h` to it and something
    // else here.
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            "an MCP server URL may not hold whitespace or control characters",
        ));
    }
    let web = url.split_once(':').filter(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
    });
    if let Some((_, after)) = web
        && !after.starts_with("//")
    {
        return Err(invalid(
            "an http(s) MCP server URL must be written scheme://host…",
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(url.to_owned());
    };
    let scheme = scheme.to_ascii_lowercase();
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    if authority.contains(['@', '\\'])
        || authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid(
            "an MCP server URL may not carry user information, a backslash, whitespace or control characters before its path",
        ));
    }
    if web.is_some() {
        return web_url(url)
            .ok_or_else(|| invalid("an http(s) MCP server URL must parse as a URL"));
    }
    // A port is digits after the last `:` (in `[::1]` that is `1]`, not a port).
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host, port.parse::<u16>().ok())
        }
        _ => (authority, None),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    Ok(match port {
        Some(port) => format!("{scheme}://{host}:{port}{tail}"),
        None => format!("{scheme}://{host}{tail}"),
    })
}

/// An http(s) URL as WHATWG reads it, written back without a trailing dot of its host, its
/// default port, a bare `/` path, an empty query or a fragment (which no request carries),
/// and with the percent escapes of unreserved characters in its path decoded (`/%73se` is
/// `/sse`, RFC 3986 §6.2.2.2); `None` when it does not parse or has no host.
fn web_url(url: &str) -> Option<String> {
    let mut parsed = url::Url::parse(url).ok()?;
    parsed.set_fragment(None);
    if parsed.query() == Some("") {
        parsed.set_query(None);
    }
    let path = unreserved_decoded(parsed.path());
    parsed.set_path(&path);
    let host = match parsed.host()? {
        url::Host::Domain(domain) => domain.trim_end_matches('.').to_owned(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => format!("[{ip}]"),
    };
    let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
    let tail = &parsed[url::Position::BeforePath..];
    let tail = if tail == "/" { "" } else { tail };
    Some(format!("{}://{host}{port}{tail}", parsed.scheme()))
}

/// `path` with the percent escapes of unreserved characters (letters, digits, `-._~`)
/// decoded; other escapes are kept, with upper-case hex digits.
fn unreserved_decoded(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let hex = rest
            .get(at + 1..at + 3)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 3..];
            }
            Some(_) => {
                out.push('%');
                out.push_str(&rest[at + 1..at + 3].to_ascii_uppercase());
                rest = &rest[at + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Messages: `tools` (custom and Anthropic-defined, `mcp_toolset`), `mcp_servers`,
/// `container.skills`, the tools content adds ([`inline`]), and the models of `fallbacks`.
fn anthropic(obj: &Map<String, Value>, found: &mut Found) -> Result<(), WireError> {
    let mut declared = inline::Declared::default();
    for (i, server) in optional_array(obj, "mcp_servers", "")?.iter().enumerate() {
        let path = format!("mcp_servers[{i}]");
        let server = object(server, &path)?;
        let name = required_str(server, "name", &path)?;
        let url = required_str(server, "url", &path)?;
        let target = mcp_url(url, &format!("{path}.url"))?;
        declared.servers.push((name.to_owned(), target.clone()));
        found.push(named(OfferKind::McpServer, "mcp", &target, path)?);
    }
    for (i, tool) in optional_array(obj, "tools", "")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let tool = object(tool, &path)?;
        let recorded = tool_of(tool, &path)?;
        found.define(anthropic_tool(tool, path, &mut declared)?, recorded);
    }
    inline::anthropic(obj, &mut declared, found)?;
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
            found.models.push("fallbacks:default".into());
        }
        Some(Value::Array(entries)) => {
            for (i, entry) in entries.iter().enumerate() {
                let path = format!("fallbacks[{i}]");
                let model = required_str(object(entry, &path)?, "model", &path)?;
                found.models.push(model.to_owned());
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

/// One Anthropic tool definition (an entry of `tools`, or the `definition` of a
/// `tool_addition` block) as an offer; a tool with a `name` is remembered in `declared`, so
/// that a later reference to it by name is decided as the same tool.
fn anthropic_tool(
    tool: &Map<String, Value>,
    path: String,
    declared: &mut inline::Declared,
) -> Result<Offer, WireError> {
    let offer = match optional_str(tool, "type", &path)? {
        None | Some("custom") => function(required_str(tool, "name", &path)?, path.clone())?,
        Some("mcp_toolset") => {
            let server = required_str(tool, "mcp_server_name", &path)?;
            let target = declared.server(server, &format!("{path}.mcp_server_name"))?;
            named(OfferKind::McpServer, "mcp", &target, path.clone())?
        }
        Some(other) => provider("anthropic", other, path.clone()),
    };
    if let Some(name) = optional_str(tool, "name", &path)? {
        declared.tools.insert(name.to_owned(), offer.clone());
    }
    Ok(offer)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entities(api: ApiKind, body: Value) -> Vec<String> {
        let offers = offers(api, body.as_object().unwrap()).unwrap().offers;
        offers.into_iter().map(|o| o.entity).collect()
    }

    #[test]
    fn tools_handed_to_the_chat_template_are_offers() {
        let body = json!({
            "tools": [{"type": "function", "function": {"name": "lookup"}}],
            "chat_template_kwargs": {"enable_thinking": false, "tools": [
                {"type": "function", "function": {"name": "evil", "parameters": {}}},
                {"name": "wire_money", "parameters": {}}
            ]}
        });
        let decided = offers(ApiKind::OpenAiChat, body.as_object().unwrap())
            .unwrap()
            .offers;
        let found: Vec<(String, String)> =
            decided.into_iter().map(|o| (o.entity, o.field)).collect();
        assert_eq!(
            found,
            [
                ("lookup".to_owned(), "tools[0]".to_owned()),
                (
                    "evil".to_owned(),
                    "chat_template_kwargs.tools[0]".to_owned()
                ),
                (
                    "wire_money".to_owned(),
                    "chat_template_kwargs.tools[1]".to_owned()
                ),
            ]
        );
        // Template settings without tools offer nothing; a bare name stays malformed in the
        // request's own `tools`.
        let builtin = json!({"chat_template_kwargs": {"builtin_tools": ["browser", "python"]}});
        assert_eq!(
            entities(ApiKind::OpenAiChat, builtin),
            ["template:browser", "template:python"]
        );
        let settings = json!({"chat_template_kwargs": {"enable_thinking": false}});
        assert!(entities(ApiKind::OpenAiChat, settings).is_empty());
        let bare = json!({"tools": [{"name": "wire_money"}]});
        assert!(offers(ApiKind::OpenAiChat, bare.as_object().unwrap()).is_err());
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
        let super::Found { offers, models, .. } =
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
        let models = super::offers(
            ApiKind::AnthropicMessages,
            json!({"fallbacks": "default"}).as_object().unwrap(),
        )
        .unwrap()
        .models;
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
        assert_eq!(without_version("web_search_2025_08_26"), "web_search");
        assert_eq!(
            without_version("web_search_preview_2025_03_11"),
            "web_search_preview"
        );
        assert_eq!(without_version("_2025_08_26"), "_2025_08_26");
        assert_eq!(without_version("x_2025_8_26"), "x_2025_8_26");
        assert_eq!(without_version("web_search_preview"), "web_search_preview");
        assert_eq!(without_version("_20250305"), "_20250305");
        assert_eq!(without_version("x_2025030"), "x_2025030");
    }

    #[test]
    fn responses_tools_are_offers_wherever_a_list_of_them_sits() {
        let body = json!({
            "tools": [{"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "refund"}]}],
            "input": [
                {"type": "additional_tools", "role": "developer", "tools": [
                    {"type": "mcp", "server_label": "x", "server_url": "HTTPS://Evil.Example.com.:443/sse"},
                    {"type": "code_interpreter", "container": {"type": "auto"}},
                    {"type": "function", "name": "wire_money"}
                ]},
                {"type": "tool_search_output", "tools": [
                    {"type": "mcp", "server_label": "m", "server_url": "https://a.example/s", "connector_id": "connector_gmail"},
                    {"type": "mcp", "server_label": "t", "server_url": "https://allowed.example/sse", "tunnel_id": "tnl_1"}
                ]},
                {"type": "mcp_list_tools", "server_label": "m", "tools": [{"name": "lookup", "input_schema": {}}]},
                {"role": "user", "content": "hi"}
            ]
        });
        assert_eq!(
            entities(ApiKind::OpenAiResponses, body),
            [
                "openai:namespace",
                "refund",
                "mcp:https://evil.example.com/sse",
                "openai:code_interpreter",
                "wire_money",
                "mcp:https://a.example/s",
                "mcp:connector_gmail",
                "mcp:tunnel:tnl_1",
                "mcp:https://allowed.example/sse"
            ]
        );
        for odd in [
            json!({"type": "mcp", "server_label": "x", "tunnel_id": ""}),
            json!({"type": "mcp", "server_label": "x", "tunnel_id": "t", "connector_id": "tunnel:t"}),
        ] {
            let body = json!({ "tools": [odd] });
            assert!(offers(ApiKind::OpenAiResponses, body.as_object().unwrap()).is_err());
        }
        let nameless = json!({"tools": [{"type": "mcp", "server_label": "x"}]});
        assert!(offers(ApiKind::OpenAiResponses, nameless.as_object().unwrap()).is_err());
        let colon = json!({"input": [{"type": "additional_tools", "tools": [{"type": "function", "name": "mcp:x"}]}]});
        assert!(offers(ApiKind::OpenAiResponses, colon.as_object().unwrap()).is_err());
    }

    #[test]
    fn one_mcp_server_has_one_name() {
        let name = |url: &str| mcp_url(url, "tools[0].server_url");
        for url in [
            "https://mcp.example.com/sse",
            "HTTPS://MCP.example.COM/sse",
            "https://mcp.example.com.:443/sse",
            "https://mcp.example.com:0443/sse",
            "https://mcp.example.com:/sse",
        ] {
            assert_eq!(name(url).unwrap(), "https://mcp.example.com/sse", "{url}");
        }
        assert_eq!(name("http://h:8080/x?q=1").unwrap(), "http://h:8080/x?q=1");
        assert_eq!(name("http://h:80").unwrap(), "http://h");
        assert_eq!(
            name("https://[::1]:8443/s").unwrap(),
            "https://[::1]:8443/s"
        );
        assert_eq!(
            name("https://h/a@b").unwrap(),
            "https://h/a@b",
            "an @ in the path"
        );
        assert_eq!(name("https://h/").unwrap(), "https://h");
        assert_eq!(name("not-a-url").unwrap(), "not-a-url");
        assert_eq!(name("sse://H.example.:9/x").unwrap(), "sse://h.example:9/x");
        // Spellings of one host that a WHATWG reader (the provider's) takes as that host.
        for url in [
            "https://%65vil.example/sse",
            "https://\u{ff45}vil.example/sse",
            "https://evil\u{3002}example/sse",
            "https://EVIL.example./sse",
            "https://evil.example/a/../sse",
            "https://evil.example/%73se",
            "https://evil.example/sse#x",
            "https://evil.example/sse?",
        ] {
            assert_eq!(name(url).unwrap(), "https://evil.example/sse", "{url}");
        }
        // Readers disagree on the host of these: refused.
        for url in [
            "https://someone:secret@mcp.example.com/sse",
            "https://evil.example\\@good.example/sse",
            "https://good.example\\evil.example/sse",
            "https://good.example evil/sse",
            "https://good.example\u{0}/sse",
            "https:evil.example/sse",
            " https://evil.example/sse",
            "\u{1}https://evil.example/sse",
            "ht\ttps://evil.example/sse",
            "https://evil.example/s\nse",
            "not a url",
            "https:/evil.example/sse",
            "HTTPS:\\\\evil.example/sse",
        ] {
            assert!(name(url).is_err(), "{url}");
        }
    }
}
