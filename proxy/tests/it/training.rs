//! Training marks: every recorded step carries the decision of the policy's `training.toml`
//! (matched on tenant, agent, upstream and the entity types found), narrowed by the caller's
//! `x-atdp-consent`, which can never widen a policy's "no".

use serde_json::json;

use crate::harness::*;

const TRAINING: &str = r#"
[default]
legal_basis = "legitimate_interests"
retention_days = 365

[[rule]]
name = "no-cards"
entities = ["CREDIT_CARD"]
eligible = false
legal_basis = "contract"
retention_days = 30

[[rule]]
name = "other-contract"
tenants = ["other"]
upstreams = ["default"]
upstream_trust = ["external"]
eligible = false
legal_basis = "contract"
retention_days = 7
"#;

const DAY: i64 = 86_400_000_000;

/// A chat call with `key`, `text` and the extra `headers`; returns the step id.
fn call(port: u16, key: &str, text: &str, headers: &[(&str, &str)]) -> Response {
    let auth = format!("Bearer {key}");
    let mut all = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    all.extend_from_slice(headers);
    let body = json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}]});
    http(
        port,
        "POST",
        "/v1/chat/completions",
        &all,
        body.to_string().as_bytes(),
    )
}

#[test]
fn steps_are_recorded_with_the_policy_marks_and_consent_only_narrows() {
    let upstream = Upstream::start();
    let policy = quickstart_with("", &[("training.toml", TRAINING)]);
    let proxy = Proxy::launch(
        upstream.port,
        policy.path(),
        &[],
        tempfile::tempdir().unwrap(),
        &[],
    );
    // (name, key, text, headers)
    type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: [Case; 6] = [
        ("default", DEMO_KEY, "hello there", &[]),
        (
            "card",
            DEMO_KEY,
            "my card is 4111 1111 1111 1111",
            &[("x-atdp-consent", "granted")],
        ),
        (
            "withdrawn",
            DEMO_KEY,
            "hello again",
            &[("x-atdp-consent", "withdrawn")],
        ),
        (
            "granted",
            DEMO_KEY,
            "and again",
            &[("x-atdp-consent", "granted")],
        ),
        (
            "tenant-no",
            OTHER_KEY,
            "hello from other",
            &[("x-atdp-consent", "granted")],
        ),
        ("tenant-no-plain", OTHER_KEY, "hello once more", &[]),
    ];
    let mut ids = Vec::new();
    for (label, key, text, headers) in cases {
        let response = call(proxy.port, key, text, headers);
        assert_eq!(
            response.status,
            200,
            "{label}: {}",
            String::from_utf8_lossy(&response.body)
        );
        ids.push((label, response.header("x-atdp-step-id").unwrap().to_owned()));
    }
    // A consent value the proxy cannot read is refused, never guessed at.
    let misspelt = call(
        proxy.port,
        DEMO_KEY,
        "hi",
        &[("x-atdp-consent", "withdrawm")],
    );
    assert_eq!(misspelt.status, 400);
    assert_eq!(misspelt.json()["error"]["code"], "invalid_header");

    let data = proxy.stop();
    let steps = read_lake(data.path()).steps;
    assert_eq!(steps.len(), ids.len(), "the refused call is not recorded");
    let marks = |label: &str| {
        let id = &ids.iter().find(|(l, _)| *l == label).unwrap().1;
        let step = steps.iter().find(|s| &s.step_id == id).unwrap();
        let days = step
            .retention_until
            .map(|until| (until - step.started_at) / DAY);
        (
            step.training_eligible,
            step.legal_basis.clone(),
            days,
            step.consent_source.clone(),
        )
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        marks("default"),
        (
            Some(true),
            some("legitimate_interests"),
            Some(365),
            some("policy:default")
        )
    );
    // A rule on an entity type found in the step; the header's "granted" does not widen it.
    assert_eq!(
        marks("card"),
        (
            Some(false),
            some("contract"),
            Some(30),
            some("policy:no-cards")
        )
    );
    assert_eq!(
        marks("withdrawn"),
        (
            Some(false),
            some("legitimate_interests"),
            Some(365),
            some("header")
        )
    );
    assert_eq!(
        marks("granted"),
        (
            Some(true),
            some("legitimate_interests"),
            Some(365),
            some("header")
        )
    );
    // A rule on tenant, upstream name and trust: the header cannot widen it either.
    for label in ["tenant-no", "tenant-no-plain"] {
        assert_eq!(
            marks(label),
            (
                Some(false),
                some("contract"),
                Some(7),
                some("policy:other-contract")
            ),
            "{label}"
        );
    }
}

#[test]
fn without_a_training_file_every_step_is_eligible_by_the_default_policy() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let response = call(proxy.port, DEMO_KEY, "hello", &[]);
    assert_eq!(response.status, 200);
    let data = proxy.stop();
    let steps = read_lake(data.path()).steps;
    assert_eq!(steps.len(), 1);
    let step = &steps[0];
    assert_eq!(
        (
            step.training_eligible,
            step.legal_basis.as_deref(),
            step.retention_until,
            step.consent_source.as_deref()
        ),
        (Some(true), None, None, Some("policy:default"))
    );
}
