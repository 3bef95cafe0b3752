//! The files training hands to serving, as both sides read and check them: a Hugging Face
//! model directory's `config.json` ([`ModelConfig`]), weights ([`weight_files`]), tokenizer
//! and chat template ([`ChatFormat`]); a PEFT LoRA adapter's configuration and the check a
//! server runs before serving one ([`check_adapter`]); the base-model identity in the
//! trainer's `manifest.json` ([`hash_weights`], [`trained_on`]); and atomic writes.
//!
//! The trainer (`atdp-trainer`) writes these files and `atdp-deploy` serves them; neither
//! depends on the other.

mod chat;
mod error;
mod lora_config;
mod manifest;
mod model_config;
mod peft;
mod weights;

pub use chat::{ChatFormat, GENERATION_CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE};
pub use error::{Error, Result};
pub use lora_config::{LoraConfig, TargetModule};
pub use manifest::{BaseModel, MANIFEST_FILE, hash_weights, trained_on};
pub use model_config::{Arch, CONFIG_FILE, ModelConfig, RopeScaling, dtype_from_name, dtype_name};
pub use peft::{
    ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LoraMatrix, PEFT_PREFIX, adapter_config_json,
    check_adapter, parse_tensor_name, read_adapter_config, rename, tensor_name, write_atomic,
};
pub use weights::{WEIGHTS_FILE, WEIGHTS_INDEX_FILE, weight_files};
