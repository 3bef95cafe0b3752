//! The wire formats of the APIs the proxy speaks: OpenAI chat completions, OpenAI responses
//! and Anthropic messages, streamed (SSE) or not.
//!
//! - [`parse_json_body`] reads a request body one way only (a repeated key is refused), so
//!   that what the proxy decides on is what it forwards.
//! - [`parse_request`] and [`parse_response`] read a body into the normalised ATDP shapes
//!   ([`RequestView`], [`ResponseView`]) that a step record is made of; a request's
//!   [`Offer`]s are everything in it that can act, each named for its Cedar decision.
//! - [`SseParser`] splits a byte stream into server-sent events wherever its chunks are cut;
//!   [`StreamAssembler`] rebuilds the final reply from the events.
//! - [`restore_json`] and [`SseRestorer`] put the originals of masked placeholders back into
//!   a reply, the latter on a stream whose chunk boundaries may cut a placeholder anywhere.
//! - [`error_body`] writes an error in the caller's API's own JSON format.
//!
//! Nothing here panics on any input, and no error message quotes request or response text
//! (it may be personal data): errors name the field that was wrong, never its content.

mod assemble;
mod canonical;
mod error;
mod request;
mod response;
mod restore;
mod restore_sse;
mod sse;
mod strip;

#[cfg(test)]
mod tests;

pub use assemble::StreamAssembler;
pub use canonical::parse_json_body;
pub use error::{ApiFamily, WireError, error_body, error_type};
pub use request::fields::{ANTHROPIC_BETAS, OPENAI_BETAS, known_fields};
pub use request::{Offer, OfferKind, RequestView, parse_request};
pub use response::{ResponseView, parse_response};
pub use restore::restore_json;
pub use restore_sse::SseRestorer;
pub use sse::{SseEvent, SseParser};
pub use strip::{Added, SseStripper};

/// The API a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiKind {
    /// OpenAI `POST /v1/chat/completions`.
    OpenAiChat,
    /// OpenAI `POST /v1/responses`.
    OpenAiResponses,
    /// Anthropic `POST /v1/messages`.
    AnthropicMessages,
}

impl ApiKind {
    /// Every API, in a fixed order.
    pub const ALL: [ApiKind; 3] = [
        ApiKind::OpenAiChat,
        ApiKind::OpenAiResponses,
        ApiKind::AnthropicMessages,
    ];

    /// The API served at `path` (a query string is ignored; the path must match exactly).
    pub fn from_path(path: &str) -> Option<ApiKind> {
        match strip_query(path) {
            "/v1/chat/completions" => Some(ApiKind::OpenAiChat),
            "/v1/responses" => Some(ApiKind::OpenAiResponses),
            "/v1/messages" => Some(ApiKind::AnthropicMessages),
            _ => None,
        }
    }

    /// The name written into a step's `api` column: `openai.chat`, `openai.responses` or
    /// `anthropic.messages`.
    pub fn name(self) -> &'static str {
        match self {
            ApiKind::OpenAiChat => "openai.chat",
            ApiKind::OpenAiResponses => "openai.responses",
            ApiKind::AnthropicMessages => "anthropic.messages",
        }
    }

    /// Whether this is Anthropic's API.
    pub fn is_anthropic(self) -> bool {
        self == ApiKind::AnthropicMessages
    }

    /// The family whose error format this API uses.
    pub fn family(self) -> ApiFamily {
        if self.is_anthropic() {
            ApiFamily::Anthropic
        } else {
            ApiFamily::OpenAi
        }
    }
}

impl std::fmt::Display for ApiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `path` without its query string (and fragment).
fn strip_query(path: &str) -> &str {
    path.split(['?', '#']).next().unwrap_or(path)
}
