//! Tools that Anthropic content (the blocks of the top-level `system` and of every message)
//! adds mid-conversation, each decided like a tool of the top-level `tools`:
//!
//! | where | what it offers |
//! |---|---|
//! | a `tool_addition` block (in `system`, or a message of any role) | its `tool`: a `tool_definition` is a tool of its own, defined like a `tools` entry; a `tool_reference` is the tool it names; an `mcp_tool_reference` or `mcp_toolset_reference` is the MCP server it names |
//! | the `tool_changes` of a `compaction` block | each `tool_addition` there, as above |
//! | a `tool_reference` block (tool search), by its `tool_name` | the tool it names |
//! | an `mcp_tool_listing` block | the MCP server it lists the tools of |
//!
//! These blocks are found at any depth, whatever the type of the blocks around them: the walk
//! goes into every block's `content` (a list, or one object), `tool_references` and `source`,
//! so a reference in a `tool_search_tool_result`, an `mcp_tool_result`, or a `search_result`
//! inside a `tool_result` is an offer like one directly in a message.
//!
//! A reference by name is decided as the tool defined under that name (in `tools` or by an
//! earlier `tool_definition`); a name defined nowhere is decided as a client tool of that name,
//! so no reference goes out undecided. A `tool_removal` offers nothing. An addition whose `tool`
//! is of a form not listed here is refused at any trust level: what it would switch on cannot be
//! decided. Each offer's `field` is where it sat (`messages[3].content[0].tool`,
//! `messages[1].content[2].content.tool_references[0]`).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{Found, Offer, OfferKind, anthropic_tool, function, named};
use crate::WireError;
use crate::request::anthropic::tool_of;
use crate::request::{field_path, object, optional_array, optional_str, required_str};

/// The tools and MCP servers a request has defined so far, by name.
#[derive(Debug, Default)]
pub(super) struct Declared {
    /// `mcp_servers`: each name with its server's normalised URL.
    pub(super) servers: Vec<(String, String)>,
    /// Tools with a `name`, as their offers.
    pub(super) tools: HashMap<String, Offer>,
}

impl Declared {
    /// The normalised URL of the server `name` of `mcp_servers`.
    pub(super) fn server(&self, name: &str, field: &str) -> Result<String, WireError> {
        self.servers
            .iter()
            .find(|(declared, _)| declared == name)
            .map(|(_, target)| target.clone())
            .ok_or_else(|| WireError::Invalid {
                field: field.to_owned(),
                why: "must name a server of `mcp_servers`",
            })
    }

    /// The offer of a reference to the tool `name`, sitting at `field`.
    fn reference(&self, name: &str, field: String) -> Result<Offer, WireError> {
        match self.tools.get(name) {
            Some(defined) => Ok(Offer {
                field,
                ..defined.clone()
            }),
            None => function(name, field),
        }
    }
}

/// The tools the top-level `system` blocks and the messages of an Anthropic request add.
pub(super) fn anthropic(
    obj: &Map<String, Value>,
    declared: &mut Declared,
    found: &mut Found,
) -> Result<(), WireError> {
    if let Some(system) = obj.get("system") {
        blocks(system, "system", declared, found)?;
    }
    for (i, message) in optional_array(obj, "messages", "")?.iter().enumerate() {
        let path = format!("messages[{i}]");
        if let Some(content) = object(message, &path)?.get("content") {
            blocks(content, &field_path(&path, "content"), declared, found)?;
        }
    }
    Ok(())
}

/// Keys under which a block holds further blocks: a result's `content` (a list, or one
/// object such as a tool search result), a tool search result's `tool_references`, a
/// document's `source` (whose `content` is a list of blocks).
const NESTED: &[&str] = &["content", "source", "tool_references"];

/// The blocks at `path`: a list of them (lists nested in it included), one block, or text and
/// other values, which add nothing.
fn blocks(
    value: &Value,
    path: &str,
    declared: &mut Declared,
    found: &mut Found,
) -> Result<(), WireError> {
    match value {
        Value::Array(items) => {
            for (k, item) in items.iter().enumerate() {
                blocks(item, &format!("{path}[{k}]"), declared, found)?;
            }
            Ok(())
        }
        Value::Object(block) => content_block(block, path, declared, found),
        _ => Ok(()),
    }
}

/// One block at `path`, of any type, and every block nested in it (see [`NESTED`]), so that a
/// tool added or referenced at any depth is an offer whatever the blocks around it are.
fn content_block(
    block: &Map<String, Value>,
    path: &str,
    declared: &mut Declared,
    found: &mut Found,
) -> Result<(), WireError> {
    match optional_str(block, "type", path)? {
        Some("tool_addition") => addition(block, path, declared, found)?,
        Some("compaction") => {
            for (k, change) in optional_array(block, "tool_changes", path)?
                .iter()
                .enumerate()
            {
                let change_path = format!("{path}.tool_changes[{k}]");
                let change = object(change, &change_path)?;
                match required_str(change, "type", &change_path)? {
                    "tool_addition" => addition(change, &change_path, declared, found)?,
                    "tool_removal" => {}
                    _ => {
                        return Err(WireError::Invalid {
                            field: field_path(&change_path, "type"),
                            why: "must be `tool_addition` or `tool_removal`",
                        });
                    }
                }
            }
        }
        Some("tool_reference") => {
            let name = required_str(block, "tool_name", path)?;
            found.push(declared.reference(name, path.to_owned())?);
        }
        Some("mcp_tool_listing") => {
            let server = required_str(block, "mcp_server_name", path)?;
            let target = declared.server(server, &field_path(path, "mcp_server_name"))?;
            found.push(named(
                OfferKind::McpServer,
                "mcp",
                &target,
                path.to_owned(),
            )?);
        }
        _ => {}
    }
    for key in NESTED {
        if let Some(inner) = block.get(*key) {
            blocks(inner, &field_path(path, key), declared, found)?;
        }
    }
    Ok(())
}

/// A `tool_addition` block (or change) at `path`.
fn addition(
    block: &Map<String, Value>,
    path: &str,
    declared: &mut Declared,
    found: &mut Found,
) -> Result<(), WireError> {
    let tool_path = field_path(path, "tool");
    let Some(tool) = block.get("tool") else {
        return Err(WireError::missing(tool_path));
    };
    let tool = object(tool, &tool_path)?;
    // A definition is recorded with the step; a reference names a tool recorded elsewhere.
    let reference = match required_str(tool, "type", &tool_path)? {
        "tool_definition" => {
            let definition_path = field_path(&tool_path, "definition");
            let Some(definition) = tool.get("definition") else {
                return Err(WireError::missing(definition_path));
            };
            let definition = object(definition, &definition_path)?;
            let recorded = tool_of(definition, &definition_path)?;
            found.define(anthropic_tool(definition, tool_path, declared)?, recorded);
            return Ok(());
        }
        "tool_reference" => {
            declared.reference(required_str(tool, "name", &tool_path)?, tool_path)?
        }
        "mcp_tool_reference" | "mcp_toolset_reference" => {
            let server = required_str(tool, "server_name", &tool_path)?;
            let target = declared.server(server, &field_path(&tool_path, "server_name"))?;
            named(OfferKind::McpServer, "mcp", &target, tool_path)?
        }
        _ => {
            return Err(WireError::Invalid {
                field: field_path(&tool_path, "type"),
                why: "must be `tool_definition`, `tool_reference`, `mcp_tool_reference` or `mcp_toolset_reference`",
            });
        }
    };
    found.push(reference);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::ApiKind;
    use crate::request::offers::offers;

    fn decided(body: serde_json::Value) -> Vec<(String, String)> {
        let found = offers(ApiKind::AnthropicMessages, body.as_object().unwrap())
            .unwrap()
            .offers;
        found.into_iter().map(|o| (o.entity, o.field)).collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(e, f)| ((*e).to_owned(), (*f).to_owned()))
            .collect()
    }

    #[test]
    fn a_tool_added_in_a_message_is_an_offer_wherever_it_sits() {
        let body = json!({
            "model": "m",
            "tools": [{"name": "lookup", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "mcp_servers": [{"type": "url", "name": "crm", "url": "https://MCP.example.com/crm"}],
            "messages": [
                {"role": "system", "content": [
                    {"type": "text", "text": "Tools change below."},
                    {"type": "tool_addition", "tool": {"type": "tool_definition",
                        "definition": {"name": "wire_money", "input_schema": {"type": "object"}}}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_addition", "tool": {"type": "tool_definition",
                        "definition": {"type": "web_fetch_20250910", "name": "web_fetch"}}},
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "web_search"}},
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "wire_money"}},
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "never_defined"}},
                    {"type": "tool_addition", "tool": {"type": "mcp_toolset_reference", "server_name": "crm"}},
                    {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "lookup"}},
                    {"type": "text", "text": "go"}
                ]}
            ]
        });
        assert_eq!(
            decided(body),
            pairs(&[
                ("mcp:https://mcp.example.com/crm", "mcp_servers[0]"),
                ("lookup", "tools[0]"),
                ("anthropic:web_search", "tools[1]"),
                ("wire_money", "messages[0].content[1].tool"),
                ("anthropic:web_fetch", "messages[1].content[0].tool"),
                ("anthropic:web_search", "messages[1].content[1].tool"),
                ("wire_money", "messages[1].content[2].tool"),
                ("never_defined", "messages[1].content[3].tool"),
                (
                    "mcp:https://mcp.example.com/crm",
                    "messages[1].content[4].tool"
                ),
            ])
        );
    }

    #[test]
    fn compaction_tool_changes_tool_references_and_listings_are_offers() {
        let body = json!({
            "model": "m",
            "mcp_servers": [{"type": "url", "name": "crm", "url": "https://mcp.example.com/crm"}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "compaction", "content": "summary", "tool_changes": [
                        {"type": "tool_addition", "tool": {"type": "tool_definition",
                            "definition": {"type": "code_execution_20250825", "name": "code_execution"}}},
                        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "x"}},
                        {"type": "tool_addition", "tool": {"type": "mcp_tool_reference",
                            "server_name": "crm", "name": "delete_account"}}
                    ]},
                    {"type": "tool_result", "tool_use_id": "t1", "content": [
                        {"type": "text", "text": "found"},
                        {"type": "tool_reference", "tool_name": "code_execution"}
                    ]}
                ]},
                {"role": "assistant", "content": [
                    {"type": "mcp_tool_listing", "mcp_server_name": "crm", "tools": []}
                ]}
            ]
        });
        assert_eq!(
            decided(body),
            pairs(&[
                ("mcp:https://mcp.example.com/crm", "mcp_servers[0]"),
                (
                    "anthropic:code_execution",
                    "messages[0].content[0].tool_changes[0].tool"
                ),
                (
                    "mcp:https://mcp.example.com/crm",
                    "messages[0].content[0].tool_changes[2].tool"
                ),
                (
                    "anthropic:code_execution",
                    "messages[0].content[1].content[1]"
                ),
                ("mcp:https://mcp.example.com/crm", "messages[1].content[0]"),
            ])
        );
    }

    #[test]
    fn tool_references_nested_in_any_result_are_offers() {
        let body = json!({
            "model": "m",
            "tools": [{"type": "bash_20250124", "name": "bash"}],
            "messages": [
                {"role": "user", "content": "find a tool"},
                {"role": "assistant", "content": [
                    {"type": "server_tool_use", "id": "s1", "name": "tool_search_tool_regex", "input": {}},
                    {"type": "tool_search_tool_result", "tool_use_id": "s1", "content": {
                        "type": "tool_search_tool_search_result",
                        "tool_references": [{"type": "tool_reference", "tool_name": "bash"}]
                    }},
                    {"type": "mcp_tool_result", "tool_use_id": "m1", "content": [
                        {"type": "tool_reference", "tool_name": "wire_money"}
                    ]}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [
                        {"type": "search_result", "source": "s", "title": "t", "content": [
                            {"type": "text", "text": "found"},
                            {"type": "tool_reference", "tool_name": "delete_account"}
                        ]},
                        {"type": "document", "source": {"type": "content", "content": [
                            {"type": "tool_reference", "tool_name": "refund"}
                        ]}}
                    ]},
                    {"type": "future_result", "content": {"content": [
                        {"type": "tool_reference", "tool_name": "shell"}
                    ]}}
                ]}
            ]
        });
        assert_eq!(
            decided(body),
            pairs(&[
                ("anthropic:bash", "tools[0]"),
                (
                    "anthropic:bash",
                    "messages[1].content[1].content.tool_references[0]"
                ),
                ("wire_money", "messages[1].content[2].content[0]"),
                (
                    "delete_account",
                    "messages[2].content[0].content[0].content[1]"
                ),
                (
                    "refund",
                    "messages[2].content[0].content[1].source.content[0]"
                ),
                ("shell", "messages[2].content[1].content.content[0]"),
            ])
        );
    }

    #[test]
    fn tools_added_in_the_top_level_system_and_bare_references_are_offers() {
        let body = json!({
            "model": "m",
            "system": [
                {"type": "text", "text": "You may use bash."},
                {"type": "tool_addition", "tool": {"type": "tool_definition",
                    "definition": {"type": "bash_20250124", "name": "bash"}}},
                {"type": "tool_reference", "tool_name": "lookup"}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "tool_reference", "tool_name": "bash"},
                    {"type": "text", "text": "go"}
                ]}
            ]
        });
        assert_eq!(
            decided(body),
            pairs(&[
                ("anthropic:bash", "system[1].tool"),
                ("lookup", "system[2]"),
                ("anthropic:bash", "messages[0].content[0]"),
            ])
        );
    }

    #[test]
    fn a_nested_tool_reference_without_a_name_is_refused() {
        let body = json!({"model": "m", "messages": [{"role": "assistant", "content": [
            {"type": "tool_search_tool_result", "tool_use_id": "s1", "content": {
                "type": "tool_search_tool_search_result",
                "tool_references": [{"type": "tool_reference"}]
            }}
        ]}]});
        assert!(offers(ApiKind::AnthropicMessages, body.as_object().unwrap()).is_err());
    }

    #[test]
    fn an_addition_that_cannot_be_decided_is_refused() {
        for tool in [
            json!({"type": "tool_search_everything"}),
            json!({"type": "mcp_toolset_reference", "server_name": "undeclared"}),
            json!({"type": "tool_definition", "definition": {"name": "mcp:https://x"}}),
            json!({"type": "tool_definition"}),
            json!({"type": "tool_reference"}),
            json!("web_search"),
        ] {
            let body = json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "tool_addition", "tool": tool}
            ]}]});
            assert!(
                offers(ApiKind::AnthropicMessages, body.as_object().unwrap()).is_err(),
                "{tool}"
            );
        }
        let change = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "compaction", "tool_changes": [{"type": "tool_swap", "tool": {}}]}
        ]}]});
        assert!(offers(ApiKind::AnthropicMessages, change.as_object().unwrap()).is_err());
    }
}
