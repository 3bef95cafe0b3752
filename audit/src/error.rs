//! The crate's error type.

/// What can go wrong in the console and its commands.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lake could not be read or written.
    #[error(transparent)]
    Lake(atdp_lake::Error),
    /// The policy directory or the key file could not be used.
    #[error(transparent)]
    Policy(#[from] atdp_policies::Error),
    /// A query could not be planned or run.
    #[error("query failed: {0}")]
    Query(String),
    /// The input is invalid (a filter, a date, a page size); the message says which.
    #[error("{0}")]
    Invalid(String),
    /// The access policy denied the action.
    #[error("denied by the access policy: {0}")]
    Denied(String),
    /// Nothing visible to this auditor has this id.
    #[error("{0} not found")]
    NotFound(String),
    /// The audit trail could not record the action, so the action was not taken.
    #[error("the audit trail could not record this action, so it was not done: {0}")]
    Trail(String),
    /// A local file could not be read or written.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file involved.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<atdp_lake::Error> for Error {
    /// A failed query keeps its own kind: its message may quote what a user typed, so it is
    /// neither shown nor logged (see the console's error page).
    fn from(error: atdp_lake::Error) -> Self {
        match error {
            atdp_lake::Error::Sql(message) => Error::Query(message),
            other => Error::Lake(other),
        }
    }
}

impl Error {
    pub(crate) fn query(error: impl std::fmt::Display) -> Self {
        Error::Query(error.to_string())
    }
}

impl From<atdp_schema::ConversionError> for Error {
    /// Rows that do not fit the protocol's schema: a lake error like any other.
    fn from(error: atdp_schema::ConversionError) -> Self {
        Error::Lake(error.into())
    }
}
