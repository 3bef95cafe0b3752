//! Two tenants whose trajectories and steps carry the same ids: every kind of function labels
//! each tenant's units from that tenant's rows only.
//!
//! acme:   t1 = [s1, s2], t2 = [s3]        replies end with `stop`
//! globex: t1 = [s1],     t2 = [s2, s3]    replies end with `length`

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use atdp_lake::{LakeWriter, WriterConfig};
use atdp_rewards::{RewardFn, Selection};
use atdp_schema::{Message, Reward, Step};

use crate::common::{Fixture, python};

/// (tenant, trajectory, step) → value.
type Values = BTreeMap<(String, String, Option<String>), f64>;

fn twin_step(tenant: &str, trajectory: &str, step: &str, turn: i32, at: i64) -> Step {
    let finish = if tenant == "acme" { "stop" } else { "length" };
    Step {
        step_id: step.into(),
        trajectory_id: trajectory.into(),
        turn_index: turn,
        tenant_id: tenant.into(),
        agent_id: "support".into(),
        started_at: at,
        ended_at: Some(at + 1_000),
        api: "openai.chat".into(),
        upstream: "mock".into(),
        model_requested: "tiny".into(),
        request_messages: vec![Message {
            role: "user".into(),
            content: Some(format!("question of {tenant}")),
            ..Message::default()
        }],
        response_message: Some(Message {
            role: "assistant".into(),
            content: Some(format!("reply of {tenant}")),
            ..Message::default()
        }),
        finish_reason: Some(finish.into()),
        status: "ok".into(),
        training_eligible: Some(true),
        ..Step::default()
    }
}

/// A lake holding only the two tenants' twin trajectories.
async fn twins() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let lake_url = dir.path().join("lake").display().to_string();
    let mut config = WriterConfig::new(lake_url.clone(), dir.path().join("wal-twins"));
    config.fsync = false;
    let writer = LakeWriter::open(config).await.unwrap();
    let at = 1_795_910_400_000_000;
    for (tenant, trajectory, step, turn) in [
        ("acme", "t1", "s1", 0),
        ("acme", "t1", "s2", 1),
        ("acme", "t2", "s3", 0),
        ("globex", "t1", "s1", 0),
        ("globex", "t2", "s2", 0),
        ("globex", "t2", "s3", 1),
    ] {
        writer
            .append(twin_step(
                tenant,
                trajectory,
                step,
                turn,
                at + i64::from(turn),
            ))
            .unwrap();
    }
    writer.flush().await.unwrap();
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
    Fixture::at(dir, lake_url)
}

/// The rows `function` wrote, by unit.
async fn written(f: &Fixture, function: &RewardFn) -> Values {
    use deltalake::datafusion::prelude::{col, lit};
    let rewards = f
        .catalog()
        .await
        .frame(atdp_schema::Table::Rewards)
        .await
        .unwrap();
    let rows: Vec<Reward> = atdp_lake::rows(
        rewards.filter(col("reward_fn_version").eq(lit(function.version.clone()))),
        atdp_schema::rewards_from_batch,
    )
    .await
    .unwrap();
    let mut out = Values::new();
    for r in rows {
        let key = (r.tenant_id, r.trajectory_id, r.step_id);
        assert!(out.insert(key.clone(), r.value).is_none(), "{key:?} twice");
    }
    out
}

fn values(rows: &[(&str, &str, Option<&str>, f64)]) -> Values {
    rows.iter()
        .map(|(tenant, trajectory, step, value)| {
            (
                (
                    (*tenant).to_owned(),
                    (*trajectory).to_owned(),
                    step.map(str::to_owned),
                ),
                *value,
            )
        })
        .collect()
}

/// Each step's own `finish_reason`: 1 for acme's (`stop`), 0 for globex's (`length`).
fn own_finish() -> Values {
    values(&[
        ("acme", "t1", Some("s1"), 1.0),
        ("acme", "t1", Some("s2"), 1.0),
        ("acme", "t2", Some("s3"), 1.0),
        ("globex", "t1", Some("s1"), 0.0),
        ("globex", "t2", Some("s2"), 0.0),
        ("globex", "t2", Some("s3"), 0.0),
    ])
}

#[tokio::test]
async fn a_trajectory_query_sees_only_the_tenant_of_each_unit() {
    let f = twins().await;
    let function = f.spec(
        "turns",
        "name = \"turns\"\nkind = \"sql\"\ntarget = \"trajectory\"\nquery = \"SELECT trajectory_id, count(*) AS value FROM steps GROUP BY trajectory_id\"\n",
    );
    // One tenant first: its counts are its own, not the sum over both tenants.
    let acme = Selection {
        tenant_id: Some("acme".into()),
        ..Selection::default()
    };
    assert_eq!(f.run(&function, &acme).await.unwrap().written, 2);
    assert_eq!(
        written(&f, &function).await,
        values(&[("acme", "t1", None, 2.0), ("acme", "t2", None, 1.0)])
    );
    // Then every tenant: only globex is left, with its own counts.
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!((report.pending, report.written), (2, 2));
    assert_eq!(
        written(&f, &function).await,
        values(&[
            ("acme", "t1", None, 2.0),
            ("acme", "t2", None, 1.0),
            ("globex", "t1", None, 1.0),
            ("globex", "t2", None, 2.0),
        ])
    );
}

#[tokio::test]
async fn a_step_query_gives_each_step_its_own_row() {
    let f = twins().await;
    let function = f.spec(
        "stop",
        "name = \"stop\"\nkind = \"sql\"\nquery = \"SELECT trajectory_id, step_id, CASE WHEN finish_reason = 'stop' THEN 1.0 ELSE 0.0 END AS value FROM steps\"\n",
    );
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!((report.pending, report.written), (6, 6));
    assert_eq!(written(&f, &function).await, own_finish());
}

#[tokio::test]
async fn a_step_expression_reads_its_own_row() {
    let f = twins().await;
    let function = f.spec(
        "stop",
        "name = \"stop\"\nkind = \"sql\"\nexpression = \"CASE WHEN finish_reason = 'stop' THEN 1.0 ELSE 0.0 END\"\n",
    );
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(report.written, 6);
    assert_eq!(written(&f, &function).await, own_finish());
}

#[tokio::test]
async fn an_expression_may_not_read_other_rows_through_a_subquery() {
    let f = twins().await;
    let function = f.spec(
        "peek",
        "name = \"peek\"\nkind = \"sql\"\nexpression = \"(SELECT count(*) FROM steps)\"\n",
    );
    let error = f.run(&function, &Selection::default()).await.unwrap_err();
    assert!(error.to_string().contains("steps"), "{error}");
    assert!(written(&f, &function).await.is_empty());
}

#[tokio::test]
async fn an_expression_may_not_read_other_rows_through_a_window_or_an_aggregate() {
    let f = twins().await;
    // The twins share trajectory ids across tenants: a window over a trajectory would read
    // the other tenant's rows.
    for (name, expression) in [
        (
            "longest",
            "CAST(max(length(finish_reason)) OVER (PARTITION BY trajectory_id) AS DOUBLE)",
        ),
        (
            "rank",
            "CAST(row_number() OVER (ORDER BY step_id) AS DOUBLE)",
        ),
        ("count", "CAST(count(*) AS DOUBLE)"),
    ] {
        let function = f.spec(
            name,
            &format!("name = \"{name}\"\nkind = \"sql\"\nexpression = \"{expression}\"\n"),
        );
        let error = f.run(&function, &Selection::default()).await.unwrap_err();
        assert!(
            error.to_string().contains("aggregate and window functions"),
            "{name}: {error}"
        );
        assert!(written(&f, &function).await.is_empty(), "{name}");
    }
}

#[tokio::test]
async fn a_query_reads_no_audit_trail_and_no_vault() {
    let f = twins().await;
    for table in ["audit", "pii_vault"] {
        let function = f.spec(
            table,
            &format!(
                "name = \"peek\"\nkind = \"sql\"\nquery = \"SELECT s.trajectory_id, s.step_id, 1.0 AS value FROM steps s CROSS JOIN {table} t\"\n"
            ),
        );
        let error = f.run(&function, &Selection::default()).await.unwrap_err();
        assert!(error.to_string().contains(table), "{table}: {error}");
        assert!(written(&f, &function).await.is_empty(), "{table}");
    }
}

#[tokio::test]
async fn a_step_program_labels_each_tenant_in_its_own_batches() {
    let f = twins().await;
    let script = f.file(
        "finish.py",
        r#"import json, sys
lines = [json.loads(line) for line in sys.stdin]
tenants = {s["tenant_id"] for s in lines}
if len(tenants) != 1:
    sys.exit("a batch mixes tenants: %s" % sorted(tenants))
for s in lines:
    print(json.dumps({"step_id": s["step_id"], "value": 1 if s["finish_reason"] == "stop" else 0}))
"#,
    );
    let function = f.spec(
        "finish",
        &format!(
            "name = \"finish\"\nkind = \"program\"\ncommand = [{:?}, {:?}]\nbatch = 64\n",
            python(),
            script.display().to_string()
        ),
    );
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(report.written, 6);
    assert_eq!(written(&f, &function).await, own_finish());
}

#[tokio::test]
async fn a_trajectory_program_sees_each_tenants_trajectory_whole_and_alone() {
    let f = twins().await;
    let script = f.file(
        "shape.py",
        r#"import json, sys
for line in sys.stdin:
    t = json.loads(line)
    tenants = {s["tenant_id"] for s in t["steps"]}
    if tenants != {t["tenant_id"]}:
        sys.exit("trajectory %s mixes tenants: %s" % (t["trajectory_id"], sorted(tenants)))
    print(json.dumps({"trajectory_id": t["trajectory_id"], "value": len(t["steps"])}))
    print(json.dumps({"trajectory_id": t["trajectory_id"], "step_id": t["steps"][-1]["step_id"], "name": "last", "value": 1}))
"#,
    );
    let function = f.spec(
        "shape",
        &format!(
            "name = \"shape\"\nkind = \"program\"\ntarget = \"trajectory\"\ncommand = [{:?}, {:?}]\nbatch = 64\n",
            python(),
            script.display().to_string()
        ),
    );
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!((report.pending, report.written), (4, 8));
    assert_eq!(
        written(&f, &function).await,
        values(&[
            ("acme", "t1", None, 2.0),
            ("acme", "t1", Some("s2"), 1.0),
            ("acme", "t2", None, 1.0),
            ("acme", "t2", Some("s3"), 1.0),
            ("globex", "t1", None, 1.0),
            ("globex", "t1", Some("s1"), 1.0),
            ("globex", "t2", None, 2.0),
            ("globex", "t2", Some("s3"), 1.0),
        ])
    );
}

#[tokio::test]
async fn diff_compares_each_tenants_units_separately() {
    let f = twins().await;
    let a = f.spec(
        "stop_a",
        "name = \"stop\"\nkind = \"sql\"\nexpression = \"CASE WHEN finish_reason = 'stop' THEN 1.0 ELSE 0.0 END\"\n",
    );
    let b = f.spec(
        "stop_b",
        "name = \"stop\"\nkind = \"sql\"\nexpression = \"CASE WHEN tenant_id = 'acme' THEN 1.0 ELSE 0.0 END\"\n",
    );
    let catalog = f.catalog().await;
    let diff = atdp_rewards::diff(&catalog, &a, &b, &Selection::default(), 100, 0)
        .await
        .unwrap();
    assert_eq!((diff.units, diff.compared), (6, 6));
    assert_eq!(diff.agreement, 1.0);
}

#[tokio::test]
async fn preview_examples_come_from_the_selected_tenant() {
    let f = twins().await;
    let function = f.spec(
        "stop",
        "name = \"stop\"\nkind = \"sql\"\nexpression = \"CASE WHEN finish_reason = 'stop' THEN 1.0 ELSE 0.0 END\"\n",
    );
    let catalog = f.catalog().await;
    // Several seeds: which of two same-id rows a scan hands back first is not fixed.
    for (tenant, value, seed) in [("acme", 1.0), ("globex", 0.0)]
        .into_iter()
        .flat_map(|(t, v)| (0..8).map(move |seed| (t, v, seed)))
    {
        let selection = Selection {
            tenant_id: Some(tenant.into()),
            ..Selection::default()
        };
        let preview = atdp_rewards::preview(&catalog, &function, &selection, 10, seed)
            .await
            .unwrap();
        assert_eq!(preview.units, 3);
        let examples: Vec<_> = preview.buckets.iter().flat_map(|b| &b.examples).collect();
        assert_eq!(examples.len(), 3, "{preview}");
        for e in examples {
            assert_eq!(e.value, value);
            assert_eq!(e.reply, format!("reply of {tenant}"), "{preview}");
            assert_eq!(e.user, format!("question of {tenant}"), "{preview}");
        }
    }
}

/// Rewards are training data: a function never reads a step that may not be trained on, in
/// its units or in its query, and reads unmarked steps only when told to. A reply recorded in
/// shadow (never trained on, only because nobody received it) is read, to be scored against
/// the served reply it copies.
#[tokio::test]
async fn steps_that_may_not_be_trained_on_are_never_labelled() {
    let dir = tempfile::tempdir().unwrap();
    let lake_url = dir.path().join("lake").display().to_string();
    let mut config = WriterConfig::new(lake_url.clone(), dir.path().join("wal-marks"));
    config.fsync = false;
    let writer = LakeWriter::open(config).await.unwrap();
    let at = 1_795_910_400_000_000;
    let marks = [
        ("t1", "s1", 0, Some(true), None),
        ("t1", "s2", 1, Some(false), None),
        ("t1", "s3", 2, Some(true), Some(at)), // retention ended when it started
        ("t2", "s4", 0, None, None),
        ("t2", "s5", 1, Some(true), Some(i64::MAX)),
        ("t3", "s6", 0, Some(false), None),     // in shadow
        ("t4", "s7", 0, Some(false), Some(at)), // in shadow, retention ended
    ];
    for (trajectory, step, turn, eligible, until) in marks {
        let mut step = twin_step("acme", trajectory, step, turn, at + i64::from(turn));
        step.training_eligible = eligible;
        step.retention_until = until;
        if trajectory == "t3" || trajectory == "t4" {
            step.consent_source = Some("shadow".into());
            step.tags.insert("shadow_of".into(), "s1".into());
        }
        writer.append(step).unwrap();
    }
    writer.flush().await.unwrap();
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
    let f = Fixture::at(dir, lake_url);

    let step_fn = f.spec(
        "stop",
        "name = \"stop\"\nkind = \"sql\"\nexpression = \"CASE WHEN finish_reason = 'stop' THEN 1.0 ELSE 0.0 END\"\n",
    );
    let report = f.run(&step_fn, &Selection::default()).await.unwrap();
    assert_eq!((report.pending, report.written), (3, 3));
    assert_eq!(
        written(&f, &step_fn).await,
        values(&[
            ("acme", "t1", Some("s1"), 1.0),
            ("acme", "t2", Some("s5"), 1.0),
            ("acme", "t3", Some("s6"), 1.0)
        ])
    );
    // A query over `steps` counts only the steps that may be trained on.
    let turns = f.spec(
        "turns",
        "name = \"turns\"\nkind = \"sql\"\ntarget = \"trajectory\"\nquery = \"SELECT trajectory_id, count(*) AS value FROM steps GROUP BY trajectory_id\"\n",
    );
    f.run(&turns, &Selection::default()).await.unwrap();
    assert_eq!(
        written(&f, &turns).await,
        values(&[
            ("acme", "t1", None, 1.0),
            ("acme", "t2", None, 1.0),
            ("acme", "t3", None, 1.0)
        ])
    );
    // A preview's examples are trainable steps too: t1's latest step (s3, expired) is not
    // shown for its trajectory value, s1 is.
    let catalog = f.catalog().await;
    for seed in 0..4 {
        let preview = atdp_rewards::preview(&catalog, &turns, &Selection::default(), 10, seed)
            .await
            .unwrap();
        let shown: BTreeSet<(String, String)> = preview
            .buckets
            .iter()
            .flat_map(|b| &b.examples)
            .map(|e| (e.trajectory_id.clone(), e.step_id.clone()))
            .collect();
        assert_eq!(
            shown,
            BTreeSet::from([
                ("t1".to_owned(), "s1".to_owned()),
                ("t2".to_owned(), "s5".to_owned()),
                ("t3".to_owned(), "s6".to_owned())
            ]),
            "{preview}"
        );
    }
    // Unmarked steps, when the operator says they may be trained on.
    let eligible = Selection {
        unmarked: atdp_schema::Unmarked::Eligible,
        ..Selection::default()
    };
    let report = f.run(&step_fn, &eligible).await.unwrap();
    assert_eq!((report.pending, report.written), (1, 1));
    assert!(written(&f, &step_fn).await.contains_key(&(
        "acme".to_owned(),
        "t2".to_owned(),
        Some("s4".to_owned())
    )));
}
