//! Rotating a tenant's vault key: new values are sealed under a new key id, old entries
//! keep opening with the keys they name. Cedar decides (`rotate_key` on the tenant); the
//! rotation is recorded, and a rotation that cannot be recorded is undone.

use std::path::Path;

use policies::{KeyRing, Policy};
use serde::Serialize;

use crate::access::{self, Auditor};
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
/// in memory (a running `atdp-proxy`) use the new key once they reload it.
pub async fn rotate_key(
    policy: &Policy,
    keys_path: &Path,
    trail: &Trail,
    auditor: &Auditor,
    tenant: &str,
    reason: &str,
) -> Result<RotateReport> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(Error::Invalid(
            "a key rotation needs a written reason".into(),
        ));
    }
    let verdict = policy.access.decide(
        ("Auditor", &auditor.id),
        "rotate_key",
        ("Tenant", tenant),
        serde_json::json!({}),
    );
    let mut record = event("key_rotation", &auditor.actor(), tenant);
    record.subject = Some(format!("tenant:{tenant}"));
    record.reason = Some(redact(&policy.scanner, reason));
    record.policy_id = access::policy_ids(&verdict);
    record.decision = Some(if verdict.allowed { "allow" } else { "deny" }.to_owned());
    if !verdict.allowed {
        trail.record_committed(record).await?;
        return Err(Error::Denied(format!(
            "the access policy does not let this auditor rotate the keys of tenant {tenant}"
        )));
    }
    let before = KeyRing::load(keys_path)?;
    let mut keys = before.clone();
    let key_id = keys.rotate(tenant)?;
    write_keys(keys_path, &keys)?;
    record.detail_json = Some(serde_json::json!({ "key_id": key_id }).to_string());
    match trail.record_committed(record).await {
        Ok(recorded) => Ok(RotateReport {
            tenant: tenant.to_owned(),
            key_id,
            event_id: recorded.event_id,
        }),
        Err(e) => {
            // Not recorded, so not done: put the old keys back.
            write_keys(keys_path, &before)?;
            Err(e)
        }
    }
}

/// Writes the key file through a temporary file and a rename, so that a crash leaves the
/// old file or the new one, never half of one.
pub(crate) fn write_keys(path: &Path, keys: &KeyRing) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let text = keys.to_json()?;
    let tmp = path.with_extension("erasing");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    // Keys are secrets: owner-only, as the proxy creates the file.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp).map_err(io)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)
}
