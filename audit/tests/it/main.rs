//! Integration tests of `atdp-audit`: a lake of masked trajectories written through the real
//! writer and vault crypto, then searched, read, revealed, erased, exported and verified;
//! the console over HTTP and in headless Chromium, its live view of training and its
//! Prometheus endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod auditor;
mod browser;
mod cli;
mod client;
mod common;
mod console;
mod erasure;
mod hostile;
mod html;
mod key_file;
mod paging;
mod retention;
mod runs;
mod tenants;
mod tls;
mod verify;
