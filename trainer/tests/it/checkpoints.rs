//! Checkpoint layouts real models ship in: sharded safetensors with an index, and bf16/f16
//! weights, loaded as f32 or computed in half precision.

use std::collections::BTreeMap;

use atdp_model_files::Arch;

use atdp_trainer::{Adapter, LoadOptions, Model};
use candle_core::{DType, Device, Tensor};
use serde_json::json;

use crate::util::{batch, max_abs_diff, rewrite_safetensors, tiny_model, values};

const ROWS: [&[u32]; 1] = [&[296, 72, 101, 108, 108, 111, 297, 10]];

#[test]
fn sharded_checkpoint_loads_like_the_single_file() {
    let dir = tiny_model(Arch::Llama, 4);
    let single = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    let want = values(&single.forward(&batch(&ROWS), Adapter::Off).unwrap());

    let path = dir.path().join("model.safetensors");
    let all = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let mut shards: [BTreeMap<String, Tensor>; 2] = [BTreeMap::new(), BTreeMap::new()];
    let mut weight_map = serde_json::Map::new();
    for (i, (name, t)) in all.into_iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i % 2 + 1);
        weight_map.insert(name.clone(), json!(file));
        shards[i % 2].insert(name, t);
    }
    for (i, shard) in shards.iter().enumerate() {
        let file = dir
            .path()
            .join(format!("model-0000{}-of-00002.safetensors", i + 1));
        safetensors::serialize_to_file(shard, None, &file).unwrap();
    }
    std::fs::remove_file(&path).unwrap();
    let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();

    let sharded = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    assert_eq!(sharded.weight_files().len(), 2);
    assert_eq!(
        values(&sharded.forward(&batch(&ROWS), Adapter::Off).unwrap()),
        want
    );
}

#[test]
fn half_precision_checkpoints_load_and_compute() {
    let dir = tiny_model(Arch::Qwen2, 4);
    let f32_model = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    let want = f32_model.forward(&batch(&ROWS), Adapter::Off).unwrap();
    let scale = values(&want).iter().fold(0.0f64, |m, v| m.max(v.abs()));

    for stored in [DType::BF16, DType::F16] {
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
        rewrite_safetensors(&copy.path().join("model.safetensors"), |tensors| {
            for t in tensors.values_mut() {
                *t = t.to_dtype(stored).unwrap();
            }
        });
        // Stored in half precision, computed in f32: only the rounding of the weights differs.
        let as_f32 = Model::load(copy.path(), &LoadOptions::default()).unwrap();
        let got = as_f32.forward(&batch(&ROWS), Adapter::Off).unwrap();
        assert_eq!(got.dtype(), DType::F32);
        let tolerance = if stored == DType::BF16 { 0.05 } else { 0.01 };
        assert!(
            max_abs_diff(&got, &want) < tolerance * scale,
            "{stored:?} as f32"
        );

        // Computed in half precision (norms and softmax in f32), log-probs in f32. candle's
        // CPU matmul has no bf16 kernel: that is refused up front, saying what to do instead.
        let options = LoadOptions {
            dtype: stored,
            device: Device::Cpu,
        };
        if stored == DType::BF16 {
            let message = Model::load(copy.path(), &options).unwrap_err().to_string();
            assert!(
                message.contains("bf16 computation needs a GPU"),
                "{message}"
            );
            continue;
        }
        let half = Model::load(copy.path(), &options).unwrap();
        let logits = half.forward(&batch(&ROWS), Adapter::Off).unwrap();
        assert_eq!(logits.dtype(), stored);
        assert!(
            max_abs_diff(&logits, &want) < 2.0 * tolerance * scale,
            "{stored:?} computed"
        );
        let lp = half
            .next_token_log_probs(&batch(&ROWS), Adapter::Off)
            .unwrap();
        assert_eq!(lp.dtype(), DType::F32);
        assert!(values(&lp).iter().all(|v| v.is_finite() && *v <= 0.0));
    }
}
