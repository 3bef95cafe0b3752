//! SQL functions: expression and query, incremental re-runs, changed versions, filters,
//! non-finite values.

use atdp_rewards::{Error, Selection};

use crate::common::{Fixture, STEPS};

const STOP_OK: &str = r#"
name = "stop_ok"
kind = "sql"
expression = "CASE WHEN finish_reason = 'stop' AND status = 'ok' THEN 1.0 ELSE 0.0 END"
"#;

#[tokio::test]
async fn expression_labels_every_step_once_and_rerun_writes_nothing() {
    let f = Fixture::new().await;
    let function = f.spec("stop_ok", STOP_OK);
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(report.pending, STEPS as u64);
    assert_eq!(report.written, STEPS as u64);
    assert_eq!(f.rows_of(&function).await, STEPS as f64);
    // The values are the expression's: the sum is the number of stop/ok steps.
    let expected = f
        .number("SELECT count(*) FROM steps WHERE finish_reason = 'stop' AND status = 'ok'")
        .await;
    let got = f
        .number(&format!(
            "SELECT sum(value) FROM rewards WHERE reward_fn_version = '{}'",
            function.version
        ))
        .await;
    assert_eq!(got, expected);
    assert!(expected > 0.0 && expected < STEPS as f64);
    let terminal = f
        .number("SELECT count(*) FROM rewards WHERE source = 'sql:stop_ok' AND (terminal OR step_id IS NULL)")
        .await;
    assert_eq!(terminal, 0.0);

    // One audit event per tenant, naming the function and its version.
    let events = f
        .number(&format!(
            "SELECT count(*) FROM audit WHERE kind = 'reward_written' AND subject = 'sql:stop_ok' AND strpos(detail_json, '{}') > 0",
            function.version
        ))
        .await;
    let tenants = f
        .number("SELECT count(DISTINCT tenant_id) FROM steps")
        .await;
    assert_eq!(events, tenants);

    let before = f.rewards_version().await;
    let audit_before = f.catalog().await.versions()[&atdp_schema::Table::Audit];
    let again = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!((again.pending, again.written), (0, 0));
    assert_eq!(
        f.rewards_version().await,
        before,
        "a re-run commits nothing"
    );
    assert_eq!(
        f.catalog().await.versions()[&atdp_schema::Table::Audit],
        audit_before,
        "nor an audit event"
    );
    assert_eq!(f.rows_of(&function).await, STEPS as f64);
}

#[tokio::test]
async fn a_changed_function_labels_again_and_old_rows_stay() {
    let f = Fixture::new().await;
    let old = f.spec("stop_ok", STOP_OK);
    f.run(&old, &Selection::default()).await.unwrap();
    let new = f.spec("stop_ok", &STOP_OK.replace("THEN 1.0", "THEN 2.0"));
    assert_ne!(old.version, new.version);
    let report = f.run(&new, &Selection::default()).await.unwrap();
    assert_eq!(report.written, STEPS as u64);
    assert_eq!(f.rows_of(&old).await, STEPS as f64);
    assert_eq!(f.rows_of(&new).await, STEPS as f64);
    assert_eq!(
        f.number("SELECT count(*) FROM rewards WHERE name = 'stop_ok'")
            .await,
        2.0 * STEPS as f64
    );
}

#[tokio::test]
async fn filters_select_tenant_and_time_and_the_rest_follows_later() {
    let f = Fixture::new().await;
    let function = f.spec("stop_ok", STOP_OK);
    let tenant = Selection {
        tenant_id: Some("tenant-01".into()),
        ..Selection::default()
    };
    let expected = f
        .number("SELECT count(*) FROM steps WHERE tenant_id = 'tenant-01'")
        .await;
    let report = f.run(&function, &tenant).await.unwrap();
    assert_eq!(report.written as f64, expected);
    assert_eq!(
        f.number(&format!(
            "SELECT count(*) FROM rewards WHERE reward_fn_version = '{}' AND tenant_id <> 'tenant-01'",
            function.version
        ))
        .await,
        0.0
    );
    // Since the last day only (the synthetic lake ends 2026-11-29T00:00Z, over 3 days).
    let since = 1_795_910_400_000_000 - 86_400_000_000;
    let day = Selection {
        since: Some(since),
        ..Selection::default()
    };
    let expected_day = f
        .number(&format!(
            "SELECT count(*) FROM steps WHERE tenant_id <> 'tenant-01' AND started_at >= to_timestamp_micros({since})"
        ))
        .await;
    let report = f.run(&function, &day).await.unwrap();
    assert_eq!(report.written as f64, expected_day);
    // The rest of the lake.
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(
        report.written as f64,
        STEPS as f64 - expected - expected_day
    );
    // An agent, with another function.
    let other = f.spec("ok", "name = \"ok\"\nkind = \"sql\"\nexpression = \"1\"\n");
    let agent = Selection {
        agent_id: Some("onboarding".into()),
        ..Selection::default()
    };
    let expected_agent = f
        .number("SELECT count(*) FROM steps WHERE agent_id = 'onboarding'")
        .await;
    assert!(expected_agent > 0.0 && expected_agent < STEPS as f64);
    let report = f.run(&other, &agent).await.unwrap();
    assert_eq!(report.written as f64, expected_agent);
}

#[tokio::test]
async fn query_labels_trajectories() {
    let f = Fixture::new().await;
    let function = f.spec(
        "short",
        r#"
name = "short_trajectory"
kind = "sql"
target = "trajectory"
query = "SELECT trajectory_id, 1.0 / (max(turn_index) + 1) AS value FROM steps GROUP BY trajectory_id"
"#,
    );
    let trajectories = f
        .number("SELECT count(DISTINCT trajectory_id) FROM steps")
        .await;
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(report.written as f64, trajectories);
    assert_eq!(
        f.number(&format!(
            "SELECT count(*) FROM rewards WHERE reward_fn_version = '{}' AND step_id IS NULL AND terminal AND value > 0 AND value <= 1",
            function.version
        ))
        .await,
        trajectories
    );
    let again = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(again.written, 0);
}

#[tokio::test]
async fn non_finite_values_name_the_step_and_write_nothing() {
    let f = Fixture::new().await;
    let function = f.spec(
        "nan",
        "name = \"nan\"\nkind = \"sql\"\nexpression = \"CAST('NaN' AS DOUBLE)\"\n",
    );
    let before = f.rewards_version().await;
    let error = f.run(&function, &Selection::default()).await.unwrap_err();
    assert!(matches!(error, Error::NotFinite { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("for step ") && message.contains("NaN"),
        "{message}"
    );
    assert_eq!(f.rewards_version().await, before);
}

#[tokio::test]
async fn bad_sql_is_reported_and_writes_nothing() {
    let f = Fixture::new().await;
    let before = f.rewards_version().await;
    let unknown = f.spec(
        "unknown",
        "name = \"unknown\"\nkind = \"sql\"\nexpression = \"no_such_column + 1\"\n",
    );
    let error = f.run(&unknown, &Selection::default()).await.unwrap_err();
    assert!(matches!(error, Error::Query(_)), "{error}");
    assert!(error.to_string().contains("no_such_column"), "{error}");
    let missing = f.spec(
        "missing",
        "name = \"missing\"\nkind = \"sql\"\nquery = \"SELECT trajectory_id, 1.0 AS score FROM steps\"\n",
    );
    let error = f.run(&missing, &Selection::default()).await.unwrap_err();
    assert!(error.to_string().contains("`value` column"), "{error}");
    let writes = f.spec(
        "writes",
        "name = \"writes\"\nkind = \"sql\"\nquery = \"INSERT INTO rewards SELECT * FROM rewards\"\n",
    );
    let error = f.run(&writes, &Selection::default()).await.unwrap_err();
    assert!(matches!(error, Error::Query(_)), "{error}");
    assert_eq!(f.rewards_version().await, before);
}
