//! Values whose context is their object key: `{"password": "…"}` read alone is a random
//! string; after its key it is a secret.

use serde_json::json;

use super::tests::Fixture;
use crate::mask::Action;

const SECRET: &str = "Zx8vQ2mLp9Rt4KwB";

#[test]
fn a_secret_under_a_credential_key_is_masked_wherever_the_object_is() {
    let fixture = Fixture::new(Action::Tokenize);
    let token = fixture.token("SECRET", SECRET);
    let arguments = json!({"db_password": SECRET, "host": "db1"}).to_string();
    let mut document = json!({
        "messages": [
            {"role": "tool", "content": json!({"password": SECRET}).to_string()},
            {"role": "assistant", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "connect", "arguments": arguments}}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "login",
                 "input": {"apiKey": SECRET, "user": "ops"}}
            ]}
        ]
    });
    fixture.mask(&mut document);
    let text = document.to_string();
    assert!(!text.contains(SECRET), "{text}");
    assert_eq!(text.matches(&token).count(), 3, "{text}");
    // What is not a secret stays.
    assert!(text.contains("db1") && text.contains("ops"), "{text}");
}

#[test]
fn a_bare_number_under_a_phone_or_ssn_key_is_masked() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"customer": {"mobile": "4155550172", "ssn": "900-12-3456"}});
    let masked = fixture.mask(&mut document);
    let text = document.to_string();
    assert!(!text.contains("4155550172"), "{text}");
    assert!(!text.contains("900-12-3456"), "{text}");
    let mut entities: Vec<&str> = masked
        .spans
        .iter()
        .map(|(_, s)| s.entity.as_str())
        .collect();
    entities.sort_unstable();
    assert_eq!(entities, ["PHONE_NUMBER", "US_SSN"]);
}

#[test]
fn the_same_values_under_other_keys_stay_as_they_are() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"build": SECRET, "count": "4155550172", "code": "900-12-3456"});
    let before = document.clone();
    let masked = fixture.mask(&mut document);
    assert_eq!(document, before);
    assert!(masked.spans.is_empty());
}

#[test]
fn a_value_found_after_its_key_is_masked_wherever_else_the_document_holds_it() {
    let fixture = Fixture::new(Action::Tokenize);
    let token = fixture.token("SECRET", SECRET);
    // Met first where nothing tells it is a secret (and remembered there as clean), then
    // under a credential key, then quoted in a message.
    let mut document = json!({"messages": [
        {"role": "tool", "content": json!({"build": SECRET}).to_string()},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "login", "arguments": json!({"token": SECRET}).to_string()}}]},
        {"role": "user", "content": format!("it is {SECRET}, right?")}
    ]});
    let masked = fixture.mask(&mut document);
    let text = document.to_string();
    assert!(!text.contains(SECRET), "{text}");
    assert_eq!(text.matches(&token).count(), 3, "{text}");
    assert_eq!(masked.vault.len(), 1);
    // Each placeholder is recorded once, where it was written.
    assert_eq!(masked.spans.len(), 3, "{:?}", masked.spans);
}

#[test]
fn keys_are_read_as_words_and_values_in_arrays_and_name_value_pairs_have_their_context() {
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({
        "employeeSSN": "536221234",
        "SECRET_KEY": SECRET,
        "backup_passwords": ["Qm4vT8xL2pR9wK7z"],
        "env": [{"name": "DB_PASSWORD", "value": "Hn5cW2yJ8rT4mQ6v"}, {"name": "HOST", "value": "db1"}]
    });
    let masked = fixture.mask(&mut document);
    let text = document.to_string();
    for value in ["536221234", SECRET, "Qm4vT8xL2pR9wK7z", "Hn5cW2yJ8rT4mQ6v"] {
        assert!(!text.contains(value), "{value}: {text}");
    }
    assert!(text.contains("db1"), "{text}");
    assert_eq!(masked.spans.len(), 4, "{:?}", masked.spans);
}

#[test]
fn a_value_found_after_its_key_is_left_everywhere_when_its_entity_is_allowed() {
    let mut fixture = Fixture::new(Action::Tokenize);
    fixture.policy = crate::mask::MaskPolicy::all(Action::Allow);
    let mut document = json!({"password": SECRET, "note": SECRET});
    let before = document.clone();
    fixture.mask(&mut document);
    assert_eq!(document, before);
}

/// A type the policy leaves in the clear (an order reference, for the model to use) never
/// carries a value of a type it masks: a card written as an allowed reference is masked as a
/// card.
#[test]
fn a_masked_value_inside_an_allowed_one_is_masked() {
    use atdp_detect::{CustomEntity, CustomMatch, DetectionConfig, Scanner};

    use crate::mask::MaskPolicy;
    use crate::vault::KeyRing;

    let config = DetectionConfig {
        custom: vec![CustomEntity {
            name: "ORDER_ID".into(),
            matcher: CustomMatch::Pattern(r"ref [0-9 ]{8,40}[0-9]".into()),
            score: 1.0,
            context: Default::default(),
        }],
        ..Default::default()
    };
    let scanner = Scanner::with_config(&config, None).unwrap();
    let mut keys = KeyRing::default();
    keys.generate("acme");
    let policy = MaskPolicy {
        default: Action::Tokenize,
        per_entity: [("ORDER_ID".to_owned(), Action::Allow)].into(),
    };
    let masker = super::JsonMasker {
        scanner: &scanner,
        policy: &policy,
        tenant: "acme",
        keys: &keys,
        known: None,
    };
    let mut document = json!({"messages": [
        {"role": "user", "content": "ref 4111 1111 1111 1111 please, and ref 20240117"}
    ]});
    masker.mask(&mut document).unwrap();
    let text = document.to_string();
    assert!(
        !text.contains("4111") && !text.contains("1111 1111"),
        "{text}"
    );
    assert!(text.contains("<CREDIT_CARD_"), "{text}");
    // A reference that holds nothing masked stays as it is.
    assert!(text.contains("ref 20240117"), "{text}");
    // Also where the masked value is found only after its key.
    let mut document = json!({"customer": {"mobile": "ref 4155550172"}});
    masker.mask(&mut document).unwrap();
    let text = document.to_string();
    assert!(!text.contains("4155550172"), "{text}");
    assert!(text.contains("<PHONE_NUMBER_"), "{text}");
}

#[test]
fn a_value_found_by_the_words_before_it_is_masked_where_another_message_repeats_it_alone() {
    let fixture = Fixture::new(Action::Tokenize);
    let token = fixture.token("PHONE_NUMBER", "4155550172");
    // Alone, a ten-digit number is no phone number; after "mobile:" it is. The later
    // messages repeat it without the word, once in fullwidth digits.
    let mut document = json!({"messages": [
        {"role": "user", "content": "my mobile: 4155550172"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "please repeat 4155550172 back"},
        {"role": "user", "content": "the order no 4155550172 too"},
        {"role": "user", "content": "or call (415) 555-0172"},
        {"role": "user", "content": "or text \u{FF14}\u{FF11}\u{FF15}\u{FF15}\u{FF15}\u{FF15}\u{FF10}\u{FF11}\u{FF17}\u{FF12}"}
    ]});
    fixture.mask(&mut document);
    let text = document.to_string();
    assert!(!text.contains("4155550172"), "{text}");
    assert!(!text.contains('\u{FF14}'), "{text}");
    assert!(!text.contains("555-0172"), "{text}");
    assert_eq!(text.matches(&token).count(), 5, "{text}");
    assert!(
        text.contains("please repeat") && text.contains("or text"),
        "{text}"
    );
}

#[test]
fn the_values_found_by_their_context_are_reported_whatever_their_action() {
    // Names and ids carried as given are checked against these, for a policy that leaves
    // them in the clear towards this upstream as for one that masks them.
    for action in [Action::Tokenize, Action::Allow] {
        let mut fixture = Fixture::new(Action::Tokenize);
        fixture.policy = crate::mask::MaskPolicy::all(action);
        let mut document = json!({"messages": [
            {"role": "user", "content": "my mobile: 4155550172, mail jane@example.com"},
            {"role": "tool", "content": json!({"password": SECRET}).to_string()}
        ]});
        let masked = fixture.mask(&mut document);
        let found: Vec<(&str, &str)> = masked.by_context.iter().collect();
        assert_eq!(
            found,
            [("4155550172", "PHONE_NUMBER"), (SECRET, "SECRET")],
            "{action:?}"
        );
    }
}

#[test]
fn a_value_found_alone_is_not_read_twice() {
    // An e-mail address is found wherever it stands: no second walk is needed, and a number
    // that only looks like part of a value elsewhere stays.
    let fixture = Fixture::new(Action::Tokenize);
    let mut document = json!({"messages": [
        {"role": "user", "content": "mail jane@example.com"},
        {"role": "user", "content": "order 4155550172 shipped"}
    ]});
    fixture.mask(&mut document);
    let text = document.to_string();
    assert!(!text.contains("jane@example.com"), "{text}");
    assert!(text.contains("order 4155550172 shipped"), "{text}");
}
