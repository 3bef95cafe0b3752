//! Bad input gives errors that name what is wrong: missing files and tensors, wrong shapes,
//! unsupported configurations, adapters that do not fit, token ids outside the vocabulary.

use atdp_model_files::{Arch, LoraConfig};

use atdp_trainer::{Adapter, Error, LoadOptions, Lora, Model, load_adapter, save_adapter};
use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use crate::util::{batch, rewrite_safetensors, tiny_model};

fn load(dir: &std::path::Path) -> Result<Model, Error> {
    Model::load(dir, &LoadOptions::default())
}

fn edit_config(dir: &std::path::Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

#[test]
fn missing_model_files_are_named() {
    let empty = tempfile::tempdir().unwrap();
    let err = load(empty.path()).unwrap_err();
    assert!(
        matches!(&err, Error::MissingFile { path, .. } if path.ends_with("config.json")),
        "{err}"
    );

    let dir = tiny_model(Arch::Qwen2, 0);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let message = load(dir.path()).unwrap_err().to_string();
    assert!(
        message.contains("model.safetensors") && message.contains("model.safetensors.index.json"),
        "{message}"
    );

    // An index naming a shard that is not there.
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let message = load(dir.path()).unwrap_err().to_string();
    // The first tensor missing from the index is named before any file is read.
    assert!(
        message.contains("model.layers.0.input_layernorm.weight"),
        "{message}"
    );
}

#[test]
fn missing_and_misshapen_tensors_are_named_with_shapes() {
    let dir = tiny_model(Arch::Qwen2, 0);
    let weights = dir.path().join("model.safetensors");
    rewrite_safetensors(&weights, |t| {
        t.insert(
            "model.layers.1.self_attn.k_proj.weight".into(),
            Tensor::zeros((33, 64), DType::F32, &Device::Cpu).unwrap(),
        );
    });
    let err = load(dir.path()).unwrap_err();
    let message = err.to_string();
    match err {
        Error::Shape {
            name,
            expected,
            found,
            ..
        } => {
            assert_eq!(name, "model.layers.1.self_attn.k_proj.weight");
            assert_eq!((expected, found), (vec![32, 64], vec![33, 64]));
        }
        other => panic!("expected a shape error, got {other}"),
    }
    assert!(
        message.contains("[33, 64]") && message.contains("[32, 64]"),
        "{message}"
    );

    rewrite_safetensors(&weights, |t| {
        t.remove("model.layers.1.self_attn.k_proj.weight");
        t.remove("model.layers.0.self_attn.q_proj.bias");
    });
    let message = load(dir.path()).unwrap_err().to_string();
    assert!(
        message.contains("`model.layers.0.self_attn.q_proj.bias` not found"),
        "{message}"
    );
}

#[test]
fn unsupported_configurations_are_refused_by_field() {
    let dir = tiny_model(Arch::Llama, 0);
    edit_config(dir.path(), |v| {
        v["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0})
    });
    let err = load(dir.path()).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, Error::Config { field, .. } if field == "rope_scaling.rope_type"),
        "{message}"
    );
    assert!(
        message.contains("`yarn` is not supported") && message.contains("linear, llama3"),
        "{message}"
    );

    edit_config(dir.path(), |v| {
        v["rope_scaling"] = Value::Null;
        v["num_key_value_heads"] = serde_json::json!(3);
    });
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(&err, Error::Config { field, .. } if field == "num_key_value_heads"),
        "{err}"
    );
}

#[test]
fn adapters_that_do_not_fit_are_refused() {
    let dir = tiny_model(Arch::Qwen2, 0);
    let model = load(dir.path()).unwrap();
    let other_dir = tiny_model(Arch::Qwen3, 0);
    let other = load(other_dir.path()).unwrap();
    let lora = Lora::new(&other, LoraConfig::default()).unwrap();
    let ids = batch(&[&[1, 2, 3]]);
    let err = model.forward(&ids, Adapter::On(&lora)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "adapter",
                ..
            }
        ),
        "{err}"
    );

    // Saved for Qwen3 (q_proj out 128), loaded onto Qwen2 (q_proj out 64).
    let out = tempfile::tempdir().unwrap();
    save_adapter(&lora, out.path(), "qwen3").unwrap();
    let err = load_adapter(out.path(), &model).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::Shape { .. }), "{message}");
    assert!(
        message.contains("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"),
        "{message}"
    );

    // A missing tensor is named.
    let lora = Lora::new(&model, LoraConfig::default()).unwrap();
    save_adapter(&lora, out.path(), "qwen2").unwrap();
    rewrite_safetensors(&out.path().join("adapter_model.safetensors"), |t| {
        t.remove("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
    });
    let message = load_adapter(out.path(), &model).unwrap_err().to_string();
    assert!(
        message.contains("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"),
        "{message}"
    );

    // No adapter at all.
    let empty = tempfile::tempdir().unwrap();
    let err = load_adapter(empty.path(), &model).unwrap_err();
    assert!(matches!(err, Error::MissingFile { .. }), "{err}");
}

#[test]
fn token_ids_outside_the_vocabulary_are_refused() {
    let dir = tiny_model(Arch::Qwen2, 0);
    let model = load(dir.path()).unwrap();
    let err = model
        .forward(&batch(&[&[1, 300]]), Adapter::Off)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("token id 300 is outside the vocabulary"),
        "{err}"
    );
    let negative = Tensor::new(&[[1i64, -1]], &Device::Cpu).unwrap();
    assert!(matches!(
        model.forward(&negative, Adapter::Off),
        Err(Error::Invalid { .. })
    ));
    let flat = Tensor::new(&[1u32, 2], &Device::Cpu).unwrap();
    assert!(matches!(
        model.forward(&flat, Adapter::Off),
        Err(Error::Invalid { .. })
    ));
    let one = batch(&[&[1]]);
    assert!(matches!(
        model.next_token_log_probs(&one, Adapter::Off),
        Err(Error::Invalid { .. })
    ));
}
