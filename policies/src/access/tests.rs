use std::path::PathBuf;

use serde_json::json;

use super::*;
use crate::store::{Policy, PolicyStore};

fn quickstart() -> PathBuf {
    atdp_testkit::repo_root().join("policies/examples/quickstart")
}

fn policy() -> AccessPolicy {
    AccessPolicy::load(&quickstart()).unwrap()
}

fn call(entities: &[&str], trust: &str, bytes: i64) -> serde_json::Value {
    json!({"entities": entities, "upstream_trust": trust, "request_bytes": bytes, "unscannable": []})
}

const ROUTER: &str = "atdp-acme-router-key";
const REPORTS: &str = "atdp-globex-reports-key";
const REVOKED: &str = "atdp-acme-revoked-key";

#[test]
fn model_calls_by_key_pii_and_upstream() {
    let p = policy();
    let key = |k: &str| ("ApiKey", hash_api_key(k));
    let decide = |k: &str, context| {
        let (kind, id) = key(k);
        p.decide(
            (kind, &id),
            "invoke_model",
            ("Model", "gpt-4.1-mini"),
            context,
        )
    };
    let ok = decide(ROUTER, call(&["EMAIL_ADDRESS"], "external", 2_000));
    assert!(ok.allowed, "{ok:?}");
    assert_eq!(ok.policies, ["active-keys-invoke"]);

    let ssn = decide(ROUTER, call(&["US_SSN"], "external", 2_000));
    assert!(!ssn.allowed);
    assert_eq!(ssn.policies, ["no-ssn-or-secrets-external"]);
    // The same request to an internal upstream is fine.
    assert!(decide(ROUTER, call(&["US_SSN"], "internal", 2_000)).allowed);

    assert!(
        !decide(ROUTER, call(&[], "internal", 9_000_000)).allowed,
        "over 8 MiB"
    );
    assert!(
        !decide(REVOKED, call(&[], "internal", 10)).allowed,
        "revoked key"
    );
    // An unknown key: its attributes cannot be read, which is an error, which denies.
    let unknown = decide("not-a-key", call(&[], "internal", 10));
    assert!(!unknown.allowed);
}

#[test]
fn tools_rewards_and_tenant_isolation() {
    let p = policy();
    let router = hash_api_key(ROUTER);
    let reports = hash_api_key(REPORTS);
    let ctx = || call(&[], "internal", 10);
    assert!(
        p.decide(("ApiKey", &router), "call_tool", ("Tool", "refund"), ctx())
            .allowed
    );
    assert!(
        !p.decide(
            ("ApiKey", &router),
            "call_tool",
            ("Tool", "delete_account"),
            ctx()
        )
        .allowed
    );
    assert!(
        !p.decide(("ApiKey", &reports), "call_tool", ("Tool", "search"), ctx())
            .allowed
    );

    // Trajectories are entities with their tenant; rewards stay within the tenant.
    let with_trajectory = |tenant: &str| {
        let entities = format!(
            r#"[{{"uid": {{"type": "Atdp::Trajectory", "id": "t-1"}}, "attrs": {{"tenant": {{"__entity": {{"type": "Atdp::Tenant", "id": "{tenant}"}}}}}}, "parents": [{{"type": "Atdp::Tenant", "id": "{tenant}"}}]}}]"#
        );
        let mut all: Vec<serde_json::Value> = serde_json::from_str(
            &std::fs::read_to_string(quickstart().join("entities.json")).unwrap(),
        )
        .unwrap();
        all.extend(serde_json::from_str::<Vec<serde_json::Value>>(&entities).unwrap());
        AccessPolicy::from_sources(
            &std::fs::read_to_string(quickstart().join("schema.cedarschema")).unwrap(),
            &std::fs::read_to_string(quickstart().join("policies.cedar")).unwrap(),
            &serde_json::to_string(&all).unwrap(),
        )
        .unwrap()
    };
    let acme = with_trajectory("acme");
    assert!(
        acme.decide(
            ("ApiKey", &router),
            "write_reward",
            ("Trajectory", "t-1"),
            json!({})
        )
        .allowed
    );
    assert!(
        !acme
            .decide(
                ("ApiKey", &reports),
                "write_reward",
                ("Trajectory", "t-1"),
                json!({})
            )
            .allowed
    );

    // Auditors: read within their tenants; reveal only as an officer with a reason.
    assert!(
        acme.decide(
            ("Auditor", "bob"),
            "read_trajectory",
            ("Trajectory", "t-1"),
            json!({})
        )
        .allowed
    );
    assert!(
        !acme
            .decide(
                ("Auditor", "bob"),
                "reveal_pii",
                ("Trajectory", "t-1"),
                json!({"reason": "curious"})
            )
            .allowed
    );
    assert!(
        acme.decide(
            ("Auditor", "ana"),
            "reveal_pii",
            ("Trajectory", "t-1"),
            json!({"reason": "DSAR #4411"})
        )
        .allowed
    );
    assert!(
        !acme
            .decide(
                ("Auditor", "ana"),
                "reveal_pii",
                ("Trajectory", "t-1"),
                json!({"reason": ""})
            )
            .allowed
    );
    let globex = with_trajectory("globex");
    assert!(
        !globex
            .decide(
                ("Auditor", "ana"),
                "read_trajectory",
                ("Trajectory", "t-1"),
                json!({})
            )
            .allowed
    );
    assert!(
        acme.decide(("Auditor", "ana"), "erase", ("Tenant", "acme"), json!({}))
            .allowed
    );
    assert!(
        !acme
            .decide(("Auditor", "ana"), "erase", ("Tenant", "globex"), json!({}))
            .allowed
    );
}

#[test]
fn malformed_requests_deny() {
    let p = policy();
    let router = hash_api_key(ROUTER);
    // Missing context fields, wrong types, unknown actions: errors, so denials.
    let missing = p.decide(
        ("ApiKey", &router),
        "invoke_model",
        ("Model", "m"),
        json!({"entities": []}),
    );
    assert!(!missing.allowed && !missing.errors.is_empty());
    let wrong = p.decide(
        ("ApiKey", &router),
        "invoke_model",
        ("Model", "m"),
        json!({"entities": [], "upstream_trust": "internal", "request_bytes": "big"}),
    );
    assert!(!wrong.allowed);
    for odd in [json!(1.5), json!(null), json!({"nested": null})] {
        let verdict = p.decide(
            ("ApiKey", &router),
            "invoke_model",
            ("Model", "m"),
            json!({"entities": [], "upstream_trust": "internal", "request_bytes": odd}),
        );
        assert!(!verdict.allowed && !verdict.errors.is_empty(), "{odd}");
    }
    assert!(
        !p.decide(
            ("ApiKey", &router),
            "drop_tables",
            ("Model", "m"),
            json!({})
        )
        .allowed
    );
}

#[test]
fn invalid_reload_keeps_the_old_policy() {
    let dir = std::env::temp_dir().join(format!("atdp-cedar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["schema.cedarschema", "policies.cedar", "entities.json"] {
        std::fs::copy(quickstart().join(name), dir.join(name)).unwrap();
    }
    let store = PolicyStore::new(Policy::load(&dir).unwrap());
    let router = hash_api_key(ROUTER);
    let allowed = |store: &PolicyStore| {
        store
            .current()
            .1
            .access
            .decide(
                ("ApiKey", &router),
                "invoke_model",
                ("Model", "m"),
                call(&[], "internal", 10),
            )
            .allowed
    };
    assert!(allowed(&store));

    // A typo (unknown attribute) fails validation: refused, old policy in force.
    let policies = std::fs::read_to_string(dir.join("policies.cedar")).unwrap();
    std::fs::write(
        dir.join("policies.cedar"),
        policies.replace("principal.active &&", "principal.activ &&"),
    )
    .unwrap();
    let error = store.reload(&dir).unwrap_err().to_string();
    assert!(error.contains("does not match the schema"), "{error}");
    assert_eq!(store.current().0, 1);
    assert!(allowed(&store));

    // A syntax error: refused too.
    std::fs::write(
        dir.join("policies.cedar"),
        "permit (principal, action, resource) when {",
    )
    .unwrap();
    assert!(store.reload(&dir).is_err());
    assert!(allowed(&store));

    // A valid change takes effect: deny everything for this key.
    std::fs::write(
        dir.join("policies.cedar"),
        format!("{policies}\n@id(\"freeze\")\nforbid (principal, action, resource);\n"),
    )
    .unwrap();
    assert_eq!(store.reload(&dir).unwrap(), 2);
    assert!(!allowed(&store));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keys_resolve_to_agent_and_tenant() {
    let p = policy();
    let router = p.key_identity(&hash_api_key(ROUTER)).unwrap();
    assert_eq!(
        router,
        KeyIdentity {
            agent: "acme-router".into(),
            tenant: "acme".into(),
            active: true
        }
    );
    assert!(p.key_identity(&hash_api_key("not-a-key")).is_none());
    assert!(!p.key_identity(&hash_api_key(REVOKED)).unwrap().active);
    assert!(p.tenants().contains(&"acme".to_owned()));
    assert!(p.tenants().contains(&"globex".to_owned()));
}

#[test]
fn rewards_only_on_the_keys_own_tenant() {
    let p = policy();
    let router = hash_api_key(ROUTER);
    let own = p.decide_on_trajectory(
        ("ApiKey", &router),
        "write_reward",
        "t-1",
        "acme",
        json!({}),
    );
    assert!(own.allowed, "{own:?}");
    assert_eq!(own.policies, ["reward-own-tenant"]);
    let other = p.decide_on_trajectory(
        ("ApiKey", &router),
        "write_reward",
        "t-1",
        "globex",
        json!({}),
    );
    assert!(!other.allowed);
    // Several trajectories at once: one verdict each, in order, as one by one.
    let many = p.decide_on_trajectories(
        ("ApiKey", &router),
        "write_reward",
        &["t-1", "t-2", "t-3"],
        "acme",
        json!({}),
    );
    assert_eq!(many.len(), 3);
    assert!(
        many.iter()
            .all(|v| v.allowed && v.policies == ["reward-own-tenant"])
    );
    let foreign = p.decide_on_trajectories(
        ("ApiKey", &router),
        "write_reward",
        &["t-1", "t-2"],
        "globex",
        json!({}),
    );
    assert!(foreign.iter().all(|v| !v.allowed));
}

#[test]
fn auditors_are_known_by_id() {
    let policy = policy();
    assert!(policy.is_auditor("ana"));
    assert!(policy.is_auditor(&hash_api_key("sk-atdp-demo-auditor")));
    assert!(!policy.is_auditor(&hash_api_key("sk-atdp-demo-agent")));
    assert!(!policy.is_auditor("nobody"));
}

#[test]
fn schema_checks_are_remembered_by_ids_and_context_shape() {
    let p = policy();
    let router = hash_api_key(ROUTER);
    let decide = |model: &str, context| {
        p.decide(
            ("ApiKey", &router),
            "invoke_model",
            ("Model", model),
            context,
        )
    };
    assert!(decide("m", call(&["EMAIL_ADDRESS"], "internal", 10)).allowed);
    let checked = p.checked.lock().unwrap().len();
    assert_eq!(checked, 1);
    // Other values of the same shape reuse the check and still decide on their values.
    assert!(decide("m", call(&["PHONE_NUMBER", "IBAN_CODE"], "internal", 20)).allowed);
    assert!(!decide("m", call(&["US_SSN"], "external", 20)).allowed);
    assert!(!decide("m", call(&[], "internal", 9_000_000)).allowed);
    assert_eq!(
        p.checked.lock().unwrap().len(),
        2,
        "an empty set is its own shape"
    );
    // A context of another shape after a checked one is checked, and refused.
    let wrong = decide(
        "m",
        json!({"entities": [], "upstream_trust": "internal", "request_bytes": "big", "unscannable": []}),
    );
    assert!(
        !wrong.allowed && wrong.errors.iter().any(|e| e.contains("is not valid for")),
        "{wrong:?}"
    );
    let missing = decide(
        "m",
        json!({"entities": [], "upstream_trust": "internal", "request_bytes": 1}),
    );
    assert!(
        !missing.allowed
            && missing
                .errors
                .iter()
                .any(|e| e.contains("is not valid for")),
        "{missing:?}"
    );
    // Another resource is another check.
    assert!(decide("n", call(&["EMAIL_ADDRESS"], "internal", 10)).allowed);
    assert_eq!(p.checked.lock().unwrap().len(), 3);
}

#[test]
fn each_action_sees_only_the_policies_that_can_match_it_and_decides_the_same() {
    let source = |name: &str| std::fs::read_to_string(quickstart().join(name)).unwrap();
    // The quickstart's policies, plus one in `action in [...]` form and one for `call_tool`
    // whose condition fails to evaluate (overflow) on large requests.
    let policies = format!(
        "{}\n@id(\"group-scope\")\nforbid (principal, action in [Atdp::Action::\"invoke_model\"], resource) when {{ context.request_bytes == 7 }};\n@id(\"overflowing\")\nforbid (principal, action == Atdp::Action::\"call_tool\", resource) when {{ context.request_bytes * 4611686018427387904 > 0 }};\n",
        source("policies.cedar")
    );
    let load = || {
        AccessPolicy::from_sources(
            &source("schema.cedarschema"),
            &policies,
            &source("entities.json"),
        )
        .unwrap()
    };
    let split = load();
    let mut whole = load();
    whole.by_action.clear();
    let names = |action: &str| {
        let uid = &split.actions[action];
        let mut names: Vec<_> = split.by_action[uid]
            .policies()
            .map(|p| split.names[p.id()].clone())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names("invoke_model"),
        [
            "active-keys-invoke",
            "group-scope",
            "no-ssn-or-secrets-external",
            "no-unscannable-external"
        ]
    );
    assert_eq!(
        names("call_tool"),
        [
            "acme-router-tools",
            "demo-agent-tools",
            "group-scope",
            "overflowing"
        ]
    );

    let keys = [ROUTER, REPORTS, REVOKED, "sk-atdp-demo-agent"].map(hash_api_key);
    let mut denied_with_errors = 0;
    for key in &keys {
        for bytes in [7, 10, 9_000_000] {
            for (entities, trust) in [(&[][..], "internal"), (&["US_SSN"][..], "external")] {
                for (action, resource) in [
                    ("invoke_model", ("Model", "gpt-4.1-mini")),
                    ("call_tool", ("Tool", "refund")),
                    ("call_tool", ("Tool", "delete_account")),
                ] {
                    let decide = |p: &AccessPolicy| {
                        p.decide(
                            ("ApiKey", key),
                            action,
                            resource,
                            call(entities, trust, bytes),
                        )
                    };
                    let (a, b) = (decide(&split), decide(&whole));
                    assert_eq!(a, b, "{action} {resource:?} {bytes} {entities:?}");
                    denied_with_errors += usize::from(!a.errors.is_empty());
                }
            }
        }
    }
    // The overflowing policy did error (on call_tool only), the same way in both.
    assert!(denied_with_errors > 0);
    let ok = split.decide(
        ("ApiKey", &keys[0]),
        "invoke_model",
        ("Model", "m"),
        call(&[], "internal", 9_000_000_000),
    );
    assert!(ok.errors.is_empty(), "{ok:?}");
    for (action, resource, context) in [
        ("write_reward", ("Trajectory", "t-1"), json!({})),
        ("erase", ("Tenant", "acme"), json!({})),
    ] {
        let (a, b) = (
            split.decide(("ApiKey", &keys[0]), action, resource, context.clone()),
            whole.decide(("ApiKey", &keys[0]), action, resource, context),
        );
        assert_eq!(a, b, "{action}");
    }
}

#[test]
fn a_schema_that_does_not_declare_a_context_attribute_decides_without_it() {
    // A policy directory written before `unscannable` existed.
    let schema = r#"
        namespace Atdp {
          entity Tenant;
          entity ApiKey in [Tenant] = { "active": Bool };
          entity Model;
          type CallContext = { "entities": Set<String>, "upstream_trust": String, "request_bytes": Long };
          action invoke_model appliesTo { principal: [ApiKey], resource: [Model], context: CallContext };
        }
    "#;
    let policies = r#"
        @id("small")
        permit (principal, action == Atdp::Action::"invoke_model", resource)
        when { principal.active && context.request_bytes <= 100 };
    "#;
    let key = hash_api_key("k");
    let entities = format!(
        r#"[{{"uid": {{"type": "Atdp::ApiKey", "id": "{key}"}}, "attrs": {{"active": true}}, "parents": [{{"type": "Atdp::Tenant", "id": "t"}}]}},
            {{"uid": {{"type": "Atdp::Tenant", "id": "t"}}, "attrs": {{}}, "parents": []}}]"#
    );
    let p = AccessPolicy::from_sources(schema, policies, &entities).unwrap();
    let decide = |bytes: i64| {
        p.decide(
            ("ApiKey", &key),
            "invoke_model",
            ("Model", "m"),
            call(&["EMAIL_ADDRESS"], "external", bytes),
        )
    };
    let allowed = decide(10);
    assert!(allowed.allowed, "{allowed:?}");
    assert_eq!(allowed.policies, ["small"]);
    assert!(!decide(1_000).allowed);
    // A policy cannot read an attribute its schema does not declare: it does not load.
    let reads_undeclared = r#"
        @id("images")
        forbid (principal, action == Atdp::Action::"invoke_model", resource)
        when { context.unscannable.contains("image") };
    "#;
    assert!(AccessPolicy::from_sources(schema, reads_undeclared, &entities).is_err());
}
