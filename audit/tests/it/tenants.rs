//! Two tenants whose trajectory and step ids are the same: search, evidence, export and SQL
//! keep each tenant's rows apart, and an auditor's SQL sees only the auditor's tenants.

use std::collections::BTreeSet;
use std::process::Output;
use std::time::Duration;

use atdp_audit::{Auditor, Search, search};
use atdp_lake::{LakeWriter, WriterConfig};
use atdp_policies::{Policy, hash_api_key};
use atdp_schema::{AuditEvent, Message, Reward, Step, now_micros};

use crate::common::*;

/// The trajectory id both tenants' clients chose.
const TWIN: &str = "order-4711";
/// Step ids both tenants' lakes hold (imported data, or a client that names its steps).
const STEPS: [&str; 2] = ["twin-step-1", "twin-step-2"];
/// An auditor of both `demo` and `other`.
const BOTH_AUDITOR: &str = "sk-test-both-auditor";

fn reply(tenant: &str, turn: usize) -> String {
    format!("{tenant} twin reply {turn}")
}

/// The common fixture, plus the twin trajectory in `demo` (reward 1) and in `other`
/// (reward -1, and a step reward), and an auditor of both tenants.
async fn twins() -> (Fixture, Policy) {
    let f = fixture().await;
    let path = f.policy_dir.join("entities.json");
    let mut entities: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    entities.as_array_mut().unwrap().push(serde_json::json!({
        "uid": {"type": "Atdp::Auditor", "id": hash_api_key(BOTH_AUDITOR)},
        "attrs": {"role": "analyst", "tenants": [
            {"__entity": {"type": "Atdp::Tenant", "id": "demo"}},
            {"__entity": {"type": "Atdp::Tenant", "id": "other"}}
        ]},
        "parents": []
    }));
    std::fs::write(&path, serde_json::to_string_pretty(&entities).unwrap()).unwrap();
    let policy = Policy::load(&f.policy_dir).unwrap();

    let mut config = WriterConfig::new(f.lake_url.clone(), f.dir.path().join("wal-twins"));
    config.fsync = false;
    let writer = LakeWriter::open(config).await.unwrap();
    let at = now_micros();
    for tenant in ["demo", "other"] {
        for (turn, id) in STEPS.iter().enumerate() {
            writer
                .append(Step {
                    step_id: (*id).into(),
                    trajectory_id: TWIN.into(),
                    parent_step_id: (turn > 0).then(|| STEPS[turn - 1].to_owned()),
                    turn_index: turn as i32,
                    tenant_id: tenant.into(),
                    agent_id: format!("{tenant}-agent"),
                    started_at: at + turn as i64 * 1_000,
                    ended_at: Some(at + turn as i64 * 1_000 + 500),
                    api: "openai.chat".into(),
                    upstream: "default".into(),
                    model_requested: "gpt-4o-mini".into(),
                    request_messages: vec![Message {
                        role: "user".into(),
                        content: Some(format!("{tenant} twin question {turn}")),
                        ..Message::default()
                    }],
                    response_message: Some(Message {
                        role: "assistant".into(),
                        content: Some(reply(tenant, turn)),
                        ..Message::default()
                    }),
                    status: "ok".into(),
                    finish_reason: Some("stop".into()),
                    ..Step::default()
                })
                .unwrap();
        }
    }
    let reward = |tenant: &str, step: Option<&str>, value: f64| Reward {
        reward_id: atdp_schema::new_id(),
        trajectory_id: TWIN.into(),
        step_id: step.map(str::to_owned),
        tenant_id: tenant.into(),
        name: "task_success".into(),
        value,
        source: "api".into(),
        created_at: at + 10_000,
        ..Reward::default()
    };
    writer.append(reward("demo", None, 1.0)).unwrap();
    writer.append(reward("other", None, -1.0)).unwrap();
    writer
        .append(reward("other", Some(STEPS[1]), -0.5))
        .unwrap();
    writer
        .append(AuditEvent {
            event_id: atdp_schema::new_id(),
            tenant_id: "other".into(),
            occurred_at: at,
            kind: "request_allowed".into(),
            actor: "key:other-agent".into(),
            subject: Some(STEPS[0].into()),
            decision: Some("allow".into()),
            ..AuditEvent::default()
        })
        .unwrap();
    writer.flush().await.unwrap();
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
    (f, policy)
}

/// The parsed `detail_json` of the `query` events of `actor`.
async fn query_details(f: &Fixture, actor: &str) -> Vec<serde_json::Value> {
    let batches = f
        .catalog()
        .await
        .sql(&format!(
            "SELECT detail_json FROM audit WHERE kind = 'query' AND actor = '{actor}'"
        ))
        .await
        .unwrap();
    let mut out = Vec::new();
    for batch in &batches {
        let column =
            arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
        for value in arrow::array::cast::as_string_array(&column)
            .iter()
            .flatten()
        {
            out.push(serde_json::from_str(value).unwrap());
        }
    }
    out
}

fn cli(f: &Fixture, wal: &str, args: &[&str]) -> Output {
    f.command(wal).args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// (tenant, step, preview) of every hit.
fn seen(hits: &[atdp_audit::Hit]) -> BTreeSet<(String, String, String)> {
    hits.iter()
        .map(|h| (h.tenant_id.clone(), h.step_id.clone(), h.preview.clone()))
        .collect()
}

fn own(tenants: &[&str]) -> BTreeSet<(String, String, String)> {
    tenants
        .iter()
        .flat_map(|t| {
            STEPS
                .iter()
                .enumerate()
                .map(|(turn, id)| ((*t).to_owned(), (*id).to_owned(), reply(t, turn)))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_shows_each_tenants_own_row_of_a_shared_id() {
    let (f, policy) = twins().await;
    let catalog = f.catalog().await;
    let both = Auditor::from_key(&policy.access, BOTH_AUDITOR).unwrap();
    assert_eq!(both.tenants, ["demo", "other"]);
    let twin = Search {
        trajectory: Some(TWIN.into()),
        limit: 50,
        ..Search::default()
    };
    let page = search(&catalog, &both.tenants, &twin).await.unwrap();
    assert_eq!(page.hits.len(), 4);
    assert_eq!(seen(&page.hits), own(&["demo", "other"]));
    // Only demo's twin has a reward of at least 0.5: its steps, with its own rows.
    let rewarded = Search {
        reward_min: Some(0.5),
        ..twin.clone()
    };
    let page = search(&catalog, &both.tenants, &rewarded).await.unwrap();
    assert_eq!(seen(&page.hits), own(&["demo"]));
    // Only other's replies hold this text: not demo's steps of the same ids.
    let text = Search {
        text: Some("other twin reply".into()),
        ..twin.clone()
    };
    let page = search(&catalog, &both.tenants, &text).await.unwrap();
    assert_eq!(seen(&page.hits), own(&["other"]));
    // Pages of one hit walk all four, each once.
    let mut walked = Vec::new();
    for offset in 0..5 {
        let one = Search {
            offset,
            limit: 1,
            ..twin.clone()
        };
        walked.extend(search(&catalog, &both.tenants, &one).await.unwrap().hits);
    }
    assert_eq!(walked.len(), 4);
    assert_eq!(seen(&walked), own(&["demo", "other"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_evidence_holds_the_rows_of_the_hits_only() {
    let (f, _) = twins().await;
    let evidence = f.dir.path().join("evidence.json");
    let out = stdout(&cli(
        &f,
        "wal-q",
        &[
            "query",
            "--auditor-key",
            BOTH_AUDITOR,
            "--trajectory",
            TWIN,
            "--reward-min",
            "0.5",
            "--format",
            "json",
            "--evidence",
            evidence.to_str().unwrap(),
        ],
    ));
    let hits: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(hits.len(), 2, "{out}");
    assert!(hits.iter().all(|h| h["tenant_id"] == "demo"), "{out}");
    let bundle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&evidence).unwrap()).unwrap();
    let rows: Vec<serde_json::Value> = bundle["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r["row_json"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r["tenant_id"] == "demo"), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_of_a_shared_id_holds_one_tenants_rows() {
    let (f, _) = twins().await;
    for (tenant, rewards) in [("other", [-1.0, -0.5].as_slice()), ("demo", &[1.0])] {
        let path = f.dir.path().join(format!("export-{tenant}.json"));
        stdout(&cli(
            &f,
            &format!("wal-e-{tenant}"),
            &[
                "export",
                "--auditor-key",
                BOTH_AUDITOR,
                "--trajectory",
                TWIN,
                "--tenant",
                tenant,
                "--out",
                path.to_str().unwrap(),
            ],
        ));
        let bundle: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let rows: Vec<(String, serde_json::Value)> = bundle["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["table"].as_str().unwrap().to_owned(),
                    serde_json::from_str(r["row_json"].as_str().unwrap()).unwrap(),
                )
            })
            .collect();
        assert!(
            rows.iter().all(|(_, r)| r["tenant_id"] == tenant),
            "{rows:?}"
        );
        let replies: Vec<&str> = rows
            .iter()
            .filter(|(t, _)| t == "steps")
            .map(|(_, r)| r["response_message"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(replies, [reply(tenant, 0), reply(tenant, 1)]);
        let mut values: Vec<f64> = rows
            .iter()
            .filter(|(t, _)| t == "rewards")
            .map(|(_, r)| r["value"].as_f64().unwrap())
            .collect();
        values.sort_by(f64::total_cmp);
        assert_eq!(values, rewards);
        assert_eq!(bundle["anchor"]["tenant_id"], tenant);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auditors_sql_reads_only_the_auditors_tenants() {
    let (f, _) = twins().await;
    let per_tenant =
        "SELECT tenant_id, count(*) AS n FROM steps GROUP BY tenant_id ORDER BY tenant_id";
    // The key from the environment, as for the other commands.
    let demo = f
        .command("wal-s")
        .env("ATDP_AUDITOR_KEY", DEMO_AUDITOR)
        .args(["sql", per_tenant, "--format", "csv"])
        .output()
        .unwrap();
    assert_eq!(stdout(&demo).trim(), "tenant_id,n\ndemo,4");
    // Every table is scoped: rewards, the vault and the audit trail too.
    for table in ["steps", "rewards", "pii_vault", "audit"] {
        let sql = format!("SELECT count(*) AS n FROM {table} WHERE tenant_id = 'other'");
        let out = stdout(&cli(
            &f,
            "wal-s",
            &[
                "sql",
                &sql,
                "--auditor-key",
                DEMO_AUDITOR,
                "--format",
                "csv",
            ],
        ));
        assert_eq!(out.trim(), "n\n0", "{table}: {out}");
    }
    // A join on the shared trajectory id finds demo's rows only.
    let joined = stdout(&cli(
        &f,
        "wal-s",
        &[
            "sql",
            &format!(
                "SELECT s.tenant_id, r.tenant_id AS reward_tenant, r.value FROM steps s JOIN rewards r ON s.trajectory_id = r.trajectory_id WHERE s.trajectory_id = '{TWIN}' ORDER BY s.step_id"
            ),
            "--auditor-key",
            DEMO_AUDITOR,
            "--format",
            "csv",
        ],
    ));
    assert_eq!(
        joined.trim(),
        "tenant_id,reward_tenant,value\ndemo,demo,1.0\ndemo,demo,1.0"
    );
    // An auditor of both tenants sees both; the query event names the scope.
    let both = stdout(&cli(
        &f,
        "wal-s",
        &[
            "sql",
            per_tenant,
            "--auditor-key",
            BOTH_AUDITOR,
            "--format",
            "csv",
        ],
    ));
    assert_eq!(both.trim(), "tenant_id,n\ndemo,4\nother,3");
    let actor = format!("auditor:{}", hash_api_key(BOTH_AUDITOR));
    let details = query_details(&f, &actor).await;
    assert_eq!(details.len(), 1, "{details:?}");
    assert_eq!(details[0]["tenants"], serde_json::json!(["demo", "other"]));
    // A key that is no auditor's runs nothing.
    let refused = cli(
        &f,
        "wal-s",
        &["sql", per_tenant, "--auditor-key", "sk-nobody"],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stdout).is_empty());
}
