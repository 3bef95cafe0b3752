//! The lake: where an ATDP record becomes durable and how it reaches the Delta Lake tables on
//! object storage (`docs/lake.md`). The records themselves are `atdp-schema`'s.
//!
//! - `writer`: what the proxy calls on its hot path. [`LakeWriter::append`] puts a record into
//!   the local write-ahead log (`wal`) and returns at once; the log is group-committed to disk,
//!   and sealed segments are committed to the tables by an uploader task, idempotently.
//! - `files`: a segment's records streamed, a chunk at a time, into the Parquet data files of
//!   each table's partitions, without a query engine.
//! - `tables`: where the lake is (a directory or an object-store URL) and the idempotent Delta
//!   commit of a segment's files.
//! - `reader` and `catalog`: reading it back, filtered, or by SQL pinned to a version;
//!   `erasures`: what erasures reached, which training reads leave out.
//! - `maintenance`: compaction, vacuum and statistics.
//! - [`runs`]: training runs as they happen (their state, step metrics and reward
//!   distributions), beside the tables, for the console's live view.
//!
//! Reading, querying and maintenance run on DataFusion and are the feature `query` (on by
//! default). The write path needs no query engine: the proxy builds this crate without
//! `query`, so its build compiles no DataFusion.
//! - [`synth`]: a synthetic lake for benchmarks, demos and other components' tests.
//! - [`cli`]: what every atdp command line shares (the lake arguments, logging, exit status).
//!
//! ```no_run
//! # async fn demo() -> atdp_lake::Result<()> {
//! use atdp_lake::{Filter, LakeReader, LakeWriter, WriterConfig};
//! use atdp_schema::{Reward, new_id, now_micros};
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

#[cfg(feature = "query")]
mod catalog;
pub mod cli;
mod config;
#[cfg(feature = "query")]
mod erasures;
mod error;
mod files;
#[cfg(feature = "query")]
pub mod maintenance;
#[cfg(feature = "query")]
mod reader;
pub mod runs;
pub mod synth;
mod tables;
mod wal;
mod writer;

#[cfg(feature = "query")]
pub use catalog::{Catalog, rows};
pub use config::WriterConfig;
#[cfg(feature = "query")]
pub use erasures::Erasures;
pub use error::{Error, Result};
#[cfg(feature = "query")]
pub use reader::{
    Filter, LakeReader, Read, Trainable, count_exclusions, has_training_marks, time_range,
    trainable_predicate,
};
pub use tables::{Lake, PROTOCOL_VERSION_KEY, parse_storage_options, table_version};
pub use wal::{DAMAGED_DIR, Damage, DamageKind};
pub use writer::{Appended, LakeWriter, WriterStats};
