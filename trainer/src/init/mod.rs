//! Small random models in Hugging Face format (`atdp-train init-model`), for tests, demos and
//! benchmarks where no model hub is reachable: `config.json`, `model.safetensors` (f32), a
//! byte-level BPE `tokenizer.json`, `tokenizer_config.json` with a ChatML chat template, and
//! `generation_config.json`. The same seed gives the same bytes. transformers, vLLM and
//! mistral.rs load the result like any checkpoint.

mod tokenizer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde_json::{Value, json};

use atdp_model_files::{WEIGHTS_FILE, WEIGHTS_INDEX_FILE};

use crate::model::weights::{self, TensorKind};
use crate::rng::Rng;
use crate::{Error, Result};
use atdp_model_files::{Arch, CONFIG_FILE, ModelConfig, RopeScaling};
pub use tokenizer::{
    CHAT_TEMPLATE, ENDOFTEXT, IM_END, IM_START, Merge, VOCAB_SIZE as TOKENIZER_VOCAB_SIZE,
    added_token_id, learn_merges,
};

use atdp_model_files::{GENERATION_CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE};

/// Spread of the random norm scales around 1, so that tests see them.
const NORM_NOISE: f64 = 0.1;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct InitSpec {
    /// The architecture and sizes; `vocab_size` must cover the tokenizer's 300 tokens and
    /// the learned merges.
    pub config: ModelConfig,
    /// Merges learned from a corpus ([`learn_merges`]), after the built-in vocabulary.
    pub merges: Vec<Merge>,
    /// Seeds every weight (each tensor has its own stream, named by the tensor).
    pub seed: u64,
    /// Standard deviation of embeddings, projections and biases (transformers'
    /// `initializer_range`, 0.02 by default). Norm scales are `1 + N(0, 0.1²)`.
    pub init_std: f64,
}

impl InitSpec {
    /// The tiny preset: vocabulary 300, hidden 64, 2 layers, 4 heads, 2 key/value heads,
    /// MLP 128. Qwen2 has q/k/v biases and a tied head; Llama an untied head and Llama 3.1
    /// RoPE scaling (`rope_theta` 500000, factor 8, original context 64, so that all three
    /// frequency bands occur); Qwen3 q/k norms, a tied head and `head_dim` 32 (not 64 / 4).
    pub fn tiny(arch: Arch) -> Self {
        let config = ModelConfig {
            arch,
            vocab_size: TOKENIZER_VOCAB_SIZE,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: if arch == Arch::Qwen3 { 32 } else { 16 },
            rms_norm_eps: 1e-6,
            rope_theta: if arch == Arch::Llama {
                500_000.0
            } else {
                10_000.0
            },
            rope_scaling: (arch == Arch::Llama).then_some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64,
            }),
            max_position_embeddings: 2048,
            tie_word_embeddings: arch != Arch::Llama,
            qkv_bias: arch == Arch::Qwen2,
            o_proj_bias: false,
            mlp_bias: false,
            qk_norm: arch == Arch::Qwen3,
            torch_dtype: Some(candle_core::DType::F32),
        };
        InitSpec {
            config,
            merges: Vec::new(),
            seed: 0,
            init_std: 0.02,
        }
    }

    /// Qwen2-0.5B's shape (vocabulary 151,936, hidden 896, MLP 4,864, 24 layers, 14 heads,
    /// 2 key/value heads, RoPE θ 10⁶) with the test tokenizer, for benchmarks: 2 GB of f32.
    pub fn qwen2_0_5b_shape() -> Self {
        let mut spec = InitSpec::tiny(Arch::Qwen2);
        let c = &mut spec.config;
        c.vocab_size = 151_936;
        c.hidden_size = 896;
        c.intermediate_size = 4_864;
        c.num_hidden_layers = 24;
        c.num_attention_heads = 14;
        c.num_key_value_heads = 2;
        c.head_dim = 64;
        c.max_position_embeddings = 32_768;
        c.rope_theta = 1_000_000.0;
        spec
    }

    /// A benchmark preset by name: `tiny` (Qwen2) or `qwen2-0.5b`.
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "tiny" => Some(InitSpec::tiny(Arch::Qwen2)),
            "qwen2-0.5b" => Some(InitSpec::qwen2_0_5b_shape()),
            _ => None,
        }
    }
}

impl InitSpec {
    /// Adds the `merges` learned from a corpus to the tokenizer (replacing any set before),
    /// and their rows to the vocabulary when it has no room for them.
    pub fn with_merges(mut self, merges: Vec<Merge>) -> Self {
        self.config.vocab_size = self
            .config
            .vocab_size
            .max(TOKENIZER_VOCAB_SIZE + merges.len());
        self.merges = merges;
        self
    }
}

/// The chat format (template and tokenizer) of a model [`init_model`] writes with `merges`,
/// before it is written: to render a corpus to learn merges from.
pub fn chat_format(merges: &[Merge]) -> Result<atdp_model_files::ChatFormat> {
    Ok(atdp_model_files::ChatFormat::from_parts(
        CHAT_TEMPLATE,
        ENDOFTEXT,
        IM_END,
        tokenizer::tokenizer(merges)?,
    )?)
}

/// What [`init_model`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitReport {
    /// The model directory.
    pub dir: PathBuf,
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// Number of weights.
    pub num_parameters: usize,
}

/// Writes a random model to `dir` (created if needed). Refuses a directory that already
/// holds a model.
pub fn init_model(dir: impl AsRef<Path>, spec: &InitSpec) -> Result<InitReport> {
    let dir = dir.as_ref();
    let config = &spec.config;
    config.validate()?;
    let tokens = TOKENIZER_VOCAB_SIZE + spec.merges.len();
    if config.vocab_size < tokens {
        return Err(Error::invalid(
            "vocab_size",
            format!(
                "{} is below the tokenizer's {tokens} tokens",
                config.vocab_size
            ),
        ));
    }
    if !(spec.init_std.is_finite() && spec.init_std > 0.0) {
        return Err(Error::invalid(
            "init_std",
            format!("{} must be a positive number", spec.init_std),
        ));
    }
    for existing in [CONFIG_FILE, WEIGHTS_FILE, WEIGHTS_INDEX_FILE] {
        if dir.join(existing).exists() {
            return Err(Error::invalid(
                "output directory",
                format!(
                    "{} already holds a model ({existing}); choose a new or empty directory",
                    dir.display()
                ),
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;

    let tensors = random_weights(spec)?;
    let num_parameters = tensors.iter().map(|(_, t)| t.elem_count()).sum();
    let weights_path = dir.join(WEIGHTS_FILE);
    let tmp = dir.join(format!("{WEIGHTS_FILE}.tmp"));
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(tensors, Some(metadata), &tmp).map_err(|e| {
        Error::Safetensors {
            path: tmp.clone(),
            message: e.to_string(),
        }
    })?;
    std::fs::rename(&tmp, &weights_path).map_err(|e| Error::io(&weights_path, e))?;

    let ids = |token| added_token_id(token).map_or(Value::Null, |id| json!(id));
    let mut config_json = config.to_hf_json();
    if let Some(map) = config_json.as_object_mut() {
        map.insert("bos_token_id".into(), ids(ENDOFTEXT));
        map.insert("eos_token_id".into(), ids(IM_END));
        map.insert("initializer_range".into(), json!(spec.init_std));
    }
    let mut files = vec![weights_path];
    for (name, value) in [
        (TOKENIZER_FILE, tokenizer::tokenizer_json(&spec.merges)),
        (TOKENIZER_CONFIG_FILE, tokenizer::tokenizer_config_json()),
        (GENERATION_CONFIG_FILE, tokenizer::generation_config_json()),
        // Last: a directory with a config.json is a whole model.
        (CONFIG_FILE, config_json),
    ] {
        let path = dir.join(name);
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::json(&path, e))?;
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        files.push(path);
    }
    Ok(InitReport {
        dir: dir.to_path_buf(),
        files,
        num_parameters,
    })
}

/// Every tensor of the model, named as in a Hugging Face checkpoint, f32 on the CPU.
pub(crate) fn random_weights(spec: &InitSpec) -> Result<Vec<(String, Tensor)>> {
    weights::expected_tensors(&spec.config)
        .into_iter()
        .map(|t| {
            let mut rng = Rng::stream(spec.seed, &t.name);
            let n: usize = t.shape.iter().product();
            let values: Vec<f32> = (0..n)
                .map(|_| match t.kind {
                    TensorKind::Norm => (1.0 + NORM_NOISE * rng.normal()) as f32,
                    TensorKind::Embedding | TensorKind::Linear | TensorKind::Bias => {
                        (spec.init_std * rng.normal()) as f32
                    }
                })
                .collect();
            let tensor = Tensor::from_vec(values, t.shape.as_slice(), &Device::Cpu)?;
            Ok((t.name, tensor))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use candle_core::DType;

    use super::*;

    /// The estimate behind automatic recomputation, against the peaks measured on the
    /// Qwen2-0.5B shape (docs/benchmarks.md: 4.9 GB at 256 tokens, 21.8 GB at 1,024, each
    /// with 2 GB of weights): recompute at 1,024, not at 256 nor for the tiny model.
    #[test]
    fn activation_estimate_decides_recomputation_as_measured() {
        let big = InitSpec::qwen2_0_5b_shape().config;
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        let at = |seq| gib(big.activation_bytes(1, seq, DType::F32, false));
        // Measured without recomputation: 4.2 GB peak at 256 tokens (loading peaks at 3.8 GB),
        // 10.8 GB at 1,024 (2 GB of it the weights).
        assert!((1.5..3.0).contains(&at(256)), "{}", at(256));
        assert!((6.0..10.0).contains(&at(1024)), "{}", at(1024));
        assert!(
            at(512) < 4.0 && at(600) > 4.0,
            "recomputation from about 530 tokens on"
        );
        // Scores built from candle ops (CUDA): 8 of `heads × seq²` per layer on top.
        let scores = gib(big.activation_bytes(1, 1024, DType::F32, true)) - at(1024);
        assert!((10.0..11.0).contains(&scores), "{scores}");
        assert_eq!(
            big.activation_bytes(2, 512, DType::F32, true),
            2 * big.activation_bytes(1, 512, DType::F32, true)
        );
        assert!(
            gib(InitSpec::tiny(Arch::Qwen2)
                .config
                .activation_bytes(1, 2048, DType::F32, false))
                < 4.0
        );
    }

    #[test]
    fn tiny_presets_are_valid_and_differ_as_documented() {
        for arch in Arch::ALL {
            let spec = InitSpec::tiny(arch);
            spec.config.validate().unwrap();
            assert_eq!(spec.config.vocab_size, 300);
        }
        assert_eq!(InitSpec::tiny(Arch::Qwen3).config.q_dim(), 128);
        assert!(!InitSpec::tiny(Arch::Llama).config.tie_word_embeddings);
    }

    #[test]
    fn weights_are_seeded_per_tensor() {
        let spec = InitSpec::tiny(Arch::Qwen2);
        let a = random_weights(&spec).unwrap();
        let b = random_weights(&spec).unwrap();
        let c = random_weights(&InitSpec { seed: 1, ..spec }).unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for ((na, ta), (_, tb)) in a.iter().zip(&b) {
            assert_eq!(flat(ta), flat(tb), "{na}");
        }
        assert_ne!(flat(&a[0].1), flat(&c[0].1));
        let norm = a.iter().find(|(n, _)| n == "model.norm.weight").unwrap();
        let values = flat(&norm.1);
        assert!(values.iter().all(|v| (v - 1.0).abs() < 0.6) && values.iter().any(|v| *v != 1.0));
    }
}
