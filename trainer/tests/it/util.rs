//! Helpers: tiny models on disk, token batches, tensor comparison.

use std::collections::BTreeMap;
use std::path::Path;

use atdp_model_files::Arch;

use atdp_trainer::{InitSpec, init_model};
use candle_core::{DType, Device, Tensor};
use tempfile::TempDir;

/// A tiny random model of `arch` in a fresh directory. `init_std` 0.2 (not transformers'
/// 0.02) makes attention far from uniform, so that mistakes in masking, RoPE or head
/// grouping change the logits by a lot.
pub fn tiny_model(arch: Arch, seed: u64) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = InitSpec::tiny(arch);
    spec.seed = seed;
    spec.init_std = 0.2;
    init_model(dir.path(), &spec).unwrap();
    dir
}

/// Token ids `[batch, seq]` (u32) on the CPU.
pub fn batch(rows: &[&[u32]]) -> Tensor {
    let seq = rows[0].len();
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), seq), &Device::Cpu).unwrap()
}

/// All values as f64, row-major.
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

/// Largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    values(a)
        .iter()
        .zip(values(b))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Every tensor of a safetensors file: name → (shape, values as f64).
pub fn read_safetensors(path: &Path) -> BTreeMap<String, (Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect();
            (name, (view.shape().to_vec(), values))
        })
        .collect()
}

/// Rewrites a safetensors file with `edit` applied to its tensors (read through candle).
pub fn rewrite_safetensors(path: &Path, edit: impl FnOnce(&mut BTreeMap<String, Tensor>)) {
    let mut tensors: BTreeMap<String, Tensor> = candle_core::safetensors::load(path, &Device::Cpu)
        .unwrap()
        .into_iter()
        .collect();
    edit(&mut tensors);
    safetensors::serialize_to_file(&tensors, None, path).unwrap();
}
