//! What every request shares: settings, the policy in force, vault keys, the lake writer,
//! trajectory grouping, rate and concurrency limits, metrics and the recording queue.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use atdp_lake::{LakeWriter, WriterConfig};
use atdp_policies::{KeyFile, KeyRing, MissingKeys, Policy, PolicyStore};
use atdp_schema::AuditEvent;

use crate::config::{Config, Durability};
use crate::error::{Error, Result};
use crate::grouping::Trajectories;
use crate::limits::{HeavyWork, InFlight, RateLimiter, ShadowSlots};
use crate::metrics::Metrics;
use crate::recorder::{Job, Recorder, Sink};
use crate::stages::record::{StepEnd, StepStart, build_step, store_step};
use crate::wire::RequestView;

/// Shared state of one proxy instance.
#[derive(Debug)]
pub struct State {
    /// Checked settings.
    pub config: Config,
    /// The policy directory in force.
    pub policy: PolicyStore,
    /// Held across a whole reload (load, check, swap, audit): two reloads at once (SIGHUP
    /// and `POST /reload`) would otherwise let an older file replace a newer one.
    reloading: std::sync::Mutex<()>,
    /// Vault keys per tenant.
    pub keys: RwLock<Arc<KeyRing>>,
    /// The lake writer.
    pub writer: LakeWriter,
    /// Trajectory grouping.
    pub trajectories: Trajectories,
    /// Rate limits.
    pub limiter: RateLimiter,
    /// Calls in flight per key.
    pub in_flight_per_key: InFlight,
    /// Parsing and masking of large bodies, off the worker threads.
    pub heavy: HeavyWork,
    /// Counters.
    pub metrics: Metrics,
    /// Requests being handled now.
    pub in_flight: AtomicUsize,
    /// Places for shadow copies (`crate::shadow`).
    pub shadows: ShadowSlots,
    /// Set once a graceful shutdown starts: new requests get 503.
    pub draining: AtomicBool,
    /// The queue to the recording thread.
    pub recorder: Recorder,
}

/// Counts a request as in flight while it lives.
#[derive(Debug)]
pub struct InFlightCall<'a>(&'a AtomicUsize);

impl<'a> InFlightCall<'a> {
    /// Starts counting.
    pub fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlightCall(counter)
    }
}

impl Drop for InFlightCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Loads the vault keys for the policy's tenants: with `generate`, keys are created for the
/// tenants that have none (under the key file's lock, so that proxies sharing the file agree
/// on one key); without it, a tenant without keys is an error that says how to create them.
pub fn load_keys(config: &Config, tenants: &[String]) -> Result<KeyRing> {
    let missing = if config.generate_keys {
        MissingKeys::Generate
    } else {
        MissingKeys::Refuse
    };
    let ensured = KeyFile::new(&config.keys).ensure_tenants(tenants, missing)?;
    if !ensured.generated.is_empty() {
        tracing::warn!(
            key_file = %config.keys.display(),
            tenants = ensured.generated.len(),
            "Generated vault keys; back this file up: without it masked values cannot be revealed."
        );
    }
    Ok(ensured.keys)
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
        let keys = load_keys(&config, &policy.access.tenants())?;
        let writer = LakeWriter::open(writer_config(&config)).await?;
        let (recorder, jobs) = crate::recorder::channel();
        let state = Arc::new(State {
            policy: PolicyStore::new(policy),
            reloading: std::sync::Mutex::new(()),
            keys: RwLock::new(Arc::new(keys)),
            writer,
            trajectories: Trajectories::new(1 << 20),
            limiter: RateLimiter::default(),
            in_flight_per_key: InFlight::default(),
            heavy: HeavyWork::for_this_machine(),
            metrics: Metrics::default(),
            in_flight: AtomicUsize::new(0),
            shadows: ShadowSlots::default(),
            draining: AtomicBool::new(false),
            recorder,
            config,
        });
        let sink: std::sync::Weak<dyn Sink> = Arc::downgrade(&state) as std::sync::Weak<dyn Sink>;
        std::thread::Builder::new()
            .name("atdp-recorder".into())
            .spawn(move || crate::recorder::run(sink, jobs))
            .map_err(|source| Error::Io {
                what: "cannot start the recording thread".into(),
                source,
            })?;
        Ok(state)
    }

    /// Records a finished call, off the response path (waits for room in the queue without
    /// blocking the thread).
    pub async fn record_step(&self, start: StepStart, request: RequestView, end: StepEnd) {
        self.recorder
            .submit(self, Job::Step(Box::new((start, request, end))))
            .await;
    }

    /// Records a decision event, in order with the steps (queued before the call it decides
    /// is forwarded).
    pub async fn record_event(&self, event: AuditEvent) {
        self.recorder
            .submit(self, Job::Audit(Box::new(event)))
            .await;
    }

    /// Whether new calls meet back-pressure: the lake writer's log over budget or failing,
    /// or the recording queue nearly full.
    pub fn backlogged(&self) -> bool {
        self.writer.backlogged() || self.recorder.full()
    }

    /// The keys in force.
    pub fn keys(&self) -> Arc<KeyRing> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reloads the policy directory (and the keys of its tenants); the old policy stays in
    /// force when the new one is invalid or a tenant has no keys. Both outcomes are audited
    /// (`policy_reload`, tenant `_system`); `by` says who asked (`signal`, `admin`).
    pub fn reload(&self, by: &str) -> Result<u64> {
        // Everything that can fail happens before the swap: a new policy is only in force
        // with keys for all its tenants.
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let before = self.policy.current().1;
        let mut principals = None;
        let outcome: Result<u64> = Policy::load(&self.config.policy)
            .map_err(Error::from)
            .and_then(|policy| {
                let keys = load_keys(&self.config, &policy.access.tenants())?;
                principals = Some(atdp_policies::principals::changes(
                    before.access.principals(),
                    policy.access.principals(),
                ));
                let version = self.policy.replace(policy);
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
                Ok(version)
            });
        let event = AuditEvent {
            subject: Some(self.config.policy.display().to_string()),
            decision: Some(if outcome.is_ok() { "allow" } else { "deny" }.to_owned()),
            policy_id: outcome.as_ref().ok().map(u64::to_string),
            reason: outcome.as_ref().err().map(ToString::to_string),
            // Which API keys and auditors the reload added, revoked or removed (ids only).
            detail_json: principals
                .map(|changes| serde_json::json!({ "principals": changes }).to_string()),
            ..AuditEvent::new("policy_reload", by, "_system")
        };
        if let Err(error) = self.writer.append_audit(event) {
            tracing::error!(error = %error, "Could not record the policy reload in the audit trail.");
        }
        outcome
    }
}

impl Sink for State {
    fn perform(&self, job: Job) {
        match job {
            Job::Step(step) => {
                let (start, request, mut end) = *step;
                let restored_glued = std::mem::take(&mut end.restored_glued);
                let step = build_step(&start, &request, end);
                let (_, policy) = self.policy.current();
                store_step(
                    &self.writer,
                    &policy,
                    &self.keys(),
                    &self.metrics,
                    step,
                    &start,
                    &restored_glued,
                );
            }
            Job::Audit(event) => {
                if let Err(error) = self.writer.append_audit(*event) {
                    self.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %error, "Could not record an audit event.");
                }
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
        }
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
