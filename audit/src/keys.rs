//! Rotating a tenant's vault key: new values are sealed under a new key id, old entries
//! keep opening with the keys they name. Cedar decides (`rotate_key` on the tenant); the
//! rotation is recorded, and a rotation that cannot be recorded is undone.
//!
//! The key file is changed through [`KeyFile`], under its lock. The lock is not held while
//! the rotation is recorded (a commit to the lake, which may wait on object storage, would
//! hold up every proxy's start and reload meanwhile). The undo is a second locked change that
//! removes only the key this rotation added ([`atdp_policies::KeyRing::undo_rotation`]): other
//! tenants' changes and later rotations made in between stay.

use std::path::Path;

use atdp_policies::{KeyFile, Policy};
use serde::Serialize;

use crate::auditor::{self, Auditor};
use crate::error::{Error, Result};
use crate::trail::{Trail, event, redact};

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RotateReport {
    /// The tenant.
    pub tenant: String,
    /// The new current key id.
    pub key_id: String,
    /// The audit event that recorded it.
    pub event_id: String,
}

/// Adds a new current key for `tenant` to the key file. Processes that hold the key file
/// in memory (a running `atdp-proxy`) use the new key once they reload it. A rotation that
/// cannot be recorded is undone; a process that reloaded the key file in between may have
/// sealed values under the withdrawn key, which then no longer open.
pub async fn rotate_key(
    policy: &Policy,
    keys_path: &Path,
    trail: &Trail,
    auditor: &Auditor,
    tenant: &str,
    reason: &str,
) -> Result<RotateReport> {
    let reason = crate::reason::checked(reason, "a key rotation")?;
    let verdict = policy.access.decide(
        ("Auditor", &auditor.id),
        "rotate_key",
        ("Tenant", tenant),
        serde_json::json!({}),
    );
    let mut record = event("key_rotation", &auditor.actor(), tenant);
    record.subject = Some(format!("tenant:{tenant}"));
    record.reason = Some(redact(&policy.scanner, reason));
    record.policy_id = auditor::policy_ids(&verdict);
    record.decision = Some(if verdict.allowed { "allow" } else { "deny" }.to_owned());
    if !verdict.allowed {
        trail.record_committed(record).await?;
        return Err(Error::Denied(format!(
            "the access policy does not let this auditor rotate the keys of tenant {tenant}"
        )));
    }
    let file = KeyFile::new(keys_path);
    let (previous, key_id) = file.update(|keys| {
        let previous = keys.current_key_id(tenant).unwrap_or_default().to_owned();
        Ok((previous, keys.rotate(tenant)?))
    })?;
    record.detail_json = Some(serde_json::json!({ "key_id": key_id }).to_string());
    match trail.record_committed(record).await {
        Ok(recorded) => Ok(RotateReport {
            tenant: tenant.to_owned(),
            key_id,
            event_id: recorded.event_id,
        }),
        Err(e) => {
            // Not recorded, so not done: undo this rotation, and only it, in a change of its
            // own, so that what others changed in the key file meanwhile stays.
            file.update(|keys| Ok(keys.undo_rotation(tenant, &key_id, &previous)))?;
            Err(e)
        }
    }
}
