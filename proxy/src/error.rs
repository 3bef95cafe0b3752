//! The crate's error type.

/// What can go wrong starting or running the proxy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is missing or invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The policy directory or the key file could not be loaded.
    #[error(transparent)]
    Policy(#[from] atdp_policies::Error),
    /// The lake writer failed.
    #[error(transparent)]
    Lake(#[from] atdp_lake::Error),
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Pingora refused to start.
    #[error("proxy server: {0}")]
    Server(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
