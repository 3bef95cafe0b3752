//! ATDP v1, the Agent Trajectory Data Protocol: its records, their Arrow schema, and the lake
//! that stores them as Delta Lake tables on object storage (`docs/atdp-v1.md`).
//!
//! The writer is what the proxy calls on its hot path: [`LakeWriter::append`] puts a record
//! into a local write-ahead log and returns at once; the log is group-committed to disk,
//! rolled into Parquet files, and committed to the Delta tables idempotently.
//!
//! The lake (`lake/`: the writer, its write-ahead log, the Delta tables, the reader and
//! maintenance) and everything but the record types is behind the default feature `lake`; without it the
//! crate is just the records (for `atdp-wire`, which fuzzes without building Delta Lake).
//!
//! ```no_run
//! # async fn demo() -> atdp_schema::Result<()> {
//! use atdp_schema::{Filter, LakeReader, LakeWriter, Reward, WriterConfig, new_id, now_micros};
//!
//! let writer = LakeWriter::open(WriterConfig::new("./lake", "./wal")).await?;
//! let appended = writer.append(Reward {
//!     reward_id: new_id(),
//!     trajectory_id: new_id(),
//!     tenant_id: "acme".into(),
//!     name: "task_success".into(),
//!     value: 1.0,
//!     source: "api".into(),
//!     created_at: now_micros(),
//!     ..Reward::default()
//! })?;
//! writer.durable(appended).await?; // on local disk: a crash cannot lose it
//! writer.flush().await?;           // committed to the lake
//!
//! let reader = LakeReader::new(writer.lake().clone());
//! let rewards = reader.rewards(&Filter { tenant_id: Some("acme".into()), ..Filter::default() }).await?;
//! assert_eq!(rewards.rows.len(), 1);
//! # Ok(()) }
//! ```

#[cfg(feature = "lake")]
mod batch;
#[cfg(feature = "lake")]
mod chain;
#[cfg(feature = "lake")]
pub mod cli;
#[cfg(feature = "lake")]
mod error;
#[cfg(feature = "lake")]
pub mod lake;
mod record;
#[cfg(feature = "lake")]
pub mod synth;

#[cfg(feature = "lake")]
pub use batch::{
    PARTITION_COLUMNS, arrow_schema, audit_from_batch, audit_to_batch, rewards_from_batch,
    rewards_to_batch, steps_from_batch, steps_to_batch, vault_from_batch, vault_to_batch,
};
#[cfg(feature = "lake")]
pub use chain::{ChainBreak, ChainHead, GENESIS_HASH, event_hash, verify_chain};
#[cfg(feature = "lake")]
pub use error::{Error, Result};
#[cfg(feature = "lake")]
pub use lake::catalog::{Catalog, rows};
#[cfg(feature = "lake")]
pub use lake::config::WriterConfig;
#[cfg(feature = "lake")]
pub use lake::maintenance;
#[cfg(feature = "lake")]
pub use lake::reader::{
    Filter, LakeReader, Read, Trainable, count_exclusions, has_training_marks, time_range,
    trainable_predicate,
};
#[cfg(feature = "lake")]
pub use lake::tables::{Lake, PROTOCOL_VERSION_KEY, parse_storage_options, table_version};
#[cfg(feature = "lake")]
pub use lake::wal::{DAMAGED_DIR, Damage, DamageKind};
#[cfg(feature = "lake")]
pub use lake::writer::{Appended, LakeWriter, WriterStats};
pub use record::{
    AuditEvent, Exclusion, Message, PROTOCOL_VERSION, PiiSpan, READABLE_VERSIONS, Record, Reward,
    Step, Table, Tool, ToolCall, Unmarked, VaultEntry, date_of_micros, new_id, now_micros,
    trainable_steps,
};
