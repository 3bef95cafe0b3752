//! The console's own entries in the audit trail: every query, login, reveal, erasure and
//! export is an audit event in this process's hash chain, written to local disk before the
//! action's result is shown (an action that cannot be recorded is not done).

use std::time::Duration;

use atdp_schema::{AuditEvent, LakeWriter, WriterConfig, new_id, now_micros};

use crate::error::{Error, Result};

/// The tenant of events that concern no tenant (a login, a cross-tenant query).
pub const SYSTEM_TENANT: &str = "_system";

/// The console's audit writer.
#[derive(Debug)]
pub struct Trail {
    writer: LakeWriter,
}

/// A new event of `kind` by `actor` about `tenant`; the chain fields are set on recording.
pub fn event(kind: &str, actor: &str, tenant: &str) -> AuditEvent {
    AuditEvent {
        event_id: new_id(),
        tenant_id: tenant.to_owned(),
        occurred_at: now_micros(),
        kind: kind.to_owned(),
        actor: actor.to_owned(),
        ..AuditEvent::default()
    }
}

impl Trail {
    /// Opens the writer (its own write-ahead log directory: one per console process).
    pub async fn open(config: WriterConfig) -> Result<Trail> {
        Ok(Trail {
            writer: LakeWriter::open(config).await?,
        })
    }

    /// The id of this process's chain.
    pub fn chain_id(&self) -> &str {
        self.writer.writer_id()
    }

    /// Records `event`, returning it as linked; returns once it is on local disk.
    pub async fn record(&self, event: AuditEvent) -> Result<AuditEvent> {
        let (appended, event) = self
            .writer
            .append_audit(event)
            .map_err(|e| Error::Trail(e.to_string()))?;
        self.writer
            .durable(appended)
            .await
            .map_err(|e| Error::Trail(e.to_string()))?;
        Ok(event)
    }

    /// Records `event` and commits it to the lake, so that it is on the audit page at once.
    pub async fn record_committed(&self, event: AuditEvent) -> Result<AuditEvent> {
        let event = self.record(event).await?;
        self.writer
            .flush()
            .await
            .map_err(|e| Error::Trail(e.to_string()))?;
        Ok(event)
    }

    /// Commits what is recorded and stops the writer.
    pub async fn close(&self) -> Result<()> {
        self.writer
            .shutdown(Duration::from_secs(30))
            .await
            .map(|_| ())
            .map_err(|e| Error::Trail(e.to_string()))
    }
}
