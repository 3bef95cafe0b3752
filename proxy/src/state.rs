//! What every request shares: settings, the policy in force, vault keys, the lake writer,
//! trajectory grouping, rate limits and metrics.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use atdp_schema::{AuditEvent, LakeWriter, WriterConfig};
use policies::{KeyRing, Policy, PolicyStore};

use crate::config::{Config, Durability};
use crate::error::{Error, Result};
use crate::limits::RateLimiter;
use crate::metrics::Metrics;
use crate::record::{StepEnd, StepStart};
use crate::recorder::{Job, Recorder};
use crate::trajectory::Trajectories;
use crate::wire::RequestView;

/// Shared state of one proxy instance.
#[derive(Debug)]
pub struct State {
    /// Checked settings.
    pub config: Config,
    /// The policy directory in force.
    pub policy: PolicyStore,
    /// Vault keys per tenant.
    pub keys: RwLock<Arc<KeyRing>>,
    /// The lake writer.
    pub writer: LakeWriter,
    /// Trajectory grouping.
    pub trajectories: Trajectories,
    /// Rate limits.
    pub limiter: RateLimiter,
    /// Counters.
    pub metrics: Metrics,
    /// Requests being handled now.
    pub in_flight: AtomicUsize,
    /// Set once a graceful shutdown starts: new requests get 503.
    pub draining: AtomicBool,
    /// The queue to the recording thread.
    pub recorder: Recorder,
}

/// Counts a request as in flight while it lives.
#[derive(Debug)]
pub struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    /// Starts counting.
    pub fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Loads the key file, creating it (mode 0600) or adding keys for tenants of the policy that
/// have none; the file is rewritten atomically.
pub fn load_keys(path: &Path, tenants: &[String]) -> Result<KeyRing> {
    let mut keys = if path.exists() {
        KeyRing::load(path)?
    } else {
        KeyRing::default()
    };
    let missing: Vec<&String> = tenants.iter().filter(|t| !keys.has_tenant(t)).collect();
    if missing.is_empty() && path.exists() {
        return Ok(keys);
    }
    for tenant in &missing {
        keys.generate(tenant);
    }
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| Error::Io { what, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("cannot create the directory of"))?;
    }
    let temporary = path.with_extension("json.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&temporary).map_err(io("cannot write"))?;
    file.write_all(keys.to_json()?.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io("cannot write"))?;
    std::fs::rename(&temporary, path).map_err(io("cannot replace"))?;
    tracing::warn!(
        key_file = %path.display(),
        tenants = missing.len(),
        "Generated vault keys; back this file up: without it masked values cannot be revealed."
    );
    Ok(keys)
}

/// The lake writer's settings from the proxy's.
fn writer_config(config: &Config) -> WriterConfig {
    let mut writer = WriterConfig::new(config.lake.clone(), config.wal.clone());
    writer.storage_options = config.lake_options.0.clone();
    writer.fsync = config.durability == Durability::Fsync;
    writer.commit_interval = config.commit_interval;
    writer
}

impl State {
    /// Loads the policy and keys and opens the lake writer.
    pub async fn open(config: Config) -> Result<Arc<State>> {
        let policy = Policy::load(&config.policy)?;
        let keys = load_keys(&config.keys, &policy.access.tenants())?;
        let writer = LakeWriter::open(writer_config(&config)).await?;
        let (recorder, jobs) = crate::recorder::channel();
        let state = Arc::new(State {
            policy: PolicyStore::new(policy),
            keys: RwLock::new(Arc::new(keys)),
            writer,
            trajectories: Trajectories::new(1 << 20),
            limiter: RateLimiter::default(),
            metrics: Metrics::default(),
            in_flight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            recorder,
            config,
        });
        let recording = Arc::downgrade(&state);
        std::thread::Builder::new()
            .name("atdp-recorder".into())
            .spawn(move || crate::recorder::run(recording, jobs))
            .map_err(|source| Error::Io {
                what: "cannot start the recording thread".into(),
                source,
            })?;
        Ok(state)
    }

    /// Records a finished call, off the response path.
    pub fn record_step(&self, start: StepStart, request: RequestView, end: StepEnd) {
        self.recorder
            .submit(self, Job::Step(Box::new((start, request, end))));
    }

    /// Records a decision event, in order with the steps (queued before the call it decides
    /// is forwarded).
    pub fn record_event(&self, event: AuditEvent) {
        self.recorder.submit(self, Job::Audit(Box::new(event)));
    }

    /// The keys in force.
    pub fn keys(&self) -> Arc<KeyRing> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reloads the policy directory (and adds keys for new tenants); the old policy stays in
    /// force when the new one is invalid. Both outcomes are audited (`policy_reload`, tenant
    /// `_system`); `by` says who asked (`signal`, `admin`).
    pub fn reload(&self, by: &str) -> Result<u64> {
        // Everything that can fail happens before the swap: a new policy is only in force
        // with keys for all its tenants.
        let outcome: Result<u64> = Policy::load(&self.config.policy)
            .map_err(Error::from)
            .and_then(|policy| {
                let keys = load_keys(&self.config.keys, &policy.access.tenants())?;
                let version = self.policy.replace(policy);
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
                Ok(version)
            });
        let event = AuditEvent {
            event_id: uuid::Uuid::now_v7().to_string(),
            tenant_id: "_system".to_owned(),
            occurred_at: crate::record::now_micros(),
            kind: "policy_reload".to_owned(),
            actor: by.to_owned(),
            subject: Some(self.config.policy.display().to_string()),
            decision: Some(if outcome.is_ok() { "allow" } else { "deny" }.to_owned()),
            policy_id: outcome.as_ref().ok().map(u64::to_string),
            reason: outcome.as_ref().err().map(ToString::to_string),
            ..AuditEvent::default()
        };
        if let Err(error) = self.writer.append_audit(event) {
            tracing::error!(error = %error, "Could not record the policy reload in the audit trail.");
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    #[test]
    fn the_lake_writer_gets_the_durability_and_commit_interval() {
        let config = |extra: &str| {
            RawConfig::from_toml(&format!(
                "{extra}\npolicy = \"p\"\n[[upstream]]\nname = \"a\"\nurl = \"http://x\"\n"
            ))
            .unwrap()
            .validate()
            .unwrap()
        };
        let writer = writer_config(&config(""));
        assert!(writer.fsync);
        assert_eq!(writer.commit_interval, std::time::Duration::from_millis(10));
        let writer = writer_config(&config(
            "durability = \"buffered\"\ncommit_interval_ms = 0\nlake_options = { aws_region = \"r\" }",
        ));
        assert!(!writer.fsync);
        assert!(writer.commit_interval.is_zero());
        assert_eq!(writer.storage_options["aws_region"], "r");
        assert!(writer.validate().is_ok());
    }
}
