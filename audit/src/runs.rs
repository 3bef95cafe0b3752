//! Training as it happens, for the console's live view and its Prometheus endpoint: the runs
//! the trainer publishes beside the lake's tables (`atdp_lake::runs`), each reward's
//! distribution with its alerts (against the run before it over the same tenants and agent),
//! and what the adapter registry did with the versions each run produced: the gate's
//! numbers, canaries, promotions, rejections, rollbacks and retirements. A version belongs
//! to a run when its `manifest.json` names the run (`run_id`).
//!
//! **Who sees what.** A run's tenants are those its `run.json` names together with those the
//! manifests of its versions list as trained on (`lineage`); an auditor sees the run only when
//! it may read every one of them. A registry event is shown with the run whose version it is
//! about (the version promoted, rejected, retired, put in shadow or canary; for a rollback, the
//! version taken out of service), and its numbers only when the other version it names (the
//! one compared with, or rolled back to) is the base model or was made by a run the auditor
//! sees too: those numbers describe both versions' traffic.
//!
//! **Cost.** Every file read here is kept in memory by its path, size and time of writing
//! ([`Files`]): the run files of finished runs, full metrics files, manifests and registry log
//! entries never change, so a page load or a scrape lists `training/` and `adapters/` and
//! reads only what changed since.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use atdp_lake::Lake;
use atdp_lake::runs::{self, Alert, FileStamp, RunInfo, RunState};
use serde::Deserialize;

use crate::auditor::Auditor;
use crate::error::Result;

/// Runs shown at most, newest first.
pub const MAX_RUNS: usize = 20;
/// Files kept in memory at most; past it the cache starts afresh.
const MAX_CACHED: usize = 20_000;

/// One entry of a policy's registry log, as the console shows it (`atdp_deploy`'s `Event`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RegistryEvent {
    /// Position in the policy's log.
    pub seq: u64,
    /// `promote`, `rollback`, `reject`, `retire`, `shadow` or `canary`.
    pub action: String,
    /// The version it serves, refuses, retires or puts in shadow or canary (for a rollback: the
    /// version returned to).
    pub version: u32,
    /// The version served before it.
    #[serde(default)]
    pub previous: Option<u32>,
    /// When (RFC 3339).
    pub at: String,
    /// Who.
    pub by: String,
    /// Why, in words.
    pub reason: String,
    /// The gate's or the monitor's numbers (`None` too when they are withheld).
    #[serde(default)]
    pub report: Option<serde_json::Value>,
    /// A canary's or a shadow's share of requests.
    #[serde(default)]
    pub share: Option<f64>,
    /// The policy (from the log's path).
    #[serde(skip)]
    pub policy: String,
    /// The numbers (the report, and the reason, which quotes them) are withheld: they
    /// concern a version of tenants the reader may not see.
    #[serde(skip)]
    pub withheld: bool,
}

impl RegistryEvent {
    /// The version the event is about: the one taken out of service by a rollback, else
    /// the one it names.
    fn about(&self) -> Option<u32> {
        if self.action == "rollback" {
            self.previous
        } else {
            Some(self.version)
        }
    }

    /// The other version whose figures its numbers may hold.
    fn other(&self) -> Option<u32> {
        if self.action == "rollback" {
            Some(self.version)
        } else {
            self.previous
        }
    }
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
    /// Registry events about those versions, in log order.
    pub events: Vec<RegistryEvent>,
    /// Its metrics files as listed.
    pub metrics_files: Vec<FileStamp>,
}

/// Whether a run is still running (neither finished, failed nor stopped, nor silent).
pub fn running(view: &RunView) -> bool {
    view.info.state == RunState::Running && !view.silent
}

/// What was read of a file, by its stamp.
#[derive(Debug, Clone)]
enum Read {
    Run(Option<RunInfo>),
    Metrics(std::sync::Arc<Vec<serde_json::Value>>),
    Manifest {
        run_id: Option<String>,
        tenants: Vec<String>,
    },
    Event(Option<RegistryEvent>),
}

/// The files read so far: by path, what was read and the stamp (size, time of writing,
/// entity tag) it was read at. A file read again replaces its entry, so the memory held
/// follows the number of files, not of their writes.
#[derive(Debug, Default)]
pub struct Files {
    read: Mutex<HashMap<String, (FileStamp, Read)>>,
}

impl Files {
    fn get(&self, stamp: &FileStamp) -> Option<Read> {
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stamp.path)
            .filter(|(at, _)| at == stamp)
            .map(|(_, read)| read.clone())
    }

    fn put(&self, stamp: FileStamp, read: Read) {
        let mut cache = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED && !cache.contains_key(&stamp.path) {
            // Past the bound (a lake of that many files), the oldest-written entries go.
            let mut by_age: Vec<(i64, String)> = cache
                .iter()
                .map(|(path, (at, _))| (at.modified_ms, path.clone()))
                .collect();
            by_age.sort();
            for (_, path) in by_age.into_iter().take(MAX_CACHED / 10) {
                cache.remove(&path);
            }
        }
        cache.insert(stamp.path.clone(), (stamp, read));
    }

    async fn run(&self, lake: &Lake, id: &str, stamp: &FileStamp) -> Result<Option<RunInfo>> {
        if let Some(Read::Run(info)) = self.get(stamp) {
            return Ok(info);
        }
        let info = runs::read_run(lake, id, stamp).await?;
        self.put(stamp.clone(), Read::Run(info.clone()));
        Ok(info)
    }

    async fn metrics(
        &self,
        lake: &Lake,
        stamp: &FileStamp,
    ) -> Result<std::sync::Arc<Vec<serde_json::Value>>> {
        if let Some(Read::Metrics(lines)) = self.get(stamp) {
            return Ok(lines);
        }
        let lines = std::sync::Arc::new(runs::read_metrics(lake, stamp).await?);
        self.put(stamp.clone(), Read::Metrics(lines.clone()));
        Ok(lines)
    }
}

/// The runs `auditor` may see, newest first, at most [`MAX_RUNS`].
pub async fn visible_runs(lake: &Lake, files: &Files, auditor: &Auditor) -> Result<Vec<RunView>> {
    runs_where(lake, files, |tenant| auditor.sees(tenant)).await
}

/// The runs whose every tenant `sees` accepts, newest first, at most [`MAX_RUNS`].
pub async fn runs_where(
    lake: &Lake,
    files: &Files,
    sees: impl Fn(&str) -> bool,
) -> Result<Vec<RunView>> {
    let mut all = Vec::new();
    let mut listing = runs::listing(lake).await?;
    for (id, listed) in &listing {
        if let Some(stamp) = &listed.run
            && let Some(info) = files.run(lake, id, stamp).await?
        {
            all.push(info);
        }
    }
    runs::sort_newest_first(&mut all);
    let registry = Registry::read(lake, files).await?;
    // Each run's tenants: its own, and those its versions' manifests list as trained on.
    let tenants_of = |info: &RunInfo| -> BTreeSet<String> {
        let mut tenants: BTreeSet<String> = info.tenants.iter().cloned().collect();
        for version in registry.versions_of(&info.run_id) {
            if let Some(lineage) = registry.lineage.get(&version) {
                tenants.extend(lineage.iter().cloned());
            }
        }
        tenants
    };
    let visible: HashMap<&str, bool> = all
        .iter()
        .map(|info| {
            let tenants = tenants_of(info);
            (
                info.run_id.as_str(),
                !tenants.is_empty() && tenants.iter().all(|t| sees(t)),
            )
        })
        .collect();
    let now = chrono::Utc::now();
    let mut views = Vec::new();
    for (i, info) in all.iter().enumerate() {
        if !visible[info.run_id.as_str()] {
            continue;
        }
        // The run before: the next older one over the same tenants and agent that the
        // reader sees too (an alert quotes its figures).
        let before = all[i + 1..].iter().find(|r| {
            r.tenants == info.tenants && r.agent_id == info.agent_id && visible[r.run_id.as_str()]
        });
        let mut alerts: Vec<Alert> = info
            .rewards
            .iter()
            .flat_map(|(name, now)| {
                runs::alerts(name, now, before.and_then(|b| b.rewards.get(name)))
            })
            .collect();
        alerts.dedup_by(|a, b| a.reward == b.reward && a.kind == b.kind);
        let versions = registry.versions_of(&info.run_id);
        let events = registry.events_about(&versions, |policy, version| match version {
            None => true,
            Some(v) => registry
                .made_by
                .get(&(policy.to_owned(), v))
                .is_some_and(|run| visible.get(run.as_str()).copied().unwrap_or(false)),
        });
        views.push(RunView {
            silent: info.silent(now),
            info: info.clone(),
            alerts,
            versions,
            events,
            metrics_files: listing
                .remove(&info.run_id)
                .map(|f| f.metrics)
                .unwrap_or_default(),
        });
        if views.len() == MAX_RUNS {
            break;
        }
    }
    Ok(views)
}

/// The step metrics of `run`, in order.
pub async fn metrics(lake: &Lake, files: &Files, run: &RunView) -> Result<Vec<serde_json::Value>> {
    let mut lines = Vec::new();
    for stamp in &run.metrics_files {
        lines.extend(files.metrics(lake, stamp).await?.iter().cloned());
    }
    Ok(lines)
}

/// The last step's metrics of `run`.
pub async fn last_metrics(
    lake: &Lake,
    files: &Files,
    run: &RunView,
) -> Result<Option<serde_json::Value>> {
    match run.metrics_files.last() {
        Some(stamp) => Ok(files.metrics(lake, stamp).await?.last().cloned()),
        None => Ok(None),
    }
}

/// The registry under the lake's `adapters/`: which run made each version and what each
/// version's manifest lists as trained on, and every log entry.
#[derive(Debug, Default)]
struct Registry {
    made_by: HashMap<(String, u32), String>,
    lineage: HashMap<(String, u32), Vec<String>>,
    events: BTreeMap<(String, u64), RegistryEvent>,
}

/// A file of the registry: a version's manifest, or a log entry.
#[derive(Debug, PartialEq)]
enum RegistryFile {
    Manifest(String, u32),
    Log(String, u64),
}

/// `<policy>/v<N>/manifest.json` or `<policy>/log/<seq>.json`.
fn registry_path(path: &str) -> Option<RegistryFile> {
    let mut parts = path.split('/');
    let (policy, folder, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    if folder == "log" {
        let seq = file.strip_suffix(".json")?.parse().ok()?;
        return Some(RegistryFile::Log(policy.to_owned(), seq));
    }
    if file != "manifest.json" {
        return None;
    }
    let version = folder.strip_prefix('v')?.parse().ok()?;
    Some(RegistryFile::Manifest(policy.to_owned(), version))
}

impl Registry {
    async fn read(lake: &Lake, files: &Files) -> Result<Registry> {
        let Some((store, listed)) = crate::lineage::registry_files(lake).await? else {
            return Ok(Registry::default());
        };
        let mut registry = Registry::default();
        for meta in listed {
            let Some(file) = registry_path(meta.location.as_ref()) else {
                continue;
            };
            let stamp = FileStamp {
                path: format!("adapters/{}", meta.location.as_ref()),
                size: meta.size,
                modified_ms: meta.last_modified.timestamp_millis(),
                e_tag: meta.e_tag.clone(),
            };
            let read = match files.get(&stamp) {
                Some(read) => read,
                None => {
                    let bytes = crate::lineage::read_object(store.as_ref(), &meta.location).await?;
                    let read = match &file {
                        RegistryFile::Manifest(..) => {
                            let manifest: serde_json::Value =
                                serde_json::from_slice(&bytes).unwrap_or_default();
                            Read::Manifest {
                                run_id: manifest["run_id"].as_str().map(str::to_owned),
                                tenants: manifest["lineage"]["trajectories"]
                                    .as_object()
                                    .map(|t| t.keys().cloned().collect())
                                    .unwrap_or_default(),
                            }
                        }
                        // An entry that does not parse is the registry's to refuse; not shown.
                        RegistryFile::Log(..) => {
                            Read::Event(serde_json::from_slice::<RegistryEvent>(&bytes).ok())
                        }
                    };
                    files.put(stamp, read.clone());
                    read
                }
            };
            match (file, read) {
                (RegistryFile::Manifest(policy, version), Read::Manifest { run_id, tenants }) => {
                    if let Some(run) = run_id {
                        registry.made_by.insert((policy.clone(), version), run);
                    }
                    registry.lineage.insert((policy, version), tenants);
                }
                (RegistryFile::Log(policy, seq), Read::Event(Some(mut event))) => {
                    event.policy = policy.clone();
                    registry.events.insert((policy, seq), event);
                }
                _ => {}
            }
        }
        Ok(registry)
    }

    fn versions_of(&self, run_id: &str) -> Vec<(String, u32)> {
        let mut versions: Vec<(String, u32)> = self
            .made_by
            .iter()
            .filter(|(_, run)| run.as_str() == run_id)
            .map(|(version, _)| version.clone())
            .collect();
        versions.sort();
        versions
    }

    /// The events about `versions`, their numbers withheld unless `may_show` accepts the
    /// other version they name (`None`: the base model).
    fn events_about(
        &self,
        versions: &[(String, u32)],
        may_show: impl Fn(&str, Option<u32>) -> bool,
    ) -> Vec<RegistryEvent> {
        self.events
            .values()
            .filter(|e| {
                e.about()
                    .is_some_and(|v| versions.contains(&(e.policy.clone(), v)))
            })
            .map(|e| {
                let mut e = e.clone();
                if !may_show(&e.policy, e.other()) {
                    e.report = None;
                    e.reason = String::new();
                    e.withheld = true;
                }
                e
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{RegistryFile, registry_path};

    #[test]
    fn only_manifests_and_log_entries_are_read() {
        assert_eq!(
            registry_path("support/v12/manifest.json"),
            Some(RegistryFile::Manifest("support".into(), 12))
        );
        assert_eq!(
            registry_path("support/log/00000000000000000007.json"),
            Some(RegistryFile::Log("support".into(), 7))
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
