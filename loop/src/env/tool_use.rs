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

use super::calls::{
    ASIDES, DONE, SORRY, add_call, answer, argument, call, cannot_help, first_messages,
    strict_tool, two_numbers,
};
use super::{Episode, SeedRng};
use crate::client::{Agent, ChatMessage, ToolCallReply};

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
    let (number, other) = two_numbers(&mut rng);
    let ticket = template.replace("{n}", &number);
    let aside = aside.replace("{m}", &other);
    let text = if rng.below(2) == 0 {
        format!("{ticket} {aside}")
    } else {
        format!("{aside} {ticket}")
    };
    let ok = rng.below(3) != 0;
    let choices = [number.as_str(), other.as_str()];
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|(name, description, _)| strict_tool(name, description, "reference", &choices))
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

/// What a call did: the tool's result, and whether the call was the right one.
fn call_result(task: &Task, call: &ToolCallReply) -> (Value, bool) {
    let name = call.name.as_str();
    match argument(call, "reference") {
        Some(reference) if name == task.tool && reference == task.number => {
            (json!({"reference": reference, "ok": task.ok}), true)
        }
        Some(reference) if name == task.tool => (
            json!({"reference": reference, "ok": false, "error": "no such order on this account"}),
            false,
        ),
        _ => (cannot_help(), false),
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
    let mut messages = first_messages(&task.messages);
    let Some(made) = call(
        agent,
        &messages,
        &task.tools,
        json!("required"),
        temperature,
        episode,
    )
    .await?
    else {
        // No result to answer from, nothing right.
        return Ok(());
    };
    let (result, call_right) = call_result(&task, &made);
    add_call(&mut messages, &made, &result);
    let want = if call_right && task.ok { DONE } else { SORRY };
    let answer_right = answer(agent, &messages, &task.tools, temperature, want, episode).await?;
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
        let made = |name: &str, arguments: String| ToolCallReply {
            id: String::new(),
            name: name.to_owned(),
            arguments,
        };
        let args = |n: &str| json!({"reference": n}).to_string();
        let (result, right) = call_result(&t, &made(t.tool, args(&t.number)));
        assert!(right);
        assert_eq!(result["ok"], json!(t.ok));
        let (result, right) = call_result(&t, &made(t.tool, args(&other)));
        assert!(!right);
        assert_eq!(result["ok"], json!(false));
        let wrong_tool = TOOLS.iter().map(|t| t.0).find(|n| *n != t.tool).unwrap();
        assert!(!call_result(&t, &made(wrong_tool, args(&t.number))).1);
        assert!(!call_result(&t, &made(t.tool, "not json".into())).1);
    }

    #[test]
    fn schema_tools_carry_the_strict_parameters() {
        let tools = super::super::calls::schema_tools(&task(3).tools);
        assert_eq!(tools.len(), 4);
        assert_eq!(tools[1].name, "refund");
        let parameters: Value =
            serde_json::from_str(tools[1].parameters.as_ref().unwrap()).unwrap();
        assert_eq!(parameters["required"], json!(["reference"]));
    }
}
