//! Integration tests of `atdp-deploy`: the registry on a local lake, and `atdp-serve`
//! (mistral.rs on a tiny random model) swapping, rolling back and refusing adapters.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod registry;
mod serve;
mod util;
