//! The atdp trainer: LoRA adapters learned by policy gradient from the trajectories the proxy
//! records. This crate owns a differentiable forward pass of the Llama, Qwen2 and Qwen3
//! families in candle ([`Model`]; candle-transformers' models use kernels without a backward
//! pass and return only the last position), LoRA on any of the seven projections ([`Lora`]),
//! adapters in PEFT format that PEFT, vLLM and mistral.rs load ([`save_adapter`],
//! [`load_adapter`]), and small random models with a tokenizer and chat template for tests
//! and demos ([`init_model`]).
//!
//! Training ([`run`]): steps and rewards selected from the lake ([`read_lake`]), the
//! placeholders of their masked text rendered as surrogate values of their type, as serving
//! sees real ones ([`render_step`], [`Placeholders`]), prompts
//! rendered with the model's own chat template (`atdp_model_files::ChatFormat`,
//! [`build_examples`]),
//! tree-aware discounted returns ([`step_returns`]), REINFORCE or GRPO advantages with a
//! PPO-style clipped ratio and an optional KL penalty to the base model, AdamW with warm-up
//! and cosine decay, checkpoints with an exact resume, and a [`Manifest`] next to the
//! adapter. Configured by `train.toml` ([`RawRunConfig`]).
//! An HTML report with inline SVG plots is written next to the adapter.
//!
//! ```
//! use atdp_model_files::{Arch, LoraConfig};
//! use atdp_trainer::{Adapter, InitSpec, LoadOptions, Lora, Model};
//! use candle_core::Tensor;
//!
//! let dir = tempfile::tempdir()?;
//! atdp_trainer::init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2))?;
//! let model = Model::load(dir.path(), &LoadOptions::default())?;
//! let lora = Lora::new(&model, LoraConfig::default())?;
//!
//! let ids = Tensor::new(&[[1u32, 2, 3, 4]], model.device())?;
//! let policy = model.next_token_log_probs(&ids, Adapter::Train { lora: &lora, step: 0 })?;
//! let reference = model.next_token_log_probs(&ids, Adapter::Off)?;
//! let grads = policy.sum_all()?.backward()?; // gradients reach lora.vars() only
//! assert_eq!(policy.dims(), reference.dims()); // [1, 3]
//! assert!(grads.get(&lora.vars()[0]).is_some());
//!
//! atdp_trainer::save_adapter(&lora, dir.path().join("adapter"), "tiny-qwen2")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod data;
mod error;
mod init;
mod lora;
mod manifest;
mod model;
mod objective;
mod optim;
mod peft;
mod report;
mod returns;
mod rng;
mod run_config;
mod train;

pub use data::{
    Credit, Example, ExampleStats, LakeData, Placeholders, Selection, TableRead, build_examples,
    read_lake, read_lake_to_monitor, render_step, render_surrogates, surrogate,
};
pub use error::{Error, Result};
pub use init::{
    CHAT_TEMPLATE, ENDOFTEXT, IM_END, IM_START, InitReport, InitSpec, Merge, TOKENIZER_VOCAB_SIZE,
    added_token_id, chat_format, init_model, learn_merges,
};
pub use lora::{Lora, LoraLayer};
pub use manifest::{Lineage, Manifest, RewardInfo, RewardVersions};
pub use model::{Adapter, Gradients, LoadOptions, Model, Span, TokenStats, token_log_probs};
pub use objective::{Advantage, Baseline, GroupKey, LossConfig};
pub use optim::{AdamW, AdamWConfig};
pub use peft::{SavedAdapter, load_adapter, save_adapter};
pub use report::REPORT_FILE;
pub use report::StepMetrics;
pub use returns::{Returns, RewardSpec, StepKey, step_returns};
pub use rng::Rng;
pub use run_config::{
    Length, RawLora, RawObjective, RawRewards, RawRunConfig, RawSelect, RawTrain, RunConfig,
};
pub use train::{CHECKPOINT_DIR, METRICS_FILE, RunReport, TrainOptions, run};
