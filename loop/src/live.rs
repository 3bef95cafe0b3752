//! Live reward per serving version, from the lake, and automatic rollback when a newly
//! promoted version earns less than the one before it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use atdp_deploy::{Event, Registry};
use atdp_trainer::Selection;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::trail::Trail;

/// The live reward of one version: the latest `window` trajectories it served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionReward {
    /// Trajectories counted (at most the window).
    pub trajectories: usize,
    /// Their mean reward.
    pub mean: f64,
}

/// Reads the rewards named `reward` of the selected trajectories and attributes each to the
/// version that served the trajectory's last step (`policy_version`); per version, the mean
/// of the latest `window`. Blocking.
pub fn live_rewards(
    lake: &str,
    options: HashMap<String, String>,
    selection: &Selection,
    reward: &str,
    window: usize,
) -> Result<BTreeMap<String, VersionReward>> {
    let mut selection = selection.clone();
    selection.reward_names = BTreeSet::from([reward.to_owned()]);
    let data = atdp_trainer::read_lake(lake, options, &selection)?;
    // The version of each trajectory's latest step.
    let mut last: HashMap<&str, (i64, &str)> = HashMap::new();
    for step in &data.steps {
        let Some(version) = step.policy_version.as_deref() else {
            continue;
        };
        let entry = last
            .entry(step.trajectory_id.as_str())
            .or_insert((step.started_at, version));
        if step.started_at >= entry.0 {
            *entry = (step.started_at, version);
        }
    }
    let mut by_version: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for reward in data.rewards.iter().filter(|r| r.step_id.is_none()) {
        if let Some((_, version)) = last.get(reward.trajectory_id.as_str()) {
            by_version
                .entry((*version).to_owned())
                .or_default()
                .push((reward.created_at, reward.value));
        }
    }
    Ok(by_version
        .into_iter()
        .map(|(version, mut rows)| {
            rows.sort_by_key(|r| std::cmp::Reverse(r.0));
            rows.truncate(window);
            let mean = rows.iter().map(|r| r.1).sum::<f64>() / rows.len().max(1) as f64;
            (
                version,
                VersionReward {
                    trajectories: rows.len(),
                    mean,
                },
            )
        })
        .collect())
}

/// When automatic rollback acts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RollbackConfig {
    /// Trajectories each version needs before they are compared.
    pub window: usize,
    /// Roll back when the served version's mean is below the previous one's by more.
    pub margin: f64,
}

impl Default for RollbackConfig {
    fn default() -> Self {
        RollbackConfig {
            window: 200,
            margin: 0.05,
        }
    }
}

/// Rolls the policy back when its served version's live reward is below the previous
/// version's by more than the margin, both over a full window; the rollback goes into the
/// audit `trail` too when given. Returns the rollback event.
pub async fn check_rollback(
    registry: &Registry,
    live: &BTreeMap<String, VersionReward>,
    config: &RollbackConfig,
    by: &str,
    trail: Option<&Trail>,
) -> Result<Option<Event>> {
    let state = registry.state().await?;
    let (Some(current), Some(&previous)) = (state.serving, state.earlier.last()) else {
        return Ok(None);
    };
    let policy = registry.policy();
    let name = |n: u32| format!("{policy}@v{n}");
    let (Some(now), Some(before)) = (live.get(&name(current)), live.get(&name(previous))) else {
        return Ok(None);
    };
    if now.trajectories < config.window || before.trajectories < config.window {
        return Ok(None);
    }
    if now.mean >= before.mean - config.margin {
        return Ok(None);
    }
    let reason = format!(
        "live reward of v{current} {:.3} is below v{previous}'s {:.3} by more than {:.3} over the last {} trajectories each",
        now.mean, before.mean, config.margin, config.window
    );
    let report = serde_json::json!({
        "automatic_rollback": {
            "served": {"version": name(current), "mean": now.mean, "trajectories": now.trajectories},
            "previous": {"version": name(previous), "mean": before.mean, "trajectories": before.trajectories},
            "config": config,
        }
    });
    let event = registry.rollback(by, &reason, Some(report.clone())).await?;
    if let Some(trail) = trail {
        trail.record(policy, &event, report).await?;
    }
    Ok(Some(event))
}
