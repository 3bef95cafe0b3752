//! Integration tests of the trainer crate: the forward pass against an independent f64
//! reference, gradients against finite differences, LoRA and PEFT adapters, loading from
//! sharded and half-precision checkpoints, bad input, the `atdp-train` command, and training
//! from a synthetic lake (learning, resume, bad data), and placeholders rendered as surrogates.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod adapter;
mod checkpoints;
mod cli;
mod errors;
mod gradients;
mod learning;
mod python_lake;
mod reference;
mod runs;
mod surrogates;
mod tenants;
mod util;
