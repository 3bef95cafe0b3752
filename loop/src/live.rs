//! Live reward per serving version, from the lake, and automatic rollback when a newly
//! promoted version earns less than the one before it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use atdp_deploy::{Event, Registry};
use atdp_trainer::Selection;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::adapter_events::AdapterEvents;

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
/// of the latest `window`. Every served step counts, whatever its training marks: what may be
/// trained on is not what was served. Blocking.
pub fn live_rewards(
    lake: &str,
    options: HashMap<String, String>,
    selection: &Selection,
    reward: &str,
    window: usize,
) -> Result<BTreeMap<String, VersionReward>> {
    let mut selection = selection.clone();
    selection.reward_names = BTreeSet::from([reward.to_owned()]);
    let data = atdp_trainer::read_lake_to_monitor(lake, options, &selection)?;
    // The version of each (tenant, trajectory)'s latest step.
    let mut last: HashMap<(&str, &str), (i64, &str)> = HashMap::new();
    for step in &data.steps {
        let Some(version) = step.policy_version.as_deref() else {
            continue;
        };
        let entry = last
            .entry((step.tenant_id.as_str(), step.trajectory_id.as_str()))
            .or_insert((step.started_at, version));
        if step.started_at >= entry.0 {
            *entry = (step.started_at, version);
        }
    }
    let mut by_version: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for reward in data.rewards.iter().filter(|r| r.step_id.is_none()) {
        if let Some((_, version)) =
            last.get(&(reward.tenant_id.as_str(), reward.trajectory_id.as_str()))
        {
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
    trail: Option<&AdapterEvents>,
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

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;
    use std::time::Duration;

    use atdp_lake::{LakeWriter, WriterConfig};

    use atdp_schema::{Reward, Step, new_id};

    use super::*;

    /// A lake in which the clients of two tenants both named their trajectory `t1`: acme's
    /// was served by `policy@v1` and rewarded 1, globex's (later) by `policy@v2` and
    /// rewarded 0; `marks` are the two steps' `training_eligible`. Returns the lake's
    /// location.
    pub(crate) fn twin_lake(dir: &Path, marks: [Option<bool>; 2]) -> String {
        let lake = dir.join("lake").display().to_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut config = WriterConfig::new(lake.clone(), dir.join("wal"));
            config.fsync = false;
            let writer = LakeWriter::open(config).await.unwrap();
            let at = 1_795_910_400_000_000;
            for (i, (tenant, version, value, eligible)) in [
                ("acme", "policy@v1", 1.0, marks[0]),
                ("globex", "policy@v2", 0.0, marks[1]),
            ]
            .into_iter()
            .enumerate()
            {
                let started_at = at + i as i64 * 1_000_000;
                writer
                    .append(Step {
                        step_id: "s1".into(),
                        trajectory_id: "t1".into(),
                        tenant_id: tenant.into(),
                        agent_id: "router".into(),
                        started_at,
                        status: "ok".into(),
                        policy_version: Some(version.into()),
                        training_eligible: eligible,
                        ..Step::default()
                    })
                    .unwrap();
                writer
                    .append(Reward {
                        reward_id: new_id(),
                        trajectory_id: "t1".into(),
                        tenant_id: tenant.into(),
                        name: "ok".into(),
                        value,
                        source: "api".into(),
                        created_at: started_at + 10,
                        ..Reward::default()
                    })
                    .unwrap();
            }
            writer.flush().await.unwrap();
            assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
        });
        lake
    }

    pub(crate) fn both() -> Selection {
        Selection {
            tenants: ["acme".to_owned(), "globex".to_owned()].into(),
            ..Selection::default()
        }
    }

    #[test]
    fn each_tenants_reward_counts_for_the_version_that_served_that_tenant() {
        let dir = tempfile::tempdir().unwrap();
        // What may be trained on is not what was served: an ineligible and an unmarked step
        // count as much as eligible ones.
        let lake = twin_lake(dir.path(), [Some(false), None]);
        let live = live_rewards(&lake, Default::default(), &both(), "ok", 10).unwrap();
        let got: Vec<(&str, usize, f64)> = live
            .iter()
            .map(|(v, r)| (v.as_str(), r.trajectories, r.mean))
            .collect();
        assert_eq!(got, [("policy@v1", 1, 1.0), ("policy@v2", 1, 0.0)]);
    }
}
