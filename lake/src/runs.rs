//! Training runs as they happen, beside the tables on the lake's object storage
//! (`docs/lake.md`, "Training runs"):
//!
//! ```text
//! training/<run id>/run.json                     the run: what it trains on, its state, its rewards' distributions
//! training/<run id>/metrics/<lines before>.jsonl  one line per optimizer step, [`CHUNK_STEPS`] to a file
//! ```
//!
//! The trainer writes them through a [`RunLog`] while it runs (at most every
//! [`PUBLISH_EVERY`], at least every [`HEARTBEAT`], and at its end); only the run file and the
//! last, unfilled metrics file are ever rewritten, so a long run costs the same per
//! publication as a short one. The console and its Prometheus endpoint read them ([`runs`],
//! [`run_metrics`]). They hold figures about training (losses, means and histograms of
//! rewards, tenant and agent names), never text of the data. A run that stops writing
//! without an end (its process was killed) keeps the state `running`; readers call it silent
//! once [`SILENT_AFTER`] has passed since its last write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deltalake::Path as ObjectPath;
use deltalake::logstore::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::{Error, Lake, Result};

/// How often a running training publishes its metrics at most.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// How often a running training rewrites its run file at least, new steps or not.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// A run that has written nothing for this long while `running` is called silent.
pub const SILENT_AFTER: Duration = Duration::from_secs(180);
/// Step lines per metrics file.
pub const CHUNK_STEPS: usize = 1000;
/// Bins of a reward histogram.
pub const HISTOGRAM_BINS: usize = 10;

const RUN_FILE: &str = "run.json";
const METRICS_DIR: &str = "metrics";

/// A number that may not be finite: JSON has no NaN or infinity, so serde_json writes them
/// as `null`, which is read back as NaN.
mod lenient {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Training; steps are being added.
    Running,
    /// Every step done; the adapter was written.
    Finished,
    /// Stopped with an error (`RunInfo::error`).
    Failed,
    /// Stopped before its last step, as asked; a later invocation resumes it from its
    /// checkpoint and publishes a run of its own.
    Stopped,
    /// A state this reader does not know (written by a newer trainer).
    #[serde(other)]
    Unknown,
}

/// The distribution of one reward's values over what a run trains on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Values.
    pub count: usize,
    /// Their mean.
    #[serde(with = "lenient")]
    pub mean: f64,
    /// Their standard deviation.
    #[serde(with = "lenient")]
    pub std: f64,
    /// The smallest.
    #[serde(with = "lenient")]
    pub min: f64,
    /// The largest.
    #[serde(with = "lenient")]
    pub max: f64,
    /// The share of values equal to the largest.
    #[serde(with = "lenient")]
    pub at_max: f64,
    /// Counts in [`HISTOGRAM_BINS`] equal bins from `min` to `max` (all in the first when
    /// every value is the same).
    pub histogram: Vec<u64>,
}

impl Distribution {
    /// The distribution of `values` (non-finite values are left out); `None` when none is
    /// left.
    pub fn of(values: &[f64]) -> Option<Distribution> {
        let values: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // Computed on the values scaled into [-1, 1], so that huge values do not overflow
        // the sums; every value alike has exactly its value as mean and no spread.
        let (mean, std) = if min == max {
            (min, 0.0)
        } else {
            let scale = min.abs().max(max.abs());
            let mean = values.iter().map(|v| v / scale).sum::<f64>() / n;
            let var = values
                .iter()
                .map(|v| (v / scale - mean).powi(2))
                .sum::<f64>()
                / n;
            (mean * scale, var.sqrt() * scale)
        };
        // Each value's position in [0, 1]; from halved values when the range itself
        // overflows.
        let bins = HISTOGRAM_BINS as f64;
        let range = max - min;
        let mut histogram = vec![0u64; HISTOGRAM_BINS];
        for v in &values {
            let at = if range == 0.0 {
                0.0
            } else if range.is_finite() {
                (v - min) / range
            } else {
                (v / 2.0 - min / 2.0) / (max / 2.0 - min / 2.0)
            };
            histogram[((at * bins) as usize).min(HISTOGRAM_BINS - 1)] += 1;
        }
        Some(Distribution {
            count: values.len(),
            mean,
            std,
            min,
            max,
            at_max: values.iter().filter(|v| **v == max).count() as f64 / n,
            histogram,
        })
    }
}

/// An odd shape of a reward's distribution, worth a look before its adapter is trusted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// The reward's name.
    pub reward: String,
    /// `piled_at_max`, `variance_collapsed` or `jumped`.
    pub kind: &'static str,
    /// What was seen, in words.
    pub detail: String,
}

/// Fewer values than this raise no alert: the shape of a handful means little.
const ALERT_MIN_COUNT: usize = 20;
/// Share of values at the maximum from which they pile there.
const PILED_SHARE: f64 = 0.9;
/// A standard deviation below this share of the previous run's has collapsed.
const COLLAPSED_RATIO: f64 = 0.1;
/// A mean further than this many of the previous run's standard deviations has jumped.
const JUMP_STDS: f64 = 3.0;
/// Differences below this share of a value are rounding.
const RELATIVE_TOLERANCE: f64 = 1e-9;

/// The alerts of a reward's distribution in a run, given the same reward's distribution in
/// the run before it (same tenants and agent): mass piling at the maximum (a reward that is
/// saturated or gamed), variance collapsing (every answer scored alike), a sudden jump of
/// the mean between runs.
pub fn alerts(reward: &str, now: &Distribution, before: Option<&Distribution>) -> Vec<Alert> {
    let mut found = Vec::new();
    if now.count < ALERT_MIN_COUNT {
        return found;
    }
    let alert = |kind, detail| Alert {
        reward: reward.to_owned(),
        kind,
        detail,
    };
    if now.at_max >= PILED_SHARE && now.max > now.min {
        found.push(alert(
            "piled_at_max",
            format!(
                "{:.0}% of values are the maximum {}",
                now.at_max * 100.0,
                now.max
            ),
        ));
    }
    if now.max == now.min {
        found.push(alert(
            "variance_collapsed",
            format!("all {} values are {}", now.count, now.mean),
        ));
    }
    let finite = |d: &Distribution| d.mean.is_finite() && d.std.is_finite();
    if let Some(before) = before.filter(|b| b.count >= ALERT_MIN_COUNT && finite(b) && finite(now))
    {
        if now.std > 0.0 && before.std > 0.0 && now.std < COLLAPSED_RATIO * before.std {
            found.push(alert(
                "variance_collapsed",
                format!(
                    "standard deviation {:.4}, was {:.4} in the run before",
                    now.std, before.std
                ),
            ));
        }
        // A spread of zero (every value alike before) still allows for rounding.
        let spread = before
            .std
            .max(RELATIVE_TOLERANCE * before.mean.abs().max(1.0));
        if (now.mean - before.mean).abs() > JUMP_STDS * spread {
            found.push(alert(
                "jumped",
                format!(
                    "mean {:.4}, was {:.4} ± {:.4} in the run before",
                    now.mean, before.mean, before.std
                ),
            ));
        }
    }
    found
}

/// What `run.json` says of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The run's id (letters, digits and `-`).
    pub run_id: String,
    /// The tenants whose data it trains on.
    pub tenants: Vec<String>,
    /// The agent it trains, when the selection names one.
    pub agent_id: Option<String>,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// When it last wrote (RFC 3339, UTC).
    pub updated_at: String,
    /// Where it stands.
    pub state: RunState,
    /// Optimizer steps it will take.
    pub total_steps: u64,
    /// Optimizer steps done.
    pub steps_done: u64,
    /// Examples with a return (those it trains on).
    pub examples: usize,
    /// Each reward's distribution over the trajectories it trains on, by name.
    pub rewards: BTreeMap<String, Distribution>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunInfo {
    /// Whether the run says it is running but has written nothing for [`SILENT_AFTER`].
    pub fn silent(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.state == RunState::Running
            && chrono::DateTime::parse_from_rfc3339(&self.updated_at).is_ok_and(|at| {
                (now - at.with_timezone(&chrono::Utc))
                    .to_std()
                    .is_ok_and(|d| d > SILENT_AFTER)
            })
    }
}

/// A new run id: the start time and 8 random hex digits (`20261206T231500Z-1a2b3c4d`).
pub fn new_run_id() -> String {
    format!(
        "{}-{:08x}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        rand::random::<u32>()
    )
}

/// Whether `id` can name a run (and so a folder): 1 to 64 ASCII letters, digits and `-`.
pub fn valid_run_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn store(lake: &Lake) -> Result<Arc<dyn ObjectStore>> {
    let url = lake.root().join("training/").map_err(|e| Error::Location {
        url: lake.root().to_string(),
        message: e.to_string(),
    })?;
    deltalake::logstore::store_for(&url, lake.options().clone()).map_err(|e| Error::Location {
        url: url.to_string(),
        message: e.to_string(),
    })
}

fn storage(path: &str, e: impl std::fmt::Display) -> Error {
    Error::Storage {
        path: format!("training/{path}"),
        message: e.to_string(),
    }
}

/// What a training publishes while it runs.
pub struct RunLog {
    store: Arc<dyn ObjectStore>,
    info: RunInfo,
    /// Step lines before the current metrics file.
    before: usize,
    /// Full metrics files not yet written: (lines before them, their text).
    full: Vec<(usize, String)>,
    /// The current metrics file's lines.
    current: Vec<String>,
    /// New lines since the last publication.
    dirty: bool,
    published: Option<Instant>,
    /// The last publication tried, whether it succeeded or not.
    tried: Option<Instant>,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("run_id", &self.info.run_id)
            .finish()
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn metrics_path(id: &str, before: usize) -> String {
    format!("{id}/{METRICS_DIR}/{before:010}.jsonl")
}

impl RunLog {
    /// A run to publish under the lake's `training/` (its state `running`); nothing is
    /// written before the first publication ([`RunLog::publish_if_due`] is due at once).
    pub fn new(lake: &Lake, mut info: RunInfo) -> Result<RunLog> {
        if !valid_run_id(&info.run_id) {
            return Err(Error::Config(format!("invalid run id {:?}", info.run_id)));
        }
        info.state = RunState::Running;
        Ok(RunLog {
            store: store(lake)?,
            info,
            before: 0,
            full: Vec::new(),
            current: Vec::new(),
            dirty: false,
            published: None,
            tried: None,
        })
    }

    /// Starts publishing `info`: [`RunLog::new`], then its first publication.
    pub async fn start(lake: &Lake, info: RunInfo) -> Result<RunLog> {
        let mut log = RunLog::new(lake, info)?;
        log.publish().await?;
        Ok(log)
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.info.run_id
    }

    /// Adds a step's metrics (one JSON object), to be published by the next publication.
    pub fn push(&mut self, steps_done: u64, metrics: &serde_json::Value) {
        self.current.push(metrics.to_string());
        self.info.steps_done = steps_done;
        self.dirty = true;
        if self.current.len() == CHUNK_STEPS {
            let mut text = self.current.join("\n");
            text.push('\n');
            self.full.push((self.before, text));
            self.before += CHUNK_STEPS;
            self.current.clear();
        }
    }

    /// Publishes when there are new steps and [`PUBLISH_EVERY`] has passed since the last
    /// publication, or when [`HEARTBEAT`] has.
    /// A failed publication is tried again no sooner than [`PUBLISH_EVERY`] later.
    pub async fn publish_if_due(&mut self) -> Result<()> {
        if self.tried.is_some_and(|at| at.elapsed() < PUBLISH_EVERY) && self.published != self.tried
        {
            return Ok(());
        }
        let since = self.published.map(|at| at.elapsed());
        let due = match since {
            None => true,
            Some(since) => (self.dirty && since >= PUBLISH_EVERY) || since >= HEARTBEAT,
        };
        if due { self.publish().await } else { Ok(()) }
    }

    /// Adds a step's metrics and publishes when due ([`RunLog::push`], then
    /// [`RunLog::publish_if_due`]).
    pub async fn step(&mut self, steps_done: u64, metrics: &serde_json::Value) -> Result<()> {
        self.push(steps_done, metrics);
        self.publish_if_due().await
    }

    /// Ends the run: `Finished`, `Stopped`, or `Failed` with `error`; everything is published.
    pub async fn finish(&mut self, state: RunState, error: Option<String>) -> Result<()> {
        self.info.state = state;
        self.info.error = error;
        self.publish().await
    }

    /// Writes what is new: full metrics files (each once), the current one, then the run
    /// file, so that a reader that sees a step count finds those steps' lines. A failure
    /// leaves everything to the next publication.
    async fn publish(&mut self) -> Result<()> {
        let tried = Instant::now();
        self.tried = Some(tried);
        let id = self.info.run_id.clone();
        while let Some((before, text)) = self.full.first() {
            let path = metrics_path(&id, *before);
            self.put(&path, text.clone().into_bytes()).await?;
            self.full.remove(0);
        }
        if self.dirty && !self.current.is_empty() {
            let mut text = self.current.join("\n");
            text.push('\n');
            self.put(&metrics_path(&id, self.before), text.into_bytes())
                .await?;
        }
        self.info.updated_at = now_rfc3339();
        let run = format!("{id}/{RUN_FILE}");
        let bytes = serde_json::to_vec_pretty(&self.info).map_err(|e| storage(&run, e))?;
        self.put(&run, bytes).await?;
        self.dirty = false;
        self.published = Some(tried);
        Ok(())
    }

    async fn put(&self, path: &str, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(&path.into(), PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| storage(path, e))
    }
}

async fn read(store: &dyn ObjectStore, path: &ObjectPath) -> Result<Option<Vec<u8>>> {
    match store.get(path).await {
        Ok(found) => Ok(Some(
            found
                .bytes()
                .await
                .map_err(|e| storage(path.as_ref(), e))?
                .to_vec(),
        )),
        Err(deltalake::ObjectStoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(storage(path.as_ref(), e)),
    }
}

fn no_training_folder(lake: &Lake) -> bool {
    lake.root()
        .join("training/")
        .ok()
        .and_then(|url| url.to_file_path().ok())
        .is_some_and(|path| !path.exists())
}

/// One stored file: where it is under `training/`, its size and when it was last written
/// (together: whether it changed since it was last read).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileStamp {
    /// Its path under `training/`.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Last written (ms since the epoch).
    pub modified_ms: i64,
    /// The store's entity tag, which changes with every write where the time may not
    /// (S3's times are whole seconds).
    pub e_tag: Option<String>,
}

/// A run's files as listed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFiles {
    /// `run.json`.
    pub run: Option<FileStamp>,
    /// The metrics files, in order.
    pub metrics: Vec<FileStamp>,
}

/// Every run folder under the lake's `training/` and its files (one listing), by run id.
/// Folders whose name is not a run id are left out.
pub async fn listing(lake: &Lake) -> Result<BTreeMap<String, RunFiles>> {
    let mut found: BTreeMap<String, RunFiles> = BTreeMap::new();
    if no_training_folder(lake) {
        return Ok(found);
    }
    let store = store(lake)?;
    let listed: Vec<_> = store
        .list(None)
        .try_collect()
        .await
        .map_err(|e| storage("", e))?;
    for meta in listed {
        let path = meta.location.as_ref().to_owned();
        let parts: Vec<&str> = path.split('/').collect();
        let stamp = FileStamp {
            path: path.clone(),
            size: meta.size,
            modified_ms: meta.last_modified.timestamp_millis(),
            e_tag: meta.e_tag.clone(),
        };
        match parts.as_slice() {
            [id, RUN_FILE] if valid_run_id(id) => {
                found.entry((*id).to_owned()).or_default().run = Some(stamp);
            }
            [id, METRICS_DIR, name]
                if valid_run_id(id)
                    && name.strip_suffix(".jsonl").is_some_and(|n| {
                        n.len() == 10 && n.bytes().all(|b| b.is_ascii_digit())
                    }) =>
            {
                found
                    .entry((*id).to_owned())
                    .or_default()
                    .metrics
                    .push(stamp);
            }
            _ => {}
        }
    }
    for files in found.values_mut() {
        files.metrics.sort_by(|a, b| a.path.cmp(&b.path));
    }
    Ok(found)
}

/// What run file `stamp` of run `id` says; `None` when it is gone or is not a run file of
/// that id (logged: a run file that does not parse hides its run).
pub async fn read_run(lake: &Lake, id: &str, stamp: &FileStamp) -> Result<Option<RunInfo>> {
    let Some(bytes) = read(store(lake)?.as_ref(), &stamp.path.as_str().into()).await? else {
        return Ok(None);
    };
    match serde_json::from_slice::<RunInfo>(&bytes) {
        Ok(info) if info.run_id == id => Ok(Some(info)),
        Ok(_) => {
            tracing::warn!(run = id, "A run file names another run; it is not shown.");
            Ok(None)
        }
        Err(e) => {
            tracing::warn!(run = id, error = %e, "A run file does not parse; it is not shown.");
            Ok(None)
        }
    }
}

/// The step metrics in metrics file `stamp` (lines that do not parse are left out).
pub async fn read_metrics(lake: &Lake, stamp: &FileStamp) -> Result<Vec<serde_json::Value>> {
    let Some(bytes) = read(store(lake)?.as_ref(), &stamp.path.as_str().into()).await? else {
        return Ok(Vec::new());
    };
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Every run under the lake's `training/`, newest first (see [`listing`] and [`read_run`]).
pub async fn runs(lake: &Lake) -> Result<Vec<RunInfo>> {
    let mut found = Vec::new();
    for (id, files) in listing(lake).await? {
        if let Some(stamp) = &files.run
            && let Some(info) = read_run(lake, &id, stamp).await?
        {
            found.push(info);
        }
    }
    sort_newest_first(&mut found);
    Ok(found)
}

/// Sorts runs newest first (by start, then id).
pub fn sort_newest_first(runs: &mut [RunInfo]) {
    runs.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then(b.run_id.cmp(&a.run_id))
    });
}

/// The run `id`, when there is one.
pub async fn run(lake: &Lake, id: &str) -> Result<Option<RunInfo>> {
    if !valid_run_id(id) {
        return Ok(None);
    }
    match listing(lake).await?.get(id).and_then(|f| f.run.clone()) {
        Some(stamp) => read_run(lake, id, &stamp).await,
        None => Ok(None),
    }
}

/// Every step metrics line run `id` has published, in order.
pub async fn run_metrics(lake: &Lake, id: &str) -> Result<Vec<serde_json::Value>> {
    let mut lines = Vec::new();
    if let Some(files) = listing(lake).await?.get(id) {
        for stamp in &files.metrics {
            lines.extend(read_metrics(lake, stamp).await?);
        }
    }
    Ok(lines)
}

/// What [`prune`] removed (or, dry, would remove).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pruned {
    /// The runs, by id.
    pub runs: Vec<String>,
    /// Their files.
    pub files: usize,
    /// Nothing was deleted.
    pub dry_run: bool,
}

/// Deletes the runs that last wrote more than `older_than` before `now`, except those still
/// running and not yet silent; a folder without a run file that parses goes by the time of
/// its newest file. With `dry_run`, only says which.
pub async fn prune(
    lake: &Lake,
    older_than: Duration,
    now: chrono::DateTime<chrono::Utc>,
    dry_run: bool,
) -> Result<Pruned> {
    let cutoff = now
        - chrono::Duration::from_std(older_than)
            .map_err(|e| Error::Config(format!("prune age: {e}")))?;
    let mut pruned = Pruned {
        dry_run,
        ..Pruned::default()
    };
    for (id, files) in listing(lake).await? {
        let info = match &files.run {
            Some(stamp) => read_run(lake, &id, stamp).await?,
            None => None,
        };
        let last = match &info {
            Some(info) if info.state == RunState::Running && !info.silent(now) => continue,
            Some(info) => chrono::DateTime::parse_from_rfc3339(&info.updated_at)
                .map(|at| at.with_timezone(&chrono::Utc))
                .ok(),
            None => None,
        };
        let newest_file = files
            .run
            .iter()
            .chain(&files.metrics)
            .map(|f| f.modified_ms)
            .max()
            .and_then(chrono::DateTime::from_timestamp_millis);
        let Some(last) = last.or(newest_file) else {
            continue;
        };
        if last >= cutoff {
            continue;
        }
        pruned.files += files.metrics.len() + usize::from(files.run.is_some());
        if !dry_run {
            delete_run(lake, &id).await?;
        }
        pruned.runs.push(id);
    }
    Ok(pruned)
}

/// Deletes run `id`'s files.
pub async fn delete_run(lake: &Lake, id: &str) -> Result<()> {
    if !valid_run_id(id) || no_training_folder(lake) {
        return Ok(());
    }
    let store = store(lake)?;
    let files: Vec<_> = store
        .list(Some(&id.into()))
        .try_collect()
        .await
        .map_err(|e| storage(id, e))?;
    for file in files {
        store
            .delete(&file.location)
            .await
            .map_err(|e| storage(file.location.as_ref(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            tenants: vec!["acme".into()],
            agent_id: Some("support".into()),
            started_at: "2026-12-06T23:00:00Z".into(),
            updated_at: String::new(),
            state: RunState::Failed,
            total_steps: 3,
            steps_done: 0,
            examples: 12,
            rewards: BTreeMap::from([(
                "task_success".into(),
                Distribution::of(&[0.0, 1.0, 1.0]).unwrap(),
            )]),
            error: None,
        }
    }

    #[tokio::test]
    async fn a_run_is_read_back_as_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().to_str().unwrap(), Default::default()).unwrap();
        assert!(runs(&lake).await.unwrap().is_empty());
        let mut log = RunLog::start(&lake, info("r-1")).await.unwrap();
        let seen = run(&lake, "r-1").await.unwrap().unwrap();
        assert_eq!(seen.state, RunState::Running);
        assert_eq!(seen.rewards["task_success"].count, 3);
        // Steps wait for the next publication; the end publishes all.
        log.push(1, &serde_json::json!({ "step": 1, "loss": 0.5 }));
        log.push(2, &serde_json::json!({ "step": 2, "loss": 0.4 }));
        assert_eq!(run_metrics(&lake, "r-1").await.unwrap().len(), 0);
        assert_eq!(run(&lake, "r-1").await.unwrap().unwrap().steps_done, 0);
        log.finish(RunState::Finished, None).await.unwrap();
        let metrics = run_metrics(&lake, "r-1").await.unwrap();
        assert_eq!(metrics.len(), 2);
        assert_eq!(metrics[1]["loss"], 0.4);
        let done = run(&lake, "r-1").await.unwrap().unwrap();
        assert_eq!((done.state, done.steps_done), (RunState::Finished, 2));

        let mut other = info("r-2");
        other.started_at = "2026-12-06T23:10:00Z".into();
        RunLog::start(&lake, other).await.unwrap();
        let ids: Vec<String> = runs(&lake)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(ids, ["r-2", "r-1"]);
        delete_run(&lake, "r-2").await.unwrap();
        assert_eq!(runs(&lake).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_long_run_is_written_in_files_that_are_never_rewritten_once_full() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().to_str().unwrap(), Default::default()).unwrap();
        let mut log = RunLog::start(&lake, info("long")).await.unwrap();
        let steps = 2 * CHUNK_STEPS + 5;
        let mut first_full = None;
        for n in 1..=steps as u64 {
            log.push(n, &serde_json::json!({ "step": n }));
            // Publications half-way through a file, at its end, and past it.
            if [500, 1000, 1500, 2000].contains(&n) {
                log.publish().await.unwrap();
                let listed = listing(&lake).await.unwrap().remove("long").unwrap();
                let lines = run_metrics(&lake, "long").await.unwrap();
                assert_eq!(lines.len() as u64, n);
                assert_eq!(
                    listed.metrics.len(),
                    n.div_ceil(CHUNK_STEPS as u64) as usize
                );
                if n == 1000 {
                    first_full = Some(listed.metrics[0].clone());
                }
            }
        }
        log.finish(RunState::Finished, None).await.unwrap();
        // The first file, written full at step 1,000, was not written again.
        let first = listing(&lake).await.unwrap()["long"].metrics[0].clone();
        assert_eq!(first_full, Some(first));
        let files = &listing(&lake).await.unwrap()["long"];
        let names: Vec<&str> = files.metrics.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "long/metrics/0000000000.jsonl",
                "long/metrics/0000001000.jsonl",
                "long/metrics/0000002000.jsonl"
            ]
        );
        let lines = run_metrics(&lake, "long").await.unwrap();
        assert_eq!(lines.len(), steps);
        assert!(
            lines
                .iter()
                .enumerate()
                .all(|(i, l)| l["step"] == i as u64 + 1)
        );
    }

    #[tokio::test]
    async fn figures_that_are_not_finite_and_states_not_known_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().to_str().unwrap(), Default::default()).unwrap();
        let mut huge = info("huge");
        huge.rewards.insert(
            "gamed".into(),
            Distribution::of(&[0.0, 1.0, 1e155, f64::MAX, f64::MAX]).unwrap(),
        );
        huge.rewards.get_mut("gamed").unwrap().std = f64::INFINITY;
        RunLog::start(&lake, huge).await.unwrap();
        let read = run(&lake, "huge").await.unwrap().unwrap();
        assert!(read.rewards["gamed"].std.is_nan());
        assert_eq!(read.rewards["gamed"].max, f64::MAX);
        // A newer trainer's state.
        let path = dir.path().join("training/huge/run.json");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"running\"", "\"paused\"");
        std::fs::write(&path, text).unwrap();
        let read = run(&lake, "huge").await.unwrap().unwrap();
        assert_eq!(read.state, RunState::Unknown);
    }

    #[tokio::test]
    async fn old_runs_are_pruned_and_running_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().to_str().unwrap(), Default::default()).unwrap();
        let mut done = RunLog::start(&lake, info("done")).await.unwrap();
        done.push(1, &serde_json::json!({ "step": 1 }));
        done.finish(RunState::Finished, None).await.unwrap();
        RunLog::start(&lake, info("going")).await.unwrap();
        let day = Duration::from_secs(86_400);
        // Now: nothing is a day old.
        let now = chrono::Utc::now();
        assert!(prune(&lake, day, now, false).await.unwrap().runs.is_empty());
        // Two days on: the finished run goes; the running one has gone silent and goes too,
        // unless it is still writing.
        let later = now + chrono::Duration::days(2);
        let dry = prune(&lake, day, later, true).await.unwrap();
        assert_eq!(
            (dry.runs.clone(), dry.files),
            (vec!["done".to_owned(), "going".to_owned()], 3)
        );
        assert_eq!(listing(&lake).await.unwrap().len(), 2);
        let mut going = RunLog::new(&lake, info("going")).unwrap();
        going.info.updated_at = (later - chrono::Duration::seconds(5)).to_rfc3339();
        let bytes = serde_json::to_vec(&going.info).unwrap();
        going.put("going/run.json", bytes).await.unwrap();
        let pruned = prune(&lake, day, later, false).await.unwrap();
        assert_eq!(pruned.runs, ["done"]);
        assert_eq!(
            listing(&lake).await.unwrap().keys().collect::<Vec<_>>(),
            ["going"]
        );
    }

    #[tokio::test]
    async fn ids_that_could_leave_the_folder_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().to_str().unwrap(), Default::default()).unwrap();
        for id in ["../adapters", "a/b", "", "x.json", &"a".repeat(65)] {
            assert!(!valid_run_id(id), "{id}");
            assert!(RunLog::start(&lake, info(id)).await.is_err(), "{id}");
            assert!(run(&lake, id).await.unwrap().is_none());
        }
        assert!(valid_run_id(&new_run_id()));
    }

    #[test]
    fn a_distribution_and_its_odd_shapes() {
        let d = Distribution::of(&[0.0, 0.5, 1.0, 1.0, f64::NAN]).unwrap();
        assert_eq!((d.count, d.min, d.max, d.at_max), (4, 0.0, 1.0, 0.5));
        assert_eq!(d.histogram.iter().sum::<u64>(), 4);
        assert_eq!((d.histogram[0], d.histogram[5], d.histogram[9]), (1, 1, 2));
        // Values on the edges of the bins fall in their own bin.
        let tenths: Vec<f64> = (0..=10).map(|i| f64::from(i) / 10.0).collect();
        let d = Distribution::of(&tenths).unwrap();
        assert_eq!(d.histogram, [1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
        assert!(Distribution::of(&[f64::NAN]).is_none());

        let spread: Vec<f64> = (0..40).map(|i| f64::from(i % 4) / 3.0).collect();
        let before = Distribution::of(&spread).unwrap();
        assert!(alerts("r", &before, None).is_empty());
        assert!(alerts("r", &before, Some(&before)).is_empty());
        // 95% at the maximum.
        let mut piled = vec![1.0; 38];
        piled.extend([0.0, 0.5]);
        let kinds = |a: Vec<Alert>| a.into_iter().map(|a| a.kind).collect::<Vec<_>>();
        let piled = Distribution::of(&piled).unwrap();
        assert!(kinds(alerts("r", &piled, None)).contains(&"piled_at_max"));
        // Every value alike.
        let flat = Distribution::of(&[0.7; 30]).unwrap();
        assert_eq!(kinds(alerts("r", &flat, None)), ["variance_collapsed"]);
        // Spread shrunk to a twentieth, mean unchanged.
        let narrow: Vec<f64> = spread.iter().map(|v| 0.5 + (v - 0.5) / 20.0).collect();
        let narrow = Distribution::of(&narrow).unwrap();
        assert_eq!(
            kinds(alerts("r", &narrow, Some(&before))),
            ["variance_collapsed"]
        );
        // The whole distribution moved up by far more than its spread.
        let moved: Vec<f64> = spread.iter().map(|v| v + 5.0).collect();
        let moved = Distribution::of(&moved).unwrap();
        assert_eq!(kinds(alerts("r", &moved, Some(&before))), ["jumped"]);
        // Every value alike, before and now: one alert, no rounding taken for a jump or a
        // collapse.
        let flat_more = Distribution::of(&[0.7; 100]).unwrap();
        assert_eq!((flat_more.mean, flat_more.std), (0.7, 0.0));
        assert_eq!(
            kinds(alerts("r", &flat_more, Some(&flat))),
            ["variance_collapsed"]
        );
        assert_eq!(
            kinds(alerts("r", &flat, Some(&before))),
            ["variance_collapsed"]
        );
        // Values near the ends of f64 neither overflow nor land outside the histogram.
        let wide = Distribution::of(&[-f64::MAX, 0.0, f64::MAX]).unwrap();
        assert!(wide.mean.is_finite() && wide.std.is_finite(), "{wide:?}");
        assert_eq!(
            (wide.histogram[0], wide.histogram[5], wide.histogram[9]),
            (1, 1, 1)
        );
        // A handful of values raises nothing.
        let few = Distribution::of(&[1.0; 5]).unwrap();
        assert!(alerts("r", &few, Some(&before)).is_empty());
    }
}
