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

    // Another tenant's key cannot reward this trajectory.
    let foreign = post(
        proxy.port,
        "/v1/atdp/rewards",
        OTHER_KEY,
        &json!({"trajectory_id": trajectory, "name": "x", "value": 1}),
    );
    assert_eq!(foreign.status, 404);
    let invalid = post(
        proxy.port,
        "/v1/atdp/rewards",
        DEMO_KEY,
        &json!({"trajectory_id": trajectory, "value": 1}),
    );
    assert_eq!(invalid.status, 400);

    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.rewards.len(), 3);
    assert!(
        lake.rewards
            .iter()
            .all(|r| r.tenant_id == "demo" && r.source == "api")
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
        3
    );
}
