//! Placeholders rendered as surrogate values for training: the Python package's
//! `atdp.surrogates` and this trainer give the same surrogate for the same placeholder and
//! tenant, and read the same lake into the same example text; surrogates of values masked by
//! the real masker never give the original back; and an adapter trained on masked data
//! writes surrogate values, never placeholders, where one trained on the stored text writes
//! placeholders.

use std::collections::BTreeSet;
use std::process::Command;

use atdp_detect::Scanner;

use atdp_model_files::ChatFormat;
use atdp_policies::{Action, JsonMasker, KeyRing, MaskPolicy, mask};
use atdp_schema::{Message, Record, Step, Tool, ToolCall};
use atdp_trainer::{
    Adapter, IM_END, LoadOptions, Lora, Model, Selection, TrainOptions, added_token_id,
    load_adapter, read_lake, render_step, render_surrogates, surrogate,
};
use candle_core::{D, Tensor};
use regex::Regex;
use serde_json::{Value, json};

use crate::learning::{BAD, Setup, episode, prompt, write_lake};

const ENTITIES: [&str; 14] = [
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
    "PROJECT_CODENAME",
    "X",
];

fn placeholder_shape() -> Regex {
    Regex::new(r"<[A-Z][A-Z0-9_]*(_[0-9a-f]{12}|#[0-9a-f]{16})>").unwrap()
}

/// `tests/python/surrogates.py` with `args`, the package from `python/src`; its JSON output.
fn python(args: &[&str]) -> Value {
    let output = Command::new(atdp_testkit::python())
        .arg(atdp_testkit::repo_root().join("tests/python/surrogates.py"))
        .args(args)
        .env("PYTHONPATH", atdp_testkit::repo_root().join("python/src"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "surrogates.py {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn python_and_rust_give_the_same_surrogates() {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for tenant in ["acme", "globex", "ténant ü"] {
        for entity in ENTITIES {
            for i in 0..12u64 {
                let digest = 0x0123_4567_89ab_u64.wrapping_mul(i + 1) & 0xffff_ffff_ffff;
                pairs.push((tenant.into(), format!("<{entity}_{digest:012x}>")));
                pairs.push((
                    tenant.into(),
                    format!("<{entity}#{:016x}>", digest.wrapping_mul(0x9e37_79b9)),
                ));
            }
        }
        // Texts: several placeholders, JSON arguments, lookalikes that are not placeholders.
        pairs.push((
            tenant.into(),
            r#"{"to": "<EMAIL_ADDRESS_00aa11bb22cc>", "cc": "<EMAIL_ADDRESS_00aa11bb22cc>", "iban": "<IBAN_CODE_abcdefabcdef>"}"#.into(),
        ));
        pairs.push((
            tenant.into(),
            "Hi <PERSON_0123456789ab> from <LOCATION#fedcba9876543210>; <PERSON_0123>, <person_0123456789ab>, [PERSON], 日本 <b>.".into(),
        ));
        pairs.push((tenant.into(), "nothing to replace".into()));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pairs.json");
    std::fs::write(&file, json!(pairs).to_string()).unwrap();
    let got = python(&["tokens", file.to_str().unwrap()]);
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), pairs.len());
    let mut changed = 0;
    for ((tenant, text), py) in pairs.iter().zip(got) {
        let rust_one = surrogate(tenant, text).unwrap();
        let rust_all = render_surrogates(tenant, text).unwrap();
        assert_eq!(py[0].as_str(), rust_one.as_deref(), "{tenant} {text}");
        assert_eq!(py[1].as_str(), Some(rust_all.as_str()), "{tenant} {text}");
        changed += usize::from(rust_all != *text);
    }
    assert_eq!(
        changed,
        pairs.len() - 3,
        "every placeholder text is rendered"
    );
}

#[test]
fn surrogates_of_masked_values_never_give_the_original_back() {
    // Fixed keys: names, cities and organizations have no reserved range, so with keys drawn
    // at random an original that is itself a word-list value (`Beatriz Andersen`) comes back
    // by chance, one run in about 3,700 for a person (see "Placeholders and surrogates").
    let keys = KeyRing::from_json(&format!(
        r#"{{"tenants":{{"acme":{{"current":"k1","keys":{{"k1":"{}"}},"token_key":"{}"}}}}}}"#,
        "11".repeat(32),
        "22".repeat(32)
    ))
    .unwrap();
    let originals = [
        ("PERSON", "Jane Doe"),
        ("PERSON", "Beatriz Andersen"),
        ("LOCATION", "Lisbon"),
        ("ORGANIZATION", "Initech"),
        ("EMAIL_ADDRESS", "jane.doe@acme-mail.com"),
        ("EMAIL_ADDRESS", "leon.jensen@example.net"),
        ("PHONE_NUMBER", "+44 20 7946 0958"),
        ("PHONE_NUMBER", "+1 (415) 555-0132"),
        ("CREDIT_CARD", "4111 1111 1111 1111"),
        ("CREDIT_CARD", "5555 5555 5555 4444"),
        ("IBAN_CODE", "DE89 3704 0044 0532 0130 00"),
        ("IBAN_CODE", "GB82 WEST 1234 5698 7654 32"),
        ("US_SSN", "536-22-1234"),
        ("US_SSN", "912-45-6789"),
        ("IP_ADDRESS", "10.20.30.40"),
        ("URL", "postgres://app:hunter2hunter2@db.internal:5432/prod"),
        ("SECRET", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"),
    ];
    let shape = placeholder_shape();
    for (entity, original) in originals {
        let token = keys.token("acme", entity, original).unwrap();
        let hash = keys.keyed_hash("acme", entity, original).unwrap();
        for placeholder in [&token, &hash] {
            let value = surrogate("acme", placeholder).unwrap().unwrap();
            assert_ne!(value, original, "{entity}");
            assert!(!value.contains(original) && !original.contains(&value));
            assert!(!shape.is_match(&value), "{value}");
        }
    }

    // Text masked by the proxy's own scanner and masker, as the lake stores it.
    let text = "Card 4111 1111 1111 1111, IBAN DE89 3704 0044 0532 0130 00, mail \
                jane.doe@acme-mail.com or call +44 20 7946 0958; SSN 536-22-1234; \
                db postgres://app:hunter2hunter2@db.internal:5432/prod.";
    let scanner = Scanner::new(None).unwrap();
    let spans = scanner.scan(text);
    let expected = BTreeSet::from([
        "CREDIT_CARD",
        "EMAIL_ADDRESS",
        "IBAN_CODE",
        "PHONE_NUMBER",
        "URL",
        "US_SSN",
    ]);
    let found: BTreeSet<&str> = spans.iter().map(|s| s.entity).collect();
    assert!(found.is_superset(&expected), "{found:?}");
    let masked = mask(
        text,
        &spans,
        &MaskPolicy::all(Action::Tokenize),
        "acme",
        &keys,
    )
    .unwrap();
    let rendered = render_surrogates("acme", &masked.text).unwrap();
    assert!(!shape.is_match(&rendered), "{rendered}");
    for span in &spans {
        let original = &text[span.start..span.end];
        assert!(!rendered.contains(original), "{original} in {rendered}");
    }
    // What the surrogates stand for is found again by the scanner, as the same types.
    let again: BTreeSet<&str> = scanner.scan(&rendered).iter().map(|s| s.entity).collect();
    assert!(again.is_superset(&expected), "{again:?} in {rendered}");
}

/// `value` with every string and object key rendered.
fn render_json(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(render_surrogates("acme", s).unwrap()),
        Value::Array(items) => Value::Array(items.iter().map(render_json).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (render_surrogates("acme", k).unwrap(), render_json(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn tool_call_arguments_masked_by_the_json_masker_stay_valid_json_with_surrogates() {
    let mut keys = KeyRing::default();
    keys.generate("acme");
    let scanner = Scanner::new(None).unwrap();
    let policy = MaskPolicy::all(Action::Tokenize);
    let originals = [
        "jane.doe@acme-mail.com",
        "4111111111111111",
        "DE89 3704 0044 0532 0130 00",
        "+44 20 7946 0958",
        "536-22-1234",
    ];
    // A key, a bare card number, values next to escaped quotes and backslashes, and JSON
    // inside a string inside the arguments.
    let arguments = json!({
        "to": "jane.doe@acme-mail.com",
        "card": 4111111111111111u64,
        "note": "say \"IBAN DE89 3704 0044 0532 0130 00\"\\ then call +44 20 7946 0958",
        "jane.doe@acme-mail.com": ["536-22-1234"],
        "inner": json!({"ssn": "536-22-1234"}).to_string(),
    })
    .to_string();
    let mut document = json!({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "send", "arguments": arguments}}
    ]}]});
    JsonMasker {
        scanner: &scanner,
        policy: &policy,
        tenant: "acme",
        keys: &keys,
        known: None,
    }
    .mask(&mut document)
    .unwrap();
    let masked = document["messages"][0]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    let shape = placeholder_shape();
    assert!(shape.find_iter(masked).count() >= 6, "{masked}");
    let rendered = render_surrogates("acme", masked).unwrap();
    let parsed: Value = serde_json::from_str(&rendered).unwrap();
    // Each string and key is its masked one rendered: the structure is unchanged.
    assert_eq!(parsed, render_json(&serde_json::from_str(masked).unwrap()));
    let inner: Value = serde_json::from_str(parsed["inner"].as_str().unwrap()).unwrap();
    assert!(inner["ssn"].as_str().unwrap().starts_with('9'), "{inner}");
    assert!(!shape.is_match(&rendered), "{rendered}");
    for original in originals {
        assert!(!rendered.contains(original), "{original} in {rendered}");
    }
}

fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: Some(content.into()),
        ..Message::default()
    }
}

#[test]
fn python_and_rust_read_the_same_example_text_from_a_masked_lake() {
    let setup = Setup::new();
    let mut records: Vec<Record> = Vec::new();
    for (i, tenant) in ["acme", "acme", "globex"].into_iter().enumerate() {
        let (mut step, mut reward) = episode(
            "Sent to <EMAIL_ADDRESS_00aa11bb22cc>.",
            1.0,
            None,
            1_795_910_400_000_000 + i as i64 * 1_000_000,
        );
        step.tenant_id = tenant.into();
        reward.tenant_id = tenant.into();
        // Ids recorded for a reply the lake holds with a placeholder (the proxy records none
        // there; other writers may): they are of another text than the rendered reply.
        if i == 0 {
            step.completion_token_ids = Some(vec![1, 2, 3]);
            step.completion_logprobs = Some(vec![-0.5, -1.0, -0.25]);
        }
        step.request_messages = vec![
            msg("system", "You help <ORGANIZATION_0a0b0c0d0e0f> customers."),
            msg(
                "user",
                "I am <PERSON_0123456789ab>, card <CREDIT_CARD#0123456789abcdef>.",
            ),
            Message {
                role: "assistant".into(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "find".into(),
                    arguments: r#"{"name": "<PERSON_0123456789ab>"}"#.into(),
                }],
                ..Message::default()
            },
            Message {
                role: "tool".into(),
                content: Some("IBAN <IBAN_CODE_abcdefabcdef>, ip <IP_ADDRESS_111111111111>".into()),
                tool_call_id: Some("c1".into()),
                ..Message::default()
            },
        ];
        step.tools = vec![Tool {
            kind: "function".into(),
            name: "find".into(),
            description: Some("Finds customers of <ORGANIZATION_0a0b0c0d0e0f>.".into()),
            parameters: Some(r#"{"type": "object"}"#.into()),
        }];
        records.push(step.into());
        records.push(reward.into());
    }
    write_lake(&setup.lake(), records);
    let selection = Selection {
        tenants: BTreeSet::from(["acme".to_owned()]),
        reward_names: BTreeSet::from(["ok".to_owned()]),
        ..Selection::default()
    };
    let mut data = read_lake(
        &setup.lake().display().to_string(),
        Default::default(),
        &selection,
    )
    .unwrap();
    let stored = data.steps.clone();
    for step in &mut data.steps {
        render_step(step).unwrap();
    }
    let lake = setup.lake().display().to_string();
    let args = |placeholders: &'static str| {
        vec![
            "lake".to_owned(),
            "--lake".into(),
            lake.clone(),
            "--tenant".into(),
            "acme".into(),
            "--weights".into(),
            r#"{"ok": 1.0}"#.into(),
            "--placeholders".into(),
            placeholders.into(),
        ]
    };
    let run = |placeholders| {
        let a = args(placeholders);
        python(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let shape = placeholder_shape();
    for (placeholders, steps) in [("surrogate", &data.steps), ("keep", &stored)] {
        let py = run(placeholders);
        assert_eq!(py["placeholders"], placeholders);
        let examples = py["examples"].as_array().unwrap();
        assert_eq!(examples.len(), steps.len());
        for (e, step) in examples.iter().zip(steps.iter()) {
            assert_eq!(e["step_id"], step.step_id.as_str());
            let prompt = e["prompt"].as_array().unwrap();
            assert_eq!(prompt.len(), step.request_messages.len());
            for (p, m) in prompt.iter().zip(&step.request_messages) {
                assert_eq!(p["content"].as_str(), m.content.as_deref());
                let calls: Vec<&str> = p["tool_calls"]
                    .as_array()
                    .map(|c| c.iter().map(|c| c["arguments"].as_str().unwrap()).collect())
                    .unwrap_or_default();
                let want: Vec<&str> = m.tool_calls.iter().map(|c| c.arguments.as_str()).collect();
                assert_eq!(calls, want);
            }
            let reply = step.response_message.as_ref().unwrap();
            assert_eq!(
                e["completion_message"]["content"].as_str(),
                reply.content.as_deref()
            );
            assert_eq!(e["completion_token_ids"], json!(step.completion_token_ids));
            assert_eq!(e["behaviour_logprobs"], json!(step.completion_logprobs));
            assert_eq!(
                e["tools"][0]["description"].as_str(),
                step.tools[0].description.as_deref()
            );
            let text = e.to_string();
            assert_eq!(shape.is_match(&text), placeholders == "keep", "{text}");
        }
    }
    // The same person is the same surrogate in the user's text and in the tool call.
    let person = surrogate("acme", "<PERSON_0123456789ab>").unwrap().unwrap();
    let step = &data.steps[0];
    assert!(
        step.request_messages[1]
            .content
            .as_ref()
            .unwrap()
            .contains(&person)
    );
    assert!(
        step.request_messages[2].tool_calls[0]
            .arguments
            .contains(&person)
    );
    // The ids recorded for the first step's reply are dropped with `surrogate` only.
    assert_eq!(stored[0].completion_token_ids, Some(vec![1, 2, 3]));
    assert_eq!(data.steps[0].completion_token_ids, None);
    assert_eq!(data.steps[0].completion_logprobs, None);
    // Both acme steps read the same person, address and card: one value per placeholder.
    assert_eq!(
        data.steps[0].request_messages,
        data.steps[1].request_messages
    );
    assert_eq!(data.steps[0].tools, data.steps[1].tools);
}

/// The reply the agent gave, as the lake stores it: a placeholder where it wrote a name.
const MASKED_REPLY: &str = "Ask <PERSON_5eed0c0ffee1>.";

/// Greedy decoding of a reply to [`prompt`], up to `max` tokens or the end of the turn.
fn greedy_reply(model: &Model, chat: &ChatFormat, adapter: &Lora, max: usize) -> String {
    let mut ids = chat
        .encode(&chat.render(&prompt(), &[], true).unwrap())
        .unwrap();
    let start = ids.len();
    let end = added_token_id(IM_END).unwrap();
    for _ in 0..max {
        let input = Tensor::new(ids.as_slice(), model.device())
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = model.forward(&input, Adapter::On(adapter)).unwrap();
        let last = logits.get(0).unwrap().get(ids.len() - 1).unwrap();
        let next = last.argmax(D::Minus1).unwrap().to_scalar::<u32>().unwrap();
        if next == end {
            break;
        }
        ids.push(next);
    }
    chat.tokenizer().decode(&ids[start..], false).unwrap()
}

#[test]
fn an_adapter_trained_on_masked_data_writes_surrogates_not_placeholders() {
    let setup = Setup::new();
    let base = 1_795_910_400_000_000;
    let mut records: Vec<Record> = Vec::new();
    for i in 0..2 {
        for (j, (text, value)) in [(MASKED_REPLY, 1.0), (BAD, -1.0)].into_iter().enumerate() {
            let (s, r): (Step, _) =
                episode(text, value, None, base + (2 * i + j) as i64 * 1_000_000);
            records.push(s.into());
            records.push(r.into());
        }
    }
    write_lake(&setup.lake(), records);
    let train = |out: &str, placeholders: &str| {
        let config = setup.config(
            out,
            &format!(
                r#"
                [select]
                tenant = "acme"
                [rewards]
                weights = {{ ok = 1.0 }}
                [objective]
                kind = "grpo"
                [train]
                steps = 60
                lr = 0.01
                min_lr_ratio = 1.0
                batch_size = 4
                seed = 3
                placeholders = "{placeholders}"
                [lora]
                r = 8
                alpha = 16
                "#
            ),
        );
        atdp_trainer::run(&config, &TrainOptions::default(), &mut |_| {}).unwrap();
        let manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(setup.out(out).join("manifest.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["hyper_parameters"]["placeholders"], placeholders);
    };
    train("surrogate", "surrogate");
    train("keep", "keep");

    let model = Model::load(setup.model(), &LoadOptions::default()).unwrap();
    let chat = ChatFormat::load(setup.model()).unwrap();
    let name = surrogate("acme", "<PERSON_5eed0c0ffee1>").unwrap().unwrap();
    let shape = placeholder_shape();
    let on_surrogates: Lora = load_adapter(setup.out("surrogate"), &model).unwrap();
    let on_placeholders: Lora = load_adapter(setup.out("keep"), &model).unwrap();
    let with_surrogates = greedy_reply(&model, &chat, &on_surrogates, 40);
    let with_placeholders = greedy_reply(&model, &chat, &on_placeholders, 40);
    eprintln!("surrogate run: {with_surrogates:?}; keep run: {with_placeholders:?}");
    // Trained on the text as stored, the adapter writes a placeholder; trained on
    // surrogates, the name.
    assert_eq!(with_placeholders, MASKED_REPLY);
    assert!(!shape.is_match(&with_surrogates), "{with_surrogates:?}");
    assert!(!with_surrogates.contains('<'), "{with_surrogates:?}");
    assert_eq!(with_surrogates, format!("Ask {name}."));
}
