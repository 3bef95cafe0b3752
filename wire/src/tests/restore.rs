use std::collections::HashMap;

use atdp_policies::KeyRing;
use serde_json::{Value, json};

use super::fixtures::{EMAIL, TENANT, Vault};
use crate::{WireError, restore_json};

#[test]
fn documents_are_restored_string_by_string() {
    let quoted = "say \"hi\"\\\n";
    let (vault, tokens) = Vault::of(&[("EMAIL_ADDRESS", EMAIL), ("PERSON", quoted)]);
    let (email, person) = (&tokens[0], &tokens[1]);
    let arguments = json!({"to": email, "note": person}).to_string();
    let mut body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": {"role": "assistant",
            "content": format!("Write to {email} or <b>{email}</b>, not <UNKNOWN_000000000000>."),
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "send", "arguments": arguments}}]},
            "finish_reason": "tool_calls"}]
    });
    let changed = restore_json(&mut body, TENANT, &vault.vault, &vault.keys).unwrap();
    assert_eq!(changed, 2);
    let message = &body["choices"][0]["message"];
    assert_eq!(
        message["content"],
        format!("Write to {EMAIL} or <b>{EMAIL}</b>, not <UNKNOWN_000000000000>.")
    );
    // The arguments are JSON text: the original went in escaped, so they still parse.
    let arguments: Value = serde_json::from_str(
        message["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(arguments, json!({"to": EMAIL, "note": quoted}));
    // Field order is kept.
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "object", "model", "choices"]);
}

#[test]
fn anthropic_tool_input_is_plain_text() {
    let (vault, tokens) = Vault::of(&[("PERSON", "Jo \"J\" Doe")]);
    let mut body = json!({"type": "message", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "send", "input": {"name": tokens[0]}}]});
    assert_eq!(
        restore_json(&mut body, TENANT, &vault.vault, &vault.keys).unwrap(),
        1
    );
    assert_eq!(body["content"][0]["input"]["name"], "Jo \"J\" Doe");
}

#[test]
fn nothing_to_restore() {
    let (vault, _) = Vault::of(&[("EMAIL_ADDRESS", EMAIL)]);
    let original = json!({"a": ["<x>", "a < b > c", 1, null, {"b": "<EMAIL_ADDRESS_"}]});
    let mut body = original.clone();
    assert_eq!(
        restore_json(&mut body, TENANT, &vault.vault, &vault.keys).unwrap(),
        0
    );
    assert_eq!(body, original);
    let mut body = json!("<EMAIL_ADDRESS_000000000000>");
    let empty = HashMap::new();
    assert_eq!(
        restore_json(&mut body, TENANT, &empty, &vault.keys).unwrap(),
        0
    );
}

#[test]
fn a_placeholder_that_does_not_open_is_an_error() {
    let (vault, tokens) = Vault::of(&[("EMAIL_ADDRESS", EMAIL)]);
    let mut body = json!({"content": tokens[0]});
    let other_keys = KeyRing::default();
    let error = restore_json(&mut body, TENANT, &vault.vault, &other_keys).unwrap_err();
    assert!(matches!(error, WireError::Unmask(_)));
    assert!(!error.to_string().contains(EMAIL));
    assert_eq!(error.status(), 500);
}
