//! Revealing a masked value: allowed only by policy, only with a written reason (at least a
//! few visible characters, see `reason.rs`), only for a value that appears in a trajectory the
//! auditor may read, and recorded in the audit trail (committed to the lake) before the value
//! is shown.

use std::path::Path;

use atdp_policies::{KeyFile, KeyRing, Policy, SealedValue};
use atdp_schema::{Table, VaultEntry, vault_from_batch};
use deltalake::datafusion::prelude::{col, lit};
use serde::Serialize;

use crate::auditor::{self, Auditor};
use crate::catalog::{Catalog, rows};
use crate::error::{Error, Result};
use crate::trail::{Trail, event, record_refusal, redact};
use crate::trajectory;

/// What a reveal showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revealed {
    /// The original value.
    pub value: String,
    /// Its entity type.
    pub entity: String,
    /// The audit event that recorded the reveal.
    pub event_id: String,
}

/// A request to reveal `token` in trajectory `trajectory_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevealRequest<'a> {
    /// The trajectory the value was seen in.
    pub trajectory_id: &'a str,
    /// Its tenant, when known (a hint; the stored tenant decides).
    pub tenant: Option<&'a str>,
    /// The placeholder (`<EMAIL_ADDRESS_7f3a9c…>`).
    pub token: &'a str,
    /// Why, in the reviewer's words.
    pub reason: &'a str,
}

/// Reveals a value. The key file is read on every reveal, so an erasure done meanwhile
/// (by `atdp-audit erase` in another process) takes effect at once. Every attempt past the
/// reason check is recorded: refused ones (not found, denied) and allowed ones, with the
/// reason (personal data in it replaced by its entity type).
pub async fn reveal(
    catalog: &Catalog,
    policy: &Policy,
    keys_path: &Path,
    trail: &Trail,
    auditor: &Auditor,
    request: &RevealRequest<'_>,
) -> Result<Revealed> {
    let reason = crate::reason::checked(request.reason, "a reveal")?;
    let found = trajectory::load(
        catalog,
        &policy.access,
        auditor,
        request.trajectory_id,
        request.tenant,
    )
    .await
    .and_then(|(steps, _)| {
        let span = steps
            .iter()
            .flat_map(|s| &s.pii)
            .find(|p| p.token == request.token && p.action == "tokenize")
            .cloned();
        match (steps.first(), span) {
            (Some(step), Some(span)) => Ok((step.tenant_id.clone(), span)),
            _ => Err(Error::NotFound(format!(
                "a revealable value {} in trajectory {}",
                request.token, request.trajectory_id
            ))),
        }
    });
    let (tenant, span) = match found {
        Ok(found) => found,
        Err(e) => {
            record_refusal(trail, "reveal", &auditor.actor(), request.token, &e).await;
            return Err(e);
        }
    };
    let entity = span.entity.clone();
    let verdict = auditor::decide(
        &policy.access,
        auditor,
        "reveal_pii",
        request.trajectory_id,
        &tenant,
        serde_json::json!({ "reason": reason }),
    );
    let mut record = event("reveal", &auditor.actor(), &tenant);
    record.subject = Some(request.token.to_owned());
    record.reason = Some(redact(&policy.scanner, reason));
    record.policy_id = auditor::policy_ids(&verdict);
    record.decision = Some(if verdict.allowed { "allow" } else { "deny" }.to_owned());
    if !verdict.allowed {
        record.detail_json = Some(
            serde_json::json!({ "trajectory_id": request.trajectory_id, "entity": entity })
                .to_string(),
        );
        trail.record_committed(record).await?;
        return Err(Error::Denied(
            "the access policy does not let this auditor reveal values of this tenant".into(),
        ));
    }
    let opened = open(catalog, keys_path, &tenant, request.token, &entity).await;
    let outcome = match &opened {
        Ok(_) => "revealed",
        Err(_) => "unavailable",
    };
    record.detail_json = Some(
        serde_json::json!({
            "trajectory_id": request.trajectory_id,
            "entity": entity,
            "outcome": outcome,
        })
        .to_string(),
    );
    let recorded = trail.record_committed(record).await?;
    Ok(Revealed {
        value: opened?,
        entity,
        event_id: recorded.event_id,
    })
}

/// Finds and decrypts the vault entry of `token`.
async fn open(
    catalog: &Catalog,
    keys_path: &Path,
    tenant: &str,
    token: &str,
    entity: &str,
) -> Result<String> {
    let erased = || Error::NotFound(format!("the original of {token} (erased, or never stored)"));
    let entries = rows(
        catalog.frame(Table::PiiVault).await?.filter(
            col("tenant_id")
                .eq(lit(tenant.to_owned()))
                .and(col("token").eq(lit(token.to_owned()))),
        ),
        vault_from_batch,
    )
    .await?;
    if entries.is_empty() {
        return Err(erased());
    }
    let keys = KeyFile::new(keys_path).load()?;
    open_any(&keys, tenant, entity, entries).ok_or_else(erased)
}

/// The value of the first of `entries` that opens. A token can have several vault rows (the
/// same value sealed again under a later key); one whose key is gone (its tenant's keys were
/// erased and generated again) must not hide one that opens.
fn open_any(
    keys: &KeyRing,
    tenant: &str,
    entity: &str,
    entries: Vec<VaultEntry>,
) -> Option<String> {
    entries.into_iter().find_map(|entry| {
        keys.open(
            tenant,
            entity,
            &SealedValue {
                key_id: entry.key_id,
                nonce: entry.nonce,
                ciphertext: entry.ciphertext,
            },
        )
        .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tenant: &str, sealed: SealedValue) -> VaultEntry {
        VaultEntry {
            tenant_id: tenant.to_owned(),
            token: "<EMAIL_ADDRESS_0123456789ab>".to_owned(),
            entity: "EMAIL_ADDRESS".to_owned(),
            key_id: sealed.key_id,
            nonce: sealed.nonce,
            ciphertext: sealed.ciphertext,
            created_at: 0,
        }
    }

    #[test]
    fn a_vault_row_whose_key_is_gone_does_not_hide_one_that_opens() {
        let mut old = KeyRing::default();
        old.generate("demo");
        let stale = old
            .seal("demo", "EMAIL_ADDRESS", "old@example.com")
            .unwrap();
        let mut keys = KeyRing::default();
        keys.generate("demo");
        keys.rotate("demo").unwrap();
        let fresh = keys
            .seal("demo", "EMAIL_ADDRESS", "jane@example.com")
            .unwrap();
        assert_eq!(stale.key_id, "k1");
        assert_eq!(fresh.key_id, "k2");
        let entries = vec![entry("demo", stale.clone()), entry("demo", fresh)];
        assert_eq!(
            open_any(&keys, "demo", "EMAIL_ADDRESS", entries).as_deref(),
            Some("jane@example.com")
        );
        assert_eq!(
            open_any(&keys, "demo", "EMAIL_ADDRESS", vec![entry("demo", stale)]),
            None
        );
    }
}
