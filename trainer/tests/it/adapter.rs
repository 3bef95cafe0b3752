//! LoRA and PEFT adapters: an untrained adapter changes nothing, a trained one does, and a
//! saved adapter loads back with identical outputs and PEFT's names, shapes and config.

use std::collections::{BTreeSet, HashMap};

use atdp_model_files::{Arch, LoraConfig, TargetModule};

use atdp_trainer::{Adapter, LoadOptions, Lora, Model, load_adapter, save_adapter};
use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use crate::util::{batch, max_abs_diff, read_safetensors, tiny_model, values};

const ROWS: [&[u32]; 2] = [
    &[296, 72, 101, 108, 108, 111, 297],
    &[1, 250, 33, 299, 0, 120, 64],
];

/// Gives every `B` deterministic non-zero values (as training would).
fn train_a_little(lora: &Lora) {
    for (i, var) in lora.vars().iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        let v: Vec<f32> = (0..var.elem_count())
            .map(|j| 0.05 * (((i * 37 + j * 11) % 41) as f32 / 20.5 - 1.0))
            .collect();
        let t = Tensor::from_vec(v, var.dims(), &Device::Cpu).unwrap();
        var.set(&t.to_dtype(var.dtype()).unwrap()).unwrap();
    }
}

#[test]
fn untrained_adapter_gives_the_base_logits_exactly() {
    for arch in [Arch::Qwen2, Arch::Llama, Arch::Qwen3] {
        let dir = tiny_model(arch, 1);
        let model = Model::load(dir.path(), &LoadOptions::default()).unwrap();
        let lora = Lora::new(
            &model,
            LoraConfig {
                dropout: 0.3,
                ..LoraConfig::default()
            },
        )
        .unwrap();
        let ids = batch(&ROWS);
        let base = values(&model.forward(&ids, Adapter::Off).unwrap());
        assert_eq!(
            values(&model.forward(&ids, Adapter::On(&lora)).unwrap()),
            base,
            "{arch}"
        );
        // B = 0 makes the update zero whatever dropout does to its input.
        let train = model
            .forward(
                &ids,
                Adapter::Train {
                    lora: &lora,
                    step: 4,
                },
            )
            .unwrap();
        assert_eq!(values(&train), base, "{arch}");
    }
}

#[test]
fn trained_adapter_changes_logits_and_leaves_the_reference_alone() {
    let dir = tiny_model(Arch::Qwen2, 1);
    let model = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    let ids = batch(&ROWS);
    let before = model.forward(&ids, Adapter::Off).unwrap();
    let lora = Lora::new(&model, LoraConfig::default()).unwrap();
    train_a_little(&lora);
    let adapted = model.forward(&ids, Adapter::On(&lora)).unwrap();
    assert!(max_abs_diff(&adapted, &before) > 1e-3);
    // The adapter switched off is the reference policy: the same weights, unchanged.
    assert_eq!(
        values(&model.forward(&ids, Adapter::Off).unwrap()),
        values(&before)
    );
}

#[test]
fn saved_adapter_has_peft_names_shapes_and_config() {
    let dir = tiny_model(Arch::Qwen2, 1);
    let model = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    let config = LoraConfig {
        r: 4,
        alpha: 8.0,
        dropout: 0.05,
        target_modules: vec![
            TargetModule::QProj,
            TargetModule::VProj,
            TargetModule::DownProj,
        ],
        seed: 1,
    };
    let lora = Lora::new(&model, config).unwrap();
    let out = tempfile::tempdir().unwrap();
    let saved = save_adapter(&lora, out.path(), "tiny-qwen2").unwrap();

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&saved.config).unwrap()).unwrap();
    assert_eq!(
        json["target_modules"],
        serde_json::json!(["q_proj", "v_proj", "down_proj"])
    );
    assert_eq!(json["r"], 4);
    assert_eq!(json["lora_alpha"], 8);
    assert_eq!(json["lora_dropout"], 0.05);
    assert_eq!(json["peft_type"], "LORA");
    assert_eq!(json["task_type"], "CAUSAL_LM");
    assert_eq!(json["bias"], "none");
    assert_eq!(json["fan_in_fan_out"], false);
    assert_eq!(json["base_model_name_or_path"], "tiny-qwen2");

    let tensors = read_safetensors(&saved.weights);
    let mut expected = BTreeSet::new();
    for layer in 0..2 {
        for (module, input, output) in [
            ("self_attn.q_proj", 64, 64),
            ("self_attn.v_proj", 64, 32),
            ("mlp.down_proj", 128, 64),
        ] {
            let p = format!("base_model.model.model.layers.{layer}.{module}");
            assert_eq!(tensors[&format!("{p}.lora_A.weight")].0, vec![4, input]);
            assert_eq!(tensors[&format!("{p}.lora_B.weight")].0, vec![output, 4]);
            expected.insert(format!("{p}.lora_A.weight"));
            expected.insert(format!("{p}.lora_B.weight"));
        }
    }
    assert_eq!(tensors.keys().cloned().collect::<BTreeSet<_>>(), expected);
    // transformers' loader insists on this metadata.
    let bytes = std::fs::read(&saved.weights).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(
        meta.metadata()
            .as_ref()
            .and_then(|m| m.get("format"))
            .map(String::as_str),
        Some("pt")
    );
    assert!(!out.path().join("adapter_model.safetensors.tmp").exists());
}

#[test]
fn saved_adapter_loads_back_with_identical_outputs() {
    let dir = tiny_model(Arch::Qwen3, 1);
    let model = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    let lora = Lora::new(
        &model,
        LoraConfig {
            r: 2,
            alpha: 5.0,
            ..LoraConfig::default()
        },
    )
    .unwrap();
    train_a_little(&lora);
    let out = tempfile::tempdir().unwrap();
    save_adapter(&lora, out.path(), "tiny-qwen3").unwrap();
    let loaded = load_adapter(out.path(), &model).unwrap();
    assert_eq!(loaded.config().r, 2);
    assert_eq!(loaded.config().alpha, 5.0);
    assert_eq!(loaded.config().target_modules, TargetModule::ALL.to_vec());
    assert_eq!(loaded.num_parameters(), lora.num_parameters());

    let ids = batch(&ROWS);
    let want = values(&model.forward(&ids, Adapter::On(&lora)).unwrap());
    assert_eq!(
        values(&model.forward(&ids, Adapter::On(&loaded)).unwrap()),
        want
    );
    for (a, b) in lora.vars().iter().zip(loaded.vars()) {
        assert_eq!(values(a.as_tensor()), values(b.as_tensor()));
    }
}

#[test]
fn adapter_equals_its_update_merged_into_the_weights() {
    // W + (alpha / r) · B A, computed here from the files, must give the adapter's logits:
    // this checks the scale, the orientation of A and B, and which projection each adapts.
    let dir = tiny_model(Arch::Llama, 8);
    let options = LoadOptions {
        dtype: DType::F64,
        device: Device::Cpu,
    };
    let model = Model::load(dir.path(), &options).unwrap();
    let config = LoraConfig {
        r: 3,
        alpha: 7.0,
        ..LoraConfig::default()
    };
    let lora = Lora::new(&model, config).unwrap();
    train_a_little(&lora);

    let mut weights: HashMap<String, Tensor> =
        candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu)
            .unwrap()
            .into_iter()
            .map(|(n, t)| (n, t.to_dtype(DType::F64).unwrap()))
            .collect();
    for (layer, module, pair) in lora.layers() {
        let name = format!("{}.weight", module.module_path(layer));
        let update = pair
            .b()
            .matmul(pair.a())
            .unwrap()
            .affine(7.0 / 3.0, 0.0)
            .unwrap();
        let merged = weights[&name].add(&update).unwrap();
        weights.insert(name, merged);
    }
    let merged = Model::from_tensors(model.config().clone(), weights, &options).unwrap();

    let ids = batch(&ROWS);
    let adapted = model.forward(&ids, Adapter::On(&lora)).unwrap();
    let base = model.forward(&ids, Adapter::Off).unwrap();
    let want = merged.forward(&ids, Adapter::Off).unwrap();
    assert!(max_abs_diff(&adapted, &base) > 1e-3);
    assert!(
        max_abs_diff(&adapted, &want) < 1e-10,
        "{}",
        max_abs_diff(&adapted, &want)
    );
}
