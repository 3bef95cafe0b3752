//! Shadow copies: an internal upstream names a version in `x-atdp-shadow`; the proxy sends
//! the same request to it after the served reply, records its reply masked as a step of its
//! own that is never trained on, and never returns it. No client sees the header, and an
//! external upstream's or a malformed name is ignored.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

fn chat(port: u16, text: &str, stream: bool) -> Response {
    chat_with(port, text, stream, &[])
}

fn chat_with(port: u16, text: &str, stream: bool, headers: &[(&str, &str)]) -> Response {
    let auth = format!("Bearer {DEMO_KEY}");
    let body = json!({
        "model": "support",
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    });
    http(
        port,
        "POST",
        "/v1/chat/completions",
        &[
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
            headers,
        ]
        .concat(),
        body.to_string().as_bytes(),
    )
}

/// The chat requests the upstream has received, once there are `n` (waits up to 10 s).
fn upstream_chats(upstream: &Upstream, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let chats: Vec<Value> = upstream
            .requests()
            .into_iter()
            .filter(|r| r["path"] == "/v1/chat/completions")
            .collect();
        if chats.len() >= n || Instant::now() > deadline {
            return chats;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the proxy counts `n` copies that ended `outcome` (a copy is charged to its
/// tenant before it is counted).
fn wait_for_copies(proxy: &Proxy, outcome: &str, n: u64) {
    let line = format!("atdp_shadow_calls_total{{outcome=\"{outcome}\"}} {n}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let scraped = http(proxy.admin, "GET", "/metrics", &[], b"").body;
        let text = String::from_utf8(scraped).unwrap();
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line} in:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_shadow_copy_is_recorded_masked_never_trained_on_and_never_returned() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &["--upstream-trust", "internal"]);
    let text = "[[shadow]] my email is jane.roe@example.com";
    // A client cannot pass its request off as a copy.
    let whole = chat_with(proxy.port, text, false, &[("x-atdp-shadow-copy", "1")]);
    assert_eq!(whole.status, 200);
    let streamed = chat(proxy.port, text, true);
    assert_eq!(streamed.status, 200);
    // The end user withdrew consent: the copy keeps the policy's reason, not `shadow`.
    let withdrawn = chat_with(proxy.port, text, false, &[("x-atdp-consent", "withdrawn")]);
    assert_eq!(withdrawn.status, 200);
    for response in [&whole, &streamed] {
        assert_eq!(response.header("x-atdp-shadow"), None);
        assert_eq!(response.header("x-atdp-policy-version"), Some("support@v1"));
        // Deltas of a stream are 3 to 7 characters, its first one 4.
        let body = String::from_utf8_lossy(&response.body);
        assert!(body.contains("Echo"), "{body}");
        assert!(!body.contains("Cand"), "{body}");
    }

    // Each call went out twice: the served request, and its copy naming the shadow.
    let chats = upstream_chats(&upstream, 6);
    assert_eq!(chats.len(), 6, "{chats:#?}");
    // (Copies run on their own: one may arrive after the next served call.)
    let (copies, served): (Vec<&Value>, Vec<&Value>) = chats
        .iter()
        .partition(|c| c["body"]["model"] == "support@v2");
    assert_eq!((copies.len(), served.len()), (3, 3));
    for request in &served {
        assert_eq!(request["headers"].get("x-atdp-shadow-copy"), None);
    }
    for copy in &copies {
        assert_eq!(copy["headers"]["x-atdp-shadow-copy"], "1");
        let mut body = copy["body"].clone();
        body["model"] = json!("support");
        assert!(served.iter().any(|s| s["body"] == body), "{body}");
    }

    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 6);
    let withdrawn_id = withdrawn.header("x-atdp-step-id").unwrap();
    let copy = lake
        .steps
        .iter()
        .find(|s| s.tags.get("shadow_of").map(String::as_str) == Some(withdrawn_id))
        .unwrap();
    assert_eq!(
        (copy.training_eligible, copy.consent_source.as_deref()),
        (Some(false), Some("header"))
    );
    for response in [&whole, &streamed] {
        let served_id = response.header("x-atdp-step-id").unwrap();
        let served = lake.steps.iter().find(|s| s.step_id == served_id).unwrap();
        assert_eq!(served.policy_version.as_deref(), Some("support@v1"));
        assert_eq!(served.training_eligible, Some(true));
        assert!(!served.tags.contains_key("shadow_of"));
        let shadow = lake
            .steps
            .iter()
            .find(|s| s.tags.get("shadow_of").map(String::as_str) == Some(served_id))
            .expect("the copy is recorded");
        assert_eq!(shadow.policy_version.as_deref(), Some("support@v2"));
        assert_eq!(shadow.model_requested, "support@v2");
        assert_eq!(shadow.status, "ok");
        assert_eq!(
            (shadow.training_eligible, shadow.consent_source.as_deref()),
            (Some(false), Some("shadow"))
        );
        assert_ne!(shadow.trajectory_id, served.trajectory_id);
        assert_eq!(
            (shadow.turn_index, shadow.parent_step_id.as_deref()),
            (0, None)
        );
        let reply = shadow
            .response_message
            .as_ref()
            .and_then(|m| m.content.clone())
            .unwrap();
        assert!(reply.starts_with("Candidate: "), "{reply}");
        assert!(reply.contains("<EMAIL_ADDRESS_"), "{reply}");
        // Nothing of the value is stored in the clear, in the copy's step or anywhere else.
        let stored = serde_json::to_string(shadow).unwrap();
        assert!(!stored.contains("jane.roe"), "{stored}");
        // Its decision is audited, naming the served step.
        let event = lake
            .audit
            .iter()
            .find(|e| e.subject.as_deref() == Some(shadow.step_id.as_str()))
            .expect("the copy has an audit event");
        assert_eq!(event.kind, "request_allowed");
        let detail: Value = serde_json::from_str(event.detail_json.as_deref().unwrap()).unwrap();
        assert_eq!(detail["shadow_of"], served_id);
        assert_eq!(detail["model"], "support@v2");
    }
    let rows = serde_json::to_string(&lake.steps).unwrap();
    assert!(!rows.contains("jane.roe"));
}

#[test]
fn no_copy_for_an_external_upstream_a_malformed_name_or_a_failed_call() {
    let upstream = Upstream::start();
    let external = Proxy::start(upstream.port, &[]);
    let response = chat(external.port, "[[shadow]] hello", false);
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("x-atdp-shadow"),
        None,
        "taken off all the same"
    );
    drop(external);

    let internal = Proxy::start(upstream.port, &["--upstream-trust", "internal"]);
    let response = chat(internal.port, "[[shadowbad]] hello", false);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("x-atdp-shadow"), None);
    let response = chat(internal.port, "[[shadow]] [[error500]] hello", false);
    assert_eq!(response.status, 500);
    // A served call the client saw cut is not copied either.
    let auth = format!("Bearer {DEMO_KEY}");
    let _ = try_http(
        internal.port,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        json!({"model": "support", "stream": true,
               "messages": [{"role": "user", "content": "[[shadow]] [[cut]] hi"}]})
        .to_string()
        .as_bytes(),
    );
    // One more call that is copied, so that a late copy of the others would show.
    assert_eq!(chat(internal.port, "[[shadow]] last", false).status, 200);
    let chats = upstream_chats(&upstream, 6);
    std::thread::sleep(Duration::from_millis(300));
    let chats_after = upstream_chats(&upstream, 6);
    assert_eq!(chats.len(), chats_after.len());
    let models: Vec<&str> = chats_after
        .iter()
        .map(|c| c["body"]["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        models,
        [
            "support",
            "support",
            "support",
            "support",
            "support",
            "support@v2"
        ],
    );
    let data = internal.stop();
    let steps = read_lake(data.path()).steps;
    let shadows = steps
        .iter()
        .filter(|s| s.tags.contains_key("shadow_of"))
        .count();
    assert_eq!(shadows, 1);
}

#[test]
fn in_strict_audit_mode_a_copy_leaves_only_after_its_event_is_durable() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(
        upstream.port,
        &["--upstream-trust", "internal", "--audit", "strict"],
    );
    let response = chat(proxy.port, "[[shadow]] call me on +44 20 7946 0958", false);
    assert_eq!(response.status, 200);
    assert_eq!(upstream_chats(&upstream, 2).len(), 2);
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let served = response.header("x-atdp-step-id").unwrap();
    let copy = lake
        .steps
        .iter()
        .find(|s| s.tags.get("shadow_of").map(String::as_str) == Some(served))
        .expect("the copy is recorded");
    let event = lake
        .audit
        .iter()
        .find(|e| e.subject.as_deref() == Some(copy.step_id.as_str()))
        .unwrap();
    // The strict event carries the request as stored: masked.
    let detail: Value = serde_json::from_str(event.detail_json.as_deref().unwrap()).unwrap();
    let request = detail["request"].to_string();
    assert!(request.contains("<PHONE_NUMBER_"), "{request}");
    assert!(!request.contains("7946"), "{request}");
}

#[test]
fn a_copy_spends_the_tenants_token_budget_and_none_leaves_once_it_is_spent() {
    let upstream = Upstream::start();
    // What one served call costs, from a proxy without budgets.
    let free = Proxy::start(upstream.port, &["--upstream-trust", "internal"]);
    let cost = chat(free.port, "[[shadow]] hello", false).json()["usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    let _ = free.stop();
    assert_eq!(upstream_chats(&upstream, 2).len(), 2);

    // A budget of one and a half calls a minute: the served call leaves some, the copy takes
    // the rest, and the tenant's next call waits.
    let budget = (cost * 3 / 2).to_string();
    let proxy = Proxy::start(
        upstream.port,
        &["--upstream-trust", "internal", "--tenant-tpm", &budget],
    );
    assert_eq!(chat(proxy.port, "[[shadow]] hello", false).status, 200);
    assert_eq!(upstream_chats(&upstream, 4).len(), 4, "the copy left");
    // The copy is charged once it has answered.
    wait_for_copies(&proxy, "recorded", 1);
    let limited = chat(proxy.port, "[[shadow]] hello", false);
    assert_eq!(limited.status, 429);
    let _ = proxy.stop();

    // A call that spends the budget itself is served, and its copy does not leave.
    let proxy = Proxy::start(
        upstream.port,
        &["--upstream-trust", "internal", "--tenant-tpm", "1"],
    );
    assert_eq!(chat(proxy.port, "[[shadow]] hello", false).status, 200);
    wait_for_copies(&proxy, "skipped", 1);
    let data = proxy.stop();
    assert_eq!(upstream_chats(&upstream, 5).len(), 5, "no copy left");
    let steps = read_lake(data.path()).steps;
    assert_eq!(steps.len(), 1);
    assert!(!steps[0].tags.contains_key("shadow_of"));
}
