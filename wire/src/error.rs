//! What can go wrong reading the wire formats, and the one place that writes an error in
//! each API's own JSON format.

use bytes::Bytes;
use serde_json::{Value, json};

use super::strip_query;

/// What went wrong reading a request or restoring a reply. Messages name fields, never
/// their content.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The body is not JSON.
    #[error("request body is not JSON ({0}); send a JSON object")]
    NotJson(&'static str),
    /// An object repeats a key: JSON readers disagree on which copy counts.
    #[error(
        "request body: an object repeats a key (line {line}, column {column}); send each key once"
    )]
    DuplicateKey {
        /// Line of the repetition.
        line: usize,
        /// Column of the repetition.
        column: usize,
    },
    /// A field's value is not acceptable.
    #[error("request body: field `{field}` {why}")]
    Invalid {
        /// Path of the field.
        field: String,
        /// What is wrong with it, in words.
        why: &'static str,
    },
    /// A required field is absent.
    #[error("request body: field `{field}` is required")]
    Missing {
        /// Path of the field: `model`, `messages[2].role`.
        field: String,
    },
    /// A field has the wrong JSON type.
    #[error("request body: field `{field}` must be {expected}")]
    WrongType {
        /// Path of the field: `messages[0].content`.
        field: String,
        /// What it must be, in words: `a string`, `an array of objects`.
        expected: &'static str,
    },
    /// A placeholder's original could not be opened (erased tenant key, tampered vault).
    #[error("cannot restore a masked value: {0}")]
    Unmask(#[from] atdp_policies::Error),
}

impl WireError {
    /// The HTTP status this error calls for.
    pub fn status(&self) -> u16 {
        match self {
            WireError::NotJson(_)
            | WireError::DuplicateKey { .. }
            | WireError::Invalid { .. }
            | WireError::Missing { .. }
            | WireError::WrongType { .. } => 400,
            WireError::Unmask(_) => 500,
        }
    }

    pub(crate) fn missing(field: impl Into<String>) -> WireError {
        WireError::Missing {
            field: field.into(),
        }
    }

    pub(crate) fn wrong_type(field: impl Into<String>, expected: &'static str) -> WireError {
        WireError::WrongType {
            field: field.into(),
            expected,
        }
    }
}

/// Which error format a caller expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiFamily {
    /// `{"error":{"message","type","param","code"}}`.
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}`.
    Anthropic,
}

impl ApiFamily {
    /// The family of a request path: anything under `/v1/messages` (also paths the proxy
    /// does not serve, such as `/v1/messages/count_tokens`) is Anthropic, the rest OpenAI.
    pub fn from_path(path: &str) -> ApiFamily {
        if strip_query(path).starts_with("/v1/messages") {
            ApiFamily::Anthropic
        } else {
            ApiFamily::OpenAi
        }
    }
}

/// The standard error `type` of an HTTP status in `family`'s API.
///
/// Both families: 400 `invalid_request_error`, 401 `authentication_error`, 403
/// `permission_error`, 404 `not_found_error`, 413 `request_too_large`, 429
/// `rate_limit_error`, other 4xx `invalid_request_error`, 500 and other 5xx `api_error`.
/// Anthropic reports an overloaded upstream (503, 529) as `overloaded_error` and a gateway
/// timeout (504) as `timeout_error`, as its API does; OpenAI has no such types and uses
/// `api_error` for every 5xx.
pub fn error_type(family: ApiFamily, status: u16) -> &'static str {
    match (family, status) {
        (_, 401) => "authentication_error",
        (_, 403) => "permission_error",
        (_, 404) => "not_found_error",
        (_, 413) => "request_too_large",
        (_, 429) => "rate_limit_error",
        (ApiFamily::Anthropic, 503 | 529) => "overloaded_error",
        (ApiFamily::Anthropic, 504) => "timeout_error",
        (_, 500..) => "api_error",
        _ => "invalid_request_error",
    }
}

/// An error body in `family`'s format for `status`. The `type` is the standard one of the
/// status ([`error_type`]); `kind` is the proxy's own machine-readable reason
/// (`policy_denied`, `invalid_api_key`, …), written as OpenAI's `code` (`null` when empty).
/// Anthropic's error object has no such field, so there the message must say it all.
pub fn error_body(family: ApiFamily, status: u16, kind: &str, message: &str) -> Bytes {
    let error_type = error_type(family, status);
    let body = match family {
        ApiFamily::OpenAi => {
            let code = if kind.is_empty() {
                Value::Null
            } else {
                Value::from(kind)
            };
            json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
        }
        ApiFamily::Anthropic => {
            json!({"type": "error", "error": {"type": error_type, "message": message}})
        }
    };
    // Serialising a `Value` cannot fail; the fallback keeps this total anyway.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec()))
}
