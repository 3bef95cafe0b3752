//! The console's own entries in the audit trail: every query, login, reveal, erasure and
//! export is an audit event in this process's hash chain, written to local disk before the
//! action's result is shown (an action that cannot be recorded is not done).

use std::time::Duration;

use atdp_lake::{LakeWriter, WriterConfig};

use atdp_schema::AuditEvent;

use crate::error::{Error, Result};

/// The tenant of events that concern no tenant (a login, a cross-tenant query).
pub const SYSTEM_TENANT: &str = "_system";

/// The console's audit writer.
#[derive(Debug)]
pub struct Trail {
    writer: LakeWriter,
}

/// `text` with every value the scanner finds replaced by `[ENTITY]`: what a person typed
/// (a search, a reason) goes into the audit trail without the personal data it may hold.
pub fn redact(scanner: &atdp_detect::Scanner, text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in scanner.scan(text) {
        out.push_str(text.get(at..span.start).unwrap_or_default());
        out.push('[');
        out.push_str(span.entity);
        out.push(']');
        at = span.end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    out
}

/// Records a refused attempt (`kind` by `actor` on `subject`), so that probing for data one
/// may not see leaves a trace. The tenant is `_system`: the attempt named none it may see.
pub async fn record_refusal(trail: &Trail, kind: &str, actor: &str, subject: &str, error: &Error) {
    let outcome = match error {
        Error::NotFound(_) => "not_found",
        Error::Denied(_) => "denied",
        Error::Invalid(_) => "invalid",
        _ => return,
    };
    let mut record = event(kind, actor, SYSTEM_TENANT);
    record.subject = Some(subject.to_owned());
    record.decision = Some("deny".into());
    record.detail_json = Some(serde_json::json!({ "outcome": outcome }).to_string());
    if let Err(e) = trail.record(record).await {
        tracing::error!(error = %e, "A refused attempt could not be recorded.");
    }
}

/// A new event of `kind` by `actor` about `tenant`; the chain fields are set on recording.
pub fn event(kind: &str, actor: &str, tenant: &str) -> AuditEvent {
    AuditEvent::new(kind, actor, tenant)
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

    /// Commits what is recorded and stops the writer. Events that could not be committed
    /// in time stay in the write-ahead log (on disk) and are committed on the next start;
    /// that is reported as an error so that a command does not claim more than it did.
    pub async fn close(&self) -> Result<()> {
        let committed = self
            .writer
            .shutdown(Duration::from_secs(30))
            .await
            .map_err(|e| Error::Trail(e.to_string()))?;
        if committed {
            Ok(())
        } else {
            Err(Error::Trail(
                "audit events are safe in the write-ahead log but not yet in the lake; they are committed when this tool next starts with the same --wal".into(),
            ))
        }
    }
}
