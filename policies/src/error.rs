//! The crate's error type.

/// What can go wrong building or running the detectors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A detector pattern does not compile.
    #[error("detector pattern does not compile: {0}")]
    Pattern(String),
    /// An entity type was asked for that no detector reports.
    #[error("unknown entity type {0:?}; see `atdp-policy scan --help` for the list")]
    UnknownEntity(String),
    /// The key file is unreadable or inconsistent.
    #[error("key file: {0}")]
    KeyFile(String),
    /// No keys for this tenant (never configured, or erased).
    #[error("no keys for tenant {0:?} (never configured, or erased)")]
    UnknownTenant(String),
    /// The key a vault entry names is not in the key file (erased, or from another file).
    #[error("vault key {0:?} is not in the key file")]
    UnknownKey(String),
    /// Encryption or decryption failed: a tampered ciphertext, or one sealed for another
    /// tenant, entity or key.
    #[error("vault entry does not decrypt with this tenant's key (tampered, or not this tenant's)")]
    Crypto,
    /// The access policy could not be loaded or a request not be formed.
    #[error("access policy: {0}")]
    Policy(String),
    /// Masking could not be completed; the text must not be used unmasked.
    #[error("masking failed: {0}")]
    Mask(String),
}

/// What kind of JSON error `error` is, in words, without quoting the input (which may hold
/// personal data).
pub fn json_error_kind(error: &serde_json::Error) -> &'static str {
    match error.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "wrong fields",
        serde_json::error::Category::Eof => "unexpected end",
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
