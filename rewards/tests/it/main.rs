//! Integration tests of `atdp-rewards`: a small synthetic lake written through the real
//! writer, labelled by SQL and program functions, re-run, changed, previewed and compared.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli;
mod common;
mod preview;
mod program;
mod sql;
mod tenants;
