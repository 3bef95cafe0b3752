//! `forwarding.toml`: what a policy directory lets the proxy forward beyond its own lists.
//!
//! The proxy knows every request field, content type and beta feature of the official SDKs;
//! towards `external` upstreams it refuses anything else, since a field, content block or beta
//! it cannot judge may switch something on at the provider (a tool, a file). An administrator
//! who has judged one allows it here by name. The file is optional; without it nothing beyond
//! the lists is forwarded.
//!
//! ```toml
//! # Top-level request fields, per API (openai.chat, openai.responses, anthropic.messages).
//! fields = { "openai.chat" = ["x_trace"] }
//! # Content block, part or item types, per API. The proxy masks the strings inside them but
//! # reads no tool, file or setting they may carry.
//! content = { "anthropic.messages" = ["citations_marker"] }
//! # Values of `anthropic-beta` / `openai-beta` headers.
//! betas = ["some-feature-2027-01-01"]
//! # Client headers forwarded to every upstream (names, any case).
//! headers = ["x-request-source"]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The file's name inside a policy directory.
pub const FORWARDING_FILE: &str = "forwarding.toml";

/// The APIs whose fields can be allowed.
const APIS: [&str; 3] = ["openai.chat", "openai.responses", "anthropic.messages"];

/// Headers that are never the client's to forward, whatever the file says: credentials
/// (the proxy injects the provider's own), framing, and the proxy's own.
const NEVER_FORWARDED: [&str; 14] = [
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "cookie",
    "host",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "keep-alive",
];

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForwarding {
    /// Extra top-level request fields, per API name.
    #[serde(default)]
    fields: BTreeMap<String, Vec<String>>,
    /// Extra content block, part or item types, per API name.
    #[serde(default)]
    content: BTreeMap<String, Vec<String>>,
    /// Extra beta feature values.
    #[serde(default)]
    betas: Vec<String>,
    /// Extra client headers forwarded to every upstream.
    #[serde(default)]
    headers: Vec<String>,
}

/// Validated forwarding allowances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forwarding {
    /// Extra top-level request fields, per API name (`openai.chat`, …).
    pub fields: BTreeMap<String, Vec<String>>,
    /// Extra content block, part or item types, per API name.
    pub content: BTreeMap<String, Vec<String>>,
    /// Extra beta feature values.
    pub betas: Vec<String>,
    /// Extra client headers forwarded to every upstream, lower-case.
    pub headers: Vec<String>,
}

impl Forwarding {
    /// Whether `field` of `api` is allowed beyond the known list.
    pub fn allows_field(&self, api: &str, field: &str) -> bool {
        self.fields
            .get(api)
            .is_some_and(|fields| fields.iter().any(|f| f == field))
    }

    /// Whether content type `kind` of `api` is allowed beyond the known lists.
    pub fn allows_content(&self, api: &str, kind: &str) -> bool {
        self.content
            .get(api)
            .is_some_and(|kinds| kinds.iter().any(|k| k == kind))
    }

    /// Whether beta value `value` is allowed beyond the known list.
    pub fn allows_beta(&self, value: &str) -> bool {
        self.betas.iter().any(|b| b == value)
    }

    /// Loads `forwarding.toml` from `dir`; absent is the default (nothing extra).
    pub fn load(dir: &Path) -> Result<Forwarding> {
        let path = dir.join(FORWARDING_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Forwarding::from_toml(&text).map_err(|problems| {
                Error::Policy(format!("{FORWARDING_FILE}: {}", problems.join("; ")))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Forwarding::default()),
            Err(e) => Err(Error::Policy(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// Parses and checks the file's text; every problem is returned.
    pub fn from_toml(text: &str) -> std::result::Result<Forwarding, Vec<String>> {
        let raw: RawForwarding = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut problems = Vec::new();
        for (table, names) in [("fields", &raw.fields), ("content", &raw.content)] {
            for (api, names) in names {
                if !APIS.contains(&api.as_str()) {
                    problems.push(format!(
                        "{table}: unknown API {api:?} (one of {})",
                        APIS.join(", ")
                    ));
                }
                if names.iter().any(String::is_empty) {
                    problems.push(format!("{table}.{api}: an empty name"));
                }
            }
        }
        for beta in &raw.betas {
            if beta.is_empty() || beta.contains(',') || beta.chars().any(char::is_whitespace) {
                problems.push(format!(
                    "betas: {beta:?} is not a beta value (no commas or spaces)"
                ));
            }
        }
        let mut headers = Vec::new();
        for header in &raw.headers {
            let name = header.to_ascii_lowercase();
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !token {
                problems.push(format!("headers: {header:?} is not a header name"));
            } else if NEVER_FORWARDED.contains(&name.as_str()) || name.starts_with("x-atdp-") {
                problems.push(format!(
                    "headers: {header:?} is never forwarded (credentials, framing and the proxy's own headers are not the client's to pass on)"
                ));
            } else {
                headers.push(name);
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Forwarding {
            fields: raw.fields,
            content: raw.content,
            betas: raw.betas,
            headers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowances_are_read_and_checked() {
        let forwarding = Forwarding::from_toml(
            r#"
fields = { "openai.chat" = ["x_trace"] }
content = { "anthropic.messages" = ["citations_marker"] }
betas = ["feature-2027-01-01"]
headers = ["X-Request-Source"]
"#,
        )
        .unwrap();
        assert!(forwarding.allows_field("openai.chat", "x_trace"));
        assert!(forwarding.allows_content("anthropic.messages", "citations_marker"));
        assert!(!forwarding.allows_content("openai.chat", "citations_marker"));
        assert!(!forwarding.allows_field("openai.responses", "x_trace"));
        assert!(forwarding.allows_beta("feature-2027-01-01"));
        assert_eq!(forwarding.headers, ["x-request-source"]);

        let problems = Forwarding::from_toml(
            r#"
fields = { "openai.chats" = ["x"] }
content = { "anthropic" = [""] }
betas = ["a,b"]
headers = ["Authorization", "x-atdp-session-id", "bad header"]
"#,
        )
        .unwrap_err();
        assert_eq!(problems.len(), 7, "{problems:?}");
        assert!(Forwarding::from_toml("colour = 1").is_err());
    }
}
