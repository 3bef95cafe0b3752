//! The crate's error type.

/// What can go wrong building the detectors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A detector pattern does not compile.
    #[error("detector pattern does not compile: {0}")]
    Pattern(String),
    /// An entity type was asked for that no detector reports.
    #[error("unknown entity type {0:?}; see `atdp-policy scan --help` for the list")]
    UnknownEntity(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
