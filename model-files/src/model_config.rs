//! Model configuration: the Hugging Face `config.json` of a Llama, Qwen2 or Qwen3 checkpoint,
//! read field by field so that an error names the field at fault, and checked before any
//! weight is loaded.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use candle_core::DType;
use serde_json::{Map, Value, json};

use crate::{Error, Result};

/// The model file every Hugging Face model directory has.
pub const CONFIG_FILE: &str = "config.json";

/// The model families this crate loads and trains (`model_type` in `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// Llama 2/3 and look-alikes (`llama`): optional attention and MLP biases, RoPE scaling.
    Llama,
    /// Qwen2 and Qwen2.5 (`qwen2`): biases on the q, k and v projections.
    Qwen2,
    /// Qwen3 dense models (`qwen3`): RMSNorm on q and k per head, `head_dim` of its own.
    Qwen3,
}

impl Arch {
    /// Every supported family.
    pub const ALL: [Arch; 3] = [Arch::Llama, Arch::Qwen2, Arch::Qwen3];

    /// The `model_type` of `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    /// The `architectures` entry Hugging Face transformers uses for the causal LM.
    pub fn architecture(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.model_type())
    }
}

impl FromStr for Arch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Arch::ALL
            .into_iter()
            .find(|a| a.model_type() == s)
            .ok_or_else(|| format!("unknown architecture `{s}`; supported: llama, qwen2, qwen3"))
    }
}

/// How the RoPE frequencies are rescaled for a longer context (`rope_scaling`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (position interpolation).
    Linear {
        /// The divisor, > 0.
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling: low frequencies divided by `factor`, high
    /// ones kept, a smooth blend in between.
    Llama3 {
        /// The divisor for low frequencies, > 0.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was pre-trained with.
        original_max_position_embeddings: usize,
    },
}

/// A checked model configuration. Build it with [`ModelConfig::from_file`] or
/// [`ModelConfig::from_json_str`]; a hand-built one is checked by [`ModelConfig::validate`]
/// (which every consumer in this crate calls).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The model family.
    pub arch: Arch,
    /// Rows of the embedding and of the output head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than the query heads).
    pub num_key_value_heads: usize,
    /// Width of one head (even, for RoPE).
    pub head_dim: usize,
    /// Epsilon of every RMSNorm.
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// RoPE frequency scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// The context length the model is configured for (informational here).
    pub max_position_embeddings: usize,
    /// Whether the output head reuses the embedding matrix (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// Biases on the q, k and v projections (always on for Qwen2).
    pub qkv_bias: bool,
    /// Bias on the output projection of attention.
    pub o_proj_bias: bool,
    /// Biases on the MLP projections (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// RMSNorm on each query and key head before RoPE (Qwen3).
    pub qk_norm: bool,
    /// The dtype the weights were saved in (`torch_dtype`), when known.
    pub torch_dtype: Option<DType>,
}

impl ModelConfig {
    /// An estimate of the memory a training forward pass over `[batch, seq]` keeps for its
    /// backward pass: per layer, 24 hidden-sized plus 13 intermediate-sized values per token,
    /// in the compute dtype, and with `scores` (attention built from candle ops, as on CUDA)
    /// 8 attention-score-sized tensors (`heads × seq²`); the CPU's fused attention keeps only
    /// per-token statistics. The coefficients are fitted to the peak memory measured on the
    /// Qwen2-0.5B shape at 256 and 1,024 tokens (docs/benchmarks.md); the estimate decides
    /// when to recompute.
    pub fn activation_bytes(&self, batch: usize, seq: usize, dtype: DType, scores: bool) -> usize {
        let c = self;
        let per_token = 24 * c.hidden_size + 13 * c.intermediate_size;
        let score_values = if scores {
            8 * c.num_attention_heads * seq * seq
        } else {
            0
        };
        (batch * (seq * per_token + score_values))
            .saturating_mul(c.num_hidden_layers)
            .saturating_mul(dtype.size_in_bytes())
    }

    /// Reads and checks `config.json` (the file, or a model directory holding it).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let mut path = path.as_ref().to_path_buf();
        if path.is_dir() {
            path = path.join(CONFIG_FILE);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingFile {
                    path: path.clone(),
                    message: "a Hugging Face model directory needs its config.json".into(),
                }
            } else {
                Error::io(&path, e)
            }
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| Error::json(&path, e))?;
        Self::from_value(&value, &path)
    }

    /// Parses and checks the text of a `config.json`.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let path = PathBuf::from("<inline>");
        let value: Value = serde_json::from_str(text).map_err(|e| Error::json(&path, e))?;
        Self::from_value(&value, &path)
    }

    fn from_value(value: &Value, path: &Path) -> Result<Self> {
        let Some(map) = value.as_object() else {
            return Err(Error::Config {
                path: path.to_path_buf(),
                field: "<root>".into(),
                message: "expected a JSON object".into(),
            });
        };
        let f = Fields { map, path };

        let model_type = f
            .string("model_type")?
            .ok_or_else(|| f.err("model_type", "missing"))?;
        let arch = Arch::from_str(&model_type).map_err(|e| f.err("model_type", e))?;
        let hidden_act = f.string("hidden_act")?.unwrap_or_else(|| "silu".into());
        if hidden_act != "silu" {
            return Err(f.err(
                "hidden_act",
                format!("`{hidden_act}` is not supported; the Llama/Qwen MLP uses silu"),
            ));
        }
        if f.boolean("use_sliding_window")?.unwrap_or(false) {
            return Err(f.err(
                "use_sliding_window",
                "sliding-window attention is not supported; set it to false (Qwen2/Qwen3 checkpoints ship with it off)",
            ));
        }

        let hidden_size = f.required_usize("hidden_size")?;
        let num_attention_heads = f.required_usize("num_attention_heads")?;
        let head_dim = match f.usize("head_dim")? {
            Some(d) => d,
            // Hugging Face's Qwen3Config defaults head_dim to 128; the others derive it.
            None if arch == Arch::Qwen3 => 128,
            None => {
                if num_attention_heads == 0 || !hidden_size.is_multiple_of(num_attention_heads) {
                    return Err(f.err(
                        "num_attention_heads",
                        format!("{num_attention_heads} does not divide hidden_size {hidden_size}; give head_dim explicitly"),
                    ));
                }
                hidden_size / num_attention_heads
            }
        };

        // transformers 5 moves rope_theta and rope_scaling into rope_parameters.
        let rope_parameters = f.object("rope_parameters")?;
        let rope_theta = match f.f64("rope_theta")? {
            Some(t) => t,
            None => match rope_parameters.and_then(|p| p.get("rope_theta")) {
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| f.err("rope_parameters.rope_theta", "expected a number"))?,
                None => 10_000.0,
            },
        };
        let rope_scaling = match f.object("rope_scaling")? {
            Some(s) => parse_rope_scaling(&f, "rope_scaling", s)?,
            None => match rope_parameters {
                Some(p) => parse_rope_scaling(&f, "rope_parameters", p)?,
                None => None,
            },
        };

        let attention_bias = f.boolean("attention_bias")?.unwrap_or(false);
        let (qkv_bias, o_proj_bias, mlp_bias, qk_norm) = match arch {
            Arch::Llama => (
                attention_bias,
                attention_bias,
                f.boolean("mlp_bias")?.unwrap_or(false),
                false,
            ),
            Arch::Qwen2 => (true, false, false, false),
            Arch::Qwen3 => (attention_bias, attention_bias, false, true),
        };
        let dtype_name = match f.string("torch_dtype")? {
            Some(d) => Some(d),
            None => f.string("dtype")?,
        };

        let config = ModelConfig {
            arch,
            vocab_size: f.required_usize("vocab_size")?,
            hidden_size,
            intermediate_size: f.required_usize("intermediate_size")?,
            num_hidden_layers: f.required_usize("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads: f
                .usize("num_key_value_heads")?
                .unwrap_or(num_attention_heads),
            head_dim,
            rms_norm_eps: f.f64("rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            max_position_embeddings: f.usize("max_position_embeddings")?.unwrap_or(match arch {
                Arch::Llama => 2048,
                Arch::Qwen2 | Arch::Qwen3 => 32_768,
            }),
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.unwrap_or(false),
            qkv_bias,
            o_proj_bias,
            mlp_bias,
            qk_norm,
            torch_dtype: dtype_name.as_deref().and_then(dtype_from_name),
        };
        config.check(path)?;
        Ok(config)
    }

    /// Checks the values against each other: positive sizes, heads that divide, an even head
    /// width, finite positive epsilon and RoPE base, usable RoPE scaling.
    pub fn validate(&self) -> Result<()> {
        self.check(Path::new("<config>"))
    }

    fn check(&self, path: &Path) -> Result<()> {
        let err = |field: &str, message: String| Error::Config {
            path: path.to_path_buf(),
            field: field.into(),
            message,
        };
        for (field, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
        ] {
            if value == 0 {
                return Err(err(field, "must be at least 1".into()));
            }
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return Err(err(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(err(
                "head_dim",
                format!("{} is odd; RoPE needs an even head width", self.head_dim),
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return Err(err(
                "rms_norm_eps",
                format!("{} must be a positive number", self.rms_norm_eps),
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(err(
                "rope_theta",
                format!("{} must be a positive number", self.rope_theta),
            ));
        }
        if let Some(RopeScaling::Linear { factor } | RopeScaling::Llama3 { factor, .. }) =
            self.rope_scaling
            && !(factor.is_finite() && factor > 0.0)
        {
            return Err(err(
                "rope_scaling.factor",
                format!("{factor} must be a positive number"),
            ));
        }
        if let Some(RopeScaling::Llama3 {
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
            ..
        }) = self.rope_scaling
        {
            if !(low_freq_factor.is_finite() && low_freq_factor > 0.0) {
                return Err(err(
                    "rope_scaling.low_freq_factor",
                    format!("{low_freq_factor} must be a positive number"),
                ));
            }
            if !(high_freq_factor.is_finite() && high_freq_factor > low_freq_factor) {
                return Err(err(
                    "rope_scaling.high_freq_factor",
                    format!(
                        "{high_freq_factor} must be greater than low_freq_factor {low_freq_factor}"
                    ),
                ));
            }
            if original_max_position_embeddings == 0 {
                return Err(err(
                    "rope_scaling.original_max_position_embeddings",
                    "must be at least 1".into(),
                ));
            }
        }
        Ok(())
    }

    /// Width of all query heads together (`num_attention_heads * head_dim`).
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of all key (or value) heads together (`num_key_value_heads * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// The `config.json` Hugging Face transformers, vLLM and mistral.rs read for this
    /// configuration. Token ids and other tokenizer facts are the caller's to add.
    pub fn to_hf_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("architectures".into(), json!([self.arch.architecture()]));
        map.insert("model_type".into(), json!(self.arch.model_type()));
        map.insert("vocab_size".into(), json!(self.vocab_size));
        map.insert("hidden_size".into(), json!(self.hidden_size));
        map.insert("intermediate_size".into(), json!(self.intermediate_size));
        map.insert("num_hidden_layers".into(), json!(self.num_hidden_layers));
        map.insert(
            "num_attention_heads".into(),
            json!(self.num_attention_heads),
        );
        map.insert(
            "num_key_value_heads".into(),
            json!(self.num_key_value_heads),
        );
        map.insert("head_dim".into(), json!(self.head_dim));
        map.insert("hidden_act".into(), json!("silu"));
        map.insert(
            "max_position_embeddings".into(),
            json!(self.max_position_embeddings),
        );
        map.insert("rms_norm_eps".into(), json!(self.rms_norm_eps));
        map.insert("rope_theta".into(), json!(self.rope_theta));
        map.insert(
            "rope_scaling".into(),
            match self.rope_scaling {
                None => Value::Null,
                Some(RopeScaling::Linear { factor }) => {
                    json!({"rope_type": "linear", "type": "linear", "factor": factor})
                }
                Some(RopeScaling::Llama3 {
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_position_embeddings,
                }) => json!({
                    "rope_type": "llama3",
                    "factor": factor,
                    "low_freq_factor": low_freq_factor,
                    "high_freq_factor": high_freq_factor,
                    "original_max_position_embeddings": original_max_position_embeddings,
                }),
            },
        );
        map.insert(
            "tie_word_embeddings".into(),
            json!(self.tie_word_embeddings),
        );
        match self.arch {
            Arch::Llama => {
                map.insert("attention_bias".into(), json!(self.qkv_bias));
                map.insert("mlp_bias".into(), json!(self.mlp_bias));
            }
            Arch::Qwen2 | Arch::Qwen3 => {
                if self.arch == Arch::Qwen3 {
                    map.insert("attention_bias".into(), json!(self.qkv_bias));
                }
                map.insert("use_sliding_window".into(), json!(false));
                map.insert("sliding_window".into(), Value::Null);
                map.insert("max_window_layers".into(), json!(self.num_hidden_layers));
            }
        }
        map.insert("attention_dropout".into(), json!(0.0));
        map.insert("use_cache".into(), json!(true));
        if let Some(dtype) = self.torch_dtype.and_then(dtype_name) {
            map.insert("torch_dtype".into(), json!(dtype));
        }
        Value::Object(map)
    }
}

/// The transformers name of a dtype (`float32`, `float16`, `bfloat16`, `float64`).
pub fn dtype_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("float32"),
        DType::F16 => Some("float16"),
        DType::BF16 => Some("bfloat16"),
        DType::F64 => Some("float64"),
        _ => None,
    }
}

/// The dtype of a transformers dtype name, for the float types this crate computes in.
pub fn dtype_from_name(name: &str) -> Option<DType> {
    match name {
        "float32" | "f32" => Some(DType::F32),
        "float16" | "f16" | "half" => Some(DType::F16),
        "bfloat16" | "bf16" => Some(DType::BF16),
        "float64" | "f64" | "double" => Some(DType::F64),
        _ => None,
    }
}

fn parse_rope_scaling(
    f: &Fields<'_>,
    field: &str,
    s: &Map<String, Value>,
) -> Result<Option<RopeScaling>> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let number = |key: &str| -> Result<f64> {
        s.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| f.err(&format!("{field}.{key}"), "missing or not a number"))
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear {
            factor: number("factor")?,
        })),
        "llama3" => {
            let factor = number("factor")?;
            let low_freq_factor = number("low_freq_factor")?;
            let high_freq_factor = number("high_freq_factor")?;
            let key = "original_max_position_embeddings";
            let original = s
                .get(key)
                .and_then(Value::as_u64)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| f.err(&format!("{field}.{key}"), "missing or not a positive integer"))?;
            Ok(Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: original,
            }))
        }
        other => Err(f.err(
            &format!("{field}.rope_type"),
            format!(
                "RoPE scaling type `{other}` is not supported (supported: linear, llama3); remove rope_scaling to train at the original context length"
            ),
        )),
    }
}

/// Typed access to the fields of a `config.json`, with errors that name the field. A JSON
/// `null` counts as absent, as it does for transformers.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: &'a Path,
}

impl Fields<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> Error {
        Error::Config {
            path: self.path.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    fn usize(&self, field: &str) -> Result<Option<usize>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.err(field, format!("expected a non-negative integer, found {v}"))
                }),
        }
    }

    fn required_usize(&self, field: &str) -> Result<usize> {
        self.usize(field)?
            .ok_or_else(|| self.err(field, "missing; every Llama/Qwen config.json has it"))
    }

    fn f64(&self, field: &str) -> Result<Option<f64>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected a number, found {v}"))),
        }
    }

    fn boolean(&self, field: &str) -> Result<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected true or false, found {v}"))),
        }
    }

    fn string(&self, field: &str) -> Result<Option<String>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(|s| Some(s.to_string()))
                .ok_or_else(|| self.err(field, format!("expected a string, found {v}"))),
        }
    }

    fn object(&self, field: &str) -> Result<Option<&Map<String, Value>>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_object()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected an object, found {v}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn qwen2_json() -> Value {
        json!({
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "rope_scaling": null,
            "sliding_window": 32768,
            "use_sliding_window": false,
            "tie_word_embeddings": true,
            "torch_dtype": "bfloat16",
            "vocab_size": 151936
        })
    }

    fn with(mut v: Value, key: &str, value: Value) -> String {
        v[key] = value;
        v.to_string()
    }

    fn field_of(err: Error) -> String {
        match err {
            Error::Config { field, .. } => field,
            other => panic!("expected a config error, got {other}"),
        }
    }

    #[test]
    fn qwen2_defaults_and_biases() {
        let c = ModelConfig::from_json_str(&qwen2_json().to_string()).unwrap();
        assert_eq!(c.arch, Arch::Qwen2);
        assert_eq!(c.head_dim, 64);
        assert_eq!((c.q_dim(), c.kv_dim()), (896, 128));
        assert!(c.qkv_bias && !c.o_proj_bias && !c.mlp_bias && !c.qk_norm);
        assert!(c.tie_word_embeddings);
        assert_eq!(c.torch_dtype, Some(DType::BF16));
        assert_eq!(c.rope_scaling, None);
    }

    #[test]
    fn llama3_rope_scaling_and_biases() {
        let v = json!({
            "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 300, "rope_theta": 500000.0, "attention_bias": true, "mlp_bias": true,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        });
        let c = ModelConfig::from_json_str(&v.to_string()).unwrap();
        assert!(c.qkv_bias && c.o_proj_bias && c.mlp_bias && !c.tie_word_embeddings);
        assert_eq!(
            c.rope_scaling,
            Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192
            })
        );
        // The written config reads back the same.
        let again = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn qwen3_head_dim_and_norms() {
        let mut v = qwen2_json();
        v["model_type"] = json!("qwen3");
        v["hidden_size"] = json!(64);
        v["num_attention_heads"] = json!(4);
        v["head_dim"] = json!(32);
        let c = ModelConfig::from_json_str(&v.to_string()).unwrap();
        assert_eq!((c.head_dim, c.q_dim()), (32, 128));
        assert!(c.qk_norm && !c.qkv_bias);
        let again = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn transformers5_rope_parameters() {
        let mut v = qwen2_json();
        v.as_object_mut().unwrap().remove("rope_theta");
        v.as_object_mut().unwrap().remove("rope_scaling");
        v["rope_parameters"] = json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5});
        let c = ModelConfig::from_json_str(&v.to_string()).unwrap();
        assert_eq!(c.rope_theta, 5e5);
        assert_eq!(c.rope_scaling, Some(RopeScaling::Linear { factor: 2.0 }));
    }

    #[test]
    fn errors_name_the_field() {
        let missing = {
            let mut v = qwen2_json();
            v.as_object_mut().unwrap().remove("hidden_size");
            v.to_string()
        };
        let cases = [
            (missing, "hidden_size"),
            (
                with(qwen2_json(), "hidden_size", json!("896")),
                "hidden_size",
            ),
            (
                with(qwen2_json(), "model_type", json!("mistral")),
                "model_type",
            ),
            (
                with(qwen2_json(), "num_key_value_heads", json!(3)),
                "num_key_value_heads",
            ),
            (
                with(qwen2_json(), "hidden_act", json!("gelu")),
                "hidden_act",
            ),
            (
                with(qwen2_json(), "use_sliding_window", json!(true)),
                "use_sliding_window",
            ),
            (
                with(qwen2_json(), "rms_norm_eps", json!(0.0)),
                "rms_norm_eps",
            ),
            (
                with(qwen2_json(), "num_hidden_layers", json!(0)),
                "num_hidden_layers",
            ),
            (with(qwen2_json(), "head_dim", json!(63)), "head_dim"),
            (
                with(
                    qwen2_json(),
                    "rope_scaling",
                    json!({"type": "yarn", "factor": 4.0}),
                ),
                "rope_scaling.rope_type",
            ),
            (
                with(
                    qwen2_json(),
                    "rope_scaling",
                    json!({"rope_type": "llama3", "factor": 8.0}),
                ),
                "rope_scaling.low_freq_factor",
            ),
        ];
        for (text, field) in cases {
            let err = ModelConfig::from_json_str(&text).unwrap_err();
            let message = err.to_string();
            assert_eq!(field_of(err), field, "{message}");
            assert!(message.contains(field), "{message}");
        }
    }

    #[test]
    fn unknown_rope_type_says_what_is_supported() {
        let text = with(
            qwen2_json(),
            "rope_scaling",
            json!({"rope_type": "dynamic", "factor": 2.0}),
        );
        let message = ModelConfig::from_json_str(&text).unwrap_err().to_string();
        assert!(message.contains("`dynamic` is not supported"), "{message}");
        assert!(message.contains("linear, llama3"), "{message}");
    }
}
