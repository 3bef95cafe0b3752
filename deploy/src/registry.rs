//! The adapter registry: versions of a policy's LoRA adapter on object storage, and an
//! append-only log of promotions and rollbacks that names the version to serve.
//!
//! Layout under the lake root (any of the lake's URL schemes):
//!
//! ```text
//! adapters/<policy>/v<N>/adapter_config.json
//! adapters/<policy>/v<N>/adapter_model.safetensors
//! adapters/<policy>/v<N>/manifest.json          (the trainer's, when present)
//! adapters/<policy>/v<N>/_claim.json            (written first, create-only: the number is taken)
//! adapters/<policy>/v<N>/_published.json        (written last: sizes and sha256 of the files)
//! adapters/<policy>/log/<seq, 20 digits>.json   (promote, rollback, reject, retire, canary)
//! ```
//!
//! Both `_published.json` and log entries are written create-only (`If-None-Match: *` on
//! S3), so two publishers or two promoters racing for the same number cannot both win: the
//! loser gets [`Error::Conflict`] and re-reads. The log is the pointer: the version served is
//! the one the latest promote or rollback names, and its history is kept for the audit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use atdp_lake::Lake;
use deltalake::logstore::object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use deltalake::{ObjectStore, ObjectStoreError};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The files of a version, in upload order; `_published.json` comes after them.
pub const ADAPTER_FILES: [&str; 3] = [
    "adapter_config.json",
    "adapter_model.safetensors",
    "manifest.json",
];
/// Files without which a version is refused at publication.
const REQUIRED: [&str; 2] = ["adapter_config.json", "adapter_model.safetensors"];
const PUBLISHED: &str = "_published.json";
const CLAIM: &str = "_claim.json";

/// What `_published.json` records about a version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Published {
    /// The version number (1, 2, …).
    pub version: u32,
    /// When it was published (RFC 3339, UTC).
    pub published_at: String,
    /// Who published it.
    pub by: String,
    /// File name → (size in bytes, sha256).
    pub files: BTreeMap<String, (u64, String)>,
}

/// What a log entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Serve `version` from now on.
    Promote,
    /// Go back to the version served before the current one (named in `version`).
    Rollback,
    /// A candidate was refused by the gate; nothing changes.
    Reject,
    /// `version` never serves again (it learned from erased data, say): it leaves the
    /// versions a rollback returns to, cannot be promoted or pinned, and when it is served,
    /// the last earlier version that is not retired is served instead (the base model when
    /// there is none).
    Retire,
    /// `version` answers a share of the policy's requests (`share`) beside the served
    /// version, as a canary: its live reward is compared with the served version's before it
    /// is promoted. A promotion (of it or of another version), a rollback, or its rejection
    /// or retirement ends it; a later canary replaces it.
    Canary,
    /// `version` answers a share of the policy's requests in shadow (`share`): the served
    /// version answers them, and a copy of each goes to `version`, whose reply is recorded
    /// and never returned (the proxy sends and records it). It ends like a canary, and a
    /// canary of the same version (its next stage) or of another replaces it.
    Shadow,
}

/// One entry of a policy's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log (1, 2, …).
    pub seq: u64,
    /// What it does.
    pub action: Action,
    /// The version it serves (promote, rollback), refuses (reject) or retires (retire).
    pub version: u32,
    /// The version served before it (none at the first promotion).
    pub previous: Option<u32>,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Who (a user name, `atdp-serve` for automatic rollbacks, `atdp-train` for schedules).
    pub by: String,
    /// Why, in words.
    pub reason: String,
    /// The gate's or the monitor's numbers, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
    /// The share of requests a canary or a shadow takes (0 < share < 1; their entries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
}

/// A policy's adapters and log on object storage.
#[derive(Clone)]
pub struct Registry {
    store: Arc<dyn ObjectStore>,
    policy: String,
    location: String,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("location", &self.location)
            .field("policy", &self.policy)
            .finish()
    }
}

/// Checks a policy name: it becomes a path segment.
pub fn check_policy_name(policy: &str) -> Result<()> {
    let ok = !policy.is_empty()
        && policy.len() <= 64
        && policy
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !policy.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "policy name `{policy}`: use 1-64 letters, digits, `-`, `_` or `.`, not starting with `.`"
        )))
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Registry {
    /// The registry of `policy` under the lake at `location` (a URL or a local directory,
    /// with the lake's object-store options).
    pub fn open(location: &str, options: HashMap<String, String>, policy: &str) -> Result<Self> {
        check_policy_name(policy)?;
        let lake = Lake::new(location, options.clone())?;
        let url = lake
            .root()
            .join(&format!("adapters/{policy}/"))
            .map_err(|e| Error::Config(format!("registry location: {e}")))?;
        let store = deltalake::logstore::store_for(&url, options)
            .map_err(|e| Error::Config(format!("registry location: {e}")))?;
        let mut shown = url.clone();
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        shown.set_query(None);
        Ok(Registry {
            store,
            policy: policy.to_owned(),
            location: shown.to_string(),
        })
    }

    /// The policy's name.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Where the registry lives (no credentials).
    pub fn location(&self) -> &str {
        &self.location
    }

    async fn read(&self, path: &str) -> Result<Option<bytes::Bytes>> {
        match self.store.get(&deltalake::Path::from(path)).await {
            Ok(found) => Ok(Some(found.bytes().await?)),
            Err(ObjectStoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn create(&self, path: &str, bytes: Vec<u8>) -> Result<bool> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(
                &deltalake::Path::from(path),
                PutPayload::from(bytes),
                options,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(ObjectStoreError::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Every `v<N>/` folder, published or not, ascending.
    async fn folders(&self) -> Result<Vec<u32>> {
        let listing = self.store.list_with_delimiter(None).await?;
        let mut numbers: Vec<u32> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename()?.strip_prefix('v')?.parse().ok())
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// The published versions, ascending. A version whose `_published.json` is missing (an
    /// upload that did not finish) is not listed.
    pub async fn versions(&self) -> Result<Vec<u32>> {
        let mut versions = Vec::new();
        for v in self.folders().await? {
            if self.read(&format!("v{v}/{PUBLISHED}")).await?.is_some() {
                versions.push(v);
            }
        }
        Ok(versions)
    }

    /// What `_published.json` says of `version`.
    pub async fn published(&self, version: u32) -> Result<Published> {
        let bytes = self
            .read(&format!("v{version}/{PUBLISHED}"))
            .await?
            .ok_or_else(|| {
                Error::Registry(format!(
                    "{}: no version {version} (published: see `atdp-serve status`)",
                    self.policy
                ))
            })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::json(format!("v{version}/{PUBLISHED}"), e))
    }

    /// Refuses a publication record that names other files than the adapter's own
    /// ([`ADAPTER_FILES`]), or lacks a required one: a name is joined to the cache directory
    /// when the version is fetched, so one with a separator or `..` (written into storage by
    /// hand) would reach outside it.
    fn check_files(published: &Published, version: u32) -> Result<()> {
        let refuse = |message: String| Error::Adapter {
            version: format!("v{version}"),
            message,
        };
        if let Some(name) = published
            .files
            .keys()
            .find(|name| !ADAPTER_FILES.contains(&name.as_str()))
        {
            return Err(refuse(format!(
                "{PUBLISHED} lists {name:?}, which is not a file of an adapter"
            )));
        }
        if let Some(name) = REQUIRED
            .iter()
            .find(|name| !published.files.contains_key(**name))
        {
            return Err(refuse(format!("{PUBLISHED} does not list {name}")));
        }
        Ok(())
    }

    /// Uploads the adapter in `dir` (the trainer's output directory) as the next version.
    /// Nothing is served until the version is promoted.
    pub async fn publish(&self, dir: &Path, by: &str) -> Result<Published> {
        let mut contents = Vec::new();
        for name in ADAPTER_FILES {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(bytes) => contents.push((name, bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !REQUIRED.contains(&name) => {
                }
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        for _ in 0..5 {
            // Claim the number first (create-only), so that a racing publisher never writes
            // into the same folder.
            let version = self.folders().await?.last().copied().unwrap_or(0) + 1;
            let claim = serde_json::json!({ "by": by, "at": now() })
                .to_string()
                .into_bytes();
            if !self.create(&format!("v{version}/{CLAIM}"), claim).await? {
                continue;
            }
            let mut files = BTreeMap::new();
            for (name, bytes) in &contents {
                files.insert((*name).to_owned(), (bytes.len() as u64, sha256(bytes)));
                self.store
                    .put(
                        &deltalake::Path::from(format!("v{version}/{name}")),
                        PutPayload::from(bytes.clone()),
                    )
                    .await?;
            }
            let published = Published {
                version,
                published_at: now(),
                by: by.to_owned(),
                files,
            };
            let doc =
                serde_json::to_vec_pretty(&published).map_err(|e| Error::json(PUBLISHED, e))?;
            if !self.create(&format!("v{version}/{PUBLISHED}"), doc).await? {
                return Err(Error::Registry(format!(
                    "v{version}/{PUBLISHED} appeared while publishing into a claimed folder"
                )));
            }
            return Ok(published);
        }
        Err(Error::Registry(
            "could not claim a version number after 5 attempts: other publishers are racing".into(),
        ))
    }

    /// Downloads `version` into `cache/<policy>/v<N>/` (reused when already there and whole)
    /// and checks every file against `_published.json`.
    pub async fn fetch(&self, version: u32, cache: &Path) -> Result<PathBuf> {
        let published = self.published(version).await?;
        Self::check_files(&published, version)?;
        let dir = cache.join(&self.policy).join(format!("v{version}"));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        for (name, (size, digest)) in &published.files {
            let target = dir.join(name);
            if let Ok(bytes) = std::fs::read(&target)
                && bytes.len() as u64 == *size
                && sha256(&bytes) == *digest
            {
                continue;
            }
            let bytes = self
                .read(&format!("v{version}/{name}"))
                .await?
                .ok_or_else(|| Error::Adapter {
                    version: format!("v{version}"),
                    message: format!("{name} is listed as published but missing from the registry"),
                })?;
            if bytes.len() as u64 != *size || sha256(&bytes) != *digest {
                return Err(Error::Adapter {
                    version: format!("v{version}"),
                    message: format!(
                        "{name} does not match its published checksum (changed or damaged in storage)"
                    ),
                });
            }
            // A name of its own: the watcher and a pinned load may fetch the same version at
            // once, and each renames only what it wrote itself.
            let partial = dir.join(format!(".{name}.{}.partial", uuid::Uuid::now_v7().simple()));
            std::fs::write(&partial, &bytes).map_err(|e| Error::io(&partial, e))?;
            std::fs::rename(&partial, &target).map_err(|e| Error::io(&target, e))?;
        }
        Ok(dir)
    }

    /// The trainer's manifest of `version`, when it was published with one.
    pub async fn manifest(&self, version: u32) -> Result<Option<serde_json::Value>> {
        let name = format!("v{version}/manifest.json");
        let Some(bytes) = self.read(&name).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::json(name, e))
    }

    /// Every log entry, in order.
    pub async fn log(&self) -> Result<Vec<Event>> {
        let prefix = deltalake::Path::from("log");
        let mut names: Vec<String> = self
            .store
            .list(Some(&prefix))
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await?;
        names.sort();
        let mut events = Vec::with_capacity(names.len());
        for name in names {
            if !name.ends_with(".json") {
                continue;
            }
            // The store is rooted at the policy: the listed names are relative to it.
            let bytes = self
                .read(&name)
                .await?
                .ok_or_else(|| Error::Registry(format!("{name} vanished while reading the log")))?;
            let event: Event = serde_json::from_slice(&bytes).map_err(|e| Error::json(&name, e))?;
            events.push(event);
        }
        Ok(events)
    }

    /// Appends an entry at the next position. Fails with [`Error::Conflict`] when another
    /// writer took that position first.
    async fn append(&self, mut event: Event, after: u64) -> Result<Event> {
        event.seq = after + 1;
        let doc = serde_json::to_vec_pretty(&event).map_err(|e| Error::json("log entry", e))?;
        if self
            .create(&format!("log/{:020}.json", event.seq), doc)
            .await?
        {
            Ok(event)
        } else {
            Err(Error::Conflict(event.seq))
        }
    }

    /// The version to serve now, and the stack of earlier ones a rollback returns to.
    pub async fn state(&self) -> Result<State> {
        Ok(State::from_log(&self.log().await?))
    }

    /// Appends an event of `action` after the log's last entry; `target` gives the version
    /// it names and the one served before, from the state the log describes.
    async fn record(
        &self,
        action: Action,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
        target: impl FnOnce(&State) -> Result<(u32, Option<u32>)>,
    ) -> Result<Event> {
        let log = self.log().await?;
        let (version, previous) = target(&State::from_log(&log))?;
        let event = Event {
            seq: 0,
            action,
            version,
            previous,
            at: now(),
            by: by.to_owned(),
            reason: reason.to_owned(),
            report,
            share: None,
        };
        self.append(event, log.last().map_or(0, |e| e.seq)).await
    }

    /// Makes `version` the served one.
    pub async fn promote(
        &self,
        version: u32,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        let refusal = "is retired and never serves again";
        self.record_unretired(Action::Promote, version, by, reason, report, refusal)
            .await
    }

    /// Retires `version` for good (see [`Action::Retire`]). The event's `previous` is the
    /// version served before it; what is served after it is [`State::serving`].
    pub async fn retire(
        &self,
        version: u32,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        self.record_unretired(
            Action::Retire,
            version,
            by,
            reason,
            report,
            "is retired already",
        )
        .await
    }

    /// Records `action` on `version`, which must be published and not retired (else an
    /// error: `v<N> <refusal>`).
    async fn record_unretired(
        &self,
        action: Action,
        version: u32,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
        refusal: &str,
    ) -> Result<Event> {
        self.published(version).await?;
        let policy = self.policy.clone();
        self.record(action, by, reason, report, |state| {
            if state.retired.contains(&version) {
                return Err(Error::Registry(format!("{policy}: v{version} {refusal}")));
            }
            Ok((version, state.serving))
        })
        .await
    }

    /// Starts `version` as a canary taking `share` of the policy's requests (0 < share < 1)
    /// beside the served version. It must be published, not retired and not the served one.
    pub async fn canary(
        &self,
        version: u32,
        share: f64,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        self.trial(Action::Canary, version, share, by, reason, report)
            .await
    }

    /// Starts `version` in shadow on `share` of the policy's requests (0 < share < 1): the
    /// served version answers them and `version`'s replies to their copies are recorded,
    /// never returned. It must be published, not retired and not the served one.
    pub async fn shadow(
        &self,
        version: u32,
        share: f64,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        self.trial(Action::Shadow, version, share, by, reason, report)
            .await
    }

    /// A canary or a shadow entry.
    async fn trial(
        &self,
        action: Action,
        version: u32,
        share: f64,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        let stage = if action == Action::Shadow {
            "shadow"
        } else {
            "canary"
        };
        if !(share > 0.0 && share < 1.0) {
            return Err(Error::Config(format!(
                "a {stage}'s share is between 0 and 1 (exclusive), not {share}"
            )));
        }
        self.published(version).await?;
        let policy = self.policy.clone();
        let log = self.log().await?;
        let state = State::from_log(&log);
        if state.retired.contains(&version) {
            return Err(Error::Registry(format!(
                "{policy}: v{version} is retired and never serves again"
            )));
        }
        if state.serving == Some(version) {
            return Err(Error::Registry(format!(
                "{policy}: v{version} is the served version already"
            )));
        }
        let event = Event {
            seq: 0,
            action,
            version,
            previous: state.serving,
            at: now(),
            by: by.to_owned(),
            reason: reason.to_owned(),
            report,
            share: Some(share),
        };
        self.append(event, log.last().map_or(0, |e| e.seq)).await
    }

    /// Records that the gate refused `version`.
    pub async fn reject(
        &self,
        version: u32,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        self.record(Action::Reject, by, reason, report, |state| {
            Ok((version, state.serving))
        })
        .await
    }

    /// Goes back to the version served before the current one.
    pub async fn rollback(
        &self,
        by: &str,
        reason: &str,
        report: Option<serde_json::Value>,
    ) -> Result<Event> {
        let policy = self.policy.clone();
        self.record(Action::Rollback, by, reason, report, |state| {
            let Some(current) = state.serving else {
                return Err(Error::Registry(format!("{policy}: nothing is promoted")));
            };
            let Some(&target) = state.earlier.last() else {
                return Err(Error::Registry(format!(
                    "{policy}: v{current} is the first promoted version; there is nothing to roll back to"
                )));
            };
            Ok((target, Some(current)))
        })
        .await
    }
}

/// A canary: a version that takes a share of the requests beside the served one, or, in
/// shadow, answers copies of that share whose replies are recorded and never returned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Canary {
    /// The version.
    pub version: u32,
    /// The share of the policy's requests it takes (0 < share < 1).
    pub share: f64,
    /// Whether it answers in shadow.
    pub shadow: bool,
}

/// What the log says is served.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// The version to serve (none: the base model alone).
    pub serving: Option<u32>,
    /// The canary beside it, if one runs.
    pub canary: Option<Canary>,
    /// The versions served before, oldest first; a rollback returns to the last one.
    pub earlier: Vec<u32>,
    /// The versions retired for good.
    pub retired: BTreeSet<u32>,
    /// The log position this state was read at.
    pub seq: u64,
}

impl State {
    /// Folds the log: a promotion pushes, a rollback pops, a retirement takes its version out
    /// (and, when it was served, returns to the last earlier version). A promotion of a
    /// retired version, which the registry refuses to write, is ignored. A canary runs from
    /// its entry until a promotion, a rollback, or the rejection or retirement of its version.
    pub fn from_log(log: &[Event]) -> State {
        let mut state = State::default();
        for event in log {
            state.seq = event.seq;
            let ends_canary = match event.action {
                Action::Promote | Action::Rollback => true,
                Action::Reject | Action::Retire => {
                    state.canary.is_some_and(|c| c.version == event.version)
                }
                Action::Canary | Action::Shadow => false,
            };
            if ends_canary {
                state.canary = None;
            }
            match event.action {
                Action::Canary | Action::Shadow => {
                    let share = event.share.filter(|s| *s > 0.0 && *s < 1.0);
                    if let Some(share) = share
                        && !state.retired.contains(&event.version)
                        && state.serving != Some(event.version)
                    {
                        state.canary = Some(Canary {
                            version: event.version,
                            share,
                            shadow: event.action == Action::Shadow,
                        });
                    }
                }
                Action::Promote if state.retired.contains(&event.version) => {}
                Action::Retire => {
                    state.retired.insert(event.version);
                    state.earlier.retain(|v| *v != event.version);
                    if state.serving == Some(event.version) {
                        state.serving = state.earlier.pop();
                    }
                }
                Action::Promote => {
                    if let Some(current) = state.serving {
                        state.earlier.push(current);
                    }
                    state.serving = Some(event.version);
                }
                Action::Rollback => {
                    state.earlier.pop();
                    state.serving = Some(event.version);
                }
                Action::Reject => {}
            }
            // A retirement can make the canary's version the served one again.
            if state
                .canary
                .is_some_and(|c| Some(c.version) == state.serving)
            {
                state.canary = None;
            }
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(action: Action, version: u32) -> Event {
        Event {
            seq: 0,
            action,
            version,
            previous: None,
            at: String::new(),
            by: String::new(),
            reason: String::new(),
            report: None,
            share: matches!(action, Action::Canary | Action::Shadow).then_some(0.25),
        }
    }

    #[test]
    fn a_shadow_runs_like_a_canary_and_its_canary_of_the_same_version_replaces_it() {
        let trial = |version, shadow| {
            Some(Canary {
                version,
                share: 0.25,
                shadow,
            })
        };
        let base = [event(Action::Promote, 1), event(Action::Shadow, 2)];
        assert_eq!(State::from_log(&base).canary, trial(2, true));
        let next = [base[0].clone(), base[1].clone(), event(Action::Canary, 2)];
        assert_eq!(State::from_log(&next).canary, trial(2, false));
        for end in [
            event(Action::Promote, 2),
            event(Action::Reject, 2),
            event(Action::Retire, 2),
            event(Action::Rollback, 1),
        ] {
            let log = [base[0].clone(), base[1].clone(), end];
            assert_eq!(State::from_log(&log).canary, None, "{log:?}");
        }
        // The served version is never its own shadow.
        let log = [event(Action::Promote, 1), event(Action::Shadow, 1)];
        assert_eq!(State::from_log(&log).canary, None);
    }

    #[test]
    fn a_canary_runs_until_a_promotion_a_rollback_or_its_rejection_or_retirement() {
        let canary = |version| {
            Some(Canary {
                version,
                share: 0.25,
                shadow: false,
            })
        };
        let base = [event(Action::Promote, 1), event(Action::Canary, 2)];
        let state = State::from_log(&base);
        assert_eq!((state.serving, state.canary), (Some(1), canary(2)));
        // Promoted: served, no canary. Rejected or retired: gone, v1 still served.
        for (end, serving) in [
            (event(Action::Promote, 2), Some(2)),
            (event(Action::Reject, 2), Some(1)),
            (event(Action::Retire, 2), Some(1)),
            (event(Action::Promote, 3), Some(3)),
        ] {
            let log = [base[0].clone(), base[1].clone(), end];
            let state = State::from_log(&log);
            assert_eq!((state.serving, state.canary), (serving, None), "{log:?}");
        }
        // A rejection of another version leaves it; a later canary replaces it.
        let log = [
            base[0].clone(),
            base[1].clone(),
            event(Action::Reject, 3),
            event(Action::Canary, 4),
        ];
        assert_eq!(State::from_log(&log).canary, canary(4));
        // The served version, a retired one, or a share out of range is no canary.
        let mut bad_share = event(Action::Canary, 2);
        bad_share.share = Some(1.0);
        for log in [
            vec![event(Action::Promote, 1), event(Action::Canary, 1)],
            vec![
                event(Action::Promote, 1),
                event(Action::Retire, 2),
                event(Action::Canary, 2),
            ],
            vec![event(Action::Promote, 1), bad_share],
            // Served again once the version above it is retired.
            vec![
                event(Action::Promote, 1),
                event(Action::Promote, 2),
                event(Action::Canary, 1),
                event(Action::Retire, 2),
            ],
        ] {
            assert_eq!(State::from_log(&log).canary, None, "{log:?}");
        }
    }

    #[test]
    fn promotions_push_and_rollbacks_pop() {
        let log = [
            event(Action::Promote, 1),
            event(Action::Promote, 2),
            event(Action::Reject, 3),
            event(Action::Promote, 4),
            event(Action::Rollback, 2),
        ];
        let state = State::from_log(&log);
        assert_eq!(state.serving, Some(2));
        assert_eq!(state.earlier, vec![1]);
        let state = State::from_log(&log[..3]);
        assert_eq!(state.serving, Some(2));
        assert_eq!(State::from_log(&[]).serving, None);
    }

    #[test]
    fn a_retired_version_leaves_the_stack_and_its_place_goes_to_the_last_earlier_one() {
        let mut log = vec![
            event(Action::Promote, 1),
            event(Action::Promote, 2),
            event(Action::Promote, 3),
            event(Action::Retire, 2),
        ];
        let state = State::from_log(&log);
        assert_eq!((state.serving, state.earlier.clone()), (Some(3), vec![1]));
        assert_eq!(state.retired, BTreeSet::from([2]));
        log.push(event(Action::Retire, 3));
        let state = State::from_log(&log);
        assert_eq!((state.serving, state.earlier.clone()), (Some(1), vec![]));
        log.push(event(Action::Retire, 1));
        assert_eq!(State::from_log(&log).serving, None);
        // A promotion of a retired version, which the registry refuses to write, changes
        // nothing.
        log.push(event(Action::Promote, 2));
        assert_eq!(State::from_log(&log).serving, None);
    }

    #[test]
    fn policy_names_are_path_segments() {
        assert!(check_policy_name("support-agent_v2.1").is_ok());
        for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_policy_name(bad).is_err(), "{bad}");
        }
    }
}
