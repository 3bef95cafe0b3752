use proptest::prelude::*;

use super::*;
use atdp_detect::Scanner;

fn ring() -> KeyRing {
    let mut ring = KeyRing::default();
    ring.generate("acme");
    ring
}

fn vault_map(masked: &Masked) -> HashMap<String, VaultItem> {
    masked
        .vault
        .iter()
        .map(|v| (v.token.clone(), v.clone()))
        .collect()
}

#[test]
fn every_action() {
    let keys = ring();
    let scanner = Scanner::new(None).unwrap();
    let text = "mail jane@example.com, card 4111 1111 1111 1111, ssn 536-22-1234, ip 203.0.113.42";
    let spans = scanner.scan(text);
    let policy = MaskPolicy {
        default: Action::Redact,
        per_entity: HashMap::from([
            ("EMAIL_ADDRESS".to_owned(), Action::Tokenize),
            ("CREDIT_CARD".to_owned(), Action::Mask),
            ("US_SSN".to_owned(), Action::Hash),
            ("IP_ADDRESS".to_owned(), Action::Allow),
        ]),
    };
    let masked = mask(text, &spans, &policy, "acme", &keys).unwrap();
    let token = keys
        .token("acme", "EMAIL_ADDRESS", "jane@example.com")
        .unwrap();
    let hash = keys.keyed_hash("acme", "US_SSN", "536-22-1234").unwrap();
    assert_eq!(
        masked.text,
        format!("mail {token}, card ***************1111, ssn {hash}, ip 203.0.113.42")
    );
    assert_eq!(masked.vault.len(), 1);
    assert_eq!(
        masked.spans.iter().map(|s| s.action).collect::<Vec<_>>(),
        [Action::Tokenize, Action::Mask, Action::Hash, Action::Allow]
    );
    assert_eq!(
        unmask(&masked.text, "acme", &vault_map(&masked), &keys).unwrap(),
        format!("mail jane@example.com, card ***************1111, ssn {hash}, ip 203.0.113.42")
    );
}

#[test]
fn masking_fails_closed() {
    let keys = ring();
    let scanner = Scanner::new(None).unwrap();
    let text = "mail jane@example.com";
    let spans = scanner.scan(text);
    // No keys for this tenant: an error, never the original text.
    assert!(
        mask(
            text,
            &spans,
            &MaskPolicy::all(Action::Tokenize),
            "unknown",
            &keys
        )
        .is_err()
    );
    let bad = [Span {
        start: 3,
        end: 100,
        entity: "EMAIL_ADDRESS",
        score: 1.0,
    }];
    assert!(mask(text, &bad, &MaskPolicy::all(Action::Redact), "acme", &keys).is_err());
}

#[test]
fn erased_key_cannot_unmask() {
    let mut keys = ring();
    let scanner = Scanner::new(None).unwrap();
    let text = "mail jane@example.com";
    let masked = mask(
        text,
        &scanner.scan(text),
        &MaskPolicy::all(Action::Tokenize),
        "acme",
        &keys,
    )
    .unwrap();
    keys.erase_tenant("acme");
    assert!(unmask(&masked.text, "acme", &vault_map(&masked), &keys).is_err());
}

const PII: &[&str] = &[
    "jane.doe@example.com",
    "+44 20 7946 0958",
    "4111 1111 1111 1111",
    "536-22-1234",
    "DE89 3704 0044 0532 0130 00",
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
];

prop_compose! {
    fn text_with_pii()(
        parts in proptest::collection::vec((r"[a-zA-Z ,.é<>!]{0,40}", proptest::option::of(0..PII.len())), 1..8)
    ) -> String {
        let mut text = String::new();
        for (filler, pii) in parts {
            text.push_str(&filler);
            text.push(' ');
            if let Some(i) = pii {
                text.push_str(PII[i]);
                text.push(' ');
            }
        }
        text
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn mask_then_unmask_is_identity(text in text_with_pii(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let keys = ring();
        let scanner = Scanner::new(None).unwrap();
        let masked = mask(&text, &scanner.scan(&text), &MaskPolicy::all(Action::Tokenize), "acme", &keys).unwrap();
        for pii in PII {
            prop_assert!(!masked.text.contains(pii), "{pii} left in {}", masked.text);
        }
        let vault = vault_map(&masked);
        prop_assert_eq!(&unmask(&masked.text, "acme", &vault, &keys).unwrap(), &text);

        // The same through a stream cut at random character boundaries.
        let boundaries: Vec<usize> = masked.text.char_indices().map(|(i, _)| i).collect();
        let mut points: Vec<usize> = cuts.iter().map(|c| boundaries[c.index(boundaries.len())]).collect();
        points.sort_unstable();
        points.dedup();
        let mut stream = StreamUnmasker::new();
        let mut out = String::new();
        let mut from = 0;
        for point in points.into_iter().chain([masked.text.len()]) {
            out.push_str(&stream.push(&masked.text[from..point], "acme", &vault, &keys).unwrap());
            from = point;
        }
        out.push_str(&stream.finish("acme", &vault, &keys).unwrap());
        prop_assert_eq!(out, text);
    }
}

#[test]
fn spellings_of_one_value_share_a_placeholder_and_restore_to_the_first() {
    let keys = ring();
    let scanner = Scanner::new(None).unwrap();
    let text = "card 4111 1111 1111 1111, again 4111111111111111; mail jane%40example.com or jane@example.com";
    let spans = scanner.scan(text);
    let masked = mask(
        text,
        &spans,
        &MaskPolicy::all(Action::Tokenize),
        "acme",
        &keys,
    )
    .unwrap();
    let card = keys
        .token("acme", "CREDIT_CARD", "4111111111111111")
        .unwrap();
    let mail = keys
        .token("acme", "EMAIL_ADDRESS", "jane@example.com")
        .unwrap();
    assert_eq!(
        masked.text,
        format!("card {card}, again {card}; mail {mail} or {mail}")
    );
    assert_eq!(masked.vault.len(), 2);
    assert_eq!(
        unmask(&masked.text, "acme", &vault_map(&masked), &keys).unwrap(),
        "card 4111 1111 1111 1111, again 4111 1111 1111 1111; \
         mail jane%40example.com or jane%40example.com"
    );
}

#[test]
fn policies_that_leave_the_same_types_have_one_name_for_them() {
    let policy = |default: Action, entities: &[(&str, Action)]| MaskPolicy {
        default,
        per_entity: entities
            .iter()
            .map(|(entity, action)| ((*entity).to_owned(), *action))
            .collect(),
    };
    let a = policy(
        Action::Tokenize,
        &[
            ("URL", Action::Allow),
            ("ORDER_ID", Action::Allow),
            ("SECRET", Action::Redact),
        ],
    );
    let b = policy(
        Action::Redact,
        &[("ORDER_ID", Action::Allow), ("URL", Action::Allow)],
    );
    assert_eq!(a.allowed_name(), b.allowed_name());
    let c = policy(Action::Tokenize, &[("URL", Action::Allow)]);
    assert_ne!(a.allowed_name(), c.allowed_name());
    // Everything left but what is listed.
    let d = policy(Action::Allow, &[("URL", Action::Tokenize)]);
    let e = policy(
        Action::Allow,
        &[("URL", Action::Redact), ("IBAN", Action::Allow)],
    );
    assert_eq!(d.allowed_name(), e.allowed_name());
    assert_ne!(d.allowed_name(), c.allowed_name());
}
