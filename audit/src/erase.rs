//! Erasure: crypto-shredding the originals of one subject's values, or every original of a
//! tenant, so that they can no longer be revealed anywhere. Masked trajectories stay as they
//! are (their placeholders carry no personal data) and remain usable for training.
//!
//! - With a subject value: its token is computed for every entity type (tokens are keyed
//!   hashes of the value), the matching `pii_vault` rows are deleted in a Delta commit, and
//!   the files that held them are vacuumed at once (Delta's `lite` vacuum: only files that
//!   commits removed, so no other writer's file in flight is touched). Time travel of
//!   `pii_vault` to before the erasure is lost, as it must be.
//! - Without: the tenant's keys are removed from the key file (a locked change through
//!   [`KeyFile`], so that what others change in the file meanwhile stays), which makes every
//!   vault entry of the tenant undecryptable, wherever copies of it live.

use std::path::Path;

use atdp_detect::builtin_entities;

use atdp_lake::Lake;
use atdp_policies::{AccessPolicy, KeyFile, MaskingConfig};
use atdp_schema::Table;
use deltalake::datafusion::prelude::{col, lit};
use deltalake::operations::vacuum::VacuumMode;
use object_store::ObjectStoreExt;
use serde::Serialize;

use crate::auditor::{self, Auditor};
use crate::error::{Error, Result};
use crate::lineage::{Reach, TrainedAdapter, reached, trained_on};
use crate::trail::{Trail, event, redact};

/// What an erasure did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EraseReport {
    /// The tenant.
    pub tenant: String,
    /// `subject` or `tenant`.
    pub scope: &'static str,
    /// Vault rows deleted (subject erasure); `None` when Delta dropped whole files without
    /// counting their rows.
    pub vault_rows_deleted: Option<u64>,
    /// Vault files that held the subject's rows, removed from the table (subject erasure).
    pub vault_files_removed: usize,
    /// Vault files written again with the other rows of the removed ones (subject erasure).
    pub vault_files_rewritten: usize,
    /// Files vacuumed (subject erasure).
    pub files_deleted: usize,
    /// Keys removed (tenant erasure).
    pub keys_erased: bool,
    /// The adapter versions in the lake's registry that learned from the erased data
    /// (`lineage`); `None` when they could not be looked up (the error is in the outcome
    /// event). They keep serving until they are retired (`atdp-serve retire`): erasure does
    /// not reach weights; `atdp-loop` retires them, and [`crate::issue_receipt`] says when
    /// every one is.
    pub trained_adapters: Option<Vec<TrainedAdapter>>,
    /// The audit event that recorded it.
    pub event_id: String,
}

/// Every entity type a value could have been tokenized as.
fn entity_types(masking: &MaskingConfig) -> Vec<String> {
    let mut names: Vec<String> = builtin_entities().iter().map(|e| (*e).to_owned()).collect();
    names.extend(masking.detection.custom.iter().map(|c| c.name.clone()));
    names.sort();
    names.dedup();
    names
}

/// Erases `subject`'s originals in `tenant`, or the whole tenant's keys when `subject` is
/// `None`. Cedar decides (`erase` on the tenant); the erasure and its reason are recorded.
#[allow(clippy::too_many_arguments)]
pub async fn erase(
    lake: &Lake,
    policy: &atdp_policies::Policy,
    keys_path: &Path,
    trail: &Trail,
    auditor: &Auditor,
    tenant: &str,
    subject: Option<&str>,
    reason: &str,
) -> Result<EraseReport> {
    let mut record = allowed_deletion(policy, trail, auditor, tenant, "erase", reason).await?;
    let file = KeyFile::new(keys_path);
    let keys = file.load()?;
    // Every spelling of the value has the canonical spelling's token; values recorded
    // before tokens were canonical have the token of their exact spelling. Where the policy
    // stores a type as a keyed hash, the spans carry that hash instead.
    let tokens = match subject {
        Some(value) => {
            let mut tokens = Vec::new();
            for entity in entity_types(&policy.masking) {
                tokens.push(keys.token(tenant, &entity, value)?);
                tokens.push(keys.token_of_spelling(tenant, &entity, value)?);
                tokens.push(keys.keyed_hash(tenant, &entity, value)?);
                tokens.push(keys.keyed_hash_of_spelling(tenant, &entity, value)?);
            }
            tokens.sort();
            tokens.dedup();
            tokens
        }
        None => Vec::new(),
    };
    // The trajectories it reaches, found now and recorded with it: a step that later leaves
    // the lake (expiry) takes its spans along, and training must still leave its trajectory
    // out. For a subject, a lookup that fails stops the erasure before anything is recorded
    // or erased (a value stored in the clear has no token for readers to match): run it
    // again. A tenant erasure goes on (training leaves out every step before it).
    let reach = match subject {
        Some(value) => Reach::Subject {
            tokens: &tokens,
            value,
        },
        None => Reach::Tenant,
    };
    let reached = reached(lake, tenant, reach).await;
    if let (Some(_), Err(error)) = (subject, &reached) {
        return Err(Error::Query(format!(
            "the trajectories the erasure reaches could not be looked up, so nothing was erased: {error}"
        )));
    }
    // Recorded (and committed) before anything is erased: an erasure that cannot be
    // recorded is not done. The subject's tokens and trajectories (never the value) say what
    // is erased.
    let scope = if subject.is_some() {
        "subject"
    } else {
        "tenant"
    };
    let mut detail = serde_json::json!({ "scope": scope, "tokens": tokens });
    if let (Some(_), Ok(trajectories)) = (subject, &reached) {
        detail["trajectories"] = serde_json::json!(trajectories);
    }
    record.detail_json = Some(detail.to_string());
    let recorded = trail.record_committed(record).await?;
    let mut report = EraseReport {
        tenant: tenant.to_owned(),
        scope,
        vault_rows_deleted: Some(0),
        vault_files_removed: 0,
        vault_files_rewritten: 0,
        files_deleted: 0,
        keys_erased: false,
        trained_adapters: None,
        event_id: recorded.event_id.clone(),
    };
    let done = match subject {
        Some(_) => delete_vault_rows(lake, tenant, &tokens)
            .await
            .map(|deleted| {
                report.vault_rows_deleted = deleted.rows;
                report.vault_files_removed = deleted.files_removed;
                report.vault_files_rewritten = deleted.files_rewritten;
                report.files_deleted = deleted.files_deleted;
            }),
        None => file
            .update(|keys| Ok(keys.erase_tenant(tenant)))
            .map(|erased| report.keys_erased = erased)
            .map_err(Error::from),
    };
    // Which adapters learned from it. A failed lookup does not undo or stop the erasure; the
    // outcome says so.
    let lineage = match &reached {
        Ok(trajectories) => trained_on(lake, tenant, trajectories).await,
        Err(error) => Err(Error::Query(format!(
            "the trajectories the erasure reached: {error}"
        ))),
    };
    let lineage_error = lineage.as_ref().err().map(ToString::to_string);
    report.trained_adapters = lineage.ok();
    // The outcome follows as its own event, linked to the first by its subject.
    let mut outcome = event("erase_completed", &auditor.actor(), tenant);
    outcome.subject = Some(recorded.event_id);
    outcome.decision = Some(if done.is_ok() { "allow" } else { "deny" }.to_owned());
    outcome.detail_json = Some(
        serde_json::json!({
            "scope": scope,
            "ok": done.is_ok(),
            "vault_rows_deleted": report.vault_rows_deleted,
            "vault_files_removed": report.vault_files_removed,
            "vault_files_rewritten": report.vault_files_rewritten,
            "files_deleted": report.files_deleted,
            "keys_erased": report.keys_erased,
            "trained_adapters": report.trained_adapters,
            "lineage_error": lineage_error,
        })
        .to_string(),
    );
    let completed = trail.record_committed(outcome).await;
    done?;
    completed?;
    Ok(report)
}

/// Checks a deletion (`kind`: `erase`, `expire`) of `tenant`'s data: a reason, and Cedar's
/// `erase` on the tenant. A refusal is recorded (committed) and returned as an error; an
/// allowed deletion returns its event, not recorded yet, for the caller to complete.
pub(crate) async fn allowed_deletion(
    policy: &atdp_policies::Policy,
    trail: &Trail,
    auditor: &Auditor,
    tenant: &str,
    kind: &str,
    reason: &str,
) -> Result<atdp_schema::AuditEvent> {
    let action = if kind == "expire" {
        "an expiry"
    } else {
        "an erasure"
    };
    let reason = crate::reason::checked(reason, action)?;
    let verdict = decide(&policy.access, auditor, tenant);
    let mut record = event(kind, &auditor.actor(), tenant);
    record.reason = Some(redact(&policy.scanner, reason));
    record.policy_id = auditor::policy_ids(&verdict);
    record.decision = Some(if verdict.allowed { "allow" } else { "deny" }.to_owned());
    record.subject = Some(format!("tenant:{tenant}"));
    if !verdict.allowed {
        trail.record_committed(record).await?;
        return Err(Error::Denied(format!(
            "the access policy does not let this auditor delete data of tenant {tenant} ({kind})"
        )));
    }
    Ok(record)
}

pub(crate) fn decide(
    policy: &AccessPolicy,
    auditor: &Auditor,
    tenant: &str,
) -> atdp_policies::Verdict {
    policy.decide(
        ("Auditor", &auditor.id),
        "erase",
        ("Tenant", tenant),
        serde_json::json!({}),
    )
}

struct Deleted {
    rows: Option<u64>,
    files_removed: usize,
    files_rewritten: usize,
    files_deleted: usize,
}

async fn delete_vault_rows(lake: &Lake, tenant: &str, tokens: &[String]) -> Result<Deleted> {
    let mut deleted = Deleted {
        rows: Some(0),
        files_removed: 0,
        files_rewritten: 0,
        files_deleted: 0,
    };
    let Some(table) = lake.open_table(Table::PiiVault).await? else {
        return Ok(deleted);
    };
    let predicate = col("tenant_id")
        .eq(lit(tenant.to_owned()))
        .and(col("token").in_list(tokens.iter().map(|t| lit(t.clone())).collect(), false));
    let before = table.version();
    let (table, metrics) = table
        .delete()
        .with_predicate(predicate)
        .await
        .map_err(Error::query)?;
    drop_change_files(&table, before).await?;
    deleted.rows = metrics.num_deleted_rows.and_then(|n| u64::try_from(n).ok());
    deleted.files_removed = metrics.num_removed_files;
    deleted.files_rewritten = metrics.num_added_files;
    if deleted.files_removed == 0 {
        return Ok(deleted);
    }
    let (_, vacuum) = table
        .vacuum()
        .with_retention_period(chrono::Duration::zero())
        .with_enforce_retention_duration(false)
        .with_mode(VacuumMode::Lite)
        .await
        .map_err(Error::query)?;
    deleted.files_deleted = vacuum.files_deleted.len();
    Ok(deleted)
}

/// Deletes the change-data files that a delete committed on `table` wrote (`before`: the
/// table's version before it; a delete that matched nothing commits nothing, and the latest
/// commit is then someone else's). With Delta's change data feed switched on for a table
/// (`delta.enableChangeDataFeed`, an operator's choice), a delete writes every row it removes
/// to a file of `_change_data/` as well, which no vacuum of removed files touches: an erased
/// vault row would stay readable there, and an expired step too. The feed of that commit no
/// longer reads; the rows it held must not. A file that cannot be deleted, or is not where
/// the commit says, is an error. Returns how many files were deleted.
pub(crate) async fn drop_change_files(
    table: &deltalake::DeltaTable,
    before: Option<u64>,
) -> Result<usize> {
    let Some(version) = table.version().filter(|v| Some(*v) != before) else {
        return Ok(0);
    };
    let commit = table
        .log_store()
        .read_commit_entry(version)
        .await
        .map_err(Error::query)?
        .ok_or_else(|| Error::Invalid(format!("commit {version} of the table is missing")))?;
    let store = table.object_store();
    let mut dropped = 0;
    for line in commit.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let action: serde_json::Value = serde_json::from_slice(line).map_err(Error::query)?;
        let Some(path) = action
            .pointer("/cdc/path")
            .and_then(serde_json::Value::as_str)
        else {
            continue;
        };
        // Paths in the log are percent-encoded, as delta-rs reads them.
        let decoded = crate::verify::percent_decode(path);
        let path = object_store::path::Path::parse(&decoded)
            .unwrap_or_else(|_| object_store::path::Path::from(decoded.as_str()));
        store.head(&path).await.map_err(|error| {
            Error::Invalid(format!(
                "a change file the delete wrote is not where its commit says ({error}); \
                 delete the table's _change_data files of version {version} by hand"
            ))
        })?;
        store.delete(&path).await.map_err(Error::query)?;
        dropped += 1;
    }
    Ok(dropped)
}
