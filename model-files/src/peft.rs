//! Adapters in the PEFT format that PEFT, vLLM and mistral.rs load: `adapter_config.json`
//! and `adapter_model.safetensors` with tensors named
//! `base_model.model.<module path>.lora_A.weight` (`[r, in]`) and `….lora_B.weight`
//! (`[out, r]`), where the module path is the Hugging Face one
//! (`model.layers.N.self_attn.q_proj`). PEFT's `get_peft_model_state_dict` strips the adapter
//! name (`lora_A.default.weight` → `lora_A.weight`) and `PeftModel` adds `base_model.model.`.
//!
//! What this module holds is the format and its checks: the names, the configuration file
//! ([`adapter_config_json`], [`read_adapter_config`]) and [`check_adapter`], which a server
//! runs before an adapter is served. Writing and loading the weights as tensors is the
//! trainer's. Files are written to a temporary name and renamed ([`write_atomic`]).

use std::path::Path;

use serde_json::{Value, json};

use crate::lora_config::{LoraConfig, TargetModule};
use crate::model_config::ModelConfig;
use crate::{Error, Result};

/// PEFT's adapter configuration file.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// PEFT's adapter weights file.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// The prefix `PeftModel` puts before the base model's own module paths.
pub const PEFT_PREFIX: &str = "base_model.model.";

/// Which matrix of a LoRA pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoraMatrix {
    /// `lora_A`, `[r, in_features]`.
    A,
    /// `lora_B`, `[out_features, r]`.
    B,
}

impl LoraMatrix {
    /// `lora_A` or `lora_B`.
    pub fn name(self) -> &'static str {
        match self {
            LoraMatrix::A => "lora_A",
            LoraMatrix::B => "lora_B",
        }
    }
}

/// The PEFT tensor name of one LoRA matrix, e.g.
/// `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`.
pub fn tensor_name(layer: usize, module: TargetModule, matrix: LoraMatrix) -> String {
    format!(
        "{PEFT_PREFIX}{}.{}.weight",
        module.module_path(layer),
        matrix.name()
    )
}

/// The `adapter_config.json` PEFT writes for a LoRA on a causal LM, for this adapter.
pub fn adapter_config_json(config: &LoraConfig, base_model_name_or_path: &str) -> Value {
    let alpha = if config.alpha.fract() == 0.0 && config.alpha.abs() < 1e15 {
        json!(config.alpha as i64)
    } else {
        json!(config.alpha)
    };
    let targets: Vec<&str> = config.target_modules.iter().map(|m| m.name()).collect();
    json!({
        "alpha_pattern": {},
        "auto_mapping": null,
        "base_model_name_or_path": base_model_name_or_path,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "layers_pattern": null,
        "layers_to_transform": null,
        "lora_alpha": alpha,
        "lora_dropout": config.dropout,
        "modules_to_save": null,
        "peft_type": "LORA",
        "r": config.r,
        "rank_pattern": {},
        "revision": null,
        "target_modules": targets,
        "task_type": "CAUSAL_LM",
        "use_dora": false,
        "use_rslora": false
    })
}

/// Reads and checks `adapter_config.json` in `dir`: refuses what cannot be applied exactly
/// (rsLoRA, DoRA, per-layer ranks, trained biases, extra trained modules, patterns instead of
/// module names). The dropout seed, which PEFT does not store, is 0.
pub fn read_adapter_config(dir: &Path) -> Result<LoraConfig> {
    let config_path = dir.join(ADAPTER_CONFIG_FILE);
    let text = std::fs::read_to_string(&config_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::MissingFile {
                path: config_path.clone(),
                message: "a PEFT adapter directory needs adapter_config.json".into(),
            }
        } else {
            Error::io(&config_path, e)
        }
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| Error::json(&config_path, e))?;
    parse_config(&value, &config_path)
}

/// Checks a PEFT LoRA adapter in `dir` against a base model's config without loading any
/// weights: the configuration ([`read_adapter_config`]); every tensor present, none
/// unexpected, each shaped for this base model; float dtypes; finite values. A server runs this
/// before handing an adapter to an inference engine that would fail less clearly.
pub fn check_adapter(dir: impl AsRef<Path>, c: &ModelConfig) -> Result<LoraConfig> {
    let dir = dir.as_ref();
    let config = read_adapter_config(dir)?;
    let weights_path = dir.join(ADAPTER_WEIGHTS_FILE);
    let bytes = std::fs::read(&weights_path).map_err(|e| Error::io(&weights_path, e))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| Error::Safetensors {
        path: weights_path.clone(),
        message: format!("{e}; the file is damaged or not safetensors"),
    })?;
    let mut seen = std::collections::BTreeSet::new();
    for (name, view) in st.tensors() {
        let bad = |message: String| Error::adapter(&weights_path, format!("`{name}`: {message}"));
        let (layer, module, matrix) = parse_tensor_name(&name)
            .filter(|(layer, module, _)| {
                *layer < c.num_hidden_layers && config.target_modules.contains(module)
            })
            .ok_or_else(|| bad("not a tensor of this base model's target modules".into()))?;
        let (fan_in, fan_out) = module.in_out(c);
        let expected = match matrix {
            LoraMatrix::A => vec![config.r, fan_in],
            LoraMatrix::B => vec![fan_out, config.r],
        };
        if view.shape() != expected.as_slice() {
            return Err(Error::Shape {
                name: name.clone(),
                location: weights_path.display().to_string(),
                expected,
                found: view.shape().to_vec(),
            });
        }
        let data = view.data();
        let finite = match view.dtype() {
            safetensors::Dtype::F32 => data
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite()),
            safetensors::Dtype::F64 => data.chunks_exact(8).all(|b| {
                f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]).is_finite()
            }),
            // f16 and bf16: the exponent bits all set means infinity or NaN.
            safetensors::Dtype::F16 => data
                .chunks_exact(2)
                .all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7c00 != 0x7c00),
            safetensors::Dtype::BF16 => data
                .chunks_exact(2)
                .all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 != 0x7f80),
            other => return Err(bad(format!("dtype {other:?} is not a float type"))),
        };
        if !finite {
            return Err(bad("holds NaN or infinite values".into()));
        }
        seen.insert((layer, module, matrix));
    }
    for layer in 0..c.num_hidden_layers {
        for &module in &config.target_modules {
            for matrix in [LoraMatrix::A, LoraMatrix::B] {
                if !seen.contains(&(layer, module, matrix)) {
                    return Err(Error::MissingTensor {
                        name: tensor_name(layer, module, matrix),
                        location: weights_path.display().to_string(),
                    });
                }
            }
        }
    }
    Ok(config)
}

/// `(layer, module, matrix)` of a PEFT LoRA tensor name.
pub fn parse_tensor_name(name: &str) -> Option<(usize, TargetModule, LoraMatrix)> {
    let rest = name.strip_prefix(PEFT_PREFIX)?.strip_suffix(".weight")?;
    let (path, matrix) = rest.rsplit_once('.')?;
    let matrix = match matrix {
        "lora_A" => LoraMatrix::A,
        "lora_B" => LoraMatrix::B,
        _ => return None,
    };
    let (_, module) = path.rsplit_once('.')?;
    let module: TargetModule = module.parse().ok()?;
    let layer: usize = path
        .strip_prefix("model.layers.")?
        .split('.')
        .next()?
        .parse()
        .ok()?;
    (module.module_path(layer) == path).then_some((layer, module, matrix))
}

fn parse_config(v: &Value, path: &Path) -> Result<LoraConfig> {
    let err =
        |field: &str, message: String| Error::adapter(path, format!("field `{field}`: {message}"));
    let get = |field: &str| v.get(field).filter(|x| !x.is_null());
    if let Some(kind) = get("peft_type")
        && kind.as_str() != Some("LORA")
    {
        return Err(err("peft_type", format!("{kind} is not a LoRA adapter")));
    }
    let r = get("r")
        .and_then(Value::as_u64)
        .and_then(|r| usize::try_from(r).ok())
        .ok_or_else(|| err("r", "missing or not a positive integer".into()))?;
    let alpha = get("lora_alpha")
        .and_then(Value::as_f64)
        .ok_or_else(|| err("lora_alpha", "missing or not a number".into()))?;
    let dropout = match get("lora_dropout") {
        None => 0.0,
        Some(d) => d
            .as_f64()
            .ok_or_else(|| err("lora_dropout", format!("{d} is not a number")))?,
    };
    let target_modules = match get("target_modules") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|m| {
                m.as_str()
                    .ok_or_else(|| err("target_modules", format!("{m} is not a module name")))?
                    .parse::<TargetModule>()
                    .map_err(|e| err("target_modules", e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?,
        Some(Value::String(s)) => {
            return Err(err(
                "target_modules",
                format!("the pattern `{s}` is not supported; list the module names"),
            ));
        }
        _ => {
            return Err(err(
                "target_modules",
                "missing; expected a list of module names".into(),
            ));
        }
    };
    for flag in ["use_rslora", "use_dora", "fan_in_fan_out"] {
        if get(flag).and_then(Value::as_bool) == Some(true) {
            return Err(err(flag, "true is not supported".into()));
        }
    }
    if let Some(bias) = get("bias")
        && bias.as_str() != Some("none")
    {
        return Err(err(
            "bias",
            format!("{bias} is not supported; only \"none\""),
        ));
    }
    for field in ["rank_pattern", "alpha_pattern"] {
        if get(field)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
        {
            return Err(err(
                field,
                "per-module ranks or alphas are not supported".into(),
            ));
        }
    }
    for field in ["layers_to_transform", "modules_to_save"] {
        if let Some(x) = get(field)
            && x.as_array().is_none_or(|a| !a.is_empty())
        {
            return Err(err(
                field,
                format!("{x} is not supported; adapt every layer and save no extra modules"),
            ));
        }
    }
    let config = LoraConfig {
        r,
        alpha,
        dropout,
        target_modules,
        seed: 0,
    };
    config
        .validate()
        .map_err(|e| Error::adapter(path, e.to_string()))?;
    Ok(config)
}

/// Renames `from` to `to` (the last step of an atomic write).
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::io(to, e))
}

/// Writes a JSON file atomically: to `<name>.json.tmp`, then renamed over `path`, so a reader
/// sees the old file or the whole new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn names_round_trip() {
        let name = tensor_name(12, TargetModule::UpProj, LoraMatrix::B);
        assert_eq!(
            name,
            "base_model.model.model.layers.12.mlp.up_proj.lora_B.weight"
        );
        assert_eq!(
            parse_tensor_name(&name),
            Some((12, TargetModule::UpProj, LoraMatrix::B))
        );
        for bad in [
            "model.layers.0.self_attn.q_proj.lora_A.weight",
            "base_model.model.model.layers.0.mlp.q_proj.lora_A.weight",
            "base_model.model.model.layers.x.self_attn.q_proj.lora_A.weight",
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
            "base_model.model.lm_head.lora_A.weight",
        ] {
            assert_eq!(parse_tensor_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn config_is_what_peft_writes_and_reads_back() {
        let config = LoraConfig {
            r: 4,
            alpha: 8.0,
            dropout: 0.05,
            target_modules: vec![TargetModule::QProj, TargetModule::VProj],
            seed: 0,
        };
        let v = adapter_config_json(&config, "Qwen/Qwen2.5-0.5B-Instruct");
        assert_eq!(v["target_modules"], json!(["q_proj", "v_proj"]));
        assert_eq!(v["lora_alpha"], json!(8));
        assert_eq!(v["peft_type"], "LORA");
        assert_eq!(v["task_type"], "CAUSAL_LM");
        assert_eq!(parse_config(&v, Path::new("x")).unwrap(), config);
    }

    #[test]
    fn unsupported_configs_are_refused_by_field() {
        let base = adapter_config_json(&LoraConfig::default(), "m");
        for (field, value) in [
            ("use_rslora", json!(true)),
            ("use_dora", json!(true)),
            ("target_modules", json!("all-linear")),
            ("target_modules", json!(["q_proj", "lm_head"])),
            ("bias", json!("all")),
            ("rank_pattern", json!({"q_proj": 4})),
            ("layers_to_transform", json!([0])),
            ("peft_type", json!("IA3")),
            ("r", json!(0)),
        ] {
            let mut v = base.clone();
            v[field] = value;
            let message = parse_config(&v, Path::new("x")).unwrap_err().to_string();
            assert!(
                message.contains(field) || field == "r",
                "{field}: {message}"
            );
        }
    }
}
