//! The strict audit trail (`audit = "strict"`, `docs/proxy.md` §3.4): a call's decision event
//! carries the request as stored and is durable, with the vault entries its placeholders
//! need, before anything of the call leaves; when it cannot be, the call is refused. Used for
//! model calls and for their shadow copies alike.

use atdp_schema::AuditEvent;
use serde_json::Value;

use crate::refusal::Refusal;
use crate::state::State;

/// Puts the request as stored into a decision event's detail (strict audit mode).
pub fn with_stored_request(event: &mut AuditEvent, stored: Value) {
    let mut detail: Value = event
        .detail_json
        .as_deref()
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    detail["request"] = stored;
    event.detail_json = Some(detail.to_string());
}

/// Appends the decision event and the vault entries of the stored request, and waits until
/// they are durable; refuses the call when they cannot be.
pub async fn strict_audit(
    state: &State,
    event: AuditEvent,
    vault: Vec<atdp_schema::VaultEntry>,
) -> std::result::Result<(), Refusal> {
    let unavailable = |error: atdp_lake::Error| {
        tracing::error!(error = %error, "The strict audit trail could not be written; the call is refused.");
        Refusal::AuditUnavailable
    };
    for entry in vault {
        state.writer.append(entry).map_err(unavailable)?;
    }
    let (appended, _) = state.writer.append_audit(event).map_err(unavailable)?;
    state.writer.durable(appended).await.map_err(unavailable)
}
