//! Adapter decisions in the lake's tamper-evident `audit` table: every promotion, rejection
//! and automatic rollback the loop makes is an audit event in this process's hash chain,
//! next to the registry's log entry, and `atdp-audit verify` checks it like any other.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use atdp_deploy::{Action, Event};
use atdp_lake::{LakeWriter, WriterConfig};
use atdp_schema::AuditEvent;

use crate::{Error, Result};

/// The loop's audit writer.
#[derive(Debug)]
pub struct AdapterEvents {
    writer: LakeWriter,
    tenant: String,
}

impl AdapterEvents {
    /// Opens a writer on `lake` with its own write-ahead log in `wal` (one per process);
    /// events are recorded under `tenant`.
    pub async fn open(
        lake: &str,
        options: HashMap<String, String>,
        wal: &Path,
        tenant: &str,
    ) -> Result<AdapterEvents> {
        let mut config = WriterConfig::new(lake, wal);
        config.storage_options = options;
        let writer = LakeWriter::open(config)
            .await
            .map_err(|e| Error::Loop(format!("cannot open the audit writer: {e}")))?;
        Ok(AdapterEvents {
            writer,
            tenant: tenant.to_owned(),
        })
    }

    /// Records the registry `event` of `policy` (with `detail`) and commits it to the lake.
    /// An error means the decision is in the registry's log but not in the audit table.
    pub async fn record(
        &self,
        policy: &str,
        event: &Event,
        detail: serde_json::Value,
    ) -> Result<AuditEvent> {
        let (kind, decision) = match event.action {
            Action::Promote => ("adapter_promote", "promote"),
            Action::Reject => ("adapter_reject", "reject"),
            Action::Rollback => ("adapter_rollback", "rollback"),
            Action::Retire => ("adapter_retire", "retire"),
            Action::Canary => ("adapter_canary", "canary"),
            Action::Shadow => ("adapter_shadow", "shadow"),
        };
        let record = AuditEvent {
            subject: Some(format!("{policy}@v{}", event.version)),
            decision: Some(decision.to_owned()),
            reason: Some(event.reason.clone()),
            detail_json: Some(
                serde_json::json!({
                    "policy": policy,
                    "version": event.version,
                    "previous": event.previous,
                    "registry_log_seq": event.seq,
                    "share": event.share,
                    "detail": detail,
                })
                .to_string(),
            ),
            ..AuditEvent::new(kind, &event.by, &self.tenant)
        };
        let audit_error = |e: atdp_lake::Error| Error::Loop(format!("audit trail: {e}"));
        let (appended, linked) = self.writer.append_audit(record).map_err(audit_error)?;
        self.writer.durable(appended).await.map_err(audit_error)?;
        self.writer.flush().await.map_err(audit_error)?;
        Ok(linked)
    }

    /// Commits what is recorded and stops the writer.
    pub async fn close(&self) -> Result<()> {
        let committed = self
            .writer
            .shutdown(Duration::from_secs(30))
            .await
            .map_err(|e| Error::Loop(format!("audit trail: {e}")))?;
        if committed {
            Ok(())
        } else {
            Err(Error::Loop(
                "audit events are in the write-ahead log but not yet in the lake; they are committed when atdp-loop next starts with the same --wal".into(),
            ))
        }
    }
}
