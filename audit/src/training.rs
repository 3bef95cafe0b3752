//! Training as it happens, for the console's live view and its Prometheus endpoint: the runs
//! the trainer publishes beside the lake's tables (`atdp_lake::runs`), each reward's
//! distribution with its alerts (against the run before it over the same tenants and agent),
//! and what the adapter registry did with the versions each run produced: the gate's
//! numbers, canaries, promotions, rejections, rollbacks and retirements. A version belongs
//! to a run when its `manifest.json` names the run (`run_id`).
//!
//! An auditor sees a run only when it may read every tenant the run trained on: the figures
//! of a run are computed from all of them.

use std::collections::{BTreeMap, HashMap};

use atdp_lake::Lake;
use atdp_lake::runs::{self, Alert, RunInfo, RunState};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use serde::Deserialize;

use crate::auditor::Auditor;
use crate::error::{Error, Result};

/// Runs shown at most, newest first.
pub const MAX_RUNS: usize = 20;

/// One entry of a policy's registry log, as the console shows it (`atdp_deploy`'s `Event`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RegistryEvent {
    /// Position in the policy's log.
    pub seq: u64,
    /// `promote`, `rollback`, `reject`, `retire` or `canary`.
    pub action: String,
    /// The version it names.
    pub version: u32,
    /// When (RFC 3339).
    pub at: String,
    /// Who.
    pub by: String,
    /// Why, in words.
    pub reason: String,
    /// The gate's or the monitor's numbers.
    #[serde(default)]
    pub report: Option<serde_json::Value>,
    /// A canary's share of requests.
    #[serde(default)]
    pub share: Option<f64>,
    /// The policy (from the log's path).
    #[serde(skip)]
    pub policy: String,
}

/// A run with what the console shows beside it.
#[derive(Debug, Clone)]
pub struct RunView {
    /// What the run published.
    pub info: RunInfo,
    /// Running, but silent for [`runs::SILENT_AFTER`]: its process has likely died.
    pub silent: bool,
    /// Odd shapes of its rewards' distributions.
    pub alerts: Vec<Alert>,
    /// The adapter versions it produced (policy, version).
    pub versions: Vec<(String, u32)>,
    /// Registry events naming those versions, in log order.
    pub events: Vec<RegistryEvent>,
}

/// The runs `auditor` may see (every tenant of the run visible), newest first, at most
/// [`MAX_RUNS`].
pub async fn visible_runs(lake: &Lake, auditor: &Auditor) -> Result<Vec<RunView>> {
    runs_where(lake, |tenant| auditor.sees(tenant)).await
}

/// The runs whose every tenant `sees` accepts, newest first, at most [`MAX_RUNS`].
pub async fn runs_where(lake: &Lake, sees: impl Fn(&str) -> bool) -> Result<Vec<RunView>> {
    let all = runs::runs(lake).await?;
    let registry = Registry::read(lake).await?;
    let now = chrono::Utc::now();
    let mut views = Vec::new();
    for (i, info) in all.iter().enumerate() {
        if !info.tenants.iter().all(|t| sees(t)) || info.tenants.is_empty() {
            continue;
        }
        // The run before: the next older one over the same tenants and agent.
        let before = all[i + 1..]
            .iter()
            .find(|r| r.tenants == info.tenants && r.agent_id == info.agent_id);
        let alerts = info
            .rewards
            .iter()
            .flat_map(|(name, now)| {
                runs::alerts(name, now, before.and_then(|b| b.rewards.get(name)))
            })
            .collect();
        let versions = registry.versions_of(&info.run_id);
        let events = registry.events_of(&versions);
        views.push(RunView {
            silent: info.silent(now),
            info: info.clone(),
            alerts,
            versions,
            events,
        });
        if views.len() == MAX_RUNS {
            break;
        }
    }
    Ok(views)
}

/// The step metrics of a run (see [`runs::run_metrics`]).
pub async fn metrics(lake: &Lake, run_id: &str) -> Result<Vec<serde_json::Value>> {
    Ok(runs::run_metrics(lake, run_id).await?)
}

/// Whether a run is still running (neither finished, failed nor stopped, nor silent).
pub fn live(view: &RunView) -> bool {
    view.info.state == RunState::Running && !view.silent
}

/// The registry under the lake's `adapters/`: which run made each version, and every log
/// entry.
#[derive(Debug, Default)]
struct Registry {
    made_by: HashMap<String, Vec<(String, u32)>>,
    events: BTreeMap<(String, u64), RegistryEvent>,
}

/// `<policy>/v<N>/manifest.json` → (policy, N); `<policy>/log/<seq>.json` → (policy, seq).
fn registry_path(path: &str) -> Option<(String, Option<u32>, Option<u64>)> {
    let mut parts = path.split('/');
    let (policy, folder, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    if folder == "log" {
        let seq = file.strip_suffix(".json")?.parse().ok()?;
        return Some((policy.to_owned(), None, Some(seq)));
    }
    if file != "manifest.json" {
        return None;
    }
    let version = folder.strip_prefix('v')?.parse().ok()?;
    Some((policy.to_owned(), Some(version), None))
}

impl Registry {
    async fn read(lake: &Lake) -> Result<Registry> {
        let url = lake
            .root()
            .join("adapters/")
            .map_err(|e| Error::Invalid(format!("registry location: {e}")))?;
        if let Ok(path) = url.to_file_path()
            && !path.exists()
        {
            return Ok(Registry::default());
        }
        let store =
            deltalake::logstore::store_for(&url, lake.options().clone()).map_err(Error::query)?;
        let listed: Vec<_> = store.list(None).try_collect().await.map_err(Error::query)?;
        let mut registry = Registry::default();
        for meta in listed {
            let Some((policy, version, seq)) = registry_path(meta.location.as_ref()) else {
                continue;
            };
            let bytes = store
                .get(&meta.location)
                .await
                .map_err(Error::query)?
                .bytes()
                .await
                .map_err(Error::query)?;
            match (version, seq) {
                (Some(version), _) => {
                    let manifest: serde_json::Value =
                        serde_json::from_slice(&bytes).unwrap_or_default();
                    if let Some(run) = manifest["run_id"].as_str() {
                        registry
                            .made_by
                            .entry(run.to_owned())
                            .or_default()
                            .push((policy, version));
                    }
                }
                (None, Some(seq)) => {
                    // An entry that does not parse is the registry's to refuse; not shown.
                    if let Ok(mut event) = serde_json::from_slice::<RegistryEvent>(&bytes) {
                        event.policy = policy.clone();
                        registry.events.insert((policy, seq), event);
                    }
                }
                (None, None) => {}
            }
        }
        Ok(registry)
    }

    fn versions_of(&self, run_id: &str) -> Vec<(String, u32)> {
        let mut versions = self.made_by.get(run_id).cloned().unwrap_or_default();
        versions.sort();
        versions
    }

    fn events_of(&self, versions: &[(String, u32)]) -> Vec<RegistryEvent> {
        self.events
            .values()
            .filter(|e| versions.contains(&(e.policy.clone(), e.version)))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::registry_path;

    #[test]
    fn only_manifests_and_log_entries_are_read() {
        assert_eq!(
            registry_path("support/v12/manifest.json"),
            Some(("support".into(), Some(12), None))
        );
        assert_eq!(
            registry_path("support/log/00000000000000000007.json"),
            Some(("support".into(), None, Some(7)))
        );
        for other in [
            "support/v12/adapter_config.json",
            "support/v12/_published.json",
            "support/log/x.json",
            "support/v1/extra/manifest.json",
            "support/12/manifest.json",
        ] {
            assert_eq!(registry_path(other), None, "{other}");
        }
    }
}
