//! Live reward per serving version, from the lake; automatic rollback when a newly promoted
//! version earns less than the one before it; and the verdict on a canary, promoted when it
//! earns as much as the served version, rejected (out of service at once) when it earns less.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use atdp_deploy::{Event, Registry};
use atdp_trainer::Selection;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::adapter_events::AdapterEvents;

/// The tag the proxy puts on a reply recorded in shadow: the id of the served step it copies.
pub const SHADOW_TAG: &str = "shadow_of";

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
/// trained on is not what was served. A shadow's replies (steps tagged `shadow_of`) were never
/// served and never count (`shadow.rs` scores them). Blocking.
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
        if step.tags.contains_key(SHADOW_TAG) {
            continue;
        }
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

/// Decides the policy's canary once it and the served version each have a full window of
/// live reward: promoted when its mean is not below the served version's by more than the
/// margin, rejected otherwise (the rejection ends the canary: every request goes to the served
/// version again). The decision goes into the audit `trail` too when given. Returns it.
pub async fn check_canary(
    registry: &Registry,
    live: &BTreeMap<String, VersionReward>,
    config: &RollbackConfig,
    by: &str,
    trail: Option<&AdapterEvents>,
) -> Result<Option<Event>> {
    let state = registry.state().await?;
    let Some(canary) = state.canary.filter(|c| !c.shadow) else {
        return Ok(None);
    };
    let policy = registry.policy();
    let candidate_name = format!("{policy}@v{}", canary.version);
    let served_name = match state.serving {
        Some(n) => format!("{policy}@v{n}"),
        None => format!("{policy}@base"),
    };
    let (Some(candidate), Some(served)) = (live.get(&candidate_name), live.get(&served_name))
    else {
        return Ok(None);
    };
    if candidate.trajectories < config.window || served.trajectories < config.window {
        return Ok(None);
    }
    let report = serde_json::json!({
        "canary": {
            "candidate": {"version": candidate_name, "mean": candidate.mean, "trajectories": candidate.trajectories},
            "served": {"version": served_name, "mean": served.mean, "trajectories": served.trajectories},
            "share": canary.share,
            "config": config,
        }
    });
    let event = if candidate.mean < served.mean - config.margin {
        let reason = format!(
            "canary's live reward {:.3} is below {served_name}'s {:.3} by more than {:.3} over the last {} trajectories each",
            candidate.mean, served.mean, config.margin, config.window
        );
        registry
            .reject(canary.version, by, &reason, Some(report.clone()))
            .await?
    } else {
        let reason = format!(
            "canary's live reward {:.3} held against {served_name}'s {:.3} (margin {:.3}) over the last {} trajectories each",
            candidate.mean, served.mean, config.margin, config.window
        );
        registry
            .promote(canary.version, by, &reason, Some(report.clone()))
            .await?
    };
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

    use atdp_deploy::Action;
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

    /// The registry of policy `support` in the lake under `dir`, with `versions` published
    /// versions (placeholder files: the registry does not read them), and the lake's location.
    pub(crate) async fn published_registry(dir: &Path, versions: u32) -> (Registry, String) {
        let url = dir.join("lake").display().to_string();
        let registry = Registry::open(&url, Default::default(), "support").unwrap();
        let adapter = dir.join("adapter");
        std::fs::create_dir_all(&adapter).unwrap();
        std::fs::write(adapter.join("adapter_config.json"), br#"{"r": 4}"#).unwrap();
        std::fs::write(adapter.join("adapter_model.safetensors"), b"weights").unwrap();
        for _ in 0..versions {
            registry.publish(&adapter, "test").await.unwrap();
        }
        (registry, url)
    }

    #[tokio::test]
    async fn a_worse_canary_is_rejected_and_one_that_holds_is_promoted() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, _) = published_registry(dir.path(), 3).await;
        registry.promote(1, "test", "first", None).await.unwrap();
        let config = RollbackConfig {
            window: 50,
            margin: 0.05,
        };
        let live = |entries: &[(&str, usize, f64)]| -> BTreeMap<String, VersionReward> {
            entries
                .iter()
                .map(|(v, trajectories, mean)| {
                    (
                        (*v).to_owned(),
                        VersionReward {
                            trajectories: *trajectories,
                            mean: *mean,
                        },
                    )
                })
                .collect()
        };
        // No canary: nothing to decide.
        let decided = check_canary(&registry, &live(&[]), &config, "test", None).await;
        assert!(decided.unwrap().is_none());

        registry
            .canary(2, 0.2, "test", "gate passed", None)
            .await
            .unwrap();
        // Not a full window of the canary yet.
        let early = live(&[("support@v1", 200, 0.8), ("support@v2", 20, 0.1)]);
        let decided = check_canary(&registry, &early, &config, "test", None).await;
        assert!(decided.unwrap().is_none());
        // Worse by more than the margin: rejected, the canary ends, v1 still served.
        let worse = live(&[("support@v1", 200, 0.8), ("support@v2", 50, 0.7)]);
        let event = check_canary(&registry, &worse, &config, "atdp-loop", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((event.action, event.version), (Action::Reject, 2));
        assert!(event.reason.contains("below"), "{}", event.reason);
        let state = registry.state().await.unwrap();
        assert_eq!((state.serving, state.canary), (Some(1), None));

        registry
            .canary(3, 0.5, "test", "gate passed", None)
            .await
            .unwrap();
        // Within the margin: promoted.
        let holds = live(&[("support@v1", 200, 0.8), ("support@v3", 60, 0.77)]);
        let event = check_canary(&registry, &holds, &config, "atdp-loop", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((event.action, event.version), (Action::Promote, 3));
        let state = registry.state().await.unwrap();
        assert_eq!((state.serving, state.canary), (Some(3), None));
        // The registry refuses a canary of the served version, of a share out of range.
        assert!(
            registry
                .canary(3, 0.5, "test", "again", None)
                .await
                .is_err()
        );
        assert!(
            registry
                .canary(2, 1.5, "test", "too much", None)
                .await
                .is_err()
        );
    }
}
