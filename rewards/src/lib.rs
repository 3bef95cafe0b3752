//! Reward functions over the atdp lake: the rule a team already has for "this went well",
//! written as a DataFusion SQL expression or query, or as a program in any language
//! speaking JSON Lines, run in batch over recorded steps and written to the `rewards` table.
//!
//! A function is a TOML spec ([`RewardFn::load`]); its `reward_fn_version` is a checksum of
//! the whole spec (and of the program file it runs), so a changed rule never mixes silently
//! with old labels. [`run`] labels only what this version has not labelled yet (an
//! anti-join against `rewards`), so it is safe to re-run; [`preview`] and [`diff`] compute on
//! a deterministic sample and write nothing. See `docs/rewards.md`.
//!
//! ```no_run
//! # async fn demo() -> atdp_rewards::Result<()> {
//! use std::collections::BTreeMap;
//! use atdp_rewards::{RewardFn, Selection, run, preview};
//! use atdp_lake::{Catalog, Lake, LakeWriter, WriterConfig};
//!
//! let function = RewardFn::load("rewards/examples/stop_ok.toml".as_ref())?;
//! let lake = Lake::new("./lake", Default::default())?;
//! let catalog = Catalog::open(&lake, &BTreeMap::new()).await?;
//! let selection = Selection { tenant_id: Some("acme".into()), ..Selection::default() };
//! println!("{}", preview(&catalog, &function, &selection, 200, 0).await?);
//! let writer = LakeWriter::open(WriterConfig::new("./lake", "./wal-reward")).await?;
//! let report = run(&catalog, &function, &selection, &writer, &mut |_| {}).await?;
//! println!("{} rewards written", report.written);
//! # Ok(()) }
//! ```

mod compute;
mod diff;
mod error;
mod label;
mod preview;
mod program;
mod run;
mod select;
mod spec;

pub use compute::{OnBatch, compute};
pub use diff::{Confusion, Diff, diff};
pub use error::{Error, Result};
pub use label::Label;
pub use preview::{Bucket, Example, Preview, Sampled, preview, sample};
pub use program::StepIn;
pub use run::{Progress, RunReport, run};
pub use select::{Scope, Selection};
pub use spec::{Body, Kind, Program, RawSpec, RewardFn, Target};
