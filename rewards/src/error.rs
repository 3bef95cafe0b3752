//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong defining or running a reward function.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec file is invalid; the message says which key and why.
    #[error("invalid reward function spec {path}: {message}")]
    Spec {
        /// The spec file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The lake could not be read or written.
    #[error(transparent)]
    Lake(atdp_lake::Error),
    /// The function's SQL (or the selection around it) could not be planned or run.
    #[error("reward query failed: {0}")]
    Query(String),
    /// The function produced a value that is not a finite number.
    #[error(
        "reward {name} is {value} for step {step_id} of trajectory {trajectory_id}; nothing of this batch was written"
    )]
    NotFinite {
        /// The reward name.
        name: String,
        /// The value produced.
        value: f64,
        /// The trajectory.
        trajectory_id: String,
        /// The step (empty for a trajectory reward).
        step_id: String,
    },
    /// A reward program failed on a batch (crash, timeout, malformed or lying output); no
    /// label of that batch was written.
    #[error("reward program failed on a batch of trajectories [{}]: {reason}; nothing of this batch was written", trajectories.join(", "))]
    Program {
        /// What went wrong.
        reason: String,
        /// The trajectories of the batch.
        trajectories: Vec<String>,
    },
    /// The input is invalid (a filter, a date, a sample size); the message says which.
    #[error("{0}")]
    Invalid(String),
    /// A local file could not be read (the cause follows in the error chain).
    #[error("cannot read {path}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<atdp_lake::Error> for Error {
    fn from(error: atdp_lake::Error) -> Self {
        match error {
            atdp_lake::Error::Sql(message) => Error::Query(message),
            other => Error::Lake(other),
        }
    }
}

impl From<deltalake::datafusion::error::DataFusionError> for Error {
    fn from(error: deltalake::datafusion::error::DataFusionError) -> Self {
        Error::Query(error.to_string())
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(error: arrow::error::ArrowError) -> Self {
        Error::Query(error.to_string())
    }
}

impl From<atdp_schema::ConversionError> for Error {
    /// Rows that do not fit the protocol's schema: a lake error like any other.
    fn from(error: atdp_schema::ConversionError) -> Self {
        Error::Lake(error.into())
    }
}
