//! `order_lookup`: a lookup whose result feeds a second call. A customer writes about their
//! latest or their oldest order and gives their account number; the agent looks the account
//! up, reads which of its two orders the customer means from the lookup's result, tracks or
//! refunds that order, reads the result and tells the customer whether it went through:
//! three turns, one trajectory.
//!
//! The tools are `strict`, each argument an `enum` of two numbers (the ticket's account
//! number and an unrelated number of the ticket; the account's two orders), so that what the
//! model chooses is the tool and the number. The first turn names `find_account`
//! (`tool_choice` a named function): its choice is the account. The second is
//! `tool_choice: "required"` among the three tools. The answer turn is held to `Done.` or
//! `Sorry.`.
//!
//! Scoring: the lookup is right with the ticket's account; the action is right when the
//! lookup was, and it calls the tool of the ticket's intent with the order the ticket means
//! (`latest_order` or `oldest_order` of the lookup's result); the answer is right when it
//! says `Done.` after a right action whose result is ok, else `Sorry.`. The reward
//! `order_lookup_score` is a third for each; the episode's success is both calls right
//! (chance: 1 in 2 accounts, then 1 in 2 tools × 1 in 2 orders, 12.5%).

use serde_json::{Value, json};

use super::calls::{
    ASIDES, DONE, SORRY, add_call, answer, argument, call, cannot_help, first_messages,
    strict_tool, two_numbers,
};
use super::{Episode, SeedRng};
use crate::client::{Agent, ChatMessage, ToolCallReply};

/// The system prompt.
pub(super) const SYSTEM: &str = "You are a support agent. Look up the customer's account, \
    then track or refund the order they mean. Then tell the customer: Done. or Sorry.";

/// The lookup tool.
const FIND: &str = "find_account";

/// The two actions, by intent: the tool, its description and ticket templates (`{which}`:
/// `latest` or `oldest`; `{a}`: the account number).
const ACTIONS: [(&str, &str, &[&str]); 2] = [
    (
        "track_order",
        "Say where an order is.",
        &[
            "Where is my {which} order? Account {a}.",
            "Has my {which} order shipped yet? My account is {a}.",
            "Tracking for my {which} order please, account {a}.",
            "When will my {which} order arrive? Account number {a}.",
        ],
    ),
    (
        "refund_order",
        "Refund an order.",
        &[
            "Refund my {which} order please. Account {a}.",
            "My {which} order arrived broken, I want my money back. Account {a}.",
            "You charged me twice for my {which} order. Account number {a}.",
            "The item in my {which} order was wrong, refund it. My account is {a}.",
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
    /// The account the ticket gives.
    pub account: String,
    /// The account's latest and oldest orders.
    pub latest: String,
    pub oldest: String,
    /// Whether the ticket means the latest order (else the oldest).
    pub wants_latest: bool,
    /// The tool of the ticket's intent.
    pub action: &'static str,
    /// Whether the right action succeeds.
    pub ok: bool,
}

impl Task {
    /// The order the ticket means.
    fn order(&self) -> &str {
        if self.wants_latest {
            &self.latest
        } else {
            &self.oldest
        }
    }
}

/// The task of `seed`.
pub(super) fn task(seed: u64) -> Task {
    let mut rng = SeedRng::new(seed);
    let (action, _, templates) = ACTIONS[rng.below(ACTIONS.len())];
    let template = templates[rng.below(templates.len())];
    let aside = ASIDES[rng.below(ASIDES.len())];
    let (account, other) = two_numbers(&mut rng);
    let (latest, oldest) = two_numbers(&mut rng);
    let wants_latest = rng.below(2) == 0;
    let ticket = template
        .replace("{which}", if wants_latest { "latest" } else { "oldest" })
        .replace("{a}", &account);
    let aside = aside.replace("{m}", &other);
    let text = if rng.below(2) == 0 {
        format!("{ticket} {aside}")
    } else {
        format!("{aside} {ticket}")
    };
    let ok = rng.below(3) != 0;
    let accounts = [account.as_str(), other.as_str()];
    let orders = [latest.as_str(), oldest.as_str()];
    let mut tools = vec![strict_tool(
        FIND,
        "Find a customer's account and its orders.",
        "account",
        &accounts,
    )];
    tools.extend(
        ACTIONS
            .iter()
            .map(|(name, description, _)| strict_tool(name, description, "order", &orders)),
    );
    Task {
        messages: vec![
            ChatMessage::new("system", SYSTEM),
            ChatMessage::new("user", text),
        ],
        tools: Value::Array(tools),
        account,
        latest,
        oldest,
        wants_latest,
        action,
        ok,
    }
}

/// What the lookup returned, and whether it was the ticket's account.
fn lookup_result(task: &Task, call: &ToolCallReply) -> (Value, bool) {
    match argument(call, "account") {
        Some(account) if call.name == FIND && account == task.account => (
            json!({"account": account, "latest_order": task.latest, "oldest_order": task.oldest}),
            true,
        ),
        Some(account) if call.name == FIND => (
            json!({"account": account, "error": "no such account"}),
            false,
        ),
        _ => (json!({"error": "look the account up first"}), false),
    }
}

/// What the action did, and whether it was the right one after a right lookup.
fn action_result(task: &Task, looked_up: bool, call: &ToolCallReply) -> (Value, bool) {
    let known = ACTIONS.iter().any(|(name, _, _)| *name == call.name);
    match argument(call, "order") {
        Some(order) if known && looked_up && order == task.order() && call.name == task.action => {
            (json!({"order": order, "ok": task.ok}), true)
        }
        Some(order) if known => (
            json!({"order": order, "ok": false, "error": "not the order the customer means"}),
            false,
        ),
        _ => (cannot_help(), false),
    }
}

/// Plays the episode of `seed`: the lookup, the action, the answer. Sets success and reward.
pub(super) async fn play(
    agent: &Agent,
    seed: u64,
    temperature: f64,
    episode: &mut Episode,
) -> Result<(), String> {
    let task = task(seed);
    let mut messages = first_messages(&task.messages);
    let find = json!({"type": "function", "function": {"name": FIND}});
    let Some(lookup) = call(agent, &messages, &task.tools, find, temperature, episode).await?
    else {
        return Ok(());
    };
    let (result, looked_up) = lookup_result(&task, &lookup);
    add_call(&mut messages, &lookup, &result);
    let required = json!("required");
    let Some(action) = call(
        agent,
        &messages,
        &task.tools,
        required,
        temperature,
        episode,
    )
    .await?
    else {
        episode.reward = f64::from(u8::from(looked_up)) / 3.0;
        return Ok(());
    };
    let (result, acted) = action_result(&task, looked_up, &action);
    add_call(&mut messages, &action, &result);
    let want = if acted && task.ok { DONE } else { SORRY };
    let answered = answer(agent, &messages, &task.tools, temperature, want, episode).await?;
    episode.success = looked_up && acted;
    episode.reward = [looked_up, acted, answered]
        .iter()
        .filter(|right| **right)
        .count() as f64
        / 3.0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(name: &str, arguments: Value) -> ToolCallReply {
        ToolCallReply {
            id: String::new(),
            name: name.to_owned(),
            arguments: arguments.to_string(),
        }
    }

    fn choices(task: &Task, tool: usize, argument: &str) -> Vec<String> {
        task.tools[tool]["function"]["parameters"]["properties"][argument]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn tasks_are_deterministic_and_cover_both_intents_and_both_orders() {
        assert_eq!(task(11), task(11));
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let t = task(seed);
            seen.insert((t.action, t.wants_latest));
            let ticket = &t.messages[1].content;
            assert!(ticket.contains(&t.account), "{ticket}");
            assert!(ticket.contains(if t.wants_latest { "latest" } else { "oldest" }));
            // The ticket gives the account and another number; the orders only the lookup.
            let accounts = choices(&t, 0, "account");
            assert_eq!(accounts.len(), 2);
            assert!(accounts.contains(&t.account));
            assert!(accounts.iter().all(|a| ticket.contains(a.as_str())));
            for tool in 1..3 {
                let orders = choices(&t, tool, "order");
                assert_eq!(orders.len(), 2);
                assert!(orders.contains(&t.latest) && orders.contains(&t.oldest));
                assert_ne!(orders[0].as_bytes()[0], orders[1].as_bytes()[0]);
            }
            assert!(!ticket.contains(&t.latest) && !ticket.contains(&t.oldest));
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        let oks = (0..300).filter(|s| task(*s).ok).count();
        assert!((150..250).contains(&oks), "{oks}");
    }

    #[test]
    fn the_action_is_right_only_after_the_right_lookup_with_the_meant_order() {
        let t = task(5);
        let other_account = choices(&t, 0, "account")
            .into_iter()
            .find(|a| *a != t.account)
            .unwrap();
        let (result, right) = lookup_result(&t, &made(FIND, json!({"account": t.account})));
        assert!(right);
        assert_eq!(result["latest_order"], json!(t.latest));
        assert_eq!(result["oldest_order"], json!(t.oldest));
        let (result, right) = lookup_result(&t, &made(FIND, json!({"account": other_account})));
        assert!(!right);
        assert!(result.get("latest_order").is_none());
        assert!(!lookup_result(&t, &made(t.action, json!({"order": t.latest}))).1);

        let meant = t.order().to_owned();
        let other_order = if t.wants_latest { &t.oldest } else { &t.latest };
        let (result, right) = action_result(&t, true, &made(t.action, json!({"order": meant})));
        assert!(right);
        assert_eq!(result["ok"], json!(t.ok));
        assert!(!action_result(&t, false, &made(t.action, json!({"order": meant}))).1);
        assert!(!action_result(&t, true, &made(t.action, json!({"order": other_order}))).1);
        let wrong = ACTIONS
            .iter()
            .map(|a| a.0)
            .find(|n| *n != t.action)
            .unwrap();
        assert!(!action_result(&t, true, &made(wrong, json!({"order": meant}))).1);
        assert!(!action_result(&t, true, &made(FIND, json!({"account": t.account}))).1);
        assert!(!action_result(&t, true, &made(t.action, json!("not an object"))).1);
    }
}
