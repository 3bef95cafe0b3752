//! `atdp-reward run`: label what this function version has not labelled yet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use atdp_lake::{Catalog, LakeWriter};

use atdp_schema::{AuditEvent, now_micros};

use crate::compute::compute;
use crate::error::Result;
use crate::select::{Scope, Selection};
use crate::spec::{RewardFn, Target};

/// Where a run stands, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Units (steps or trajectories) handled so far.
    pub done: u64,
    /// Units in scope.
    pub total: u64,
    /// Rewards appended so far.
    pub written: u64,
    /// Units per second so far.
    pub per_second: f64,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Units (steps or trajectories) that had no label of this version before the run.
    pub pending: u64,
    /// Rewards written (and committed to the lake).
    pub written: u64,
    /// How long it took.
    pub elapsed: Duration,
    /// What was labelled.
    pub target: Target,
}

impl RunReport {
    /// Units per second.
    pub fn per_second(&self) -> f64 {
        self.pending as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Labels the units in `selection` that `function` (this version) has not labelled yet,
/// appending `rewards` rows through `writer`, and one `reward_written` audit event per tenant
/// that got rows (subject: the source; detail: name, version, row count), and waits until they
/// are committed. Each batch
/// is checked whole before any of it is appended; a failing batch stops the run, and what
/// earlier batches wrote stays (a re-run continues from there).
pub async fn run(
    catalog: &Catalog,
    function: &RewardFn,
    selection: &Selection,
    writer: &LakeWriter,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<RunReport> {
    let started = Instant::now();
    let total = AtomicU64::new(0);
    let mut written = 0u64;
    let mut by_tenant: BTreeMap<String, u64> = BTreeMap::new();
    let mut on_start = |t: u64| total.store(t, Ordering::Relaxed);
    let outcome = {
        let mut on_batch = |labels: Vec<crate::Label>, done: u64| {
            let created_at = now_micros();
            for label in &labels {
                writer.append(label.reward(function, created_at))?;
                *by_tenant.entry(label.tenant_id.clone()).or_default() += 1;
            }
            written += labels.len() as u64;
            progress(Progress {
                done,
                total: total.load(Ordering::Relaxed),
                written,
                per_second: done as f64 / started.elapsed().as_secs_f64().max(1e-9),
            });
            Ok(())
        };
        compute(
            catalog,
            function,
            selection,
            Scope::Pending,
            &mut on_start,
            &mut on_batch,
        )
        .await
    };
    // One audit event per tenant that got rows, even when a batch failed: earlier batches
    // are complete and committed.
    for (tenant, rows) in &by_tenant {
        writer.append_audit(AuditEvent {
            subject: Some(function.source.clone()),
            detail_json: Some(
                serde_json::json!({
                    "name": function.name,
                    "reward_fn_version": function.version,
                    "rows": rows,
                })
                .to_string(),
            ),
            ..AuditEvent::new("reward_written", "atdp-reward", tenant)
        })?;
    }
    // Commit what was appended, even when a batch failed: earlier batches are complete.
    writer.flush().await?;
    let pending = outcome?;
    tracing::info!(
        reward = %function.name,
        version = %function.version,
        pending,
        written,
        "Reward function run finished."
    );
    Ok(RunReport {
        pending,
        written,
        elapsed: started.elapsed(),
        target: function.target,
    })
}
