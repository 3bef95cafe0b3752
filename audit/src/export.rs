//! Evidence bundles: a trajectory or a query result as one JSON document that a third party
//! can check without this software.
//!
//! Each row is kept as the exact JSON text it was hashed from (`row_json`) with its SHA-256;
//! the bundle's `digest` is the SHA-256 of the rows' hashes joined by `\n`. The export itself
//! is an audit event (`anchor`) whose `detail_json` carries that digest, linked into the
//! console's hash chain in the lake: recomputing the rows' hashes, the digest, and the
//! anchor's hash (`docs/atdp-v1.md` gives the formula), then running `atdp-audit verify`,
//! proves the rows are what the lake held when the bundle was made. `docs/audit.md` shows
//! the check in a few lines of Python.

use std::collections::BTreeMap;

use atdp_schema::{AuditEvent, Table, audit_from_batch, now_micros};
use deltalake::datafusion::functions::unicode::expr_fn::strpos;
use deltalake::datafusion::prelude::{col, lit};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::auditor::Auditor;
use crate::catalog::{Catalog, rows};
use crate::error::{Error, Result};
use crate::trail::{Trail, event, record_refusal};
use crate::trajectory;

/// The bundle format's name.
pub const FORMAT: &str = "atdp-evidence/1";

/// One row of evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleRow {
    /// The table it comes from.
    pub table: String,
    /// SHA-256 (hex) of `row_json`'s UTF-8 bytes.
    pub sha256: String,
    /// The row, as JSON text.
    pub row_json: String,
}

/// An evidence bundle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bundle {
    /// [`FORMAT`].
    pub format: &'static str,
    /// What the bundle holds, in words.
    pub description: String,
    /// When it was made (µs since epoch, UTC).
    pub created_at: i64,
    /// Who made it.
    pub created_by: String,
    /// The lake's root URL.
    pub lake: String,
    /// The table versions read.
    pub table_versions: BTreeMap<String, Option<u64>>,
    /// The rows.
    pub rows: Vec<BundleRow>,
    /// SHA-256 (hex) of the rows' `sha256` values joined by `\n`.
    pub digest: String,
    /// Audit events about these rows (reveals, earlier exports), with their chain hashes.
    pub related_events: Vec<AuditEvent>,
    /// The audit event that recorded this export; its `detail_json` holds `digest`.
    pub anchor: AuditEvent,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A row of evidence from any serialisable record.
pub fn row(table: Table, record: &impl Serialize) -> Result<BundleRow> {
    let row_json = serde_json::to_string(record).map_err(Error::query)?;
    Ok(BundleRow {
        table: table.name().to_owned(),
        sha256: sha256_hex(row_json.as_bytes()),
        row_json,
    })
}

/// The digest of `rows`.
pub fn digest(rows: &[BundleRow]) -> String {
    let joined: Vec<&str> = rows.iter().map(|r| r.sha256.as_str()).collect();
    sha256_hex(joined.join("\n").as_bytes())
}

/// What a bundle is about, for [`seal`].
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// The tenant concerned (or `_system`).
    pub tenant: &'a str,
    /// The audit event's subject (a trajectory id, a query).
    pub subject: String,
    /// The bundle's description.
    pub description: String,
}

/// Records the export in the audit trail and assembles the bundle.
pub async fn seal(
    catalog: &Catalog,
    trail: &Trail,
    actor: &str,
    about: Subject<'_>,
    rows: Vec<BundleRow>,
    related_events: Vec<AuditEvent>,
) -> Result<Bundle> {
    let digest = digest(&rows);
    let mut record = event("export", actor, about.tenant);
    record.subject = Some(about.subject);
    record.detail_json = Some(
        serde_json::json!({ "format": FORMAT, "digest": digest, "rows": rows.len() }).to_string(),
    );
    let anchor = trail.record_committed(record).await?;
    Ok(Bundle {
        format: FORMAT,
        description: about.description,
        created_at: now_micros(),
        created_by: actor.to_owned(),
        lake: catalog.lake().root().to_string(),
        table_versions: catalog
            .versions()
            .iter()
            .map(|(t, v)| (t.name().to_owned(), *v))
            .collect(),
        rows,
        digest,
        related_events,
        anchor,
    })
}

/// The audit events of `tenant` that name `trajectory_id` or one of `tokens` as subject or
/// mention the trajectory in their details.
async fn related(
    catalog: &Catalog,
    tenant: &str,
    trajectory_id: &str,
    tokens: &[String],
) -> Result<Vec<AuditEvent>> {
    let mut subjects = vec![lit(trajectory_id.to_owned())];
    subjects.extend(tokens.iter().map(|t| lit(t.clone())));
    // Details are compact JSON written by atdp: the quoted pair matches this id only.
    let mention = serde_json::json!({ "trajectory_id": trajectory_id }).to_string();
    let mention = mention
        .trim_start_matches('{')
        .trim_end_matches('}')
        .to_owned();
    let about =
        col("subject")
            .in_list(subjects, false)
            .or(strpos(col("detail_json"), lit(mention)).gt(lit(0i64)));
    let mut events = rows(
        catalog
            .frame(Table::Audit)
            .await?
            .filter(col("tenant_id").eq(lit(tenant.to_owned())).and(about)),
        audit_from_batch,
    )
    .await?;
    events.sort_by(|a, b| (&a.chain_id, a.chain_seq).cmp(&(&b.chain_id, b.chain_seq)));
    Ok(events)
}

/// The evidence bundle of one trajectory the auditor may read: its steps and rewards, and
/// the audit events about it.
pub async fn trajectory_bundle(
    catalog: &Catalog,
    policy: &atdp_policies::AccessPolicy,
    trail: &Trail,
    auditor: &Auditor,
    trajectory_id: &str,
    tenant: Option<&str>,
) -> Result<Bundle> {
    let (mut steps, rewards) =
        match trajectory::load(catalog, policy, auditor, trajectory_id, tenant).await {
            Ok(found) => found,
            Err(e) => {
                record_refusal(trail, "export", &auditor.actor(), trajectory_id, &e).await;
                return Err(e);
            }
        };
    steps.sort_by(|a, b| (a.started_at, &a.step_id).cmp(&(b.started_at, &b.step_id)));
    let owner = steps
        .first()
        .map(|s| s.tenant_id.clone())
        .unwrap_or_default();
    let tokens: Vec<String> = steps
        .iter()
        .flat_map(|s| s.pii.iter().map(|p| p.token.clone()))
        .collect();
    let mut rows = Vec::new();
    for step in &steps {
        rows.push(row(Table::Steps, step)?);
    }
    for reward in &rewards {
        rows.push(row(Table::Rewards, reward)?);
    }
    let events = related(catalog, &owner, trajectory_id, &tokens).await?;
    seal(
        catalog,
        trail,
        &auditor.actor(),
        Subject {
            tenant: &owner,
            subject: trajectory_id.to_owned(),
            description: format!("trajectory {trajectory_id} of tenant {owner}"),
        },
        rows,
        events,
    )
    .await
}
