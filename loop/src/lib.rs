//! The closed loop of atdp: agents talk through the proxy, the lake records, the
//! trainer learns, the gate decides, `atdp-serve` swaps, and the success rate goes up.
//!
//! - [`Env`]: built-in environments (tool-use routing; a verifiable multi-turn guessing
//!   game; tool calls with arguments from a ticket and an answer from the tool's result) that call a model through the OpenAI API like any agent and post rewards.
//! - [`CommandEnv`]: a user's own environment, a program in any language that plays
//!   episodes and prints how each went; [`Environment`] is either kind, and evaluation, the
//!   gate and automatic rollback take both.
//! - [`evaluate`], [`EvalReport`], [`compare_html`]: `atdp-eval`.
//! - [`gate()`]: the promotion gate (held-out reward margin, KL to the base, reply length,
//!   invalid replies, reward hacking), each refusal explained in a [`GateReport`].
//! - [`live_rewards`], [`check_rollback`], [`check_canary`]: automatic rollback and the
//!   canary's verdict on live reward; [`shadow_scores`], [`check_shadow`]: the verdict on a
//!   version in shadow, its recorded replies scored against the served ones.
//! - [`AdapterEvents`]: every decision also in the lake's tamper-evident `audit` table.
//! - [`cycle`]: one train → publish → gate → promote or reject cycle; `atdp-loop run`
//!   repeats it on a schedule.
//! - [`quickstart`]: the whole loop on one machine, as `atdp-quickstart` runs it.
//!
//! See `docs/loop.md`.

mod adapter_events;
mod client;
mod command;
mod cycle;
mod env;
mod environment;
mod erased;
mod error;
mod eval;
mod gate;
mod live;
pub mod quickstart;
mod shadow;

pub use adapter_events::AdapterEvents;
pub use client::{Agent, ChatMessage, Prompt, Reply, ToolCallReply, VERSION_HEADER};
pub use command::{CommandEnv, STDERR_TAIL};
pub use cycle::{
    CycleOutcome, Trained, cycle, data_since, record_decision, rewarded_trajectories,
    train_and_publish,
};
pub use env::{Env, Episode, SeedRng};
pub use environment::{EnvArgs, Environment};
pub use erased::{erased_since_training, refuse_if_erased, retire_erased};
pub use error::{Error, Result, blocking};
pub use eval::{EvalPlan, EvalReport, compare_html, evaluate, wilson};
pub use gate::{
    Check, GateConfig, GateReport, GateSetup, decide, gate, kl_to_base, prompt_ids, request_ids,
};
pub use live::{
    RollbackConfig, SHADOW_TAG, VersionReward, check_canary, check_rollback, live_rewards,
};
pub use shadow::{MAX_FAILED_SHARE, ShadowScores, check_shadow, shadow_scores, shadow_started};
