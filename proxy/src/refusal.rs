//! Every refusal the proxy answers, in one table: the HTTP status, the machine-readable code
//! (OpenAI's `code`; the metric label), the message for the agent's developer, and how long to
//! wait. Messages say what is wrong and what to do; they never quote request text beyond the
//! name of a field or header the client sent.

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The instance is draining for a shutdown.
    ShuttingDown,
    /// No such endpoint.
    UnknownPath {
        /// Method and path as received.
        request: String,
    },
    /// The endpoint takes another method.
    MethodNotAllowed {
        /// The path.
        path: String,
    },
    /// No API key in the request.
    MissingApiKey,
    /// The key is not in the policy.
    InvalidApiKey,
    /// The key is revoked.
    ApiKeyRevoked,
    /// A rate limit of the key or its tenant is reached.
    RateLimited {
        /// Seconds until the bucket has room.
        retry_after: u64,
    },
    /// The key has as many calls in flight as it may.
    TooManyInFlight {
        /// The limit.
        limit: u32,
    },
    /// The lake cannot take more right now.
    RecordingUnavailable {
        /// What cannot be recorded: `calls`, `rewards`.
        what: &'static str,
    },
    /// The body is not JSON by its content type.
    UnsupportedContentType,
    /// The body is compressed or otherwise encoded.
    UnsupportedEncoding,
    /// The request has a query string.
    QueryNotAccepted,
    /// A header the proxy reads is malformed.
    InvalidHeader {
        /// Its name.
        name: &'static str,
        /// What it must be.
        rule: &'static str,
    },
    /// The body is over the limit.
    RequestTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The client did not send its body in time.
    BodyTimeout {
        /// The limit in seconds.
        seconds: u64,
    },
    /// The body is not (one reading of) JSON.
    InvalidJson {
        /// What is wrong, with its position.
        message: String,
    },
    /// The body does not fit the API.
    InvalidRequest {
        /// What is wrong, naming the field.
        message: String,
    },
    /// A top-level field the proxy does not know, towards an external upstream.
    UnknownField {
        /// The API's name.
        api: &'static str,
        /// The field.
        field: String,
    },
    /// A content block, part or item type the proxy does not know, towards an external
    /// upstream.
    UnknownContent {
        /// The API's name.
        api: &'static str,
        /// Where it sat: `messages[2].content[0]`.
        field: String,
        /// Its type, when it is a plain name (else it is not quoted).
        kind: Option<String>,
    },
    /// A beta feature the proxy does not know, towards an external upstream.
    UnknownBeta {
        /// The header.
        header: &'static str,
        /// The value.
        value: String,
    },
    /// An option the proxy cannot record (its reply would not pass through the proxy).
    Unrecordable {
        /// The field and value.
        field: &'static str,
    },
    /// No route for the model.
    ModelNotFound {
        /// The model asked for.
        model: String,
    },
    /// Masking failed; nothing was forwarded.
    MaskingFailed,
    /// The work on a large body failed unexpectedly; nothing was forwarded.
    Internal,
    /// Cedar denied the call (or could not decide it).
    PolicyDenied {
        /// Which decision and why.
        why: String,
    },
    /// The upstream's name does not resolve.
    UpstreamUnresolvable {
        /// The upstream.
        upstream: String,
    },
    /// The strict audit trail could not be made durable before forwarding.
    AuditUnavailable,
    /// A reward is malformed.
    InvalidReward {
        /// What is wrong.
        message: String,
    },
}

impl Refusal {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::UnknownPath { .. } | Refusal::ModelNotFound { .. } => 404,
            Refusal::MethodNotAllowed { .. } => 405,
            Refusal::MissingApiKey | Refusal::InvalidApiKey | Refusal::ApiKeyRevoked => 401,
            Refusal::PolicyDenied { .. } => 403,
            Refusal::RateLimited { .. } | Refusal::TooManyInFlight { .. } => 429,
            Refusal::ShuttingDown
            | Refusal::RecordingUnavailable { .. }
            | Refusal::AuditUnavailable => 503,
            Refusal::UnsupportedContentType | Refusal::UnsupportedEncoding => 415,
            Refusal::RequestTooLarge { .. } => 413,
            Refusal::BodyTimeout { .. } => 408,
            Refusal::QueryNotAccepted
            | Refusal::InvalidHeader { .. }
            | Refusal::InvalidJson { .. }
            | Refusal::InvalidRequest { .. }
            | Refusal::UnknownField { .. }
            | Refusal::UnknownContent { .. }
            | Refusal::UnknownBeta { .. }
            | Refusal::Unrecordable { .. }
            | Refusal::InvalidReward { .. } => 400,
            Refusal::MaskingFailed | Refusal::Internal => 500,
            Refusal::UpstreamUnresolvable { .. } => 502,
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::ShuttingDown => "shutting_down",
            Refusal::UnknownPath { .. } => "unknown_path",
            Refusal::MethodNotAllowed { .. } => "method_not_allowed",
            Refusal::MissingApiKey => "missing_api_key",
            Refusal::InvalidApiKey => "invalid_api_key",
            Refusal::ApiKeyRevoked => "api_key_revoked",
            Refusal::RateLimited { .. } => "rate_limit_exceeded",
            Refusal::TooManyInFlight { .. } => "too_many_in_flight",
            Refusal::RecordingUnavailable { .. } => "recording_unavailable",
            Refusal::UnsupportedContentType => "unsupported_content_type",
            Refusal::UnsupportedEncoding => "unsupported_content_encoding",
            Refusal::QueryNotAccepted => "query_not_accepted",
            Refusal::InvalidHeader { .. } => "invalid_header",
            Refusal::RequestTooLarge { .. } => "request_too_large",
            Refusal::BodyTimeout { .. } => "request_timeout",
            Refusal::InvalidJson { .. } => "invalid_json",
            Refusal::InvalidRequest { .. } => "invalid_request",
            Refusal::UnknownField { .. } => "unknown_field",
            Refusal::UnknownContent { .. } => "unknown_content",
            Refusal::UnknownBeta { .. } => "unknown_beta",
            Refusal::Unrecordable { .. } => "unrecordable_option",
            Refusal::ModelNotFound { .. } => "model_not_found",
            Refusal::MaskingFailed => "masking_failed",
            Refusal::Internal => "internal_error",
            Refusal::PolicyDenied { .. } => "policy_denied",
            Refusal::UpstreamUnresolvable { .. } => "upstream_unresolvable",
            Refusal::AuditUnavailable => "audit_unavailable",
            Refusal::InvalidReward { .. } => "invalid_reward",
        }
    }

    /// Seconds to wait before a retry (`Retry-After`), where waiting helps.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Refusal::ShuttingDown | Refusal::TooManyInFlight { .. } => Some(1),
            Refusal::RateLimited { retry_after } => Some(*retry_after),
            Refusal::RecordingUnavailable { .. } | Refusal::AuditUnavailable => Some(5),
            _ => None,
        }
    }

    /// The message for the agent's developer.
    pub fn message(&self) -> String {
        match self {
            Refusal::ShuttingDown => "this proxy instance is shutting down; retry".into(),
            Refusal::UnknownPath { request } => format!(
                "unknown path {request}: the proxy serves POST /v1/chat/completions, POST /v1/responses, POST /v1/messages, GET /v1/models and POST /v1/atdp/rewards"
            ),
            Refusal::MethodNotAllowed { path } => format!("{path} takes POST"),
            Refusal::MissingApiKey => "no API key: send the key atdp issued you as `Authorization: Bearer <key>` or `x-api-key`".into(),
            Refusal::InvalidApiKey => "invalid API key: this key is not known to the proxy's policy".into(),
            Refusal::ApiKeyRevoked => "API key revoked: ask your atdp administrator for a new one".into(),
            Refusal::RateLimited { .. } => "rate limit reached for this key or tenant; retry after the time in Retry-After".into(),
            Refusal::TooManyInFlight { limit } => format!(
                "this key already has {limit} calls in flight, its limit; retry when one has finished"
            ),
            Refusal::RecordingUnavailable { what } => format!(
                "the proxy cannot record {what} right now (lake back-log); retry shortly"
            ),
            Refusal::UnsupportedContentType => "the request body must be JSON (Content-Type: application/json)".into(),
            Refusal::UnsupportedEncoding => "the request body must not be compressed (Content-Encoding: identity)".into(),
            Refusal::QueryNotAccepted => "the proxy forwards no query parameters (but `beta=true`); put options in the JSON body".into(),
            Refusal::InvalidHeader { name, rule } => format!("header {name} must be {rule}"),
            Refusal::RequestTooLarge { limit } => {
                format!("request body over the proxy's limit of {limit} bytes")
            }
            Refusal::BodyTimeout { seconds } => {
                format!("the request body did not arrive within {seconds} s")
            }
            Refusal::InvalidJson { message } | Refusal::InvalidRequest { message } => {
                message.clone()
            }
            Refusal::UnknownField { api, field } => format!(
                "request field `{field}` is not one the proxy knows for {api}, so it is not sent to an external provider; remove it, or ask your atdp administrator to allow it in the policy directory's forwarding.toml"
            ),
            Refusal::UnknownContent { api, field, kind } => format!(
                "`{field}` is of a content type{} the proxy does not know for {api}, so it is not sent to an external provider: it could carry a tool or a file the proxy cannot decide; remove it, or ask your atdp administrator to allow the type in the policy directory's forwarding.toml",
                kind.as_ref().map(|k| format!(" (`{k}`)")).unwrap_or_default()
            ),
            Refusal::UnknownBeta { header, value } => format!(
                "{header} value `{value}` is not a beta feature the proxy knows, so it is not sent to an external provider; ask your atdp administrator to allow it in the policy directory's forwarding.toml"
            ),
            Refusal::Unrecordable { field } => format!(
                "`{field}` is not supported through the proxy: its reply would not pass through the proxy to be restored and recorded"
            ),
            Refusal::ModelNotFound { model } => format!(
                "model {model:?} is not routed by this proxy; ask your administrator to add a route"
            ),
            Refusal::MaskingFailed => "masking failed, so the request was not forwarded; the proxy's operator has the details".into(),
            Refusal::Internal => "the proxy failed while reading the request, so it was not forwarded; the proxy's operator has the details".into(),
            Refusal::PolicyDenied { why } => why.clone(),
            Refusal::UpstreamUnresolvable { upstream } => {
                format!("upstream {upstream} cannot be resolved")
            }
            Refusal::AuditUnavailable => "the audit trail cannot be made durable right now, so the call was not forwarded; retry shortly".into(),
            Refusal::InvalidReward { message } => message.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_come_with_the_refusals_that_pass() {
        assert_eq!(
            Refusal::RateLimited { retry_after: 7 }.retry_after(),
            Some(7)
        );
        assert_eq!(
            Refusal::RecordingUnavailable { what: "calls" }.retry_after(),
            Some(5)
        );
        assert_eq!(Refusal::MaskingFailed.retry_after(), None);
        assert_eq!(Refusal::PolicyDenied { why: "no".into() }.status(), 403);
        assert_eq!(Refusal::BodyTimeout { seconds: 1 }.status(), 408);
    }
}
