//! A personal value placed anywhere a request can carry it (a string, an object key, a bare
//! number, JSON inside a string at any depth, cut-off JSON, arrays, keys given twice, some of
//! its characters written as `\u` escapes) never leaves `JsonMasker` unmasked, is reported
//! with its entity, and comes back when the placeholders are unmasked.

use std::collections::HashMap;
use std::sync::LazyLock;

use atdp_detect::*;
use atdp_policies::*;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::Value;

/// A value each detector finds in plain text, with its entity.
const VALUES: &[(&str, &str)] = &[
    ("EMAIL_ADDRESS", "jane.doe@example.com"),
    ("CREDIT_CARD", "4111 1111 1111 1111"),
    ("CREDIT_CARD", "4111111111111111"),
    ("CREDIT_CARD", "5555555555554444"),
    ("IBAN_CODE", "DE89 3704 0044 0532 0130 00"),
    ("PHONE_NUMBER", "+44 20 7946 0958"),
    ("US_SSN", "536-22-1234"),
    ("SECRET", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"),
    ("SECRET", "AKIAIOSFODNN7EXAMPLE"),
    ("IP_ADDRESS", "203.0.113.42"),
    ("IP_ADDRESS", "2001:db8::8a2e:370:7334"),
    ("PROJECT_CODENAME", "bluebird"),
];

static SCANNER: LazyLock<Scanner> = LazyLock::new(|| {
    let config = DetectionConfig {
        custom: vec![CustomEntity {
            name: "PROJECT_CODENAME".into(),
            matcher: CustomMatch::Words {
                words: vec!["bluebird".into()],
                case_sensitive: false,
            },
            score: 0.9,
            context: ContextWords::default(),
        }],
        ..DetectionConfig::default()
    };
    Scanner::with_config(&config, None).unwrap()
});

static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("acme");
    keys
});

/// Where the value sits at the bottom.
#[derive(Debug, Clone, Copy)]
enum Leaf {
    /// Inside a string value, between words.
    Text,
    /// As an object key.
    Key,
    /// As a bare JSON number (digits-only values).
    Number,
}

/// How some of the value's characters are written.
#[derive(Debug, Clone, Copy)]
enum Escape {
    /// As they are.
    None,
    /// As `\uXXXX` in the JSON text (the parser of that level decodes them).
    Json,
    /// As `\uXXXX` in the string itself (a reader of the string sees the escape).
    Literal,
}

/// One level around the value, innermost first.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// An item of an array, after `before` other items.
    Array { before: usize },
    /// A member of an object, after a decoy member with the same key when `decoy`.
    Object { decoy: bool },
    /// JSON carried inside a string; `cut` drops its last character, so it no longer parses.
    Embedded { cut: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..3).prop_map(|before| Step::Array { before }),
        any::<bool>().prop_map(|decoy| Step::Object { decoy }),
        prop::bool::weighted(0.25).prop_map(|cut| Step::Embedded { cut }),
    ]
}

/// The JSON text of a string holding `content`, with the characters of `content[value]`
/// chosen by `escaped` written as `\u` escapes in the way `escape` says.
fn string_literal(
    content: &str,
    value: std::ops::Range<usize>,
    escape: Escape,
    escaped: &[bool],
) -> String {
    let mut out = String::from("\"");
    for (at, c) in content.char_indices() {
        let chosen = value.contains(&at) && escaped[(at - value.start) % escaped.len()];
        match (escape, chosen) {
            (Escape::Json, true) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            (Escape::Literal, true) => out.push_str(&format!("\\\\u{:04x}", u32::from(c))),
            // No character of the values and words used needs escaping.
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The JSON text of the whole request.
fn request(value: &str, leaf: Leaf, escape: Escape, escaped: &[bool], steps: &[Step]) -> String {
    let text = match leaf {
        Leaf::Text => {
            let content = format!("see {value} today");
            string_literal(&content, 4..4 + value.len(), escape, escaped)
        }
        Leaf::Key => format!(
            "{{{}: 1}}",
            string_literal(value, 0..value.len(), escape, escaped)
        ),
        Leaf::Number => value.to_owned(),
    };
    wrapped(text, steps)
}

/// `text`, a JSON text, inside the levels of `steps`, as the content of a message.
fn wrapped(mut text: String, steps: &[Step]) -> String {
    for step in steps {
        text = match *step {
            Step::Array { before } => {
                format!("[{}{text}, \"x\"]", "1, \"filler\", ".repeat(before))
            }
            Step::Object { decoy: false } => format!("{{\"other\": 2, \"k\": {text}}}"),
            Step::Object { decoy: true } => {
                format!("{{\"k\": \"decoy\", \"other\": 2, \"k\": {text}}}")
            }
            Step::Embedded { cut } => {
                if cut && (text.ends_with('}') || text.ends_with(']')) {
                    text.pop();
                }
                serde_json::to_string(&text).unwrap()
            }
        };
    }
    format!("{{\"model\": \"m\", \"messages\": [{{\"role\": \"tool\", \"content\": {text}}}]}}")
}

/// `text` with JSON escapes decoded, again and again, as a reader bent on it would.
fn decoded(text: &str) -> String {
    let mut text = text.to_owned();
    for _ in 0..12 {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find('\\') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let unicode = after
                .strip_prefix('u')
                .and_then(|hex| hex.get(..4))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .and_then(char::from_u32);
            match (after.chars().next(), unicode) {
                (Some('u'), Some(c)) => {
                    out.push(c);
                    rest = &after[5..];
                }
                (Some(c @ ('"' | '\\' | '/')), _) => {
                    out.push(c);
                    rest = &after[1..];
                }
                _ => {
                    out.push('\\');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        if out == text {
            break;
        }
        text = out;
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/json_masking.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_personal_value_never_leaves_unmasked_wherever_it_is_placed(
        which in 0..VALUES.len(),
        leaf in prop_oneof![Just(Leaf::Text), Just(Leaf::Key), Just(Leaf::Number)],
        escape in prop_oneof![Just(Escape::None), Just(Escape::Json), Just(Escape::Literal)],
        escaped in prop::collection::vec(any::<bool>(), 1..6),
        steps in prop::collection::vec(step(), 0..7),
    ) {
        let (entity, value) = VALUES[which];
        let digits = value.bytes().all(|b| b.is_ascii_digit());
        let leaf = match leaf {
            Leaf::Number if !digits => Leaf::Text,
            other => other,
        };
        // At most four levels of JSON inside strings.
        let mut embedded = 0;
        let steps: Vec<Step> = steps
            .into_iter()
            .filter(|s| !matches!(s, Step::Embedded { .. }) || { embedded += 1; embedded <= 4 })
            .collect();
        let text = request(value, leaf, escape, &escaped, &steps);
        let mut document: Value = serde_json::from_str(&text).unwrap();
        let policy = MaskPolicy::all(Action::Tokenize);
        let masker = JsonMasker { scanner: &SCANNER, policy: &policy, tenant: "acme", keys: &KEYS, known: None };
        let masked = masker.mask(&mut document).unwrap();
        let output = document.to_string();
        prop_assert!(!decoded(&output).contains(value), "{} left in {}", value, output);
        prop_assert!(
            masked.spans.iter().any(|(_, s)| s.entity == entity),
            "{} not reported for {}: {:?}", entity, text, masked.spans
        );
        for (path, _) in &masked.spans {
            prop_assert!(!decoded(path).contains(value), "{} in the path {}", value, path);
        }
        let vault: HashMap<String, VaultItem> =
            masked.vault.iter().map(|v| (v.token.clone(), v.clone())).collect();
        let restored = unmask(&output, "acme", &vault, &KEYS).unwrap();
        prop_assert!(decoded(&restored).contains(value), "{} not restored in {}", value, restored);
    }
}

/// A document scanned again, by the same tenant or another, is masked exactly as a scanner
/// without the cache masks it: the cache answers only for the same tenant and the same text.
#[test]
fn a_text_scanned_again_is_masked_as_the_first_time() {
    let long = |value: &str| {
        format!(
            "Customer writes: please update my record, my details are {value} and nothing else changed since last week."
        )
    };
    let source = serde_json::json!({
        "messages": [
            {"role": "user", "content": long("jane.doe@example.com")},
            {"role": "tool", "content": format!("{{\"note\": \"{}\"}}", long("4111 1111 1111 1111"))},
            {"role": "user", "content": long("no value at all")},
        ]
    });
    let uncached = Scanner::with_config(
        &DetectionConfig {
            cache_bytes: 0,
            ..DetectionConfig::default()
        },
        None,
    )
    .unwrap();
    let cached = Scanner::new(None).unwrap();
    let mut keys = KeyRing::default();
    keys.generate("acme");
    keys.generate("globex");
    let policy = MaskPolicy::all(Action::Redact);
    let masked = |scanner: &Scanner, tenant: &str| {
        let mut document = source.clone();
        let found = JsonMasker {
            scanner,
            policy: &policy,
            tenant,
            keys: &keys,
            known: None,
        }
        .mask(&mut document)
        .unwrap();
        let spans: Vec<(String, String)> = found
            .spans
            .iter()
            .map(|(path, span)| (path.clone(), span.entity.to_owned()))
            .collect();
        (document, spans)
    };
    let expected = masked(&uncached, "acme");
    assert_eq!(expected.1.len(), 2, "{:?}", expected.1);
    assert!(!expected.0.to_string().contains("jane.doe"));
    for tenant in ["acme", "acme", "globex", "acme"] {
        assert_eq!(masked(&cached, tenant), expected, "{tenant}");
    }
}

/// The joined texts of the runs of two or more adjacent text parts in `value`, JSON inside
/// strings included.
fn part_runs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => {
            fn text(item: &Value) -> Option<&str> {
                let kind = item.get("type")?.as_str()?;
                ["text", "input_text", "output_text"]
                    .contains(&kind)
                    .then(|| item.get("text")?.as_str())?
            }
            let mut run: Vec<&str> = Vec::new();
            for item in items.iter().map(Some).chain([None]) {
                match item.and_then(text) {
                    Some(part) => run.push(part),
                    None => {
                        if run.len() >= 2 {
                            out.push(run.concat());
                        }
                        run.clear();
                    }
                }
            }
            items.iter().for_each(|item| part_runs(item, out));
        }
        Value::Object(map) => map.values().for_each(|item| part_runs(item, out)),
        Value::String(text) => {
            if let Ok(inside) = serde_json::from_str::<Value>(text)
                && inside.is_array() | inside.is_object()
            {
                part_runs(&inside, out);
            }
        }
        _ => {}
    }
}

/// Values the scanner does not find on their own, as a request's masking may have found
/// them (by their context).
const KNOWN: &[(&str, &str)] = &[
    ("PHONE_NUMBER", "030 1234 5678"),
    ("PHONE_NUMBER", "4155550172"),
    ("PROJECT", "Zorblax-77"),
    ("EMAIL_ADDRESS", "jane.doe@example.com"),
];

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/json_masking.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_value_cut_across_text_parts_is_masked_once_and_restored_whole(
        which in 0..VALUES.len(),
        cuts in prop::collection::btree_set(1usize..60, 1..4),
        kind in prop_oneof![Just("text"), Just("input_text"), Just("output_text")],
        extra in any::<bool>(),
        steps in prop::collection::vec(step(), 0..5),
    ) {
        let (entity, value) = VALUES[which];
        let text = format!("see {value} today");
        // Cut points inside the value, on character boundaries.
        let mut at: Vec<usize> = cuts
            .into_iter()
            .map(|c| 4 + c % value.len())
            .filter(|&c| text.is_char_boundary(c) && c > 4)
            .collect();
        at.sort_unstable();
        at.dedup();
        prop_assume!(!at.is_empty());
        let mut parts = Vec::new();
        let mut from = 0;
        for cut in at.into_iter().chain([text.len()]) {
            let mut part = serde_json::json!({"type": kind, "text": &text[from..cut]});
            if extra {
                part["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            parts.push(part);
            from = cut;
        }
        // Cut-off JSON has no parts to read, nor has a string that holds a quoted string.
        let mut steps: Vec<Step> = steps
            .into_iter()
            .map(|s| match s { Step::Embedded { .. } => Step::Embedded { cut: false }, s => s })
            .collect();
        steps.dedup_by(|a, b| matches!((a, b), (Step::Embedded { .. }, Step::Embedded { .. })));
        let source = wrapped(Value::Array(parts).to_string(), &steps);
        let mut document: Value = serde_json::from_str(&source).unwrap();
        let policy = MaskPolicy::all(Action::Tokenize);
        let masker = JsonMasker { scanner: &SCANNER, policy: &policy, tenant: "acme", keys: &KEYS, known: None };
        let masked = masker.mask(&mut document).unwrap();
        let output = document.to_string();
        prop_assert!(!decoded(&output).contains(value), "{} left in {}", value, output);
        prop_assert_eq!(masked.vault.len(), 1, "{:?}", masked.spans);
        let token = &masked.vault[0].token;
        prop_assert_eq!(masked.vault[0].entity.as_str(), entity);
        let mut runs = Vec::new();
        part_runs(&document, &mut runs);
        prop_assert_eq!(runs.len(), 1);
        prop_assert_eq!(runs[0].matches(token.as_str()).count(), 1, "{}", runs[0]);
        prop_assert_eq!(runs[0].matches('<').count(), 1, "{}", runs[0]);
        let vault: HashMap<String, VaultItem> =
            masked.vault.iter().map(|v| (v.token.clone(), v.clone())).collect();
        let restored: Value =
            serde_json::from_str(&unmask(&output, "acme", &vault, &KEYS).unwrap()).unwrap();
        let mut runs = Vec::new();
        part_runs(&restored, &mut runs);
        prop_assert_eq!(runs, vec![text]);
        prop_assert!(masked.values.iter().any(|(v, e)| v == value && e == entity));
    }

    #[test]
    fn a_known_value_never_leaves_unmasked_wherever_it_is_placed(
        which in 0..KNOWN.len(),
        leaf in prop_oneof![Just(Leaf::Text), Just(Leaf::Key), Just(Leaf::Number)],
        escape in prop_oneof![Just(Escape::None), Just(Escape::Json), Just(Escape::Literal)],
        escaped in prop::collection::vec(any::<bool>(), 1..6),
        steps in prop::collection::vec(step(), 0..7),
        upper in any::<bool>(),
    ) {
        let (entity, value) = KNOWN[which];
        let digits = value.bytes().all(|b| b.is_ascii_digit());
        let leaf = match leaf {
            Leaf::Number if !digits => Leaf::Text,
            other => other,
        };
        let mut embedded = 0;
        let steps: Vec<Step> = steps
            .into_iter()
            .filter(|s| !matches!(s, Step::Embedded { .. }) || { embedded += 1; embedded <= 4 })
            .collect();
        // Found in the request in one case, repeated in another.
        let sent = if upper { value.to_ascii_uppercase() } else { value.to_owned() };
        let text = request(&sent, leaf, escape, &escaped, &steps);
        let mut document: Value = serde_json::from_str(&text).unwrap();
        let known = KnownValues::new([(value, entity)]).unwrap();
        let policy = MaskPolicy::all(Action::Tokenize);
        let masker = JsonMasker {
            scanner: &SCANNER, policy: &policy, tenant: "acme", keys: &KEYS, known: Some(&known),
        };
        let masked = masker.mask(&mut document).unwrap();
        let output = document.to_string();
        prop_assert!(
            !decoded(&output).to_ascii_lowercase().contains(&value.to_ascii_lowercase()),
            "{} left in {}", value, output
        );
        let vault: HashMap<String, VaultItem> =
            masked.vault.iter().map(|v| (v.token.clone(), v.clone())).collect();
        let restored = unmask(&output, "acme", &vault, &KEYS).unwrap();
        prop_assert!(decoded(&restored).contains(&sent), "{} not restored in {}", sent, restored);
    }
}
