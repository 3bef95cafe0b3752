//! ATDP v1, the Agent Trajectory Data Protocol (`docs/atdp-v1.md`): its records, the Arrow
//! schema of each table with the conversion of records to and from Arrow, and the audit hash
//! chain. Every component that builds or reads records uses this crate; where records become
//! durable (the write-ahead log and the Delta Lake tables) is `atdp-lake`.
//!
//! - `record`: the four tables' row types ([`Step`], [`Reward`], [`AuditEvent`],
//!   [`VaultEntry`]), the protocol version and the training marks ([`Unmarked`]).
//! - `batch`: the hand-written Arrow schema of each table ([`arrow_schema`]) and the records
//!   moved in and out of `RecordBatch`es.
//! - `chain`: the audit trail's hash chain ([`event_hash`], [`verify_chain`]).
//! - [`shown`]: recorded text as tools print it for people, inert on a terminal and in a
//!   spreadsheet.

mod batch;
mod chain;
mod record;
pub mod shown;

pub use batch::{
    ConversionError, PARTITION_COLUMNS, arrow_schema, audit_from_batch, audit_to_batch,
    rewards_from_batch, rewards_to_batch, steps_from_batch, steps_to_batch, vault_from_batch,
    vault_to_batch,
};
pub use chain::{ChainBreak, ChainHead, GENESIS_HASH, event_hash, verify_chain};
pub use record::{
    AuditEvent, Exclusion, Message, PROTOCOL_VERSION, PiiSpan, READABLE_VERSIONS, Record, Reward,
    Step, Table, Tool, ToolCall, Unmarked, VaultEntry, date_of_micros, new_id, now_micros,
    trainable_steps,
};
