//! `atdp-policy key add|revoke|list`: keys made, printed once, stored as their SHA-256,
//! decided by Cedar as the directory says; refused changes write nothing; concurrent changes
//! lose nothing.

use std::path::Path;

use atdp_policies::{AccessPolicy, hash_api_key};
use serde_json::json;

use super::run;

/// A copy of the example policy directory.
fn directory() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let example = atdp_testkit::repo_root().join("examples/policy");
    for entry in std::fs::read_dir(example).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

fn key(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["key"];
    all.extend_from_slice(args);
    let policy = dir.to_str().unwrap();
    all.extend_from_slice(&["--policy", policy]);
    run(&all, "")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn may_invoke(dir: &Path, key: &str) -> bool {
    let context = json!({"entities": [], "upstream_trust": "internal", "request_bytes": 10, "unscannable": []});
    AccessPolicy::load(dir)
        .unwrap()
        .decide(
            ("ApiKey", &hash_api_key(key)),
            "invoke_model",
            ("Model", "local/qwen"),
            context,
        )
        .allowed
}

#[test]
fn a_key_is_printed_once_stored_as_its_hash_and_revoked_by_its_id() {
    let dir = directory();
    let out = key(
        dir.path(),
        &["add", "--tenant", "research", "--agent", "notebook-helper"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let new_key = text(&out.stdout).trim().to_owned();
    assert!(
        new_key.starts_with("sk-atdp-") && new_key.len() == 48,
        "{new_key}"
    );
    let entities = std::fs::read_to_string(dir.path().join("entities.json")).unwrap();
    assert!(!entities.contains(&new_key), "the key itself is stored");
    let id = hash_api_key(&new_key);
    assert!(entities.contains(&id));
    assert!(
        !text(&out.stderr).contains(&new_key),
        "the key is printed twice"
    );
    assert!(
        may_invoke(dir.path(), &new_key),
        "the new key is not in force"
    );

    let list = key(dir.path(), &["list"]);
    let listed = text(&list.stdout);
    let line = listed.lines().find(|l| l.contains(&id)).unwrap_or_default();
    assert!(
        line.starts_with("api_key\t")
            && line.contains("agent=notebook-helper")
            && line.contains("tenants=research")
            && line.ends_with("active"),
        "{listed}"
    );

    let revoke = key(dir.path(), &["revoke", &id[..10]]);
    assert!(revoke.status.success(), "{}", text(&revoke.stderr));
    assert!(
        !may_invoke(dir.path(), &new_key),
        "a revoked key still invokes"
    );
    let again = key(dir.path(), &["revoke", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("already revoked"));
    let json_list = key(dir.path(), &["list", "--json"]);
    let entry: serde_json::Value = text(&json_list.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["id"] == id.as_str())
        .unwrap();
    assert_eq!(entry["active"], false);
    assert_eq!(entry["kind"], "api_key");
}

#[test]
fn an_auditor_key_reads_its_tenants_and_is_removed_on_revoke() {
    let dir = directory();
    let out = key(
        dir.path(),
        &["add", "--auditor", "reviewer", "--tenant", "research"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let auditor = hash_api_key(text(&out.stdout).trim());
    let reads = |tenant: &str| {
        AccessPolicy::load(dir.path())
            .unwrap()
            .decide_on_trajectory(
                ("Auditor", &auditor),
                "read_trajectory",
                "t1",
                tenant,
                json!({}),
            )
            .allowed
    };
    assert!(reads("research"));
    assert!(!reads("support"));
    let revoke = key(dir.path(), &["revoke", &auditor]);
    assert!(revoke.status.success(), "{}", text(&revoke.stderr));
    let entities = std::fs::read_to_string(dir.path().join("entities.json")).unwrap();
    assert!(!entities.contains(&auditor));
}

#[test]
fn a_change_that_cannot_be_made_writes_nothing() {
    let dir = directory();
    let path = dir.path().join("entities.json");
    let before = std::fs::read(&path).unwrap();
    let refused = [
        (
            vec!["add", "--tenant", "legal", "--agent", "a"],
            "--create-tenant",
        ),
        (
            vec!["add", "--tenant", "research", "--agent", "support-bot"],
            "belongs to tenant",
        ),
        (
            vec!["add", "--tenant", "research", "--agent", "bad name"],
            "letters, digits",
        ),
        (
            vec!["add", "--auditor", "reviewer", "--tenant", "legal"],
            "not in entities.json",
        ),
        (vec!["add", "--tenant", "research"], "--agent"),
        (vec!["revoke", "0000"], "at least 8"),
        (
            vec!["revoke", "ffffffffffffffff"],
            "0 keys or auditors match",
        ),
    ];
    for (args, why) in refused {
        let out = key(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(why),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?} printed a key");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} changed the file"
        );
    }
    // A directory whose policies the new entities would not fit is refused as a whole.
    std::fs::write(
        dir.path().join("policies.cedar"),
        "permit (principal, action, resource) when { principal.nope };",
    )
    .unwrap();
    let out = key(dir.path(), &["add", "--tenant", "research", "--agent", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // A new tenant, asked for: added with its agent and key.
    let dir = directory();
    let out = key(
        dir.path(),
        &[
            "add",
            "--tenant",
            "legal",
            "--agent",
            "contracts",
            "--create-tenant",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("keygen"));
    let tenants = AccessPolicy::load(dir.path()).unwrap().tenants();
    assert_eq!(tenants, ["legal", "research", "support"]);
}

#[test]
fn concurrent_changes_lose_nothing() {
    let dir = directory();
    let keys: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let dir = dir.path();
                scope.spawn(move || {
                    let agent = format!("agent-{i}");
                    let out = key(dir, &["add", "--tenant", "support", "--agent", &agent]);
                    assert!(out.status.success(), "{}", text(&out.stderr));
                    text(&out.stdout).trim().to_owned()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for k in &keys {
        assert!(
            may_invoke(dir.path(), k),
            "a key made concurrently does not invoke"
        );
    }
    let entities = std::fs::read_to_string(dir.path().join("entities.json")).unwrap();
    for k in &keys {
        assert!(
            entities.contains(&hash_api_key(k)),
            "a concurrent change was lost"
        );
    }
}

#[test]
fn short_ids_revoke_exactly_and_both_reference_forms_are_read() {
    let dir = directory();
    let path = dir.path().join("entities.json");
    let mut entities: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // Written by hand: a short auditor id, and a key in Cedar's `__entity` form.
    entities.push(json!({"uid": {"type": "Atdp::Auditor", "id": "ana"},
        "attrs": {"role": "reviewer", "tenants": [{"__entity": {"type": "Atdp::Tenant", "id": "support"}}]},
        "parents": []}));
    entities.push(
        json!({"uid": {"__entity": {"type": "Atdp::ApiKey", "id": "feedfacefeedface"}},
        "attrs": {"active": true},
        "parents": [{"__entity": {"type": "Atdp::Agent", "id": "support-bot"}}]}),
    );
    std::fs::write(&path, serde_json::to_string_pretty(&entities).unwrap()).unwrap();
    let listed = atdp_policies::principals::list(dir.path()).unwrap();
    let key = listed.iter().find(|p| p.id == "feedfacefeedface").unwrap();
    assert_eq!(key.agent.as_deref(), Some("support-bot"));
    assert_eq!(key.tenants, ["support"]);
    let ana = listed.iter().find(|p| p.id == "ana").unwrap();
    assert_eq!(ana.tenants, ["support"]);

    let out = key_revoke(dir.path(), "ana");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = key_revoke(dir.path(), "feedface");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("tenants=support"),
        "{}",
        text(&out.stderr)
    );
    let after = atdp_policies::principals::list(dir.path()).unwrap();
    assert!(after.iter().all(|p| p.id != "ana"));
    assert!(
        !after
            .iter()
            .find(|p| p.id == "feedfacefeedface")
            .unwrap()
            .active
    );

    // A reload's changes name a key moved to another agent.
    let before = after.clone();
    let mut moved = after;
    moved
        .iter_mut()
        .find(|p| p.id == "feedfacefeedface")
        .unwrap()
        .agent = Some("other".into());
    let changes = atdp_policies::principals::changes(&before, &moved);
    assert_eq!(
        changes["changed"],
        json!([{"kind": "api_key", "id": "feedfacefeedface"}])
    );
    assert_eq!(changes["added"], json!([]));
}

fn key_revoke(dir: &Path, id: &str) -> std::process::Output {
    key(dir, &["revoke", id])
}
