//! The atdp data plane: a Pingora proxy that agents reach by changing only their `base_url`.
//!
//! Every model call (OpenAI chat and responses, Anthropic messages; streaming or not; with
//! tools) goes through the stages of [`stages`]: admitted (key, limits, back-pressure), read
//! once (a body two JSON readers could read differently is refused), routed, decided (Cedar
//! on the model dispatched and on everything the request offers that can act), masked for
//! what the upstream sees (by its trust level), placed in a trajectory, forwarded as the
//! proxy's own serialisation with an allow-list of headers, restored on the way back, and
//! recorded as an ATDP step in the lake, masked for storage. Refusals come from one table,
//! [`Refusal`]. See `docs/proxy.md` and `docs/security.md`.
//!
//! ```no_run
//! let raw = atdp_proxy::RawConfig::from_toml(r#"
//!     policy = "policies/examples/quickstart"
//!     [[upstream]]
//!     name = "openai"
//!     url = "https://api.openai.com"
//!     api_key_env = "OPENAI_API_KEY"
//! "#)?;
//! atdp_proxy::run(raw.validate()?)?;
//! # Ok::<(), atdp_proxy::Error>(())
//! ```

mod admin;
mod call;
mod config;
mod error;
mod grouping;
mod limits;
mod metrics;
mod models;
mod recorder;
mod refusal;
mod respond;
mod reward_api;
mod server;
mod service;
mod shadow;
mod stages;
mod state;
mod strict;
mod tls;
mod upstream;

/// The wire formats, from their own crate.
use atdp_wire as wire;

pub use config::{
    AuditMode, Config, Durability, Limits, OnBackpressure, RawConfig, RawRoute, RawUpstream, Trust,
};
pub use error::{Error, Result};
pub use refusal::Refusal;
pub use server::{Bound, run, run_with};
pub use state::load_keys;
pub use tls::{Certificates, TlsFiles};
pub use wire::{
    ApiFamily, ApiKind, RequestView, ResponseView, SseEvent, SseParser, SseRestorer,
    StreamAssembler, WireError, error_body, error_type, parse_json_body, parse_request,
    parse_response, restore_json,
};
