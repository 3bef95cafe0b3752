//! `tool_use`: a support ticket and four strict function tools. The agent must call the tool
//! the ticket needs with the number the ticket is about (an order or reference number, not
//! the other number the ticket mentions), reads the tool's result, and tells the customer
//! whether it went through. Both turns go through the proxy as one trajectory.
//!
//! The tools are `strict` with the ticket's two numbers as the `reference` argument's `enum`,
//! and the first turn is `tool_choice: "required"`: a server that constrains strict
//! arguments (`atdp-serve` does, with llguidance) keeps every call valid, and what the model
//! chooses is the tool and the number, so a tiny model is sometimes right and can learn it.
//! The answer turn is held to `Done.` or `Sorry.` by the `grammar` extension.
//!
//! Scoring: the call is right when it names the ticket's tool and number; the answer is
//! right when it says `Done.` for a result with `"ok": true`, else `Sorry.`. The reward
//! `tool_use_score` is half for each; the episode's success (the tool-call accuracy of
//! evaluations) is the call alone.

use serde_json::{Value, json};

use super::{Episode, SeedRng};
use crate::client::{Agent, ChatMessage, Reply};

/// The system prompt.
pub(super) const SYSTEM: &str = "You are a support agent. Call the one tool the ticket needs, \
    with the number the ticket is about. Then tell the customer: Done. or Sorry.";

/// The tools: name, description and ticket templates (`{n}`: the number the ticket is about).
const TOOLS: [(&str, &str, &[&str]); 4] = [
    (
        "search_orders",
        "Look up where an order is.",
        &[
            "Where is my order {n}?",
            "Has package {n} shipped yet?",
            "Tracking number for order {n} please.",
            "When will order {n} arrive?",
        ],
    ),
    (
        "refund",
        "Refund an order.",
        &[
            "I want my money back for order {n}.",
            "Please refund order {n}, it arrived broken.",
            "You charged me twice for order {n}, refund one.",
            "The item from order {n} was wrong, I need a refund.",
        ],
    ),
    (
        "escalate_to_human",
        "Hand the case to a person.",
        &[
            "This is my third complaint about {n}, get me a manager!",
            "I am contacting my lawyer about order {n}.",
            "Your agent was rude to me about order {n}. Supervisor now.",
            "Nobody answers my emails about {n}, I want a real person.",
        ],
    ),
    (
        "answer_from_faq",
        "Answer a general question.",
        &[
            "What are your opening hours? (ref {n})",
            "Do you ship to Canada? Asking before order {n}.",
            "How do I reset my password? Account {n}.",
            "Which payment methods do you accept? Quote {n}.",
        ],
    ),
];

/// Sentences that add a second number the ticket is not about (`{m}`).
const ASIDES: [&str; 4] = [
    "Postcode {m}.",
    "Sent from branch {m}.",
    "Callback extension {m}.",
    "My loyalty card is {m}.",
];

/// The right final answers.
const DONE: &str = "Done.";
const SORRY: &str = "Sorry.";

/// One episode's ticket and what is right.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Task {
    /// The first turn's messages (system, user).
    pub messages: Vec<ChatMessage>,
    /// The tools, as OpenAI's `tools`.
    pub tools: Value,
    /// The tool the ticket needs.
    pub tool: &'static str,
    /// The number the ticket is about.
    pub number: String,
    /// Whether the right call succeeds.
    pub ok: bool,
}

/// The task of `seed`.
pub(super) fn task(seed: u64) -> Task {
    let mut rng = SeedRng::new(seed);
    let (tool, _, templates) = TOOLS[rng.below(TOOLS.len())];
    let template = templates[rng.below(templates.len())];
    let aside = ASIDES[rng.below(ASIDES.len())];
    // Five digits each, the first digits different, so that the first digit decides.
    let first = 1 + rng.below(9);
    let other_first = 1 + (first + rng.below(8)) % 9;
    let number = (first * 10_000 + rng.below(10_000)).to_string();
    let other = (other_first * 10_000 + rng.below(10_000)).to_string();
    let ticket = template.replace("{n}", &number);
    let aside = aside.replace("{m}", &other);
    let text = if rng.below(2) == 0 {
        format!("{ticket} {aside}")
    } else {
        format!("{aside} {ticket}")
    };
    let ok = rng.below(3) != 0;
    let mut choices = [number.clone(), other];
    choices.sort();
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|(name, description, _)| {
            json!({"type": "function", "function": {
                "name": name,
                "description": description,
                "strict": true,
                "parameters": {
                    "type": "object",
                    "properties": {"reference": {"type": "string", "enum": choices}},
                    "required": ["reference"],
                    "additionalProperties": false,
                },
            }})
        })
        .collect();
    Task {
        messages: vec![
            ChatMessage::new("system", SYSTEM),
            ChatMessage::new("user", text),
        ],
        tools: Value::Array(tools),
        tool,
        number,
        ok,
    }
}

/// The tools of `task` as the lake and the chat template carry them.
pub(super) fn schema_tools(task: &Task) -> Vec<atdp_schema::Tool> {
    task.tools
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

/// What a call did: the tool's result, and whether the call was the right one.
fn call_result(task: &Task, name: &str, arguments: &str) -> (Value, bool) {
    let reference = serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|a| a["reference"].as_str().map(str::to_owned));
    match reference {
        Some(reference) if name == task.tool && reference == task.number => {
            (json!({"reference": reference, "ok": task.ok}), true)
        }
        Some(reference) if name == task.tool => (
            json!({"reference": reference, "ok": false, "error": "no such order on this account"}),
            false,
        ),
        _ => (
            json!({"ok": false, "error": "this tool cannot help with the ticket"}),
            false,
        ),
    }
}

/// Counts a reply into the episode.
fn count(episode: &mut Episode, reply: &Reply) {
    episode.turns += 1;
    episode.completion_tokens += reply.completion_tokens;
    if let Some(v) = &reply.version {
        episode.versions.push(v.clone());
    }
    if reply.trajectory_id.is_some() {
        episode.trajectory_id.clone_from(&reply.trajectory_id);
    }
}

/// Plays the episode of `seed`: the call, then the answer. Sets success and reward.
pub(super) async fn play(
    agent: &Agent,
    seed: u64,
    temperature: f64,
    episode: &mut Episode,
) -> Result<(), String> {
    let task = task(seed);
    let mut messages: Vec<Value> = task
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let first = agent
        .chat_json(json!({
            "messages": messages,
            "tools": task.tools,
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "max_tokens": 96,
            "temperature": temperature,
        }))
        .await?;
    count(episode, &first);
    let Some(call) = first.calls.first() else {
        // Not a call (a server that does not constrain strict tools can answer text): no
        // result to answer from, nothing right.
        episode.invalid_replies += 1;
        return Ok(());
    };
    let (result, call_right) = call_result(&task, &call.name, &call.arguments);
    let id = if call.id.is_empty() {
        "call_0"
    } else {
        &call.id
    };
    messages.push(
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }]}),
    );
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": result.to_string()}));
    let answer = agent
        .chat_json(json!({
            "messages": messages,
            "tools": task.tools,
            "tool_choice": "none",
            "max_tokens": 4,
            "temperature": temperature,
            "grammar": {"type": "regex", "value": r"(Done|Sorry)\."},
        }))
        .await?;
    count(episode, &answer);
    let said = answer.text.trim();
    if said != DONE && said != SORRY {
        episode.invalid_replies += 1;
    }
    let want = if call_right && task.ok { DONE } else { SORRY };
    let answer_right = said == want;
    episode.success = call_right;
    episode.reward = (f64::from(u8::from(call_right)) + f64::from(u8::from(answer_right))) / 2.0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_deterministic_and_hold_both_numbers_as_choices() {
        assert_eq!(task(11), task(11));
        let tools: std::collections::BTreeSet<&str> = (0..200).map(|s| task(s).tool).collect();
        assert_eq!(tools.len(), 4);
        for seed in 0..200 {
            let t = task(seed);
            let ticket = &t.messages[1].content;
            let choices: Vec<&str> =
                t.tools[0]["function"]["parameters"]["properties"]["reference"]["enum"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
            assert_eq!(choices.len(), 2);
            assert!(choices.contains(&t.number.as_str()));
            assert_ne!(choices[0].as_bytes()[0], choices[1].as_bytes()[0]);
            for choice in &choices {
                assert!(ticket.contains(choice), "{ticket} lacks {choice}");
            }
        }
        let oks = (0..300).filter(|s| task(*s).ok).count();
        assert!((150..250).contains(&oks), "{oks}");
    }

    #[test]
    fn a_call_is_right_with_the_right_tool_and_number_only() {
        let t = task(5);
        let other = t.tools[0]["function"]["parameters"]["properties"]["reference"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .find(|v| *v != t.number)
            .unwrap();
        let args = |n: &str| json!({"reference": n}).to_string();
        let (result, right) = call_result(&t, t.tool, &args(&t.number));
        assert!(right);
        assert_eq!(result["ok"], json!(t.ok));
        let (result, right) = call_result(&t, t.tool, &args(&other));
        assert!(!right);
        assert_eq!(result["ok"], json!(false));
        let wrong_tool = TOOLS.iter().map(|t| t.0).find(|n| *n != t.tool).unwrap();
        assert!(!call_result(&t, wrong_tool, &args(&t.number)).1);
        assert!(!call_result(&t, t.tool, "not json").1);
    }

    #[test]
    fn schema_tools_carry_the_strict_parameters() {
        let tools = schema_tools(&task(3));
        assert_eq!(tools.len(), 4);
        assert_eq!(tools[1].name, "refund");
        let parameters: Value =
            serde_json::from_str(tools[1].parameters.as_ref().unwrap()).unwrap();
        assert_eq!(parameters["required"], json!(["reference"]));
    }
}
