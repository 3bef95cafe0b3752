//! Integration tests of atdp-schema: schema round trips, the writer against a local lake
//! and a real S3-protocol server, crash recovery, corruption, and readers in other languages.

// Test code: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli;
mod common;
mod crash;
mod interop;
mod lake;
mod roundtrip;
mod s3;
mod versions;
mod wal_damage;
