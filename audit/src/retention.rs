//! Retention: steps whose `retention_until` has passed leave the lake, with what exists only
//! because of them.
//!
//! For one tenant, at an instant `now`:
//! - `steps`: the rows with `retention_until <= now` are deleted (a Delta commit that
//!   rewrites the files that held them);
//! - `rewards`: the step rewards of those steps, and the trajectory rewards of trajectories
//!   that have no step left;
//! - `pii_vault`: the entries of the tokens that appear in the expired steps and in no step
//!   kept, written before the scan began (a value a call tokenizes again meanwhile keeps its
//!   new entry);
//! - the files those commits removed are vacuumed once the table's retention window has
//!   passed (`delta.deletedFileRetentionDuration`, 7 days by default: readers of older
//!   versions keep working until then), or at once when asked; until then time travel to an
//!   earlier version still reads them, and [`check`] says so.
//!
//! Audit events stay: they carry no message text, and the hash chain must verify. The
//! expiry is recorded (committed) before anything is deleted, its outcome after.

use std::collections::BTreeSet;

use atdp_lake::{Catalog, Lake};

use atdp_schema::Table;
use deltalake::DeltaTable;
use deltalake::datafusion::common::ScalarValue;
use deltalake::datafusion::functions::core::expr_fn::get_field;
use deltalake::datafusion::prelude::{DataFrame, Expr, col, lit};
use deltalake::operations::vacuum::VacuumMode;
use futures::TryStreamExt;
use serde::Serialize;

use crate::auditor::Auditor;
use crate::catalog::distinct as strings;
use crate::error::{Error, Result};
use crate::trail::{Trail, event};

/// When files that an expiry removed from a table are deleted from storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vacuum {
    /// After the table's retention window (readers of older versions keep working until
    /// then); each expiry vacuums what earlier ones removed once their window has passed.
    AfterWindow,
    /// At once: older versions of the tables can no longer be read.
    Now,
}

/// What an expiry did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpireReport {
    /// The tenant.
    pub tenant: String,
    /// The instant compared with `retention_until` (µs since epoch, UTC).
    pub now: i64,
    /// Steps deleted.
    pub steps_deleted: u64,
    /// Rewards deleted (`None` when Delta dropped whole files without counting their rows).
    pub rewards_deleted: Option<u64>,
    /// Vault entries deleted (the same).
    pub vault_rows_deleted: Option<u64>,
    /// Files the deletions removed from the tables.
    pub files_removed: usize,
    /// Files deleted from storage by the vacuum.
    pub files_deleted: usize,
    /// The audit event that recorded it.
    pub event_id: String,
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionCheck {
    /// The tenant.
    pub tenant: String,
    /// The instant compared with `retention_until`.
    pub now: i64,
    /// The oldest version still in the log (older ones can no longer be loaded).
    pub first_version: u64,
    /// Versions of `steps` read.
    pub versions_read: usize,
    /// Versions of `steps` that can no longer be read (their files were vacuumed).
    pub versions_gone: usize,
    /// For each version read that still holds an expired step: the version and how many.
    pub holding: Vec<(u64, u64)>,
}

impl RetentionCheck {
    /// Whether no readable version holds an expired step.
    pub fn ok(&self) -> bool {
        self.holding.is_empty()
    }
}

fn at(now: i64) -> Expr {
    lit(ScalarValue::TimestampMicrosecond(
        Some(now),
        Some("UTC".into()),
    ))
}

fn expired_in(tenant: &str, now: i64) -> Expr {
    col("tenant_id")
        .eq(lit(tenant.to_owned()))
        .and(col("retention_until").is_not_null())
        .and(col("retention_until").lt_eq(at(now)))
}

/// Deletes `tenant`'s steps whose retention ended at or before `now` (µs since epoch, UTC),
/// with their rewards and the vault entries only they used. Cedar decides (`erase` on the
/// tenant); the expiry and its reason are recorded.
#[allow(clippy::too_many_arguments)]
pub async fn expire(
    lake: &Lake,
    policy: &atdp_policies::Policy,
    trail: &Trail,
    auditor: &Auditor,
    tenant: &str,
    now: i64,
    vacuum: Vacuum,
    reason: &str,
) -> Result<ExpireReport> {
    let mut record =
        crate::erase::allowed_deletion(policy, trail, auditor, tenant, "expire", reason).await?;
    let now = now.min(atdp_schema::now_micros());
    record.detail_json = Some(serde_json::json!({ "now": now }).to_string());
    let recorded = trail.record_committed(record).await?;
    let mut report = ExpireReport {
        tenant: tenant.to_owned(),
        now,
        steps_deleted: 0,
        rewards_deleted: Some(0),
        vault_rows_deleted: Some(0),
        files_removed: 0,
        files_deleted: 0,
        event_id: recorded.event_id.clone(),
    };
    let done = delete_expired(lake, tenant, now, vacuum, &mut report).await;
    let mut outcome = event("expire_completed", &auditor.actor(), tenant);
    outcome.subject = Some(recorded.event_id);
    outcome.decision = Some(if done.is_ok() { "allow" } else { "deny" }.to_owned());
    outcome.detail_json = Some(
        serde_json::json!({
            "ok": done.is_ok(),
            "error": done.as_ref().err().map(ToString::to_string),
            "now": now,
            "steps_deleted": report.steps_deleted,
            "rewards_deleted": report.rewards_deleted,
            "vault_rows_deleted": report.vault_rows_deleted,
            "files_removed": report.files_removed,
            "files_deleted": report.files_deleted,
        })
        .to_string(),
    );
    let completed = trail.record_committed(outcome).await;
    done?;
    completed?;
    Ok(report)
}

/// The tokens named in the `pii` spans of the steps of `frame`.
async fn tokens(frame: DataFrame) -> Result<BTreeSet<String>> {
    let spans = frame
        .select(vec![col("pii")])
        .and_then(|f| f.unnest_columns(&["pii"]))
        .and_then(|f| f.select(vec![get_field(col("pii"), "token").alias("token")]))
        .map_err(Error::query)?;
    strings(spans, "token").await
}

fn in_list(column: &str, values: &BTreeSet<String>) -> Expr {
    col(column).in_list(values.iter().map(|v| lit(v.clone())).collect(), false)
}

/// Deletes the rows of `table` matching `predicate`; returns the table after the commit,
/// the rows deleted and the files removed.
async fn delete(table: DeltaTable, predicate: Expr) -> Result<(DeltaTable, Option<u64>, usize)> {
    let before = table.version();
    let (table, metrics) = table
        .delete()
        .with_predicate(predicate)
        .await
        .map_err(Error::query)?;
    crate::erase::drop_change_files(&table, before).await?;
    Ok((
        table,
        metrics.num_deleted_rows.and_then(|n| u64::try_from(n).ok()),
        metrics.num_removed_files,
    ))
}

async fn vacuum_table(table: DeltaTable, vacuum: Vacuum) -> Result<usize> {
    let builder = table.vacuum().with_mode(VacuumMode::Lite);
    let builder = match vacuum {
        Vacuum::AfterWindow => builder,
        Vacuum::Now => builder
            .with_retention_period(chrono::Duration::zero())
            .with_enforce_retention_duration(false),
    };
    let (_, metrics) = builder.await.map_err(Error::query)?;
    Ok(metrics.files_deleted.len())
}

async fn delete_expired(
    lake: &Lake,
    tenant: &str,
    now: i64,
    vacuum: Vacuum,
    report: &mut ExpireReport,
) -> Result<()> {
    let own = || col("tenant_id").eq(lit(tenant.to_owned()));
    let expired = Catalog::open(lake, &Default::default())
        .await?
        .frame(Table::Steps)
        .await?
        .filter(expired_in(tenant, now))
        .map_err(Error::query)?;
    let step_ids = strings(expired.clone(), "step_id").await?;
    if !step_ids.is_empty() {
        let trajectories = strings(expired.clone(), "trajectory_id").await?;
        let expired_tokens = tokens(expired).await?;
        // What stays is read again at the latest version, just before the deletions: a
        // step committed since the scan (a proxy's write-ahead log catching up) keeps its
        // trajectory's rewards and its values. Vault entries masked after the scan began
        // are never deleted either.
        let scanned_at = atdp_schema::now_micros();
        let kept = Catalog::open(lake, &Default::default())
            .await?
            .frame(Table::Steps)
            .await?
            .filter(own().and(!in_list("step_id", &step_ids)))
            .map_err(Error::query)?;
        let gone_trajectories: BTreeSet<String> = trajectories
            .difference(&strings(kept.clone(), "trajectory_id").await?)
            .cloned()
            .collect();
        let gone_tokens: BTreeSet<String> = expired_tokens
            .difference(&tokens(kept).await?)
            .cloned()
            .collect();
        // Rewards and vault entries before the steps: if a deletion fails, the steps are
        // still there and the next expiry finds them again.
        if let Some(table) = lake.open_table(Table::Rewards).await? {
            let mut predicate = in_list("step_id", &step_ids);
            if !gone_trajectories.is_empty() {
                predicate = predicate.or(col("step_id")
                    .is_null()
                    .and(in_list("trajectory_id", &gone_trajectories)));
            }
            let (_, rows, files) = delete(table, own().and(predicate)).await?;
            report.rewards_deleted = rows;
            report.files_removed += files;
        }
        if !gone_tokens.is_empty()
            && let Some(table) = lake.open_table(Table::PiiVault).await?
        {
            let predicate = own()
                .and(in_list("token", &gone_tokens))
                .and(col("created_at").lt_eq(at(scanned_at)));
            let (_, rows, files) = delete(table, predicate).await?;
            report.vault_rows_deleted = rows;
            report.files_removed += files;
        }
        if let Some(table) = lake.open_table(Table::Steps).await? {
            // The steps scanned, by id: a row committed since is the next expiry's, with
            // its rewards and values.
            let (_, rows, files) = delete(table, own().and(in_list("step_id", &step_ids))).await?;
            report.steps_deleted = rows.unwrap_or(step_ids.len() as u64);
            report.files_removed += files;
        }
    }
    // Every run vacuums the three tables, including when it expired nothing: files that
    // earlier runs removed are deleted once their window has passed.
    for table in [Table::Rewards, Table::PiiVault, Table::Steps] {
        if let Some(delta) = lake.open_table(table).await? {
            report.files_deleted += vacuum_table(delta, vacuum).await?;
        }
    }
    Ok(())
}

/// Reads every version of `steps` in its log and counts, in each, `tenant`'s steps whose
/// retention ended at or before `now`: after an expiry whose files were vacuumed, every
/// version either holds none or can no longer be read (its files are gone). It reads the
/// whole log, version by version: a compliance check, not a hot path.
pub async fn check(lake: &Lake, tenant: &str, now: i64) -> Result<RetentionCheck> {
    let now = now.min(atdp_schema::now_micros());
    let mut out = RetentionCheck {
        tenant: tenant.to_owned(),
        now,
        first_version: 0,
        versions_read: 0,
        versions_gone: 0,
        holding: Vec::new(),
    };
    let Some(latest) = lake.open_table(Table::Steps).await? else {
        return Ok(out);
    };
    let Some(newest) = latest.version() else {
        return Ok(out);
    };
    // Versions whose log entries were cleaned up (Delta keeps 30 days of log by default)
    // cannot be loaded: the check starts at the oldest commit or checkpoint still in the log.
    let log: Vec<_> = latest
        .object_store()
        .list(Some(&object_store::path::Path::from("_delta_log")))
        .try_collect()
        .await
        .map_err(Error::query)?;
    let oldest = log
        .iter()
        .filter_map(|meta| {
            let name = meta.location.filename()?;
            let digits = name
                .strip_suffix(".json")
                .or_else(|| name.strip_suffix(".checkpoint.parquet"))?;
            digits.parse::<u64>().ok()
        })
        .min()
        .unwrap_or(0);
    out.first_version = oldest;
    for version in oldest..=newest {
        let counted = async {
            let table = lake.open_table_at(Table::Steps, version).await?;
            let ctx = deltalake::datafusion::prelude::SessionContext::new();
            let provider = table.table_provider().await.map_err(Error::query)?;
            ctx.read_table(provider)
                .and_then(|f| f.filter(expired_in(tenant, now)))
                .map_err(Error::query)?
                .count()
                .await
                .map_err(Error::query)
        }
        .await;
        match counted {
            Ok(n) => {
                out.versions_read += 1;
                if n > 0 {
                    out.holding.push((version, n as u64));
                }
            }
            // A version whose files (or log entry) were deleted cannot be read: what it
            // held is gone. Any other failure (the store is down) is an error, never a pass.
            Err(e) if gone(&e.to_string()) => out.versions_gone += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Whether an error says that a data file is missing (object_store's `NotFound` on a
/// Parquet file), and nothing else: any other failure is an error, never a pass.
fn gone(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    (lower.contains("not found") || lower.contains("no such file")) && lower.contains(".parquet")
}
