//! The lake: where a record becomes durable and how it reaches the Delta tables.
//!
//! - [`writer`]: the component the proxy calls on its hot path; appends go to the
//!   write-ahead log ([`wal`]), which makes them durable on local disk by group commit;
//!   sealed segments are committed to the tables by an uploader task.
//! - [`files`]: a segment's records streamed, a chunk at a time, into the Parquet data
//!   files of each table's partitions, without a query engine.
//! - [`tables`]: where the lake is (a directory or an object-store URL) and the idempotent
//!   Delta commit of a segment's files.
//! - [`reader`] and [`catalog`]: reading it back, filtered, or by SQL pinned to a version.
//! - [`maintenance`]: compaction, vacuum and statistics.

pub(crate) mod catalog;
pub(crate) mod config;
pub(crate) mod files;
pub mod maintenance;
pub(crate) mod reader;
pub(crate) mod tables;
pub(crate) mod wal;
pub(crate) mod writer;

pub(crate) use tables::Lake;
