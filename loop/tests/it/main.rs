#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The closed loop in a reduced form: the quickstart end to end (proxy, serve, lake,
//! trainer, gate, swap under load), the multi-turn environment through the proxy,
//! automatic rollback on live reward, an adapter trained with PyTorch on the same lake, a
//! tenant erasure that retires what learned from it under load, and the gate on a custom
//! Python environment.

mod custom_env;
mod erasure;
mod pytorch;
mod quickstart;
