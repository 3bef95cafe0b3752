//! Integration tests of `atdp-proxy`: the proxy as a child process in front of the fake
//! upstream, driven by the official SDKs and by raw HTTP; the lake read back afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod content;
mod failures;
mod harness;
mod hostile;
mod load;
mod ops;
mod python_package;
mod reward_api;
mod sdk;
mod settings;
mod shadow;
mod strict;
mod tls;
mod training;
