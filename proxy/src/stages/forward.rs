//! Forward: what the upstream receives. The body is the proxy's own serialisation of the
//! document it parsed, decided and masked (never the client's bytes), with the dispatched
//! model name and what the proxy asks for on its own account (behaviour log-probs, token
//! ids). The headers are an allow-list: the API's version and beta headers, the provider
//! account headers, and those `forwarding.toml` names; everything else the client sent stays
//! with the proxy (its key, cookies, tracing, SDK telemetry). The provider's credential is
//! the upstream's, injected in [`crate::upstream`].

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::config::Upstream;
use crate::refusal::Refusal;
use crate::wire::{Added, ApiKind};

/// Client headers forwarded to every upstream, and the rule their values follow.
const FORWARDED: [(&str, Rule); 8] = [
    ("accept", Rule::Text),
    ("anthropic-version", Rule::Date),
    ("anthropic-beta", Rule::Text),
    ("anthropic-workspace-id", Rule::Id),
    ("anthropic-user-profile-id", Rule::Id),
    ("openai-beta", Rule::Text),
    ("openai-organization", Rule::Id),
    ("openai-project", Rule::Id),
];

/// What a forwarded header's value may be.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Visible ASCII and spaces, at most 1,024 bytes.
    Text,
    /// `YYYY-MM-DD`.
    Date,
    /// Letters, digits, `_`, `-`, `.`, `:`; 1 to 128.
    Id,
}

impl Rule {
    fn allows(self, value: &[u8]) -> bool {
        match self {
            Rule::Text => {
                value.len() <= 1024 && value.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
            }
            Rule::Date => {
                value.len() == 10
                    && value.iter().enumerate().all(|(i, b)| match i {
                        4 | 7 => *b == b'-',
                        _ => b.is_ascii_digit(),
                    })
            }
            Rule::Id => {
                (1..=128).contains(&value.len())
                    && value
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(b))
            }
        }
    }

    fn words(self) -> &'static str {
        match self {
            Rule::Text => "visible ASCII, at most 1024 bytes",
            Rule::Date => "a date YYYY-MM-DD",
            Rule::Id => "an id of letters, digits, `_`, `-`, `.` or `:` (1 to 128)",
        }
    }
}

/// The request header that marks a shadow copy for `atdp-serve` (`crate::shadow`), which
/// answers it only from the running shadow's engine; a client's is never forwarded.
pub const COPY_HEADER: &str = "x-atdp-shadow-copy";

/// The client headers that go upstream: the allow-list, plus `extra` (lower-case names from
/// `forwarding.toml`, values as [`Rule::Text`]). A listed header with a value outside its
/// rule is refused rather than silently dropped.
pub fn forwarded_headers(
    headers: &HeaderMap,
    extra: &[String],
) -> Result<Vec<(HeaderName, HeaderValue)>, Refusal> {
    let mut out = Vec::new();
    for (name, value) in headers {
        let rule = FORWARDED
            .iter()
            .find(|(known, _)| name.as_str() == *known)
            .map(|(known, rule)| (*known, *rule))
            .or_else(|| {
                extra
                    .iter()
                    .any(|e| e == name.as_str())
                    .then_some(("a header forwarding.toml allows", Rule::Text))
            });
        let Some((label, rule)) = rule else { continue };
        if !rule.allows(value.as_bytes()) {
            return Err(Refusal::InvalidHeader {
                name: label,
                rule: rule.words(),
            });
        }
        out.push((name.clone(), value.clone()));
    }
    Ok(out)
}

/// Sets the dispatched model and, for an OpenAI chat call to an upstream configured for
/// it, asks for behaviour log-probs and token ids the client did not ask for itself (they
/// are stripped from the reply). Returns what was added.
pub fn prepare(api: ApiKind, document: &mut Value, model: &str, upstream: &Upstream) -> Added {
    let mut added = Added::default();
    let Value::Object(map) = document else {
        return added;
    };
    if map.get("model").and_then(Value::as_str) != Some(model) {
        map.insert("model".into(), Value::String(model.to_owned()));
    }
    if api == ApiKind::OpenAiChat {
        let asked = |map: &serde_json::Map<String, Value>, key: &str| {
            map.get(key) == Some(&Value::Bool(true))
        };
        if upstream.record_logprobs && !asked(map, "logprobs") {
            map.insert("logprobs".into(), Value::Bool(true));
            added.logprobs = true;
        }
        if upstream.record_token_ids && !asked(map, "return_token_ids") {
            map.insert("return_token_ids".into(), Value::Bool(true));
            added.token_ids = true;
        }
    }
    added
}

/// The body sent upstream: the document as the proxy serialises it.
pub fn body(document: &Value) -> Result<Bytes, Refusal> {
    serde_json::to_vec(document)
        .map(Bytes::from)
        .map_err(|_| Refusal::MaskingFailed)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stages::test_headers as headers;

    #[test]
    fn only_the_allow_list_goes_upstream() {
        let client = headers(&[
            ("authorization", "Bearer sk-atdp-demo-agent"),
            ("x-api-key", "sk-atdp-demo-agent"),
            ("cookie", "session=1"),
            ("x-stainless-os", "Linux"),
            ("user-agent", "OpenAI/Python 3.57.0"),
            ("x-exfiltrate", "jane@example.com"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "mcp-client-2025-04-04"),
            ("openai-organization", "org-123"),
            ("x-request-source", "batch"),
        ]);
        let out = forwarded_headers(&client, &["x-request-source".to_owned()]).unwrap();
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "anthropic-version",
                "anthropic-beta",
                "openai-organization",
                "x-request-source"
            ]
        );
    }

    #[test]
    fn listed_headers_with_odd_values_are_refused() {
        for (name, value) in [
            ("anthropic-version", "2023-06-01; x=jane@example.com"),
            ("openai-organization", "org 123"),
            ("openai-project", ""),
        ] {
            let refusal = forwarded_headers(&headers(&[(name, value)]), &[]).unwrap_err();
            assert_eq!(refusal.code(), "invalid_header", "{name}");
        }
    }
}
