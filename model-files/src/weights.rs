//! Where a Hugging Face model directory keeps its weights: `model.safetensors`, or shards
//! listed in `model.safetensors.index.json`.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The weights of an unsharded checkpoint.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint (`weight_map`: tensor name → shard file).
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";

/// The safetensors files of a model directory: the shards its index names, or the single
/// weights file.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index_path = dir.join(WEIGHTS_INDEX_FILE);
    if index_path.is_file() {
        let text = std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
        let index: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::json(&index_path, e))?;
        let shards: std::collections::BTreeSet<PathBuf> = index
            .get("weight_map")
            .and_then(|m| m.as_object())
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(|v| v.as_str())
            .map(|name| dir.join(name))
            .collect();
        return Ok(shards.into_iter().collect());
    }
    let single = dir.join(WEIGHTS_FILE);
    if single.is_file() {
        Ok(vec![single])
    } else {
        Err(Error::MissingFile {
            path: single,
            message: format!(
                "no weights: expected {WEIGHTS_FILE}, or {WEIGHTS_INDEX_FILE} with its shards"
            ),
        })
    }
}
