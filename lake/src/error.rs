//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong reading or writing the lake.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A local file (write-ahead log, chain head) could not be read or written.
    #[error("I/O error on {path}: {source}; check the disk and the directory's permissions")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A record could not be encoded into or decoded from the write-ahead log.
    #[error("write-ahead log record encoding failed: {0}")]
    Encode(String),
    /// Records could not be converted to or from Arrow.
    #[error("Arrow conversion failed for table {table}: {message}")]
    Arrow {
        /// The ATDP table.
        table: &'static str,
        /// What failed.
        message: String,
    },
    /// The Delta table could not be read or written.
    #[error("Delta Lake error on table {table}: {source}")]
    Delta {
        /// The ATDP table.
        table: &'static str,
        /// The underlying error.
        #[source]
        source: Box<deltalake::DeltaTableError>,
    },
    /// A query over a Delta table failed.
    #[error("query over table {table} failed: {message}")]
    Query {
        /// The ATDP table.
        table: &'static str,
        /// What failed.
        message: String,
    },
    /// A SQL query or data-frame plan over the lake's tables failed (see [`crate::Catalog`]).
    #[error("query failed: {0}")]
    Sql(String),
    /// The lake URL or a storage option is invalid.
    #[error("invalid lake location {url:?}: {message}")]
    Location {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// An object beside the tables (a training run's files) could not be read or written.
    #[error("object storage error on {path}: {message}")]
    Storage {
        /// The object's path under the lake root.
        path: String,
        /// What failed.
        message: String,
    },
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A table states a protocol version this reader does not know.
    #[error(
        "table {table} is ATDP protocol version {found}, which this reader does not know (it reads versions 1 and 1.1); upgrade atdp"
    )]
    Version {
        /// The ATDP table.
        table: &'static str,
        /// The version the table states.
        found: String,
    },
    /// The local write-ahead log has reached its disk budget because object storage has not
    /// accepted uploads; the caller must refuse traffic or pass it unrecorded, and say so.
    #[error(
        "back-pressure: {pending_bytes} bytes wait in the write-ahead log, over its limit of {budget_bytes}; the local disk or object storage is not keeping up, or is down"
    )]
    Backpressure {
        /// Bytes waiting (on disk for the disk budget, in memory for the memory cap).
        pending_bytes: u64,
        /// The limit that was reached.
        budget_bytes: u64,
    },
    /// The writer has been shut down or its background task has stopped.
    #[error("the lake writer is closed")]
    Closed,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<atdp_schema::ConversionError> for Error {
    fn from(e: atdp_schema::ConversionError) -> Self {
        Error::Arrow {
            table: e.table,
            message: e.message,
        }
    }
}

impl Error {
    /// Whether retrying the same operation can never succeed (the data itself is at fault).
    pub fn is_permanent(&self) -> bool {
        matches!(self, Error::Arrow { .. } | Error::Encode(_))
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn delta(table: &'static str, source: deltalake::DeltaTableError) -> Self {
        Error::Delta {
            table,
            source: Box::new(source),
        }
    }
}
