//! One cycle of continuous training: train on the data since the last published adapter,
//! publish, gate, and promote or reject, the decision and its numbers in the registry's log.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use atdp_deploy::{Event, Registry};
use atdp_trainer::{RunConfig, Selection, StepMetrics, TrainOptions};
use serde::{Deserialize, Serialize};

use crate::adapter_events::AdapterEvents;
use crate::environment::Environment;
use crate::error::blocking;
use crate::gate::{GateConfig, GateReport, GateSetup, gate};
use crate::{Error, Result};

/// What a cycle did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CycleOutcome {
    /// The published version.
    pub version: u32,
    /// Whether it was promoted.
    pub promoted: bool,
    /// The gate's report.
    pub gate: GateReport,
    /// The log entry (promote or reject).
    pub event: Event,
    /// Examples trained on (those with a reward).
    pub examples: usize,
    /// The last optimizer step's metrics.
    pub final_metrics: Option<StepMetrics>,
    /// Seconds spent training.
    pub train_s: f64,
    /// Seconds spent gating.
    pub gate_s: f64,
}

/// When the newest published version was published (µs since the epoch): a cycle trains on
/// data after it. `None` when nothing is published.
pub async fn data_since(registry: &Registry) -> Result<Option<i64>> {
    let Some(&latest) = registry.versions().await?.last() else {
        return Ok(None);
    };
    let published = registry.published(latest).await?;
    let at = chrono::DateTime::parse_from_rfc3339(&published.published_at).map_err(|e| {
        Error::Loop(format!(
            "v{latest}: published_at {:?} is not RFC 3339: {e}",
            published.published_at
        ))
    })?;
    Ok(Some(at.timestamp_micros()))
}

/// Trajectories of the selection with a reward named `reward`. Blocking.
pub fn rewarded_trajectories(
    lake: &str,
    options: HashMap<String, String>,
    selection: &Selection,
    reward: &str,
) -> Result<usize> {
    let mut selection = selection.clone();
    selection.reward_names = BTreeSet::from([reward.to_owned()]);
    let data = atdp_trainer::read_lake(lake, options, &selection)?;
    // (tenant, trajectory): two tenants may use the same trajectory id.
    let steps: BTreeSet<(&str, &str)> = data
        .steps
        .iter()
        .map(|s| (s.tenant_id.as_str(), s.trajectory_id.as_str()))
        .collect();
    let rewarded: BTreeSet<(&str, &str)> = data
        .rewards
        .iter()
        .map(|r| (r.tenant_id.as_str(), r.trajectory_id.as_str()))
        .filter(|t| steps.contains(t))
        .collect();
    Ok(rewarded.len())
}

/// A trained adapter, published.
#[derive(Debug, Clone)]
pub struct Trained {
    /// The version it was published as.
    pub version: u32,
    /// Examples trained on (those with a reward).
    pub examples: usize,
    /// The last optimizer step's metrics.
    pub final_metrics: Option<StepMetrics>,
    /// Seconds spent training.
    pub train_s: f64,
}

/// Trains with `train` (its selection starting no earlier than the newest published
/// adapter) and publishes the adapter as the next version.
pub async fn train_and_publish(
    registry: &Registry,
    mut train: RunConfig,
    by: &str,
) -> Result<Trained> {
    if let Some(since) = data_since(registry).await? {
        train.selection.since = Some(train.selection.since.map_or(since, |s| s.max(since)));
    }
    let started = Instant::now();
    let report = blocking("training", move || {
        Ok(atdp_trainer::run(
            &train,
            &TrainOptions::default(),
            &mut |m: &StepMetrics| {
                tracing::info!(
                    step = m.step,
                    of = m.total_steps,
                    loss = m.loss,
                    kl = m.kl,
                    reward = m.reward_mean,
                    "training"
                );
            },
        )?)
    })
    .await?;
    let train_s = started.elapsed().as_secs_f64();
    let adapter = report
        .adapter
        .ok_or_else(|| Error::Loop("training stopped before writing an adapter".into()))?;
    let published = registry.publish(&adapter.dir, by).await?;
    Ok(Trained {
        version: published.version,
        examples: report.rewarded_examples,
        final_metrics: report.final_metrics,
        train_s,
    })
}

/// Promotes or rejects the gated version as the report says, the report (less its
/// per-episode lists) in the log entry, and the decision in the audit `trail` when given.
pub async fn record_decision(
    registry: &Registry,
    report: &GateReport,
    version: u32,
    by: &str,
    trail: Option<&AdapterEvents>,
) -> Result<Event> {
    let mut summary = report.clone();
    for eval in [
        Some(&mut summary.candidate_heldout),
        Some(&mut summary.current_heldout),
        summary.candidate_train.as_mut(),
        summary.current_train.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        eval.episode_list.clear();
    }
    let reason = report.reason();
    let json = serde_json::to_value(&summary)
        .map_err(|e| Error::Loop(format!("the gate report does not serialize: {e}")))?;
    report.config.check()?;
    let share = report.config.canary_share;
    let shadow = report.config.shadow_share;
    let event = if report.promote && shadow > 0.0 {
        registry
            .shadow(version, shadow, by, &reason, Some(json))
            .await?
    } else if report.promote && share > 0.0 {
        registry
            .canary(version, share, by, &reason, Some(json))
            .await?
    } else if report.promote {
        registry.promote(version, by, &reason, Some(json)).await?
    } else {
        registry.reject(version, by, &reason, Some(json)).await?
    };
    if let Some(trail) = trail {
        let checks: serde_json::Map<String, serde_json::Value> = report
            .checks
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    serde_json::json!({"passed": c.passed, "value": c.value, "bound": c.bound}),
                )
            })
            .collect();
        trail
            .record(
                registry.policy(),
                &event,
                serde_json::json!({"compared_with": report.current, "checks": checks}),
            )
            .await?;
    }
    Ok(event)
}

/// Trains, publishes, gates the new version against the served one on `env`, and promotes
/// or rejects it by `by`.
pub async fn cycle(
    setup: &GateSetup,
    train: RunConfig,
    env: &Environment,
    gate_config: &GateConfig,
    by: &str,
    trail: Option<&AdapterEvents>,
) -> Result<CycleOutcome> {
    let lake = atdp_lake::Lake::new(&train.lake, train.lake_options.clone())
        .map_err(|e| Error::Loop(format!("the lake: {e}")))?;
    let trained = train_and_publish(&setup.registry, train, by).await?;
    let started = Instant::now();
    let mut gate_report = gate(setup, trained.version, env, gate_config).await?;
    crate::erased::refuse_if_erased(&lake, &setup.registry, trained.version, &mut gate_report)
        .await?;
    let gate_s = started.elapsed().as_secs_f64();
    let event = record_decision(&setup.registry, &gate_report, trained.version, by, trail).await?;
    Ok(CycleOutcome {
        version: trained.version,
        promoted: gate_report.promote,
        gate: gate_report,
        event,
        examples: trained.examples,
        final_metrics: trained.final_metrics,
        train_s: trained.train_s,
        gate_s,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::live::tests::{both, twin_lake};

    #[test]
    fn two_tenants_with_the_same_trajectory_id_are_two_rewarded_trajectories() {
        let dir = tempfile::tempdir().unwrap();
        let lake = twin_lake(dir.path(), [Some(true), Some(true)]);
        let n = rewarded_trajectories(&lake, Default::default(), &both(), "ok").unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn only_trajectories_that_may_be_trained_on_make_a_cycle_due() {
        let dir = tempfile::tempdir().unwrap();
        let lake = twin_lake(dir.path(), [Some(false), None]);
        let n = rewarded_trajectories(&lake, Default::default(), &both(), "ok").unwrap();
        assert_eq!(n, 0, "one ineligible, one unmarked");
        let mut unmarked = both();
        unmarked.unmarked = atdp_schema::Unmarked::Eligible;
        let n = rewarded_trajectories(&lake, Default::default(), &unmarked, "ok").unwrap();
        assert_eq!(n, 1, "the unmarked one, taken as eligible");
    }
}
