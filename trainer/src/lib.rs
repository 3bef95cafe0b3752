//! The atdp trainer: LoRA adapters learned by policy gradient from the trajectories the proxy
//! records. This crate owns a differentiable forward pass of the Llama, Qwen2 and Qwen3
//! families in candle ([`Model`]; candle-transformers' models use kernels without a backward
//! pass and return only the last position), LoRA on any of the seven projections ([`Lora`]),
//! adapters in PEFT format that PEFT, vLLM and mistral.rs load ([`save_adapter`],
//! [`load_adapter`]), and small random models with a tokenizer and chat template for tests
//! and demos ([`init_model`]).
//!
//! Not built yet (issue 6, later milestones): reading steps and rewards from the lake, chat
//! templates, the objectives (REINFORCE, GRPO, PPO-style clipping, KL), the optimizer loop,
//! checkpoints, the run manifest, `atdp-train run` and its report.
//!
//! ```
//! use atdp_trainer::{Adapter, Arch, InitSpec, LoadOptions, Lora, LoraConfig, Model};
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

mod config;
mod error;
mod init;
mod lora;
mod model;
mod peft;
mod rng;

pub use config::{Arch, CONFIG_FILE, ModelConfig, RopeScaling, dtype_from_name, dtype_name};
pub use error::{Error, Result};
pub use init::{
    CHAT_TEMPLATE, ENDOFTEXT, GENERATION_CONFIG_FILE, IM_END, IM_START, InitReport, InitSpec,
    TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, TOKENIZER_VOCAB_SIZE, added_token_id, init_model,
};
pub use lora::{Lora, LoraConfig, LoraLayer, TargetModule};
pub use model::{Adapter, LoadOptions, Model, WEIGHTS_FILE, WEIGHTS_INDEX_FILE, token_log_probs};
pub use peft::{
    ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LoraMatrix, PEFT_PREFIX, SavedAdapter,
    adapter_config_json, load_adapter, save_adapter, tensor_name,
};
