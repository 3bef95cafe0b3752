//! The tensors a configuration implies, and loading them from a Hugging Face model directory
//! (`model.safetensors`, or shards listed in `model.safetensors.index.json`), each checked
//! for presence, shape and type before it is used.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};

use crate::{Error, Result};
use atdp_model_files::ModelConfig;

use atdp_model_files::{WEIGHTS_FILE, WEIGHTS_INDEX_FILE};

/// What a tensor is, which decides how a random model initialises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TensorKind {
    /// The token embedding or the output head.
    Embedding,
    /// A projection matrix `[out, in]`.
    Linear,
    /// A projection bias `[out]`.
    Bias,
    /// An RMSNorm scale.
    Norm,
}

/// One tensor of the checkpoint: its Hugging Face name and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorSpec {
    pub(crate) name: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) kind: TensorKind,
}

impl TensorSpec {
    fn new(name: String, shape: Vec<usize>, kind: TensorKind) -> Self {
        TensorSpec { name, shape, kind }
    }
}

/// The Hugging Face module path of decoder layer `layer` (`model.layers.N`).
pub(crate) fn layer_prefix(layer: usize) -> String {
    format!("model.layers.{layer}")
}

/// Every tensor the configuration needs, in checkpoint order.
pub(crate) fn expected_tensors(c: &ModelConfig) -> Vec<TensorSpec> {
    use TensorKind::*;
    let (h, q, kv, i, d) = (
        c.hidden_size,
        c.q_dim(),
        c.kv_dim(),
        c.intermediate_size,
        c.head_dim,
    );
    let mut out = vec![TensorSpec::new(
        "model.embed_tokens.weight".into(),
        vec![c.vocab_size, h],
        Embedding,
    )];
    for layer in 0..c.num_hidden_layers {
        let p = layer_prefix(layer);
        out.push(TensorSpec::new(
            format!("{p}.input_layernorm.weight"),
            vec![h],
            Norm,
        ));
        for (proj, rows, bias) in [
            ("q_proj", q, c.qkv_bias),
            ("k_proj", kv, c.qkv_bias),
            ("v_proj", kv, c.qkv_bias),
        ] {
            out.push(TensorSpec::new(
                format!("{p}.self_attn.{proj}.weight"),
                vec![rows, h],
                Linear,
            ));
            if bias {
                out.push(TensorSpec::new(
                    format!("{p}.self_attn.{proj}.bias"),
                    vec![rows],
                    Bias,
                ));
            }
        }
        if c.qk_norm {
            out.push(TensorSpec::new(
                format!("{p}.self_attn.q_norm.weight"),
                vec![d],
                Norm,
            ));
            out.push(TensorSpec::new(
                format!("{p}.self_attn.k_norm.weight"),
                vec![d],
                Norm,
            ));
        }
        out.push(TensorSpec::new(
            format!("{p}.self_attn.o_proj.weight"),
            vec![h, q],
            Linear,
        ));
        if c.o_proj_bias {
            out.push(TensorSpec::new(
                format!("{p}.self_attn.o_proj.bias"),
                vec![h],
                Bias,
            ));
        }
        out.push(TensorSpec::new(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            Norm,
        ));
        for (proj, shape) in [
            ("gate_proj", vec![i, h]),
            ("up_proj", vec![i, h]),
            ("down_proj", vec![h, i]),
        ] {
            let rows = shape[0];
            out.push(TensorSpec::new(
                format!("{p}.mlp.{proj}.weight"),
                shape,
                Linear,
            ));
            if c.mlp_bias {
                out.push(TensorSpec::new(
                    format!("{p}.mlp.{proj}.bias"),
                    vec![rows],
                    Bias,
                ));
            }
        }
    }
    out.push(TensorSpec::new("model.norm.weight".into(), vec![h], Norm));
    if !c.tie_word_embeddings {
        out.push(TensorSpec::new(
            "lm_head.weight".into(),
            vec![c.vocab_size, h],
            Embedding,
        ));
    }
    out
}

/// The safetensors files of a model directory, with the tensors each one should hold.
fn locate(dir: &Path, specs: &[TensorSpec]) -> Result<BTreeMap<PathBuf, Vec<usize>>> {
    let index_path = dir.join(WEIGHTS_INDEX_FILE);
    let single = dir.join(WEIGHTS_FILE);
    let mut files: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    if index_path.is_file() {
        let text = std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
        let index: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::json(&index_path, e))?;
        let Some(map) = index.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(Error::Safetensors {
                path: index_path,
                message: "no `weight_map` object (tensor name → shard file)".into(),
            });
        };
        for (i, spec) in specs.iter().enumerate() {
            let Some(file) = map.get(&spec.name).and_then(|f| f.as_str()) else {
                return Err(Error::MissingTensor {
                    name: spec.name.clone(),
                    location: index_path.display().to_string(),
                });
            };
            // A shard name is a file in the same directory, never a path elsewhere.
            if file.contains('/') || file.contains('\\') || file == ".." {
                return Err(Error::Safetensors {
                    path: index_path,
                    message: format!("shard `{file}` is not a file name in the model directory"),
                });
            }
            files.entry(dir.join(file)).or_default().push(i);
        }
    } else if single.is_file() {
        files.insert(single, (0..specs.len()).collect());
    } else {
        return Err(Error::MissingFile {
            path: single,
            message: format!(
                "no weights in {}: expected {WEIGHTS_FILE}, or {WEIGHTS_INDEX_FILE} with its shards (safetensors only; convert .bin checkpoints first)",
                dir.display()
            ),
        });
    }
    Ok(files)
}

/// Loads every tensor in `specs` from the model directory, converted to `dtype` on `device`.
/// Returns the tensors by name and the files read.
pub(crate) fn load(
    dir: &Path,
    specs: &[TensorSpec],
    dtype: DType,
    device: &Device,
) -> Result<(HashMap<String, Tensor>, Vec<PathBuf>)> {
    let files = locate(dir, specs)?;
    let mut tensors = HashMap::with_capacity(specs.len());
    for (path, wanted) in &files {
        let bytes = std::fs::read(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingFile {
                    path: path.clone(),
                    message: format!(
                        "{WEIGHTS_INDEX_FILE} lists this shard; copy the whole model directory"
                    ),
                }
            } else {
                Error::io(path, e)
            }
        })?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| Error::Safetensors {
            path: path.clone(),
            message: format!("{e}; the file is damaged or not safetensors"),
        })?;
        for &i in wanted {
            let spec = &specs[i];
            let location = path.display().to_string();
            let view = st.tensor(&spec.name).map_err(|_| Error::MissingTensor {
                name: spec.name.clone(),
                location: location.clone(),
            })?;
            if view.shape() != spec.shape.as_slice() {
                return Err(Error::Shape {
                    name: spec.name.clone(),
                    location,
                    expected: spec.shape.clone(),
                    found: view.shape().to_vec(),
                });
            }
            let float = DType::try_from(view.dtype())
                .is_ok_and(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64));
            if !float {
                return Err(Error::Safetensors {
                    path: path.clone(),
                    message: format!(
                        "tensor `{}` is stored as {:?}; only float32, float16, bfloat16 and float64 weights are supported (no quantized checkpoints)",
                        spec.name,
                        view.dtype()
                    ),
                });
            }
            let tensor = view.load(device)?.to_dtype(dtype)?;
            tensors.insert(spec.name.clone(), tensor);
        }
    }
    Ok((tensors, files.into_keys().collect()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use atdp_model_files::Arch;

    #[test]
    fn names_follow_hugging_face() {
        let mut c = ModelConfig::from_json_str(
            r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 32, "vocab_size": 300, "tie_word_embeddings": true}"#,
        )
        .unwrap();
        let names = |c: &ModelConfig| -> Vec<String> {
            expected_tensors(c).into_iter().map(|s| s.name).collect()
        };
        let n = names(&c);
        assert!(n.contains(&"model.layers.1.self_attn.q_norm.weight".to_string()));
        assert!(
            !n.iter()
                .any(|x| x.ends_with(".bias") || x == "lm_head.weight")
        );
        let q = expected_tensors(&c)
            .into_iter()
            .find(|s| s.name == "model.layers.0.self_attn.q_proj.weight")
            .unwrap();
        assert_eq!(q.shape, vec![128, 64]);
        // 1 embedding + per layer (2 norms, q/k/v/o, 2 head norms, 3 MLP) + final norm.
        assert_eq!(n.len(), 1 + 2 * 11 + 1);

        c.arch = Arch::Qwen2;
        c.qkv_bias = true;
        c.qk_norm = false;
        c.tie_word_embeddings = false;
        let n = names(&c);
        assert!(n.contains(&"model.layers.0.self_attn.k_proj.bias".to_string()));
        assert!(!n.contains(&"model.layers.0.self_attn.o_proj.bias".to_string()));
        assert_eq!(n.last().map(String::as_str), Some("lm_head.weight"));
    }
}
