//! Retention: a tenant's steps whose `retention_until` passed leave the lake with their
//! rewards and the vault entries only they used; nothing of another tenant or of a kept step
//! goes; no readable version of `steps` holds them afterwards; the trail records it.

use atdp_audit::{Error, Vacuum};
use atdp_schema::{Message, Reward, new_id, now_micros};

use crate::common::*;

const GONE_EMAIL: &str = "leaving.customer@example.net";

fn reward(tenant: &str, trajectory: &str, step: Option<&str>) -> Reward {
    Reward {
        reward_id: new_id(),
        trajectory_id: trajectory.into(),
        step_id: step.map(str::to_owned),
        tenant_id: tenant.into(),
        name: "task_success".into(),
        value: 1.0,
        source: "api".into(),
        created_at: now_micros(),
        ..Reward::default()
    }
}

async fn count(f: &Fixture, sql: &str) -> i64 {
    let batches = f.catalog().await.sql(sql).await.unwrap();
    let column =
        arrow::compute::cast(batches[0].column(0), &arrow::datatypes::DataType::Int64).unwrap();
    column
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap()
        .value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_steps_their_rewards_and_their_own_vault_entries_leave_every_version() {
    let f = fixture().await;
    let now = now_micros();
    let past = now - 3_600_000_000;
    let future = now + 86_400_000_000;

    // demo, trajectory x: an expired step naming a customer who appears nowhere else and the
    // fixture's customer (whose value kept steps still use), then a kept step.
    let x = new_id();
    let (text, spans, mut vault) = f.mask(
        "demo",
        "request_messages[0].content",
        &format!("I am {GONE_EMAIL}, my colleague is {EMAIL}."),
    );
    let mut x1 = step("demo", "demo-agent", &x, None, 0);
    x1.request_messages = vec![Message {
        role: "user".into(),
        content: Some(text),
        ..Message::default()
    }];
    x1.pii = spans;
    x1.retention_until = Some(past);
    let mut x2 = step("demo", "demo-agent", &x, Some(&x1.step_id), 1);
    x2.retention_until = Some(future);
    // demo, trajectory y: one expired step.
    let y = new_id();
    let mut y1 = step("demo", "demo-agent", &y, None, 0);
    y1.retention_until = Some(past);
    // other: an expired step, which expiring demo does not touch.
    let mut o1 = step("other", "other-agent", &new_id(), None, 0);
    o1.retention_until = Some(past);
    let (_, _, other_vault) = f.mask("other", "request_messages[0].content", GONE_EMAIL);
    vault.extend(other_vault);
    let rewards = vec![
        reward("demo", &x, Some(&x1.step_id)),
        reward("demo", &x, None),
        reward("demo", &y, None),
        reward("other", &o1.trajectory_id, None),
    ];
    let gone_token = f.token_of("EMAIL_ADDRESS", GONE_EMAIL).await;
    let kept_token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let expired_ids = [x1.step_id.clone(), y1.step_id.clone()];
    f.append(
        "wal-retention",
        vec![x1, x2, y1, o1.clone()],
        vault,
        rewards,
    )
    .await;

    let before = atdp_audit::check_retention(&f.lake, "demo", now)
        .await
        .unwrap();
    assert!(!before.ok(), "{before:?}");
    let vault_rows = |token: String| {
        let f = &f;
        async move {
            count(
                f,
                &format!(
                    "SELECT count(*) FROM pii_vault WHERE tenant_id = 'demo' AND token = '{token}'"
                ),
            )
            .await
        }
    };
    assert!(vault_rows(gone_token.clone()).await >= 1);

    let other_vault_rows = count(
        &f,
        "SELECT count(*) FROM pii_vault WHERE tenant_id = 'other'",
    )
    .await;
    assert!(other_vault_rows >= 2);
    let trail = f.trail("retention").await;
    // An analyst may not delete.
    let denied = atdp_audit::expire(
        &f.lake,
        &f.policy,
        &trail,
        &f.auditor(DEMO_ANALYST),
        "demo",
        now,
        Vacuum::Now,
        "tidy up",
    )
    .await;
    assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");

    let report = atdp_audit::expire(
        &f.lake,
        &f.policy,
        &trail,
        &f.auditor(DEMO_AUDITOR),
        "demo",
        now,
        Vacuum::Now,
        "Retention schedule, support records",
    )
    .await
    .unwrap();
    assert_eq!(report.steps_deleted, 2, "{report:?}");
    // x1's step reward and y's trajectory reward; x keeps its trajectory reward (x2 stays).
    assert_eq!(report.rewards_deleted, Some(2), "{report:?}");
    assert!(report.files_deleted >= 3, "{report:?}");

    let ids = expired_ids.map(|id| format!("'{id}'")).join(", ");
    assert_eq!(
        count(
            &f,
            &format!("SELECT count(*) FROM steps WHERE step_id IN ({ids})")
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &f,
            &format!(
                "SELECT count(*) FROM rewards WHERE step_id IN ({ids}) OR trajectory_id = '{y}'"
            )
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &f,
            &format!(
                "SELECT count(*) FROM rewards WHERE trajectory_id = '{x}' AND step_id IS NULL"
            )
        )
        .await,
        1
    );
    // The value only the expired step used is gone; the one kept steps use stays.
    assert_eq!(vault_rows(gone_token.clone()).await, 0);
    assert!(vault_rows(kept_token).await >= 1);
    // demo's kept steps, and everything of the other tenant, stay.
    assert_eq!(
        count(&f, "SELECT count(*) FROM steps WHERE tenant_id = 'demo'").await,
        3
    );
    assert_eq!(
        count(
            &f,
            &format!(
                "SELECT count(*) FROM steps WHERE step_id = '{}'",
                o1.step_id
            )
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &f,
            "SELECT count(*) FROM pii_vault WHERE tenant_id = 'other'"
        )
        .await,
        other_vault_rows
    );

    // A second run finds nothing more to delete.
    let again = atdp_audit::expire(
        &f.lake,
        &f.policy,
        &trail,
        &f.auditor(DEMO_AUDITOR),
        "demo",
        now,
        Vacuum::Now,
        "Retention schedule, support records",
    )
    .await
    .unwrap();
    assert_eq!(
        (again.steps_deleted, again.files_removed),
        (0, 0),
        "{again:?}"
    );

    // No version of `steps` that can still be read holds them.
    let after = atdp_audit::check_retention(&f.lake, "demo", now)
        .await
        .unwrap();
    assert!(after.ok(), "{after:?}");
    assert!(after.versions_gone >= 1, "{after:?}");
    assert!(after.versions_read >= 1, "{after:?}");
    // The other tenant's expired step is still there, and the check says so.
    assert!(
        !atdp_audit::check_retention(&f.lake, "other", now)
            .await
            .unwrap()
            .ok()
    );

    trail.close().await.unwrap();
    let text = f
        .sql_table("SELECT kind, decision, reason FROM audit WHERE kind IN ('expire', 'expire_completed') ORDER BY chain_seq")
        .await;
    for expected in [
        "Retention schedule, support records",
        "expire_completed",
        "tidy up",
    ] {
        assert!(text.contains(expected), "{expected} not in\n{text}");
    }
    let verified = atdp_audit::verify(&f.lake, None).await.unwrap();
    assert!(verified.ok(), "{:?}", verified.first_problem());
}
