use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;
use crate::mask::{Action, unmask};

/// A scanner, a tenant's keys and one action for everything.
struct Fixture {
    scanner: Scanner,
    keys: KeyRing,
    policy: MaskPolicy,
}

impl Fixture {
    fn new(action: Action) -> Fixture {
        let mut keys = KeyRing::default();
        keys.generate("acme");
        Fixture {
            scanner: Scanner::new(None).unwrap(),
            keys,
            policy: MaskPolicy::all(action),
        }
    }

    fn masker(&self) -> JsonMasker<'_> {
        JsonMasker {
            scanner: &self.scanner,
            policy: &self.policy,
            tenant: "acme",
            keys: &self.keys,
        }
    }

    fn mask(&self, document: &mut Value) -> JsonMasked {
        self.masker().mask(document).unwrap()
    }

    fn unmask(&self, text: &str, masked: &JsonMasked) -> String {
        let vault: HashMap<String, VaultItem> = masked
            .vault
            .iter()
            .map(|v| (v.token.clone(), v.clone()))
            .collect();
        unmask(text, "acme", &vault, &self.keys).unwrap()
    }

    fn token(&self, entity: &str, value: &str) -> String {
        self.keys.token("acme", entity, value).unwrap()
    }
}

fn paths(masked: &JsonMasked) -> Vec<&str> {
    masked.spans.iter().map(|(p, _)| p.as_str()).collect()
}

fn entities(masked: &JsonMasked) -> Vec<&str> {
    masked
        .spans
        .iter()
        .map(|(_, s)| s.entity.as_str())
        .collect()
}

#[test]
fn masks_messages_tool_arguments_and_unmodelled_fields() {
    let mut keys = KeyRing::default();
    keys.generate("acme");
    let scanner = Scanner::new(None).unwrap();
    let policy = MaskPolicy::all(Action::Tokenize);
    let masker = JsonMasker {
        scanner: &scanner,
        policy: &policy,
        tenant: "acme",
        keys: &keys,
    };
    let original = serde_json::json!({
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "Escalate to ops@example.com."},
            {"role": "user", "content": [{"type": "text", "text": "My card is 4111 1111 1111 1111"}]},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "lookup", "arguments": "{\"email\":\"jane@example.com\",\"limit\":3}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"owner\": {\"phone\": \"+44 20 7946 0958\"}}"}
        ],
        "metadata": {"user note": "ssn 536-22-1234"},
        "temperature": 0.2
    });
    let mut document = original.clone();
    let masked = masker.mask(&mut document).unwrap();
    let text = document.to_string();
    for pii in [
        "ops@example.com",
        "4111 1111 1111 1111",
        "jane@example.com",
        "+44 20 7946 0958",
        "536-22-1234",
    ] {
        assert!(!text.contains(pii), "{pii} left in {text}");
    }
    let paths: Vec<&str> = masked.spans.iter().map(|(p, _)| p.as_str()).collect();
    assert!(paths.contains(&"messages[0].content"), "{paths:?}");
    assert!(paths.contains(&"messages[1].content[0].text"), "{paths:?}");
    assert!(
        paths.contains(&"messages[2].tool_calls[0].function.arguments#.email"),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"messages[3].content#.owner.phone"),
        "{paths:?}"
    );
    assert!(paths.contains(&r#"metadata["user note"]"#), "{paths:?}");
    // Untouched JSON inside strings keeps its exact text; masked JSON stays valid JSON.
    let arguments = document["messages"][2]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    let parsed: Value = serde_json::from_str(arguments).unwrap();
    assert_eq!(parsed["limit"], 3);
    // Unmasking each string restores the originals.
    let vault: HashMap<String, VaultItem> = masked
        .vault
        .iter()
        .map(|v| (v.token.clone(), v.clone()))
        .collect();
    let restored = unmask(arguments, "acme", &vault, &keys).unwrap();
    let restored: Value = serde_json::from_str(&restored).unwrap();
    assert_eq!(restored["email"], "jane@example.com");
    assert_eq!(document["temperature"], original["temperature"]);
}

#[test]
fn a_card_number_sent_as_a_number_inside_a_tool_result_is_masked() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"messages": [
        {"role": "tool", "content": "{\"card\": 4111111111111111, \"limit\": 3}"}
    ]});
    let masked = fixture.mask(&mut document);
    let content = document["messages"][0]["content"].as_str().unwrap();
    let token = fixture.token("CREDIT_CARD", "4111111111111111");
    // The number became a string holding its placeholder; the number without a finding stays.
    assert_eq!(content, format!("{{\"card\":\"{token}\",\"limit\":3}}"));
    assert_eq!(paths(&masked), ["messages[0].content#.card"]);
    assert_eq!(
        fixture.unmask(content, &masked),
        "{\"card\":\"4111111111111111\",\"limit\":3}"
    );
}

#[test]
fn a_personal_value_used_as_a_key_inside_a_tool_result_is_masked() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"content": "{\"jane@example.com\": \"active\"}"});
    let masked = fixture.mask(&mut document);
    let token = fixture.token("EMAIL_ADDRESS", "jane@example.com");
    assert_eq!(
        document["content"].as_str().unwrap(),
        format!("{{\"{token}\":\"active\"}}")
    );
    assert_eq!(entities(&masked), ["EMAIL_ADDRESS"]);
    assert_eq!(paths(&masked), [format!("content#[\"{token}\"]")]);
}

#[test]
fn numbers_and_keys_of_the_document_itself_are_masked() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({
        "messages": [{"role": "assistant", "content": [{
            "type": "tool_use", "id": "toolu_1", "name": "charge",
            "input": {"card": 4111111111111111_u64, "jane@example.com": "owner", "amount": 12}
        }]}],
        "metadata": {"ops@example.com": {"+44 20 7946 0958": true}},
        "x-unknown": [5555555555554444_u64]
    });
    let masked = fixture.mask(&mut document);
    let text = document.to_string();
    for value in [
        "4111111111111111",
        "jane@example.com",
        "ops@example.com",
        "+44 20 7946 0958",
        "5555555555554444",
    ] {
        assert!(!text.contains(value), "{value} left in {text}");
    }
    let card = fixture.token("CREDIT_CARD", "4111111111111111");
    let input = &document["messages"][0]["content"][0]["input"];
    assert_eq!(input["card"], Value::String(card));
    assert_eq!(input["amount"], 12);
    let email = fixture.token("EMAIL_ADDRESS", "jane@example.com");
    assert_eq!(input[email.as_str()], "owner");
    let ops = fixture.token("EMAIL_ADDRESS", "ops@example.com");
    let phone = fixture.token("PHONE_NUMBER", "+44 20 7946 0958");
    assert_eq!(document["metadata"][ops.as_str()][phone.as_str()], true);
    let mut found = entities(&masked);
    found.sort_unstable();
    assert_eq!(
        found,
        [
            "CREDIT_CARD",
            "CREDIT_CARD",
            "EMAIL_ADDRESS",
            "EMAIL_ADDRESS",
            "PHONE_NUMBER"
        ]
    );
    let restored: Value = serde_json::from_str(&fixture.unmask(&text, &masked)).unwrap();
    assert_eq!(
        restored["metadata"]["ops@example.com"]["+44 20 7946 0958"],
        true
    );
    assert_eq!(restored["x-unknown"][0], "5555555555554444");
}

#[test]
fn paths_name_the_masked_key_never_the_original() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({
        "metadata": {"jane@example.com": "call +44 20 7946 0958"},
        "content": "{\"bob@example.com\": {\"note\": \"ssn 536-22-1234\"}}"
    });
    let masked = fixture.mask(&mut document);
    let jane = fixture.token("EMAIL_ADDRESS", "jane@example.com");
    let bob = fixture.token("EMAIL_ADDRESS", "bob@example.com");
    let mut found = paths(&masked);
    found.sort_unstable();
    assert_eq!(
        found,
        [
            format!("content#[\"{bob}\"]"),
            format!("content#[\"{bob}\"].note"),
            format!("metadata[\"{jane}\"]"),
            format!("metadata[\"{jane}\"]"),
        ]
    );
    for (path, _) in &masked.spans {
        assert!(!path.contains("@example.com"), "{path}");
    }
}

#[test]
fn keys_that_mask_to_the_same_text_are_kept_apart() {
    let fixture = Fixture::new(Action::Redact);
    let mut document = json!({"contacts": {
        "a@example.com": 1,
        "[EMAIL_ADDRESS]~2": 2,
        "b@example.com": 3,
        "c@example.com": 4,
        "plain": 5
    }});
    let masked = fixture.mask(&mut document);
    let contacts = document["contacts"].as_object().unwrap();
    let mut members: Vec<(&str, i64)> = contacts
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_i64().unwrap()))
        .collect();
    members.sort_unstable();
    // A key in which nothing was found keeps its name; the masked ones take the first free
    // `~N` in document order.
    assert_eq!(
        members,
        [
            ("[EMAIL_ADDRESS]", 1),
            ("[EMAIL_ADDRESS]~2", 2),
            ("[EMAIL_ADDRESS]~3", 3),
            ("[EMAIL_ADDRESS]~4", 4),
            ("plain", 5),
        ]
    );
    assert_eq!(
        paths(&masked),
        [
            "contacts[\"[EMAIL_ADDRESS]\"]",
            "contacts[\"[EMAIL_ADDRESS]~3\"]",
            "contacts[\"[EMAIL_ADDRESS]~4\"]",
        ]
    );
}

#[test]
fn embedded_json_with_duplicate_keys_is_rewritten_with_one_copy() {
    let fixture = Fixture::new(Action::Tokenize);
    // The copy a model may read first holds the address; serde_json reads the last.
    let mut document = json!({
        "first": "{\"e\":\"jane@example.com\",\"e\":\"x\"}",
        "last": "{\"e\":\"x\",\"e\":\"bob@example.com\"}",
        "clean": "{\"a\": 1, \"b\": {\"c\": 2, \"c\": 3}}"
    });
    let masked = fixture.mask(&mut document);
    let bob = fixture.token("EMAIL_ADDRESS", "bob@example.com");
    // One copy of each key, the last, as serde_json, JSON.parse and Python read it.
    assert_eq!(document["first"], "{\"e\":\"x\"}");
    assert_eq!(document["last"], format!("{{\"e\":\"{bob}\"}}"));
    assert_eq!(document["clean"], "{\"a\":1,\"b\":{\"c\":3}}");
    assert_eq!(paths(&masked), ["last#.e"]);
    assert!(!document.to_string().contains("jane@"));
}

#[test]
fn embedded_json_is_followed_at_any_depth_and_refused_beyond_the_bound() {
    let fixture = Fixture::new(Action::Redact);
    let nest = |levels: usize| {
        let mut inner = json!({"email": "jane@example.com"});
        for _ in 0..levels {
            inner = json!({"wrapped": inner.to_string()});
        }
        inner
    };
    let mut document = nest(12);
    let masked = fixture.mask(&mut document);
    assert!(!document.to_string().contains("jane@"));
    assert_eq!(
        paths(&masked),
        [format!("wrapped{}#.email", "#.wrapped".repeat(11))]
    );
    let mut unwrapped = document;
    for _ in 0..12 {
        unwrapped = serde_json::from_str(unwrapped["wrapped"].as_str().unwrap()).unwrap();
    }
    assert_eq!(unwrapped, json!({"email": "[EMAIL_ADDRESS]"}));

    // Up to the bound, in the document and in JSON inside a string, all is read.
    let mut deepest = json!("jane@example.com");
    for _ in 0..MAX_DEPTH {
        deepest = json!([deepest]);
    }
    fixture.mask(&mut deepest);
    assert!(!deepest.to_string().contains("jane@"));
    let levels = MAX_DEPTH - 2;
    let text = format!(
        "{}\"jane@example.com\"{}",
        "[".repeat(levels),
        "]".repeat(levels)
    );
    let mut inside = json!({ "content": text });
    fixture.mask(&mut inside);
    assert!(!inside.to_string().contains("jane@"));

    // Nesting deeper than the bound is an error (the proxy refuses the request), in the
    // document as in JSON inside a string, never an unmasked pass.
    let mut deep = json!("jane@example.com");
    for _ in 0..MAX_DEPTH + 1 {
        deep = json!([deep]);
    }
    assert!(fixture.masker().mask(&mut deep).is_err());
    let text = format!(
        "{}\"jane@example.com\"{}",
        "[".repeat(MAX_DEPTH + 1),
        "]".repeat(MAX_DEPTH + 1)
    );
    let mut inside = json!({ "content": text });
    assert!(fixture.masker().mask(&mut inside).is_err());
}

#[test]
fn cut_off_json_is_checked_with_its_escapes_decoded() {
    let fixture = Fixture::new(Action::Redact);
    let mut document = json!({"content": r#"{"owner": "jane\u0040example.com", "note": "ca"#});
    let masked = fixture.mask(&mut document);
    assert_eq!(entities(&masked), ["EMAIL_ADDRESS"]);
    assert_eq!(
        document["content"],
        r#"{"owner": "[EMAIL_ADDRESS]", "note": "ca"#
    );
    // Two levels of escaping inside cut-off JSON.
    let mut document =
        json!({"content": r#"{"result": "{\"owner\": \"jane\\u0040example.com\"}", "#});
    fixture.mask(&mut document);
    assert!(!document.to_string().contains("u0040"), "{document}");
}

#[test]
fn plain_strings_and_keys_with_unicode_escapes_are_checked_decoded() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({
        "content": r"write to jane\u0040example.com today",
        r"bob\u0040example.com": "x",
        "card": r"4111\u00201111 1111 1111"
    });
    let masked = fixture.mask(&mut document);
    let jane = fixture.token("EMAIL_ADDRESS", "jane@example.com");
    let bob = fixture.token("EMAIL_ADDRESS", "bob@example.com");
    let card = fixture.token("CREDIT_CARD", "4111 1111 1111 1111");
    assert_eq!(document["content"], format!("write to {jane} today"));
    assert_eq!(document[bob.as_str()], "x");
    assert_eq!(document["card"], card);
    let restored = fixture.unmask(&document.to_string(), &masked);
    assert!(
        restored.contains("write to jane@example.com today"),
        "{restored}"
    );
}

#[test]
fn decoding_escapes_never_unmasks_what_the_raw_text_showed() {
    let fixture = Fixture::new(Action::Redact);
    // Decoded, the last group grows to five digits and the card no longer validates.
    let mut document = json!({"content": r"card 4111 1111 1111 1111\u0031 and x\u0040example.com"});
    fixture.mask(&mut document);
    let text = document["content"].as_str().unwrap();
    assert!(!text.contains("4111 1111"), "{text}");
    assert!(
        !text.contains("x@example.com") && !text.contains("u0040"),
        "{text}"
    );
}

#[test]
fn escapes_hiding_escapes_are_decoded_until_none_is_left_or_refused() {
    let fixture = Fixture::new(Action::Redact);
    // `\u005c` is a backslash: each round of decoding makes the next escape.
    let hidden = |rounds: usize| format!("jane\\{}u0040example.com", "u005c".repeat(rounds));
    let mut document = json!({ "content": hidden(3) });
    fixture.mask(&mut document);
    assert_eq!(document["content"], "[EMAIL_ADDRESS]");
    let mut document = json!({ "content": hidden(MAX_DECODE_ROUNDS) });
    assert!(fixture.masker().mask(&mut document).is_err());
}

#[test]
fn numbers_written_with_a_fraction_or_an_exponent_are_checked_as_digits() {
    let fixture = Fixture::new(Action::Redact);
    let mut document = json!({
        "a": "{\"card\": 4111111111111111.0}",
        "b": "{\"card\": 4.111111111111111e15}",
        "c": "{\"card\": 41111111111111110e-1}",
        "d": "[4.111111111111111e3]",
        "e": 4111111111111111.0_f64
    });
    fixture.mask(&mut document);
    assert_eq!(document["a"], "{\"card\":\"[CREDIT_CARD]\"}");
    assert_eq!(document["b"], "{\"card\":\"[CREDIT_CARD]\"}");
    assert_eq!(document["c"], "{\"card\":\"[CREDIT_CARD]\"}");
    assert_eq!(document["d"], "[\"[CREDIT_CARD]\"]");
    assert_eq!(document["e"], "[CREDIT_CARD]");
}

#[test]
fn what_has_no_finding_is_left_as_it_was() {
    let fixture = Fixture::new(Action::Tokenize);
    let original = json!({
        "temperature": 0.2,
        "max_tokens": 4096,
        "seed": -12345678901_i64,
        "stop": ["\\n", "C:\\new\\table"],
        "arguments": "{ \"order_ref\" : \"SO-10482\",\n  \"limit\": 25.50, \"tags\": [1e3, -0, \"\\u00e9\"] }"
    });
    let mut document = original.clone();
    let masked = fixture.mask(&mut document);
    assert!(masked.spans.is_empty(), "{:?}", masked.spans);
    assert_eq!(document, original);
}

#[test]
fn allow_reports_spans_and_changes_nothing() {
    let fixture = Fixture::new(Action::Allow);
    let original = json!({
        "jane@example.com": 4111111111111111_u64,
        "content": "{\"bob@example.com\": 5555555555554444, \"n\": \"x\\u0040example.com\"}",
        "note": r"mail y\u0040example.com"
    });
    let mut document = original.clone();
    let masked = fixture.mask(&mut document);
    assert_eq!(document, original);
    assert_eq!(masked.spans.len(), 6, "{:?}", masked.spans);
    assert!(masked.spans.iter().all(|(_, s)| s.action == Action::Allow));
}

#[test]
fn a_placeholder_that_a_decoded_escape_puts_in_a_new_context_is_not_masked_again() {
    let fixture = Fixture::new(Action::Tokenize);
    // Decoded, the escaped quotes put the secret's placeholder after `api_key = "`, where
    // the secret detector reads it as a secret; each entry of the vault must stay in the
    // text, and what an escape hid of the value must still be masked.
    for text in [
        r#"api_key = "Zx8vQ2mN7pL4kund","arguments":"{\"ibfe80::1 v1.2.3.4"#,
        r#"{\"api_key\": \"Zx8vQ2mN7pL4kund\", \"x\": \"\ufe0f"#,
        r#"api_key = \"Zx8vQ2mN\u0037pL4kund\" and api_key = "Qw3rTy8uI9oP2aSd""#,
    ] {
        let mut document = json!({"messages": [{"role": "tool", "content": text}]});
        let masked = fixture.mask(&mut document);
        let output = document.to_string();
        assert!(!masked.vault.is_empty(), "{text}");
        for item in &masked.vault {
            assert!(
                output.contains(&item.token),
                "{} missing from {output}",
                item.token
            );
        }
        for secret in ["Zx8vQ2mN", "pL4kund", "Qw3rTy8u"] {
            assert!(!output.contains(secret), "{secret} in {output}");
        }
        let restored = fixture.unmask(
            document["messages"][0]["content"].as_str().unwrap(),
            &masked,
        );
        assert!(restored.contains("Zx8vQ2mN"), "{restored}");
    }
}
