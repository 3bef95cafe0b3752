//! Integration tests of `atdp-deploy`: the registry on a local lake, `atdp-serve` (mistral.rs
//! on a tiny random model) swapping, rolling back and refusing adapters, and its tool calls
//! and completion token ids, read by the proxy's own parsers and by the official SDKs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod registry;
mod serve;
mod tools;
mod util;
