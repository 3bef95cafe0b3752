//! Checkpoints: the adapter's variables, AdamW's moments, and the loop state (optimizer
//! step, running baseline), so that a resumed run continues exactly where it stopped. The
//! data order and dropout masks are functions of (seed, step), so no generator state needs
//! saving beyond the step.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::lora::Lora;
use crate::optim::AdamW;
use crate::{Error, Result};
use atdp_model_files::{rename, write_atomic};

/// The checkpoint folder inside the output directory.
pub const CHECKPOINT_DIR: &str = "checkpoint";
const TENSORS_FILE: &str = "state.safetensors";
const STATE_FILE: &str = "state.json";

/// The loop state saved with the tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoopState {
    /// Optimizer steps done.
    pub step: u64,
    /// AdamW's step count.
    pub adam_t: u64,
    /// The running-mean baseline, if any.
    pub running_baseline: Option<f64>,
    /// The seed the run was started with (a resume with another seed is refused).
    pub seed: u64,
    /// Number of examples (a resume over other data is refused).
    pub examples: usize,
    /// The examples' digest ([`data_digest`]): a resume over other data is refused, so
    /// that the manifest's lineage names every trajectory the weights learned from. Absent
    /// in a checkpoint that predates it, which is then not resumed.
    #[serde(default)]
    pub data: Option<String>,
}

/// A digest of `examples`: each one's tenant, trajectory, step and tokens, in order.
pub(crate) fn data_digest(examples: &[crate::Example]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for e in examples {
        for id in [&e.tenant_id, &e.trajectory_id, &e.step_id] {
            hash.update((id.len() as u64).to_le_bytes());
            hash.update(id.as_bytes());
        }
        hash.update((e.tokens.len() as u64).to_le_bytes());
        for t in &e.tokens {
            hash.update(t.to_le_bytes());
        }
        hash.update((e.prompt_len as u64).to_le_bytes());
    }
    hex::encode(hash.finalize())
}

fn dir(out: &Path) -> PathBuf {
    out.join(CHECKPOINT_DIR)
}

/// Writes the checkpoint (tensors first, then the state file that makes it valid).
pub(crate) fn save(out: &Path, lora: &Lora, opt: &AdamW, state: &LoopState) -> Result<()> {
    let dir = dir(out);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let (m, v, _) = opt.state();
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (i, var) in lora.vars().iter().enumerate() {
        tensors.insert(format!("var.{i}"), var.as_tensor().to_device(&Device::Cpu)?);
        tensors.insert(format!("m.{i}"), m[i].to_device(&Device::Cpu)?);
        tensors.insert(format!("v.{i}"), v[i].to_device(&Device::Cpu)?);
    }
    let path = dir.join(TENSORS_FILE);
    let tmp = dir.join(format!("{TENSORS_FILE}.tmp"));
    candle_core::safetensors::save(&tensors, &tmp).map_err(|e| Error::Safetensors {
        path: tmp.clone(),
        message: e.to_string(),
    })?;
    rename(&tmp, &path)?;
    let state_path = dir.join(STATE_FILE);
    let text = serde_json::to_string_pretty(state).map_err(|e| Error::json(&state_path, e))?;
    Ok(write_atomic(&state_path, text.as_bytes())?)
}

/// Loads the checkpoint of `out` into `lora` and `opt`, if there is one; returns its state.
pub(crate) fn load(out: &Path, lora: &Lora, opt: &mut AdamW) -> Result<Option<LoopState>> {
    let dir = dir(out);
    let state_path = dir.join(STATE_FILE);
    if !state_path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&state_path).map_err(|e| Error::io(&state_path, e))?;
    let state: LoopState = serde_json::from_str(&text).map_err(|e| Error::json(&state_path, e))?;
    let path = dir.join(TENSORS_FILE);
    let mut tensors =
        candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| Error::Safetensors {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let vars = lora.vars();
    let mut take = |name: String, like: &Tensor| -> Result<Tensor> {
        let t = tensors.remove(&name).ok_or_else(|| Error::MissingTensor {
            name: name.clone(),
            location: path.display().to_string(),
        })?;
        if t.dims() != like.dims() {
            return Err(Error::Shape {
                name,
                location: path.display().to_string(),
                expected: like.dims().to_vec(),
                found: t.dims().to_vec(),
            });
        }
        Ok(t.to_device(like.device())?.to_dtype(like.dtype())?)
    };
    let (mut ms, mut vs) = (Vec::new(), Vec::new());
    for (i, var) in vars.iter().enumerate() {
        let t = take(format!("var.{i}"), var.as_tensor())?;
        var.set(&t)?;
        ms.push(take(format!("m.{i}"), var.as_tensor())?);
        vs.push(take(format!("v.{i}"), var.as_tensor())?);
    }
    opt.restore(ms, vs, state.adam_t)?;
    Ok(Some(state))
}
