//! `POST /v1/atdp/rewards`.

use serde_json::json;

use crate::harness::*;

fn post(port: u16, path: &str, key: &str, body: &serde_json::Value) -> Response {
    let auth = format!("Bearer {key}");
    http(
        port,
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

#[test]
fn rewards_are_durable_and_stay_within_the_tenant() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let call = post(
        proxy.port,
        "/v1/chat/completions",
        DEMO_KEY,
        &json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}),
    );
    let trajectory = call.header("x-atdp-trajectory-id").unwrap().to_owned();
    let step = call.header("x-atdp-step-id").unwrap().to_owned();

    let one = post(
        proxy.port,
        "/v1/atdp/rewards",
        DEMO_KEY,
        &json!({"trajectory_id": trajectory, "step_id": step, "name": "helpful", "value": 1.0}),
    );
    assert_eq!(one.status, 200, "{}", String::from_utf8_lossy(&one.body));
    assert_eq!(one.json()["recorded"], 1);
    let batch = post(
        proxy.port,
        "/v1/atdp/rewards",
        DEMO_KEY,
        &json!({"rewards": [
            {"trajectory_id": trajectory, "name": "resolved", "value": 1, "terminal": true},
            {"trajectory_id": "not-seen-yet", "name": "resolved", "value": 0.5}
        ]}),
    );
    assert_eq!(batch.status, 200);
    assert_eq!(batch.json()["recorded"], 2);

    // A step reward must name a step of its trajectory.
    let elsewhere = post(
        proxy.port,
        "/v1/atdp/rewards",
        DEMO_KEY,
        &json!({"trajectory_id": "another-one", "step_id": step, "name": "x", "value": 1}),
    );
    assert_eq!(
        elsewhere.status,
        400,
        "{}",
        String::from_utf8_lossy(&elsewhere.body)
    );
    assert_eq!(elsewhere.json()["error"]["code"], "invalid_reward");

    // Another tenant's key rewarding this trajectory id (and this step id) is answered as for
    // an id unknown anywhere: accepted, into its own partition, where no step of this
    // tenant's can be joined to it.
    let foreign = post(
        proxy.port,
        "/v1/atdp/rewards",
        OTHER_KEY,
        &json!({"trajectory_id": trajectory, "step_id": step, "name": "x", "value": 1}),
    );
    let unknown = post(
        proxy.port,
        "/v1/atdp/rewards",
        OTHER_KEY,
        &json!({"trajectory_id": "exists-nowhere", "step_id": "nowhere", "name": "x", "value": 1}),
    );
    assert_eq!((foreign.status, unknown.status), (200, 200));
    let shape = |r: &Response| {
        let mut v = r.json();
        v["rewards"][0]["reward_id"] = json!(null);
        v["rewards"][0]["trajectory_id"] = json!(null);
        v
    };
    assert_eq!(
        shape(&foreign),
        shape(&unknown),
        "the two answers say the same"
    );
    let invalid = post(
        proxy.port,
        "/v1/atdp/rewards",
        DEMO_KEY,
        &json!({"trajectory_id": trajectory, "value": 1}),
    );
    assert_eq!(invalid.status, 400);

    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.rewards.len(), 5);
    let (demo, other): (Vec<&atdp_schema::Reward>, Vec<&atdp_schema::Reward>) =
        lake.rewards.iter().partition(|r| r.tenant_id == "demo");
    assert_eq!((demo.len(), other.len()), (3, 2));
    assert!(
        other
            .iter()
            .all(|r| r.tenant_id == "other" && r.source == "api")
    );
    let terminal = lake
        .rewards
        .iter()
        .find(|r| r.name == "resolved" && r.trajectory_id == trajectory)
        .unwrap();
    assert!(terminal.terminal && terminal.step_id.is_none());
    assert_eq!(
        lake.audit
            .iter()
            .filter(|a| a.kind == "reward_written")
            .count(),
        5
    );
}

#[test]
fn rewards_are_admitted_like_calls() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &["--key-rpm", "2"]);
    let reward = json!({"trajectory_id": "t-1", "name": "helpful", "value": 1.0});
    for _ in 0..2 {
        let ok = post(proxy.port, "/v1/atdp/rewards", DEMO_KEY, &reward);
        assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    }
    let limited = post(proxy.port, "/v1/atdp/rewards", DEMO_KEY, &reward);
    assert_eq!(
        limited.status,
        429,
        "{}",
        String::from_utf8_lossy(&limited.body)
    );
    assert!(limited.header("retry-after").is_some());
    // Another key has its own bucket.
    let other = post(
        proxy.port,
        "/v1/atdp/rewards",
        "sk-atdp-other-agent",
        &reward,
    );
    assert_eq!(
        other.status,
        200,
        "{}",
        String::from_utf8_lossy(&other.body)
    );
}

#[test]
fn names_ids_and_tags_that_people_and_programs_misread_are_refused() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let base = json!({"trajectory_id": "t-1", "name": "helpful", "value": 1.0});
    let tags: serde_json::Map<String, serde_json::Value> =
        (0..33).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (field, value) in [
        ("name", json!("task_success\u{200b}")),
        ("name", json!("helpful\n\u{1b}[2J")),
        ("name", json!("user rating")),
        ("reward_id", json!("")),
        ("reward_id", json!("r-1\u{202e}")),
        ("reward_id", json!("r".repeat(201))),
        ("tags", json!(tags)),
        ("tags", json!({"note": "x".repeat(257)})),
    ] {
        let mut reward = base.clone();
        reward[field] = value;
        let refused = post(proxy.port, "/v1/atdp/rewards", DEMO_KEY, &reward);
        assert_eq!(
            refused.status,
            400,
            "{field}: {}",
            String::from_utf8_lossy(&refused.body)
        );
        assert_eq!(refused.json()["error"]["code"], "invalid_reward");
    }
    let mut fine = base.clone();
    fine["name"] = json!("task_success.v2-b");
    fine["reward_id"] = json!("ticket-4711-resolved");
    fine["tags"] = json!({"by": "reviewer"});
    let ok = post(proxy.port, "/v1/atdp/rewards", DEMO_KEY, &fine);
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
}
