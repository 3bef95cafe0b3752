use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;
use crate::mask::{Action, unmask};

/// A scanner, a tenant's keys and one action for everything.
pub(super) struct Fixture {
    scanner: Scanner,
    keys: KeyRing,
    pub(super) policy: MaskPolicy,
}

impl Fixture {
    pub(super) fn new(action: Action) -> Fixture {
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
            known: None,
        }
    }

    pub(super) fn mask(&self, document: &mut Value) -> JsonMasked {
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

    pub(super) fn token(&self, entity: &str, value: &str) -> String {
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
        known: None,
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
fn a_value_that_only_its_decoded_spelling_shows_is_masked_whole_whatever_the_raw_text_shows() {
    let fixture = Fixture::new(Action::Tokenize);
    let secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
    // Every fourth character escaped, once or twice: as it stands the text shows a place
    // name `sk` and no secret; decoded, it shows the secret, which must be masked whole.
    for backslashes in ["\\", "\\\\"] {
        let escaped: String = secret
            .chars()
            .enumerate()
            .map(|(i, c)| match i % 4 {
                3 => format!("{backslashes}u{:04x}", u32::from(c)),
                _ => c.to_string(),
            })
            .collect();
        for text in [
            format!(r#"{{"{escaped}": "x", "note": "ca"#),
            format!(r#"{{"key": "{escaped}", "n"#),
            format!("the key is {escaped} today"),
        ] {
            let mut document = json!({"messages": [{"role": "tool", "content": text}]});
            let masked = fixture.mask(&mut document);
            let output = document.to_string();
            let mut seen = output.clone();
            while let Cow::Owned(decoded) = escape::decode(&seen) {
                seen = decoded;
            }
            assert!(!seen.contains("abc"), "{text} -> {output}");
            assert!(!seen.contains("6789"), "{text} -> {output}");
            assert_eq!(entities(&masked), ["SECRET"], "{text} -> {output}");
            for item in &masked.vault {
                assert!(
                    output.contains(&item.token),
                    "{} not in {output}",
                    item.token
                );
            }
            let restored = fixture.unmask(&output, &masked);
            assert!(restored.contains(secret), "{restored}");
        }
    }
}

#[test]
fn in_a_run_of_text_parts_what_the_decoded_text_shows_is_masked_whole() {
    let fixture = Fixture::new(Action::Tokenize);
    for (parts, clear) in [
        // A raw finding in a part does not hide the longer value its decoded text shows.
        (
            [
                "the key is ",
                r"sk-proj-abcdefghijklmnopqrstuvwxyz012345\u0041q7Rt9Lm2Xv8Kp3Zw5Ny1 today",
            ],
            "q7Rt9Lm2Xv8Kp3Zw5Ny1",
        ),
        (
            ["mail ", r"margaretthatcher\u002ex@example.com please"],
            "margaretthatcher",
        ),
        // A context word that one part spells with an escape counts for the next part.
        (
            ["my api\\u005fkey = ", "Zx8vQ2mN7pL4kund"],
            "Zx8vQ2mN7pL4kund",
        ),
    ] {
        let mut document = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": parts[0]},
            {"type": "text", "text": parts[1]},
        ]}]});
        let masked = fixture.mask(&mut document);
        let output = document.to_string();
        assert!(!output.contains(clear), "{parts:?} -> {output}");
        for item in &masked.vault {
            assert!(
                output.contains(&item.token),
                "{} not in {output}",
                item.token
            );
        }
    }
}

#[test]
fn a_value_masked_in_its_raw_spelling_is_known_in_its_decoded_spelling_too() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"content": r"my api_key=Zx8vQ2mN\u0037pL4kund"});
    let masked = fixture.mask(&mut document);
    assert!(!document.to_string().contains("Zx8vQ2mN"), "{document}");
    let known = KnownValues::new(masked.values.iter()).unwrap();
    let mut reply = json!({"content": "Your key Zx8vQ2mN7pL4kund was rotated."});
    fixture.masker_knowing(&known).mask(&mut reply).unwrap();
    assert!(!reply.to_string().contains("Zx8vQ2mN"), "{reply}");
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

/// The texts of the parts of `parts`, joined as the provider reads them.
fn joined(parts: &Value) -> String {
    parts
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect()
}

#[test]
fn a_value_split_across_adjacent_text_parts_is_masked_as_one_value() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "write to ja"},
        {"type": "text", "text": "ne@example.com please", "cache_control": {"type": "ephemeral"}}
    ]}]});
    let masked = fixture.mask(&mut document);
    let token = fixture.token("EMAIL_ADDRESS", "jane@example.com");
    let content = &document["messages"][0]["content"];
    // One token, in the part where the value starts; its piece in the next part is gone.
    assert_eq!(content[0]["text"], format!("write to {token}"));
    assert_eq!(content[1]["text"], " please");
    assert_eq!(content[1]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(paths(&masked), ["messages[0].content[0].text"]);
    assert_eq!(entities(&masked), ["EMAIL_ADDRESS"]);
    assert_eq!(masked.vault.len(), 1);
    let text = joined(content);
    assert_eq!(text.matches("<EMAIL_ADDRESS_").count(), 1, "{text}");
    assert_eq!(
        fixture.unmask(&text, &masked),
        "write to jane@example.com please"
    );
    let values: Vec<(&str, &str)> = masked.values.iter().collect();
    assert_eq!(values, [("jane@example.com", "EMAIL_ADDRESS")]);
}

#[test]
fn a_value_split_between_a_text_and_a_refusal_part_is_masked_as_one_value() {
    let fixture = Fixture::new(Action::Tokenize);
    let parts = json!([
        {"type": "text", "text": "I wrote to ja"},
        {"type": "refusal", "refusal": "ne@example.com and will not again"}
    ]);
    let mut document = json!({
        "messages": [{"role": "assistant", "content": parts.clone()}],
        "echo": parts.to_string(),
    });
    let masked = fixture.mask(&mut document);
    let token = fixture.token("EMAIL_ADDRESS", "jane@example.com");
    let expected = json!([
        {"type": "text", "text": format!("I wrote to {token}")},
        {"type": "refusal", "refusal": " and will not again"}
    ]);
    assert_eq!(document["messages"][0]["content"], expected);
    let inside: Value = serde_json::from_str(document["echo"].as_str().unwrap()).unwrap();
    assert_eq!(inside, expected);
    assert_eq!(
        paths(&masked),
        ["messages[0].content[0].text", "echo#[0].text"]
    );
    // A refusal part's own text is read like a text part's.
    let mut document = json!({"content": [
        {"type": "refusal", "refusal": "not for "},
        {"type": "refusal", "refusal": "jane@example.com"}
    ]});
    let masked = fixture.mask(&mut document);
    assert_eq!(document["content"][1]["refusal"], token);
    assert_eq!(paths(&masked), ["content[1].refusal"]);
}

#[test]
fn a_context_word_in_one_part_counts_for_the_value_in_the_next() {
    let fixture = Fixture::new(Action::Tokenize);
    // The OpenAI Responses API's parts, at any depth: here inside a tool result's JSON.
    let parts = json!([
        {"type": "input_text", "text": "Call my mobile:"},
        {"type": "input_text", "text": "0612345678"}
    ]);
    let mut document = json!({
        "input": [{"role": "user", "content": parts.clone()}],
        "tool_output": parts.to_string(),
    });
    let masked = fixture.mask(&mut document);
    let token = fixture.token("PHONE_NUMBER", "0612345678");
    let expected = json!([
        {"type": "input_text", "text": "Call my mobile:"},
        {"type": "input_text", "text": token}
    ]);
    assert_eq!(document["input"][0]["content"], expected);
    let inside: Value = serde_json::from_str(document["tool_output"].as_str().unwrap()).unwrap();
    assert_eq!(inside, expected);
    assert_eq!(
        paths(&masked),
        ["input[0].content[1].text", "tool_output#[1].text"]
    );
    // Each part alone holds nothing the scanner reports.
    let mut alone = json!({"a": "Call my mobile:", "b": "0612345678"});
    assert!(fixture.mask(&mut alone).spans.is_empty());
}

#[test]
fn a_value_over_many_parts_leaves_the_parts_it_covers_empty() {
    let fixture = Fixture::new(Action::Redact);
    // Anthropic `text` blocks and the Responses API's `output_text`; another kind of part
    // ends a run, as it does for the provider.
    let letters: Vec<Value> = "jane@example.com"
        .chars()
        .map(|c| json!({"type": "text", "text": c.to_string()}))
        .collect();
    let mut content = vec![json!({"type": "text", "text": "to "})];
    content.extend(letters);
    content.push(json!({"type": "text", "text": " or ", "citations": null}));
    content.push(
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}),
    );
    content.push(json!({"type": "output_text", "text": "bob@exa", "annotations": []}));
    content.push(json!({"type": "output_text", "text": "mple.com", "annotations": []}));
    let mut document = json!({"messages": [{"role": "assistant", "content": content}]});
    let masked = fixture.mask(&mut document);
    let content = document["messages"][0]["content"].as_array().unwrap();
    assert_eq!(content[0]["text"], "to ");
    assert_eq!(content[1]["text"], "[EMAIL_ADDRESS]");
    for part in &content[2..17] {
        assert_eq!(part["text"], "", "{part}");
    }
    assert_eq!(content[17]["text"], " or ");
    assert_eq!(content[17]["citations"], Value::Null);
    assert_eq!(content[19]["text"], "[EMAIL_ADDRESS]");
    assert_eq!(content[20]["text"], "");
    assert_eq!(content[20]["annotations"], json!([]));
    assert_eq!(
        paths(&masked),
        [
            "messages[0].content[1].text",
            "messages[0].content[19].text"
        ]
    );
}

#[test]
fn every_action_masks_a_split_value_once_and_allow_reports_it_once() {
    let document = json!({"content": [
        {"type": "text", "text": "card 4111 1111 "},
        {"type": "text", "text": "1111 1111 and x\\u0040example.com"}
    ]});
    let joined_after = |action: Action| {
        let fixture = Fixture::new(action);
        let mut copy = document.clone();
        let masked = fixture.mask(&mut copy);
        (joined(&copy["content"]), masked)
    };
    let (text, masked) = joined_after(Action::Redact);
    assert_eq!(text, "card [CREDIT_CARD] and [EMAIL_ADDRESS]");
    assert_eq!(entities(&masked), ["CREDIT_CARD", "EMAIL_ADDRESS"]);
    let (text, _) = joined_after(Action::Mask);
    assert!(text.starts_with("card ***************1111 and "), "{text}");
    let (text, masked) = joined_after(Action::Allow);
    assert_eq!(text, joined(&document["content"]));
    assert_eq!(entities(&masked), ["CREDIT_CARD", "EMAIL_ADDRESS"]);
    assert!(masked.values.is_empty());
    let (_, masked) = joined_after(Action::Allow);
    assert_eq!(
        paths(&masked),
        ["content[0].text", "content[1].text"],
        "{:?}",
        masked.spans
    );
}

#[test]
fn placeholders_a_run_wrote_are_not_masked_again_in_its_parts() {
    let fixture = Fixture::new(Action::Tokenize);
    // The part's text is JSON, walked after the run masked it: the secret's placeholder after
    // `api_key` must stay the one in the vault.
    let mut document = json!({"content": [
        {"type": "text", "text": "{\"note\": \"api_key = \\\"Zx8vQ2mN7p"},
        {"type": "text", "text": "L4kund\\\"\"}"}
    ]});
    let masked = fixture.mask(&mut document);
    let output = joined(&document["content"]);
    assert!(
        !output.contains("Zx8vQ2mN") && !output.contains("L4kund"),
        "{output}"
    );
    assert!(!masked.vault.is_empty());
    for item in &masked.vault {
        assert!(
            output.contains(&item.token),
            "{} missing from {output}",
            item.token
        );
    }
    assert!(
        fixture
            .unmask(&output, &masked)
            .contains("Zx8vQ2mN7pL4kund")
    );
}

#[test]
fn a_long_run_of_parts_is_read_whole() {
    let fixture = Fixture::new(Action::Redact);
    let mut content: Vec<Value> = (0..20_000)
        .map(|i| json!({"type": "text", "text": format!("w{i} ")}))
        .collect();
    content.push(json!({"type": "text", "text": "write to ja"}));
    content.push(json!({"type": "text", "text": "ne@example.com"}));
    let mut document = json!({ "content": content });
    let masked = fixture.mask(&mut document);
    assert_eq!(paths(&masked), ["content[20000].text"]);
    assert_eq!(
        document["content"][20000]["text"],
        "write to [EMAIL_ADDRESS]"
    );
    assert_eq!(document["content"][20001]["text"], "");
}

#[test]
fn a_value_split_across_parts_and_hidden_by_escapes_is_masked_as_one_value() {
    let fixture = Fixture::new(Action::Redact);
    for (first, second) in [
        ("write to ja", r"ne\u0040example.com please"),
        (r"write to jane\u00", "40example.com please"),
    ] {
        let mut document = json!({"content": [
            {"type": "text", "text": first},
            {"type": "text", "text": second}
        ]});
        let masked = fixture.mask(&mut document);
        assert_eq!(
            joined(&document["content"]),
            "write to [EMAIL_ADDRESS] please",
            "{first} | {second}"
        );
        assert_eq!(paths(&masked), ["content[0].text"]);
        let values: Vec<(&str, &str)> = masked.values.iter().collect();
        assert!(
            values.contains(&("jane@example.com", "EMAIL_ADDRESS")),
            "{values:?}"
        );
    }
}

impl Fixture {
    fn masker_knowing<'a>(&'a self, known: &'a KnownValues) -> JsonMasker<'a> {
        JsonMasker {
            known: Some(known),
            ..self.masker()
        }
    }
}

#[test]
fn the_originals_of_masked_values_are_kept_and_never_printed() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({
        "messages": [{"role": "user", "content": "mail jane@example.com or jane@example.com"}],
        "card": 4111111111111111_u64,
        "note": r"call bob\u0040example.com"
    });
    let masked = fixture.mask(&mut document);
    let values: Vec<(&str, &str)> = masked.values.iter().collect();
    assert_eq!(
        values,
        [
            ("4111111111111111", "CREDIT_CARD"),
            ("bob@example.com", "EMAIL_ADDRESS"),
            ("jane@example.com", "EMAIL_ADDRESS"),
        ]
    );
    let printed = format!("{masked:?}");
    assert!(printed.contains("FoundValues { count: 3 }"), "{printed}");
    assert!(!printed.contains("jane@") && !printed.contains("4111111111111111"));
    // What `allow` leaves in place is not a masked value.
    let mut policy = MaskPolicy::all(Action::Tokenize);
    policy
        .per_entity
        .insert("EMAIL_ADDRESS".into(), Action::Allow);
    let masker = JsonMasker {
        policy: &policy,
        ..fixture.masker()
    };
    let found = masker
        .mask(&mut json!({"a": "jane@example.com 4111111111111111"}))
        .unwrap();
    let values: Vec<(&str, &str)> = found.values.iter().collect();
    assert_eq!(values, [("4111111111111111", "CREDIT_CARD")]);
}

#[test]
fn a_value_found_by_its_context_is_masked_wherever_it_is_repeated() {
    let fixture = Fixture::new(Action::Tokenize);
    // The request: the phone number is found after "mobile".
    let mut request = json!({"messages": [{"role": "user", "content": "my mobile: 0612345678"}]});
    let found = fixture.mask(&mut request).values;
    assert_eq!(
        found.iter().collect::<Vec<_>>(),
        [("0612345678", "PHONE_NUMBER")]
    );
    // The reply repeats it without a context word, in a string, a key, JSON inside a string
    // and behind an escape.
    let reply = json!({
        "content": "Sure, I will use 0612345678 from now on.",
        "tool": "{\"numbers\": [\"0612345678\"]}",
        "0612345678": "primary",
        "escaped": r"0612\u003345678"
    });
    let mut alone = reply.clone();
    assert!(fixture.mask(&mut alone).spans.is_empty(), "{alone}");
    let known = KnownValues::new(found.iter()).unwrap();
    let mut document = reply.clone();
    let masked = fixture.masker_knowing(&known).mask(&mut document).unwrap();
    let token = fixture.token("PHONE_NUMBER", "0612345678");
    assert_eq!(
        document["content"],
        format!("Sure, I will use {token} from now on.")
    );
    assert_eq!(document["tool"], format!("{{\"numbers\":[\"{token}\"]}}"));
    assert_eq!(document[token.as_str()], "primary");
    assert_eq!(document["escaped"], token);
    assert!(!document.to_string().contains("1234"), "{document}");
    assert!(masked.spans.iter().all(|(_, s)| s.entity == "PHONE_NUMBER"));
    assert_eq!(masked.spans.len(), 4, "{:?}", masked.spans);
}

#[test]
fn known_values_match_whole_tokens_in_any_ascii_case_and_numbers() {
    let fixture = Fixture::new(Action::Redact);
    let known = KnownValues::new([
        ("Jan", "PERSON"),
        ("415 555 0172", "PHONE_NUMBER"),
        ("12345678", "ACCOUNT"),
    ])
    .unwrap();
    let mut document = json!({
        "a": "January: jan and JAN wrote",
        "b": "1415 555 01729 is not 415 555 0172",
        "c": 12345678,
        "d": 123456789,
        "e": "{\"n\": 12345678.0}"
    });
    fixture.masker_knowing(&known).mask(&mut document).unwrap();
    assert_eq!(document["a"], "January: [PERSON] and [PERSON] wrote");
    assert_eq!(document["b"], "1415 555 01729 is not [PHONE_NUMBER]");
    assert_eq!(document["c"], "[ACCOUNT]");
    assert_eq!(document["d"], 123456789);
    // `.` ends a token: the digits before it are the value.
    assert_eq!(document["e"], "{\"n\":\"[ACCOUNT].0\"}");
}

#[test]
fn a_known_value_and_a_finding_that_overlap_are_masked_as_one() {
    let fixture = Fixture::new(Action::Tokenize);
    let known = KnownValues::new([("Jane Doe", "PERSON")]).unwrap();
    let mut document = json!({"a": "mail Jane Doe@example.com now", "b": "hi Jane Doe"});
    let masked = fixture.masker_knowing(&known).mask(&mut document).unwrap();
    // The longer span's entity, over both.
    let email = fixture.token("EMAIL_ADDRESS", "Jane Doe@example.com");
    assert_eq!(document["a"], format!("mail {email} now"));
    let person = fixture.token("PERSON", "Jane Doe");
    assert_eq!(document["b"], format!("hi {person}"));
    assert_eq!(entities(&masked), ["EMAIL_ADDRESS", "PERSON"]);
}

#[test]
fn a_known_value_whose_action_is_allow_is_left() {
    let fixture = Fixture::new(Action::Redact);
    let mut policy = MaskPolicy::all(Action::Redact);
    policy.per_entity.insert("PERSON".into(), Action::Allow);
    let known = KnownValues::new([("Jane Doe", "PERSON"), ("Bluebird", "PROJECT")]).unwrap();
    let masker = JsonMasker {
        policy: &policy,
        ..fixture.masker_knowing(&known)
    };
    let mut document = json!({"a": "Jane Doe of Bluebird"});
    let masked = masker.mask(&mut document).unwrap();
    assert_eq!(document["a"], "Jane Doe of [PROJECT]");
    let values: Vec<(&str, &str)> = masked.values.iter().collect();
    assert_eq!(values, [("Bluebird", "PROJECT")]);
}

#[test]
fn a_known_value_split_across_text_parts_is_masked_as_one() {
    let fixture = Fixture::new(Action::Redact);
    let known = KnownValues::new([("Jane Doe", "PERSON")]).unwrap();
    let mut document = json!({"content": [
        {"type": "output_text", "text": "Dear Ja"},
        {"type": "output_text", "text": "ne Doe,"}
    ]});
    fixture.masker_knowing(&known).mask(&mut document).unwrap();
    assert_eq!(document["content"][0]["text"], "Dear [PERSON]");
    assert_eq!(document["content"][1]["text"], ",");
}

#[test]
fn known_values_never_enter_the_scanner_cache() {
    let fixture = Fixture::new(Action::Redact);
    let known = KnownValues::new([("Bluebird", "PROJECT")]).unwrap();
    // Long enough for the scanner's cache.
    let text = format!(
        "{} Bluebird ships on Monday.",
        "The weekly status of the team. ".repeat(6)
    );
    let mut first = json!({ "a": text });
    fixture.masker_knowing(&known).mask(&mut first).unwrap();
    assert!(
        first["a"]
            .as_str()
            .unwrap()
            .ends_with("[PROJECT] ships on Monday.")
    );
    let mut again = json!({ "a": text });
    let masked = fixture.mask(&mut again);
    assert!(masked.spans.is_empty(), "{:?}", masked.spans);
    assert_eq!(again["a"], text);
}

#[test]
fn allow_reports_a_value_in_json_inside_a_part_once() {
    let fixture = Fixture::new(Action::Allow);
    let original = json!({"content": [
        {"type": "text", "text": "{\"owner\": \"jane@example.com\"}"},
        {"type": "text", "text": "and more"}
    ]});
    let mut document = original.clone();
    let masked = fixture.mask(&mut document);
    assert_eq!(document, original);
    assert_eq!(paths(&masked), ["content[0].text"]);
    // Masked, the JSON inside the part stays JSON.
    let fixture = Fixture::new(Action::Redact);
    let mut document = original;
    fixture.mask(&mut document);
    assert_eq!(
        document["content"][0]["text"],
        "{\"owner\": \"[EMAIL_ADDRESS]\"}"
    );
}
