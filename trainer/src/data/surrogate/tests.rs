#![allow(clippy::unwrap_used)]

use std::net::Ipv4Addr;

use atdp_schema::{Message, Tool, ToolCall};

use super::*;

/// `n` distinct placeholders of `entity` in the `tokenize` shape.
fn tokens(entity: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("<{entity}_{:012x}>", 0x5eed_0000_0000_u64 + i as u64 * 7919))
        .collect()
}

fn of(tenant: &str, placeholder: &str) -> String {
    surrogate(tenant, placeholder).unwrap().unwrap()
}

fn luhn_valid(number: &str) -> bool {
    let digits: Vec<u32> = number.chars().filter_map(|c| c.to_digit(10)).collect();
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| match (i % 2, d * 2) {
            (0, _) => d,
            (_, twice) if twice > 9 => twice - 9,
            (_, twice) => twice,
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 13616: the first four characters moved to the end, letters as 10–35, mod 97 = 1.
fn iban_valid(iban: &str) -> bool {
    let compact: String = iban.chars().filter(|c| *c != ' ').collect();
    let (head, tail) = compact.split_at(4);
    let rearranged = format!("{tail}{head}");
    let number: String = rearranged
        .chars()
        .map(|c| c.to_digit(36).unwrap().to_string())
        .collect();
    let rest = number.chars().fold(0u64, |acc, c| {
        (acc * 10 + u64::from(c.to_digit(10).unwrap())) % 97
    });
    rest == 1
}

#[test]
fn the_same_placeholder_gets_the_same_surrogate_within_a_tenant_and_another_across_tenants() {
    let all: Vec<String> = [
        "PERSON",
        "EMAIL_ADDRESS",
        "PHONE_NUMBER",
        "CREDIT_CARD",
        "IBAN_CODE",
        "US_SSN",
        "URL",
        "SECRET",
    ]
    .iter()
    .flat_map(|e| tokens(e, 20))
    .collect();
    let mut differs = 0;
    for token in &all {
        assert_eq!(of("acme", token), of("acme", token), "{token}");
        if of("acme", token) != of("globex", token) {
            differs += 1;
        }
    }
    // Names and places can meet by chance across tenants; most values do not.
    assert!(differs > all.len() * 9 / 10, "{differs} of {}", all.len());
    // Different placeholders of one tenant mostly get different values.
    let emails: std::collections::BTreeSet<String> = tokens("EMAIL_ADDRESS", 50)
        .iter()
        .map(|t| of("acme", t))
        .collect();
    assert!(emails.len() > 45, "{emails:?}");
}

/// The algorithm is versioned: these values change only with a new version (and the
/// Python package's, checked against these by `tests/it/surrogates.rs`, with them).
#[test]
fn surrogates_of_version_one_are_stable() {
    let values: Vec<String> = [
        "<PERSON_0123456789ab>",
        "<EMAIL_ADDRESS_0123456789ab>",
        "<CREDIT_CARD_0123456789ab>",
        "<IBAN_CODE#0123456789abcdef>",
    ]
    .iter()
    .map(|t| of("acme", t))
    .collect();
    assert_eq!(values, GOLDEN);
}

const GOLDEN: [&str; 4] = [
    "Beatriz Andersen",
    "leon.jensen@example.net",
    "6011 1197 0155 6419",
    "GB17 HKBI 9928 0388 8538 91",
];

#[test]
fn surrogates_are_valid_values_of_their_type() {
    let l = lists().unwrap();
    let tenant = "acme";
    for t in tokens("CREDIT_CARD", 200) {
        let card = of(tenant, &t);
        let digits: String = card.chars().filter(char::is_ascii_digit).collect();
        assert_eq!(digits.len(), 16, "{card}");
        assert!(luhn_valid(&digits), "fails Luhn: {card}");
        assert!(
            l.card_prefixes
                .iter()
                .any(|p| digits.starts_with(p.as_str()))
        );
        assert_eq!(card.split(' ').count(), 4, "{card}");
    }
    let mut countries = std::collections::BTreeSet::new();
    for t in tokens("IBAN_CODE", 200) {
        let iban = of(tenant, &t);
        assert!(iban_valid(&iban), "fails mod-97: {iban}");
        let country = &iban[..2];
        let bban = l.iban_formats.get(country).unwrap();
        assert_eq!(iban.replace(' ', "").len(), 4 + bban.len(), "{iban}");
        countries.insert(country.to_owned());
    }
    assert_eq!(countries.len(), l.iban_formats.len());
    let email = Regex::new(r"^[a-z]+\.[a-z]+@example\.(com|org|net)$").unwrap();
    for t in tokens("EMAIL_ADDRESS", 200) {
        let value = of(tenant, &t);
        assert!(email.is_match(&value), "{value}");
    }
    let phone = Regex::new(r"^\+1 \([2-9][0-9]{2}\) 555-01[0-9]{2}$").unwrap();
    let ssn = Regex::new(r"^(9[0-9]{2})-([0-9]{2})-([0-9]{4})$").unwrap();
    for i in 0..200 {
        let value = of(tenant, &tokens("PHONE_NUMBER", 200)[i]);
        assert!(phone.is_match(&value), "{value}");
        let value = of(tenant, &tokens("US_SSN", 200)[i]);
        let caps = ssn.captures(&value).unwrap();
        let group: u32 = caps[2].parse().unwrap();
        let serial: u32 = caps[3].parse().unwrap();
        // Issued as neither an SSN (area 9xx) nor an ITIN (groups 50–65, 70–88, 90–99).
        assert!((1..=49).contains(&group) && serial > 0, "{value}");
        let value = of(tenant, &tokens("IP_ADDRESS", 200)[i]);
        let ip: Ipv4Addr = value.parse().unwrap();
        assert!(ip.is_documentation(), "{value}");
        let value = of(tenant, &tokens("URL", 200)[i]);
        let url = url::Url::parse(&value).unwrap();
        assert!(url.password().is_some_and(|p| p.len() == 16), "{value}");
        assert!(
            url.host_str().unwrap().ends_with(".example.com")
                || url.host_str().unwrap().ends_with(".example.org")
                || url.host_str().unwrap().ends_with(".example.net"),
            "{value}"
        );
        let value = of(tenant, &tokens("SECRET", 200)[i]);
        assert!(
            value.len() == 32 && value.bytes().all(|b| b.is_ascii_alphanumeric()),
            "{value}"
        );
        let value = of(tenant, &tokens("PERSON", 200)[i]);
        let (given, family) = value.split_once(' ').unwrap();
        assert!(l.given_names.iter().any(|n| n == given), "{value}");
        assert!(l.family_names.iter().any(|n| n == family), "{value}");
        let value = of(tenant, &tokens("LOCATION", 200)[i]);
        assert!(l.cities.contains(&value), "{value}");
        let value = of(tenant, &tokens("PROJECT_CODENAME", 200)[i]);
        let (word, number) = value.split_once('-').unwrap();
        assert!(l.code_words.iter().any(|w| w == word), "{value}");
        assert!(number.len() == 4 && number.bytes().all(|b| b.is_ascii_digit()));
    }
}

#[test]
fn no_surrogate_is_placeholder_shaped_or_breaks_json() {
    let pattern = placeholder_pattern().unwrap();
    for entity in [
        "PERSON",
        "LOCATION",
        "ADDRESS",
        "ORGANIZATION",
        "EMAIL_ADDRESS",
        "PHONE_NUMBER",
        "CREDIT_CARD",
        "IBAN_CODE",
        "US_SSN",
        "IP_ADDRESS",
        "URL",
        "SECRET",
        "CUSTOM_ID",
    ] {
        for t in tokens(entity, 100) {
            let value = of("acme", &t);
            assert!(!value.is_empty(), "{t}");
            assert!(!pattern.is_match(&value), "{t}: {value}");
            assert!(
                !value.contains(['"', '\\', '<', '>', '[', ']']),
                "{t}: {value}"
            );
        }
    }
}

#[test]
fn render_replaces_every_placeholder_and_nothing_else() {
    let text = "Mail <EMAIL_ADDRESS_00aa11bb22cc> about <PERSON_0123456789ab>, SSN <US_SSN#0123456789abcdef>; \
                not <PERSON_0123>, <person_0123456789ab>, [PERSON] or <b>bold</b>. Again: <PERSON_0123456789ab>.";
    let out = render("acme", text).unwrap();
    let person = of("acme", "<PERSON_0123456789ab>");
    let email = of("acme", "<EMAIL_ADDRESS_00aa11bb22cc>");
    let ssn = of("acme", "<US_SSN#0123456789abcdef>");
    assert_eq!(
        out,
        format!(
            "Mail {email} about {person}, SSN {ssn}; not <PERSON_0123>, <person_0123456789ab>, [PERSON] or <b>bold</b>. Again: {person}."
        )
    );
    assert_eq!(
        render("acme", "no placeholders").unwrap(),
        "no placeholders"
    );
    assert_eq!(surrogate("acme", "<PERSON_0123456789ab> ").unwrap(), None);
    assert_eq!(surrogate("acme", "Bob").unwrap(), None);
}

#[test]
fn a_step_is_rendered_in_every_text_the_example_is_made_of() {
    let token = "<PERSON_0123456789ab>";
    let msg = |role: &str, content: &str| Message {
        role: role.into(),
        content: Some(content.into()),
        ..Message::default()
    };
    let mut step = Step {
        tenant_id: "acme".into(),
        request_messages: vec![
            msg("system", "Help the customer."),
            msg("user", &format!("I am {token}.")),
            Message {
                role: "assistant".into(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "lookup".into(),
                    arguments: format!(r#"{{"name": "{token}"}}"#),
                }],
                ..Message::default()
            },
        ],
        tools: vec![Tool {
            kind: "function".into(),
            name: "lookup".into(),
            description: Some(format!("Looks up {token}.")),
            parameters: None,
        }],
        response_message: Some(msg("assistant", &format!("Hello {token}!"))),
        ..Step::default()
    };
    render_step(&mut step).unwrap();
    let name = of("acme", token);
    assert_eq!(
        step.request_messages[1].content.as_deref(),
        Some(format!("I am {name}.").as_str())
    );
    let args: serde_json::Value =
        serde_json::from_str(&step.request_messages[2].tool_calls[0].arguments).unwrap();
    assert_eq!(args["name"], name.as_str());
    assert_eq!(
        step.tools[0].description.as_deref(),
        Some(format!("Looks up {name}.").as_str())
    );
    assert_eq!(
        step.response_message.unwrap().content.as_deref(),
        Some(format!("Hello {name}!").as_str())
    );
}

#[test]
fn the_check_digits_are_right_on_known_numbers() {
    // 4111 1111 1111 1111 and the IBAN of ISO 13616's example.
    assert_eq!(luhn_check_digit("411111111111111"), 1);
    assert_eq!(luhn_check_digit("7992739871"), 3);
    assert_eq!(98 - mod97("370400440532013000DE00"), 89);
    assert_eq!(
        grouped("DE89370400440532013000"),
        "DE89 3704 0044 0532 0130 00"
    );
}

/// A step of `tenant` in trajectory `trajectory` whose user message and reply name the same
/// person, e-mail address and card.
fn masked_step(tenant: &str, trajectory: &str) -> Step {
    let text = "I am <PERSON_0123456789ab>, <EMAIL_ADDRESS_00aa11bb22cc>, card <CREDIT_CARD#0123456789abcdef>.";
    Step {
        tenant_id: tenant.into(),
        trajectory_id: trajectory.into(),
        step_id: format!("{trajectory}-s"),
        request_messages: vec![Message {
            role: "user".into(),
            content: Some(text.into()),
            ..Message::default()
        }],
        response_message: Some(Message {
            role: "assistant".into(),
            content: Some("Thanks, <PERSON_0123456789ab>.".into()),
            ..Message::default()
        }),
        ..Step::default()
    }
}

#[test]
fn a_placeholder_is_one_value_in_every_step_of_a_tenant_and_another_in_another_tenant() {
    let mut steps = [
        masked_step("acme", "t1"),
        masked_step("acme", "t2"),
        masked_step("globex", "t3"),
    ];
    for step in &mut steps {
        render_step(step).unwrap();
    }
    let user = |s: &Step| s.request_messages[0].content.clone().unwrap();
    let reply = |s: &Step| {
        s.response_message
            .as_ref()
            .unwrap()
            .content
            .clone()
            .unwrap()
    };
    let (acme, globex) = (
        of("acme", "<PERSON_0123456789ab>"),
        of("globex", "<PERSON_0123456789ab>"),
    );
    assert_eq!(user(&steps[0]), user(&steps[1]));
    assert_eq!(reply(&steps[0]), format!("Thanks, {acme}."));
    assert_eq!(reply(&steps[1]), format!("Thanks, {acme}."));
    assert!(user(&steps[0]).starts_with(&format!("I am {acme}, ")));
    assert_eq!(reply(&steps[2]), format!("Thanks, {globex}."));
    assert_ne!(acme, globex);
    for placeholder in [
        "<EMAIL_ADDRESS_00aa11bb22cc>",
        "<CREDIT_CARD#0123456789abcdef>",
    ] {
        let (a, g) = (of("acme", placeholder), of("globex", placeholder));
        assert_ne!(a, g, "{placeholder}");
        assert!(user(&steps[0]).contains(&a) && !user(&steps[0]).contains(&g));
        assert!(user(&steps[2]).contains(&g) && !user(&steps[2]).contains(&a));
    }
}

#[test]
fn recorded_completion_ids_are_dropped_only_when_the_reply_held_a_placeholder() {
    let recorded = |mut step: Step| {
        step.completion_token_ids = Some(vec![1, 2, 3]);
        step.completion_logprobs = Some(vec![-0.5, -1.0, -0.25]);
        step
    };
    // A placeholder in the reply: the ids are of the stored text, not of the rendered one.
    let mut step = recorded(masked_step("acme", "t1"));
    render_step(&mut step).unwrap();
    assert_eq!(step.completion_token_ids, None);
    assert_eq!(step.completion_logprobs, None);
    // One in the request only: the reply's ids stay.
    let mut step = recorded(masked_step("acme", "t1"));
    step.response_message.as_mut().unwrap().content = Some("Thanks.".into());
    render_step(&mut step).unwrap();
    assert_eq!(step.completion_token_ids, Some(vec![1, 2, 3]));
    assert_eq!(step.completion_logprobs, Some(vec![-0.5, -1.0, -0.25]));
    assert!(
        !step.request_messages[0]
            .content
            .as_ref()
            .unwrap()
            .contains('<')
    );
    // One in a tool call of the reply counts as the reply.
    let mut step = recorded(masked_step("acme", "t1"));
    let reply = step.response_message.as_mut().unwrap();
    reply.content = None;
    reply.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "pay".into(),
        arguments: r#"{"card": "<CREDIT_CARD#0123456789abcdef>"}"#.into(),
    }];
    render_step(&mut step).unwrap();
    assert_eq!(step.completion_token_ids, None);
    let args: serde_json::Value =
        serde_json::from_str(&step.response_message.as_ref().unwrap().tool_calls[0].arguments)
            .unwrap();
    assert_eq!(
        args["card"],
        of("acme", "<CREDIT_CARD#0123456789abcdef>").as_str()
    );
}
