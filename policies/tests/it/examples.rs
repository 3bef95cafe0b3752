//! The example policy directory of `examples/policy` (a company with two teams) loads, and
//! decides and detects as its comments say.

use atdp_policies::{Action, Policy, hash_api_key};
use serde_json::json;

fn example_policy() -> Policy {
    let dir = atdp_testkit::repo_root().join("examples/policy");
    Policy::load(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn call(trust: &str, entities: &[&str]) -> serde_json::Value {
    json!({"entities": entities, "upstream_trust": trust, "request_bytes": 2000, "unscannable": []})
}

const SUPPORT_KEY: &str = "sk-northwind-support-example";
const RESEARCH_KEY: &str = "sk-northwind-research-example";

#[test]
fn the_example_policy_separates_the_two_teams() {
    let policy = example_policy();
    assert_eq!(policy.access.tenants(), ["research", "support"]);
    let key = |k: &str| ("ApiKey", hash_api_key(k));
    let model = ("Model", "gpt-4.1-mini");

    let (kind, support) = key(SUPPORT_KEY);
    let decide = |principal: &str, action: &str, resource: (&str, &str), ctx| {
        policy
            .access
            .decide((kind, principal), action, resource, ctx)
            .allowed
    };
    assert!(decide(
        &support,
        "invoke_model",
        model,
        call("external", &["EMAIL_ADDRESS"])
    ));
    assert!(!decide(
        &support,
        "invoke_model",
        model,
        call("external", &["SECRET"])
    ));
    assert!(decide(
        &support,
        "call_tool",
        ("Tool", "lookup_order"),
        call("external", &[])
    ));
    assert!(!decide(
        &support,
        "call_tool",
        ("Tool", "openai:web_search"),
        call("external", &[])
    ));

    let (_, retired) = key("sk-northwind-support-retired");
    assert!(!decide(
        &retired,
        "invoke_model",
        model,
        call("external", &[])
    ));

    let (_, research) = key(RESEARCH_KEY);
    assert!(!decide(
        &research,
        "invoke_model",
        model,
        call("external", &[])
    ));
    assert!(decide(
        &research,
        "invoke_model",
        ("Model", "local/qwen"),
        call("internal", &[])
    ));
    assert!(decide(
        &research,
        "call_tool",
        ("Tool", "mcp:https://search.northwind.example/mcp"),
        call("internal", &[])
    ));
    assert!(!decide(
        &research,
        "call_tool",
        ("Tool", "anthropic:code_execution"),
        call("internal", &[])
    ));

    // Each team's key rewards its own trajectories only.
    let reward = |principal: &str, tenant: &str| {
        policy
            .access
            .decide_on_trajectory(
                ("ApiKey", principal),
                "write_reward",
                "t1",
                tenant,
                json!({}),
            )
            .allowed
    };
    assert!(reward(&support, "support"));
    assert!(!reward(&support, "research"));

    // The support lead reads the support team's trajectories; only the officer reveals.
    let auditor = |k: &str, action: &str, tenant: &str, ctx| {
        policy
            .access
            .decide_on_trajectory(("Auditor", &hash_api_key(k)), action, "t1", tenant, ctx)
            .allowed
    };
    let lead = "sk-northwind-support-lead-example";
    let officer = "sk-northwind-compliance-example";
    assert!(auditor(lead, "read_trajectory", "support", json!({})));
    assert!(!auditor(lead, "read_trajectory", "research", json!({})));
    assert!(!auditor(
        lead,
        "reveal_pii",
        "support",
        json!({"reason": "ticket 12"})
    ));
    assert!(auditor(
        officer,
        "reveal_pii",
        "research",
        json!({"reason": "ticket 12"})
    ));
    assert!(!auditor(
        officer,
        "reveal_pii",
        "research",
        json!({"reason": ""})
    ));
}

#[test]
fn the_example_masking_finds_its_own_entities_and_masks_by_destination() {
    let policy = example_policy();
    let text = "Order NW-20261201 for Kestrel: call back Jane Doe on +44 20 7946 0958.";
    let found: Vec<&str> = policy.scanner.scan(text).iter().map(|s| s.entity).collect();
    for entity in ["ORDER_ID", "CODENAME", "PERSON", "PHONE_NUMBER"] {
        assert!(found.contains(&entity), "{entity} not in {found:?}");
    }
    let masking = &policy.masking;
    assert_eq!(masking.external.action("ORDER_ID"), Action::Allow);
    assert_eq!(masking.external.action("CODENAME"), Action::Redact);
    assert_eq!(masking.storage.action("ORDER_ID"), Action::Tokenize);
    assert_eq!(masking.internal.action("PERSON"), Action::Allow);
    assert_eq!(masking.detection.thresholds.get("LOCATION"), Some(&0.6_f32));
    assert!(
        policy
            .forwarding
            .headers
            .iter()
            .any(|h| h == "x-request-source")
    );
}
