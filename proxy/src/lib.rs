//! The atdp data plane: a Pingora proxy that agents reach by changing only their `base_url`.
//!
//! Every model call (OpenAI chat and responses, Anthropic messages; streaming or not; with
//! tools) is authenticated with a key from the policy directory, checked by Cedar for the
//! model actually dispatched and every tool offered, masked (for what the upstream sees,
//! by its trust level; and for what is stored), forwarded to the upstream its model routes
//! to, restored on the way back, and recorded as an ATDP step in the lake. See
//! `docs/proxy.md`.
//!
//! ```no_run
//! let raw = proxy::RawConfig::from_toml(r#"
//!     policy = "policies/examples/quickstart"
//!     [[upstream]]
//!     name = "openai"
//!     url = "https://api.openai.com"
//!     api_key_env = "OPENAI_API_KEY"
//! "#)?;
//! proxy::run(raw.validate()?)?;
//! # Ok::<(), proxy::Error>(())
//! ```

/// Unwraps a `Result<T, Reject>` in a function that returns
/// `pingora::Result<Result<_, Reject>>`: a refusal is returned as `Ok(Err(reject))`, for the
/// caller to write in the API's format.
macro_rules! check {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(reject) => return Ok(Err(reject)),
        }
    };
}

mod admin;
mod call;
mod config;
mod endpoints;
mod error;
mod limits;
mod metrics;
mod pump;
mod record;
mod recorder;
mod rewards;
mod server;
mod service;
mod state;
mod trajectory;
mod upstream;

/// The wire formats, from their own crate.
use atdp_wire as wire;

pub use config::{
    Config, Durability, Limits, OnBackpressure, RawConfig, RawRoute, RawUpstream, Trust,
};
pub use error::{Error, Result};
pub use server::run;
pub use state::load_keys;
pub use wire::{
    ApiFamily, ApiKind, RequestView, ResponseView, SseEvent, SseParser, SseRestorer,
    StreamAssembler, WireError, error_body, error_type, parse_json_body, parse_request,
    parse_response, restore_json,
};
