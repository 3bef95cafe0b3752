//! What the tool-calling environments share: strict function tools whose one argument is a
//! choice among the numbers of the task, the call and its result added to the conversation,
//! the closing `Done.`/`Sorry.` answer, and the counting of replies into the episode.

use serde_json::{Value, json};

use super::{Episode, SeedRng};
use crate::client::{Agent, ChatMessage, Reply, ToolCallReply};

/// Sentences that add a number the ticket is not about (`{m}`).
pub(super) const ASIDES: [&str; 4] = [
    "Postcode {m}.",
    "Sent from branch {m}.",
    "Callback extension {m}.",
    "My loyalty card is {m}.",
];

/// The result of a call that no tool of the task answers.
pub(super) fn cannot_help() -> Value {
    json!({"ok": false, "error": "this tool cannot help with the ticket"})
}

/// The first turn's messages as OpenAI's `messages`.
pub(super) fn first_messages(messages: &[ChatMessage]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect()
}

/// The right final answers.
pub(super) const DONE: &str = "Done.";
pub(super) const SORRY: &str = "Sorry.";

/// Two numbers of five digits whose first digits differ, so that the first digit decides
/// between them: the one the task is about, and another.
pub(super) fn two_numbers(rng: &mut SeedRng) -> (String, String) {
    let first = 1 + rng.below(9);
    let other_first = 1 + (first + rng.below(8)) % 9;
    let number = (first * 10_000 + rng.below(10_000)).to_string();
    let other = (other_first * 10_000 + rng.below(10_000)).to_string();
    (number, other)
}

/// A `strict` function tool with one required string `argument` whose `enum` is `choices`
/// (sorted, so that their order tells nothing).
pub(super) fn strict_tool(
    name: &str,
    description: &str,
    argument: &str,
    choices: &[&str],
) -> Value {
    let mut choices = choices.to_vec();
    choices.sort_unstable();
    json!({"type": "function", "function": {
        "name": name,
        "description": description,
        "strict": true,
        "parameters": {
            "type": "object",
            "properties": {argument: {"type": "string", "enum": choices}},
            "required": [argument],
            "additionalProperties": false,
        },
    }})
}

/// OpenAI's `tools` as the lake and the chat template carry them.
pub(super) fn schema_tools(tools: &Value) -> Vec<atdp_schema::Tool> {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| atdp_schema::Tool {
            kind: "function".into(),
            name: tool["function"]["name"].as_str().unwrap_or_default().into(),
            description: tool["function"]["description"].as_str().map(str::to_owned),
            parameters: Some(tool["function"]["parameters"].to_string()),
        })
        .collect()
}

/// The string `argument` of a call's JSON arguments.
pub(super) fn argument(call: &ToolCallReply, argument: &str) -> Option<String> {
    serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|a| a[argument].as_str().map(str::to_owned))
}

/// Counts a reply into the episode.
pub(super) fn count(episode: &mut Episode, reply: &Reply) {
    episode.turns += 1;
    episode.completion_tokens += reply.completion_tokens;
    if let Some(v) = &reply.version {
        episode.versions.push(v.clone());
    }
    if reply.trajectory_id.is_some() {
        episode.trajectory_id.clone_from(&reply.trajectory_id);
    }
}

/// Adds `call` (as the assistant's message; its id, or `call_<n>` when the server gave none)
/// and the tool's `result` to `messages`.
pub(super) fn add_call(messages: &mut Vec<Value>, call: &ToolCallReply, result: &Value) {
    let id = if call.id.is_empty() {
        format!("call_{}", messages.len())
    } else {
        call.id.clone()
    };
    messages.push(
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }]}),
    );
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": result.to_string()}));
}

/// Asks for one tool call (`tool_choice` as given); `None`, counted as an invalid reply,
/// when the reply holds none (a server that does not constrain strict tools can answer
/// text).
pub(super) async fn call(
    agent: &Agent,
    messages: &[Value],
    tools: &Value,
    tool_choice: Value,
    temperature: f64,
    episode: &mut Episode,
) -> Result<Option<ToolCallReply>, String> {
    let reply = agent
        .chat_json(json!({
            "messages": messages,
            "tools": tools,
            "tool_choice": tool_choice,
            "parallel_tool_calls": false,
            "max_tokens": 96,
            "temperature": temperature,
        }))
        .await?;
    count(episode, &reply);
    let call = reply.calls.into_iter().next();
    if call.is_none() {
        episode.invalid_replies += 1;
    }
    Ok(call)
}

/// Asks for the closing answer, held to `Done.` or `Sorry.`; whether it is `want`.
pub(super) async fn answer(
    agent: &Agent,
    messages: &[Value],
    tools: &Value,
    temperature: f64,
    want: &str,
    episode: &mut Episode,
) -> Result<bool, String> {
    let reply = agent
        .chat_json(json!({
            "messages": messages,
            "tools": tools,
            "tool_choice": "none",
            "max_tokens": 4,
            "temperature": temperature,
            "grammar": {"type": "regex", "value": r"(Done|Sorry)\."},
        }))
        .await?;
    count(episode, &reply);
    let said = reply.text.trim();
    if said != DONE && said != SORRY {
        episode.invalid_replies += 1;
    }
    Ok(said == want)
}
