//! Retiring the adapter versions that learned from erased data. An erasure
//! (`atdp-audit erase`) records, in its `erase_completed` audit event, the adapter versions
//! whose training lineage meets the erased subject's trajectories (`trained_adapters`); this
//! reads those events from the lake and retires every listed version of a policy in its
//! registry, so that it never serves again, each retirement recorded in the audit trail with
//! the erasure it answers. A version whose lineage is unknown (trained before lineage was
//! recorded) is never presumed clean: it is retired too, unless the caller keeps it.

use atdp_deploy::{Event, Registry};
use atdp_lake::{Filter, Lake, LakeReader};
use serde::Deserialize;

use crate::adapter_events::AdapterEvents;
use crate::{Error, Result};

/// An adapter an erasure listed.
#[derive(Debug, Deserialize)]
struct Listed {
    policy: String,
    version: u32,
    /// How many of the subject's trajectories it learned from; `None`: unknown.
    trajectories: Option<usize>,
}

/// What an `erase_completed` event's detail holds of interest here.
#[derive(Debug, Deserialize)]
struct Outcome {
    ok: bool,
    trained_adapters: Option<Vec<Listed>>,
}

/// The versions of `policy` to retire by the erasures recorded in the lake, each with the id
/// of the erasure that listed it; in the order they were recorded, without repeats.
async fn listed(lake: &Lake, policy: &str, keep_unknown: bool) -> Result<Vec<(u32, String)>> {
    let reader = LakeReader::new(lake.clone());
    let events = reader
        .audit(&Filter::default())
        .await
        .map_err(|e| Error::Loop(format!("cannot read the audit trail: {e}")))?;
    let mut out: Vec<(u32, String)> = Vec::new();
    for event in events.rows {
        if event.kind != "erase_completed" || event.decision.as_deref() != Some("allow") {
            continue;
        }
        let Some(Ok(outcome)) = event
            .detail_json
            .as_deref()
            .map(serde_json::from_str::<Outcome>)
        else {
            continue;
        };
        let erasure = event.subject.clone().unwrap_or(event.event_id.clone());
        for adapter in outcome.trained_adapters.into_iter().flatten() {
            let learned = adapter.trajectories.is_none_or(|n| n > 0);
            let unknown = adapter.trajectories.is_none();
            if outcome.ok
                && adapter.policy == policy
                && learned
                && !(unknown && keep_unknown)
                && !out.iter().any(|(v, _)| *v == adapter.version)
            {
                out.push((adapter.version, erasure.clone()));
            }
        }
    }
    Ok(out)
}

/// How many of the trajectories `version` learned from (its manifest's lineage) an allowed
/// erasure of their tenant has reached since: an adapter trained while an erasure ran read
/// them before they were left out, and the erasure's own list (made when it ran) does not
/// name a version published after it. `None` for a version without a lineage (published
/// without a manifest, or with one that lists no trajectories): unknown.
pub async fn erased_since_training(
    lake: &Lake,
    registry: &Registry,
    version: u32,
) -> Result<Option<usize>> {
    let Some(manifest) = registry.manifest(version).await? else {
        return Ok(None);
    };
    let Some(by_tenant) = manifest["lineage"]["trajectories"].as_object() else {
        return Ok(None);
    };
    let reader = LakeReader::new(lake.clone());
    let mut met = 0;
    for (tenant, ids) in by_tenant {
        let erased = reader
            .erased_trajectories(tenant, None)
            .await
            .map_err(|e| Error::Loop(format!("cannot read what erasures reached: {e}")))?;
        met += ids
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|id| id.as_str())
            .filter(|id| erased.contains(*id))
            .count();
    }
    Ok(Some(met))
}

/// How many allowed erasures, of any tenant, the lake recorded before `published_at`
/// (RFC 3339; all of them when it does not read).
async fn erasures_before(lake: &Lake, published_at: &str) -> Result<usize> {
    let before = chrono::DateTime::parse_from_rfc3339(published_at)
        .map(|t| t.timestamp_micros())
        .unwrap_or(i64::MAX);
    LakeReader::new(lake.clone())
        .erasures_before(before)
        .await
        .map_err(|e| Error::Loop(format!("cannot read the audit trail: {e}")))
}

/// Refuses, in the gate's report, a candidate that learned from data erased since its
/// training read it ([`erased_since_training`]): a failed `erased_data` check.
pub async fn refuse_if_erased(
    lake: &Lake,
    registry: &Registry,
    version: u32,
    report: &mut crate::GateReport,
) -> Result<()> {
    let (count, detail) = match erased_since_training(lake, registry, version).await? {
        Some(met) => (
            met,
            format!(
                "learned from {met} trajectories that an erasure reached after its training read them"
            ),
        ),
        // Whether it learned from erased data is unknown: an erasure made after it was
        // published lists it (and `retire-erased` retires it), but one made before does not,
        // and it may have read the data before that erasure.
        None => {
            let published = registry.published(version).await?;
            let erasures = erasures_before(lake, &published.published_at).await?;
            (
                erasures,
                format!(
                    "its lineage is unknown (published without a manifest that lists the trajectories it learned from) and {erasures} erasures were made before it was published: it may have learned from erased data"
                ),
            )
        }
    };
    if count > 0 {
        report.promote = false;
        report.checks.push(crate::Check {
            name: "erased_data".into(),
            passed: false,
            value: count as f64,
            bound: 0.0,
            detail,
        });
    }
    Ok(())
}

/// Retires every version of `registry`'s policy that a recorded erasure lists and that is
/// not retired yet; returns the retirements written. `keep_unknown`: leave the versions whose
/// lineage is unknown.
pub async fn retire_erased(
    lake: &Lake,
    registry: &Registry,
    by: &str,
    trail: Option<&AdapterEvents>,
    keep_unknown: bool,
) -> Result<Vec<Event>> {
    let wanted = listed(lake, registry.policy(), keep_unknown).await?;
    let retired = registry.state().await?.retired;
    let mut done = Vec::new();
    for (version, erasure) in wanted {
        if retired.contains(&version) {
            continue;
        }
        let reason = format!("learned from data erased by audit event {erasure}");
        let report = serde_json::json!({"erasure": erasure});
        let event = registry
            .retire(version, by, &reason, Some(report.clone()))
            .await?;
        if let Some(trail) = trail {
            trail.record(registry.policy(), &event, report).await?;
        }
        done.push(event);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use atdp_deploy::Action;
    use atdp_lake::{LakeWriter, WriterConfig};
    use atdp_schema::AuditEvent;
    use serde_json::json;

    use super::*;

    /// Records an `erase_completed` event (`decision`, `detail`) in the lake's audit table.
    async fn erasure(writer: &LakeWriter, id: &str, decision: &str, detail: serde_json::Value) {
        let mut event = AuditEvent::new("erase_completed", "auditor:dpo", "acme");
        event.subject = Some(id.to_owned());
        event.decision = Some(decision.to_owned());
        event.detail_json = Some(detail.to_string());
        let (appended, _) = writer.append_audit(event).unwrap();
        writer.durable(appended).await.unwrap();
        writer.flush().await.unwrap();
    }

    #[tokio::test]
    async fn the_versions_an_erasure_lists_are_retired_once_and_the_served_one_steps_back() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, url) = crate::live::tests::published_registry(dir.path(), 4).await;
        for version in [1, 2, 3] {
            registry
                .promote(version, "test", "better", None)
                .await
                .unwrap();
        }
        let lake = Lake::new(&url, Default::default()).unwrap();
        let writer = LakeWriter::open(WriterConfig::new(url.clone(), dir.path().join("wal")))
            .await
            .unwrap();
        let listed = |policy: &str, version: u32, trajectories: Option<usize>| json!({"policy": policy, "version": version, "trajectories": trajectories});
        // v3 (served) learned from the subject; v1's lineage is unknown; another policy's
        // v2 and a refused or failed erasure's v2 are not this policy's concern.
        erasure(&writer, "erase-1", "allow", json!({"ok": true, "trained_adapters": [
            listed("support", 3, Some(2)), listed("support", 1, None), listed("billing", 2, Some(1)),
        ]}))
        .await;
        erasure(
            &writer,
            "erase-2",
            "deny",
            json!({"ok": false, "trained_adapters": [
                listed("support", 2, Some(1)),
            ]}),
        )
        .await;
        erasure(
            &writer,
            "erase-3",
            "allow",
            json!({"ok": false, "trained_adapters": [
                listed("support", 2, Some(1)),
            ]}),
        )
        .await;
        erasure(
            &writer,
            "erase-4",
            "allow",
            json!({"ok": true, "trained_adapters": null}),
        )
        .await;
        writer.shutdown(Duration::from_secs(10)).await.unwrap();

        let trail = AdapterEvents::open(
            &url,
            Default::default(),
            &dir.path().join("wal-loop"),
            "acme",
        )
        .await
        .unwrap();
        let kept = retire_erased(&lake, &registry, "atdp-loop", Some(&trail), true)
            .await
            .unwrap();
        trail.close().await.unwrap();
        assert_eq!(kept.iter().map(|e| e.version).collect::<Vec<_>>(), [3]);
        assert_eq!(kept[0].action, Action::Retire);
        assert!(kept[0].reason.contains("erase-1"), "{}", kept[0].reason);
        assert_eq!(registry.state().await.unwrap().serving, Some(2));
        // The retirement is an audit event naming the erasure, as an erasure receipt
        // (`atdp-audit receipt`) reads it.
        let events = LakeReader::new(lake.clone())
            .audit(&Filter::default())
            .await
            .unwrap();
        let retired: Vec<serde_json::Value> = events
            .rows
            .iter()
            .filter(|e| e.kind == "adapter_retire")
            .map(|e| serde_json::from_str(e.detail_json.as_deref().unwrap()).unwrap())
            .collect();
        assert_eq!(retired.len(), 1, "{retired:?}");
        assert_eq!(
            (
                &retired[0]["policy"],
                &retired[0]["version"],
                &retired[0]["detail"]["erasure"]
            ),
            (&json!("support"), &json!(3), &json!("erase-1"))
        );

        let unknown = retire_erased(&lake, &registry, "atdp-loop", None, false)
            .await
            .unwrap();
        assert_eq!(unknown.iter().map(|e| e.version).collect::<Vec<_>>(), [1]);
        let state = registry.state().await.unwrap();
        assert_eq!((state.serving, state.earlier), (Some(2), vec![]));
        // Done once: nothing is retired twice.
        let again = retire_erased(&lake, &registry, "atdp-loop", None, false)
            .await
            .unwrap();
        assert!(again.is_empty(), "{again:?}");
    }

    /// A gate report that would promote the candidate.
    fn gate_report() -> crate::GateReport {
        crate::GateReport {
            candidate: "support@v1".into(),
            current: "support@base".into(),
            promote: true,
            checks: Vec::new(),
            config: crate::GateConfig::default(),
            candidate_heldout: crate::gate::tests::report(0.5, 3.0, 0.0),
            current_heldout: crate::gate::tests::report(0.4, 3.0, 0.0),
            candidate_train: None,
            current_train: None,
            kl_to_base: None,
        }
    }

    #[tokio::test]
    async fn a_candidate_that_learned_from_data_erased_since_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, url) = crate::live::tests::published_registry(dir.path(), 0).await;
        let adapter = dir.path().join("adapter");
        std::fs::write(
            adapter.join("manifest.json"),
            json!({"lineage": {"trajectories": {"acme": ["t1", "t2"], "globex": ["t1"]}}})
                .to_string(),
        )
        .unwrap();
        registry.publish(&adapter, "test").await.unwrap();
        let lake = Lake::new(&url, Default::default()).unwrap();
        assert_eq!(
            erased_since_training(&lake, &registry, 1).await.unwrap(),
            Some(0)
        );

        // After the training read, acme erased the subject of its trajectory t1 (globex's t1
        // is another trajectory).
        let writer = LakeWriter::open(WriterConfig::new(url.clone(), dir.path().join("wal")))
            .await
            .unwrap();
        let step = atdp_schema::Step {
            step_id: "s1".into(),
            trajectory_id: "t1".into(),
            tenant_id: "acme".into(),
            agent_id: "support".into(),
            started_at: 1_795_910_400_000_000,
            pii: vec![atdp_schema::PiiSpan {
                token: "<EMAIL_ADDRESS_00aa11>".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        writer.append_record(&step.into()).unwrap();
        let mut erase = AuditEvent::new("erase", "auditor:dpo", "acme");
        erase.decision = Some("allow".into());
        erase.detail_json =
            Some(json!({"scope": "subject", "tokens": ["<EMAIL_ADDRESS_00aa11>"]}).to_string());
        writer.append_audit(erase).unwrap();
        writer.flush().await.unwrap();
        writer.shutdown(Duration::from_secs(10)).await.unwrap();

        assert_eq!(
            erased_since_training(&lake, &registry, 1).await.unwrap(),
            Some(1)
        );
        let mut gated = gate_report();
        refuse_if_erased(&lake, &registry, 1, &mut gated)
            .await
            .unwrap();
        assert!(!gated.promote);
        assert_eq!(gated.checks[0].name, "erased_data");
        assert!(gated.reason().contains("erasure"), "{}", gated.reason());

        // The same weights published without a manifest: what they learned from is unknown,
        // and an erasure was made before they were published.
        std::fs::remove_file(adapter.join("manifest.json")).unwrap();
        registry.publish(&adapter, "test").await.unwrap();
        assert_eq!(
            erased_since_training(&lake, &registry, 2).await.unwrap(),
            None
        );
        let mut gated = gate_report();
        refuse_if_erased(&lake, &registry, 2, &mut gated)
            .await
            .unwrap();
        assert!(!gated.promote);
        assert!(
            gated.reason().contains("lineage is unknown"),
            "{}",
            gated.reason()
        );
    }

    #[tokio::test]
    async fn a_candidate_of_unknown_lineage_passes_where_nothing_was_erased_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, url) = crate::live::tests::published_registry(dir.path(), 0).await;
        registry
            .publish(&dir.path().join("adapter"), "test")
            .await
            .unwrap();
        let lake = Lake::new(&url, Default::default()).unwrap();
        let mut gated = gate_report();
        refuse_if_erased(&lake, &registry, 1, &mut gated)
            .await
            .unwrap();
        assert!(gated.promote, "{}", gated.reason());
        assert!(gated.checks.is_empty());
    }
}
