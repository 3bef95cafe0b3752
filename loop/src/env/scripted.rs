//! The tool-calling environments played against scripted models on loopback, speaking
//! OpenAI's chat completions: one that solves the task from what the conversation shows, one
//! that gets one choice wrong, one that never calls a tool. What each scores, and what each
//! request carries, is checked.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::Env;
use crate::client::Agent;

/// How the scripted model plays.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Play {
    /// Reads the task from the conversation and answers it.
    Right,
    /// As `Right`, but acts on the other order.
    OtherOrder,
    /// Answers text, never a tool call.
    NoCall,
}

/// A reply calling `name` with `arguments`.
fn tool_call(name: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()},
    }]})
}

/// The choice of `tools`' function `name` whose value the ticket gives right after `cue`.
fn given_after(tools: &Value, name: &str, ticket: &str, cue: &str) -> String {
    let tool = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap();
    let properties = tool["function"]["parameters"]["properties"]
        .as_object()
        .unwrap();
    let choices = properties.values().next().unwrap()["enum"]
        .as_array()
        .unwrap();
    let at = ticket.find(cue).unwrap();
    choices
        .iter()
        .map(|c| c.as_str().unwrap())
        .filter_map(|c| ticket.find(c).filter(|i| *i > at).map(|i| (i, c)))
        .min()
        .unwrap()
        .1
        .to_owned()
}

/// The scripted model's message for an `order_lookup` request.
fn order_lookup_reply(play: Play, body: &Value) -> Value {
    let messages = body["messages"].as_array().unwrap();
    let ticket = messages[1]["content"].as_str().unwrap();
    let last: Value = messages
        .last()
        .and_then(|m| m["content"].as_str())
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null);
    if play == Play::NoCall {
        return json!({"role": "assistant", "content": "Done."});
    }
    match &body["tool_choice"] {
        Value::String(choice) if choice == "none" => {
            let said = if last["ok"] == json!(true) {
                "Done."
            } else {
                "Sorry."
            };
            json!({"role": "assistant", "content": said})
        }
        Value::String(choice) if choice == "required" => {
            let latest = ticket.contains("latest");
            let key = if latest == (play == Play::Right) {
                "latest_order"
            } else {
                "oldest_order"
            };
            let refund = ["efund", "money back", "charged"]
                .iter()
                .any(|w| ticket.contains(w));
            let tool = if refund {
                "refund_order"
            } else {
                "track_order"
            };
            tool_call(tool, json!({"order": last[key]}))
        }
        named => {
            let name = named["function"]["name"].as_str().unwrap();
            let account = given_after(&body["tools"], name, ticket, "ccount");
            tool_call(name, json!({"account": account}))
        }
    }
}

/// A scripted model on loopback; the request bodies it was sent.
async fn scripted(play: Play) -> (Agent, Arc<Mutex<Vec<Value>>>) {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                let body: Value = serde_json::from_slice(&body).unwrap();
                let message = order_lookup_reply(play, &body);
                keep.lock().unwrap().push(body);
                let finish = if message["tool_calls"].is_array() {
                    "tool_calls"
                } else {
                    "stop"
                };
                axum::Json(json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "model": "scripted",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let agent = Agent::new(&format!("http://{addr}/v1"), None, "scripted");
    (agent, seen)
}

#[tokio::test]
async fn an_order_lookup_solved_from_the_conversation_scores_every_turn() {
    let (agent, seen) = scripted(Play::Right).await;
    for seed in 0..24 {
        let episode = Env::OrderLookup.episode(&agent, seed, 1.0, false).await;
        assert_eq!(episode.error, None, "seed {seed}");
        assert!(episode.success, "seed {seed}: {episode:?}");
        assert!(
            (episode.reward - 1.0).abs() < 1e-9,
            "seed {seed}: {episode:?}"
        );
        assert_eq!((episode.turns, episode.invalid_replies), (3, 0));
        assert_eq!(episode.completion_tokens, 9);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 24 * 3);
    let (lookup, action, answer) = (&seen[0], &seen[1], &seen[2]);
    assert_eq!(
        lookup["tool_choice"],
        json!({"type": "function", "function": {"name": "find_account"}})
    );
    assert_eq!(lookup["messages"].as_array().unwrap().len(), 2);
    assert_eq!(lookup["tools"].as_array().unwrap().len(), 3);
    // The lookup and its result are in the action's conversation, both calls in the answer's.
    assert_eq!(action["tool_choice"], json!("required"));
    let history = action["messages"].as_array().unwrap();
    assert_eq!(history.len(), 4);
    assert_eq!(
        history[2]["tool_calls"][0]["function"]["name"],
        "find_account"
    );
    assert_eq!(history[3]["role"], "tool");
    assert_eq!(
        history[3]["tool_call_id"],
        history[2]["tool_calls"][0]["id"]
    );
    assert_eq!(answer["tool_choice"], json!("none"));
    assert_eq!(answer["messages"].as_array().unwrap().len(), 6);
    assert_eq!(answer["grammar"]["value"], r"(Done|Sorry)\.");
}

#[tokio::test]
async fn an_order_lookup_on_the_other_order_or_without_a_call_is_not_a_success() {
    let (agent, _) = scripted(Play::OtherOrder).await;
    for seed in 0..12 {
        let episode = Env::OrderLookup.episode(&agent, seed, 1.0, false).await;
        assert!(!episode.success, "seed {seed}: {episode:?}");
        // The lookup, and `Sorry.` after the wrong action, are right.
        assert!((episode.reward - 2.0 / 3.0).abs() < 1e-9, "{episode:?}");
        assert_eq!(episode.turns, 3);
    }
    let (agent, _) = scripted(Play::NoCall).await;
    let episode = Env::OrderLookup.episode(&agent, 3, 1.0, false).await;
    assert_eq!(
        (episode.success, episode.reward, episode.turns),
        (false, 0.0, 1)
    );
    assert_eq!(episode.invalid_replies, 1);
}
