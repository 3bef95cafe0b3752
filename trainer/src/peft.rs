//! Writing and loading LoRA adapters as tensors, in the PEFT format that PEFT, vLLM and
//! mistral.rs load (the format itself, its names and checks, is `atdp-model-files`'
//! `peft`). Files are written to a temporary name and renamed, weights first and the config
//! last, so a directory with an `adapter_config.json` holds a whole adapter. The training run
//! writes its manifest next to these files; [`SavedAdapter`] is what it starts from.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use atdp_model_files::{
    ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LoraMatrix, PEFT_PREFIX, TargetModule,
    adapter_config_json, parse_tensor_name, read_adapter_config, rename, tensor_name, write_atomic,
};
use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};

use crate::lora::Lora;
use crate::model::Model;
use crate::{Error, Result};

/// The files [`save_adapter`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedAdapter {
    /// The adapter directory.
    pub dir: PathBuf,
    /// Its `adapter_config.json`.
    pub config: PathBuf,
    /// Its `adapter_model.safetensors`.
    pub weights: PathBuf,
}

/// Writes `lora` to `dir` (created if needed) in PEFT format, weights in f32.
pub fn save_adapter(
    lora: &Lora,
    dir: impl AsRef<Path>,
    base_model_name_or_path: &str,
) -> Result<SavedAdapter> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut tensors: BTreeMap<String, Tensor> = BTreeMap::new();
    for (layer, module, pair) in lora.layers() {
        for (matrix, var) in [(LoraMatrix::A, pair.a()), (LoraMatrix::B, pair.b())] {
            let t = var
                .as_tensor()
                .to_device(&Device::Cpu)?
                .to_dtype(DType::F32)?
                .contiguous()?;
            tensors.insert(tensor_name(layer, module, matrix), t);
        }
    }
    let weights = dir.join(ADAPTER_WEIGHTS_FILE);
    let weights_tmp = dir.join(format!("{ADAPTER_WEIGHTS_FILE}.tmp"));
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(&tensors, Some(metadata), &weights_tmp).map_err(|e| {
        Error::Safetensors {
            path: weights_tmp.clone(),
            message: e.to_string(),
        }
    })?;
    rename(&weights_tmp, &weights)?;

    let config = dir.join(ADAPTER_CONFIG_FILE);
    let text =
        serde_json::to_string_pretty(&adapter_config_json(lora.config(), base_model_name_or_path))
            .map_err(|e| Error::json(&config, e))?;
    write_atomic(&config, text.as_bytes())?;
    Ok(SavedAdapter {
        dir: dir.to_path_buf(),
        config,
        weights,
    })
}

/// Reads a PEFT LoRA adapter for `model` from `dir`. Refuses what this crate cannot apply
/// exactly (rsLoRA, DoRA, per-layer ranks, trained biases, extra trained modules) and any
/// tensor that is missing, unexpected or misshapen. The weights are held in f32 (f64 for an
/// f64 model); the dropout seed, which PEFT does not store, is 0.
pub fn load_adapter(dir: impl AsRef<Path>, model: &Model) -> Result<Lora> {
    let dir = dir.as_ref();
    let config = read_adapter_config(dir)?;

    let weights_path = dir.join(ADAPTER_WEIGHTS_FILE);
    let bytes = std::fs::read(&weights_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::MissingFile {
                path: weights_path.clone(),
                message: "a PEFT adapter directory needs adapter_model.safetensors (adapter_model.bin is not read)".into(),
            }
        } else {
            Error::io(&weights_path, e)
        }
    })?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| Error::Safetensors {
        path: weights_path.clone(),
        message: format!("{e}; the file is damaged or not safetensors"),
    })?;

    let c = model.config();
    let dtype = if model.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let mut found: BTreeMap<(usize, TargetModule, LoraMatrix), Tensor> = BTreeMap::new();
    for (name, view) in st.tensors() {
        let key = parse_tensor_name(&name)
            .filter(|(layer, module, _)| *layer < c.num_hidden_layers && config.target_modules.contains(module))
            .ok_or_else(|| {
                Error::adapter(
                    &weights_path,
                    format!(
                        "unexpected tensor `{name}`: expected {PEFT_PREFIX}model.layers.N.<module>.lora_A/lora_B.weight for N < {} and the target_modules {:?}",
                        c.num_hidden_layers,
                        config.target_modules.iter().map(|m| m.name()).collect::<Vec<_>>()
                    ),
                )
            })?;
        found.insert(key, view.load(model.device())?.to_dtype(dtype)?);
    }
    let mut pairs = BTreeMap::new();
    for layer in 0..c.num_hidden_layers {
        for &module in &config.target_modules {
            let mut take = |matrix| {
                found
                    .remove(&(layer, module, matrix))
                    .ok_or_else(|| Error::MissingTensor {
                        name: tensor_name(layer, module, matrix),
                        location: weights_path.display().to_string(),
                    })
            };
            let a = take(LoraMatrix::A)?;
            let b = take(LoraMatrix::B)?;
            pairs.insert((layer, module), (a, b));
        }
    }
    Lora::from_pairs(c, config, pairs).map_err(|e| match e {
        Error::Shape {
            name,
            expected,
            found,
            ..
        } => Error::Shape {
            name: format!("{PEFT_PREFIX}{name}"),
            location: weights_path.display().to_string(),
            expected,
            found,
        },
        other => other,
    })
}
