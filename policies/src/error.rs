//! The crate's error type.

/// What can go wrong loading or applying a policy: detectors, masking, keys, access.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The detectors could not be built (a pattern that does not compile, an unknown entity
    /// type).
    #[error(transparent)]
    Detect(#[from] atdp_detect::Error),
    /// A masking pattern does not compile.
    #[error("masking pattern does not compile: {0}")]
    Pattern(String),
    /// The key file is unreadable or inconsistent.
    #[error("key file: {0}")]
    KeyFile(String),
    /// The key file could not be read, locked or written.
    #[error("key file {}: cannot {action}: {source}", path.display())]
    KeyFileIo {
        /// What was being done (`read`, `lock`, `write`, …).
        action: &'static str,
        /// The file involved: the key file, its lock file or its temporary file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Tenants of the policy have no keys in the key file, and generating them was not asked
    /// for.
    #[error(
        "key file {}: no keys for tenant(s) {}; create them with `atdp-policy keygen --out {} {}` (tenants that have keys keep them), or start atdp-proxy with --generate-keys",
        path.display(),
        quoted(tenants),
        shell_word(&path.to_string_lossy()),
        tenant_flags(tenants)
    )]
    MissingKeys {
        /// The key file.
        path: std::path::PathBuf,
        /// The tenants without keys, in sort order.
        tenants: Vec<String>,
    },
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

fn quoted(tenants: &[String]) -> String {
    tenants
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `word` as a POSIX shell reads it back: as it is when it is made of safe characters,
/// else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@/+=,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `--tenant T` for each tenant, ready for a shell.
fn tenant_flags(tenants: &[String]) -> String {
    tenants
        .iter()
        .map(|t| format!("--tenant {}", shell_word(t)))
        .collect::<Vec<_>>()
        .join(" ")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_keys_suggest_a_command_a_shell_runs_as_written() {
        let error = Error::MissingKeys {
            path: "my keys.json".into(),
            tenants: vec!["acme".into(), "big co's".into()],
        };
        let message = error.to_string();
        assert!(
            message.contains(r#"--out 'my keys.json' --tenant acme --tenant 'big co'\''s'"#),
            "{message}"
        );
    }
}
