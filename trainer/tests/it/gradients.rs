//! Gradients of a scalar loss with respect to LoRA weights against central finite
//! differences, in f64 on a tiny model, with dropout on (the masks are fixed by the step).

use std::collections::HashMap;

use atdp_model_files::{Arch, LoraConfig, ModelConfig, TargetModule};

use atdp_trainer::{Adapter, LoadOptions, Lora, Model, Span};
use candle_core::{DType, Device, Tensor, Var};

use crate::util::{batch, tiny_model, values};

const ROWS: [&[u32]; 2] = [
    &[296, 72, 101, 108, 108, 111, 297],
    &[1, 250, 33, 299, 0, 120, 64],
];
const STEP: u64 = 3;

/// A policy-gradient-shaped loss: `-Σ advantage_t · log p(token_t)` with mixed-sign weights.
fn loss(model: &Model, lora: &Lora) -> Tensor {
    let lp = model
        .next_token_log_probs(&batch(&ROWS), Adapter::Train { lora, step: STEP })
        .unwrap();
    let weights: Vec<f64> = (0..lp.elem_count())
        .map(|i| [1.0, -0.5, 2.0, 0.25][i % 4])
        .collect();
    let weights = Tensor::from_vec(weights, lp.dims(), &Device::Cpu).unwrap();
    lp.mul(&weights).unwrap().sum_all().unwrap().neg().unwrap()
}

/// A tiny Qwen2 of `seed`, loaded in f64 (the directory must outlive the model).
fn f64_model(seed: u64) -> (tempfile::TempDir, Model) {
    let dir = tiny_model(Arch::Qwen2, seed);
    let options = LoadOptions {
        dtype: DType::F64,
        device: Device::Cpu,
    };
    let model = Model::load(dir.path(), &options).unwrap();
    (dir, model)
}

fn scalar(t: &Tensor) -> f64 {
    t.to_scalar::<f64>().unwrap()
}

fn set_element(var: &Var, index: usize, value: f64) {
    let mut v = values(var.as_tensor());
    v[index] = value;
    var.set(&Tensor::from_vec(v, var.dims(), &Device::Cpu).unwrap())
        .unwrap();
}

#[test]
fn lora_gradients_match_finite_differences() {
    let (_dir, model) = f64_model(5);
    let config = LoraConfig {
        r: 3,
        alpha: 6.0,
        dropout: 0.1,
        seed: 9,
        ..LoraConfig::default()
    };
    let lora = Lora::new(&model, config).unwrap();
    // B = 0 would make every gradient of A zero: give B values first.
    for (i, var) in lora.vars().iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        let n = var.elem_count();
        let v: Vec<f64> = (0..n)
            .map(|j| 0.3 * (((i * 131 + j * 17) % 97) as f64 / 48.5 - 1.0))
            .collect();
        var.set(&Tensor::from_vec(v, var.dims(), &Device::Cpu).unwrap())
            .unwrap();
    }

    let grads = loss(&model, &lora).backward().unwrap();
    let probes = [
        (0, TargetModule::QProj, true, 5),
        (0, TargetModule::KProj, false, 7),
        (1, TargetModule::VProj, true, 40),
        (0, TargetModule::OProj, false, 2),
        (1, TargetModule::GateProj, true, 100),
        (0, TargetModule::UpProj, false, 9),
        (1, TargetModule::DownProj, true, 3),
        (1, TargetModule::DownProj, false, 60),
    ];
    let eps = 1e-5;
    for (layer, module, is_a, index) in probes {
        let pair = lora.layer(layer, module).unwrap();
        let var = if is_a { pair.a() } else { pair.b() };
        let analytic = values(grads.get(var).expect("a gradient for every LoRA variable"))[index];
        let original = values(var.as_tensor())[index];
        set_element(var, index, original + eps);
        let plus = scalar(&loss(&model, &lora));
        set_element(var, index, original - eps);
        let minus = scalar(&loss(&model, &lora));
        set_element(var, index, original);
        let numeric = (plus - minus) / (2.0 * eps);
        let which = if is_a { "A" } else { "B" };
        assert!(
            analytic.abs() > 1e-6,
            "layer {layer} {module} {which}[{index}]: gradient {analytic} too small to test"
        );
        assert!(
            (analytic - numeric).abs() < 1e-6 * analytic.abs().max(1.0),
            "layer {layer} {module} {which}[{index}]: backward {analytic}, finite difference {numeric}"
        );
    }
}

#[test]
fn base_weights_get_no_gradient_and_dropout_depends_on_the_step() {
    let dir = tiny_model(Arch::Llama, 2);
    let config = ModelConfig::from_file(dir.path()).unwrap();
    let base: HashMap<String, Tensor> =
        candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu)
            .unwrap()
            .into_iter()
            .map(|(name, t)| (name, t.to_dtype(DType::F64).unwrap()))
            .collect();
    let options = LoadOptions {
        dtype: DType::F64,
        device: Device::Cpu,
    };
    let model = Model::from_tensors(config, base.clone(), &options).unwrap();
    let lora = Lora::new(
        &model,
        LoraConfig {
            dropout: 0.2,
            ..LoraConfig::default()
        },
    )
    .unwrap();
    for var in lora.vars().iter().skip(1).step_by(2) {
        var.set(&var.ones_like().unwrap().affine(0.05, 0.0).unwrap())
            .unwrap();
    }
    let ids = batch(&ROWS);
    let lp = |adapter| values(&model.next_token_log_probs(&ids, adapter).unwrap());
    assert_eq!(
        lp(Adapter::Train {
            lora: &lora,
            step: 1
        }),
        lp(Adapter::Train {
            lora: &lora,
            step: 1
        })
    );
    assert_ne!(
        lp(Adapter::Train {
            lora: &lora,
            step: 1
        }),
        lp(Adapter::Train {
            lora: &lora,
            step: 2
        })
    );
    assert_ne!(
        lp(Adapter::Train {
            lora: &lora,
            step: 1
        }),
        lp(Adapter::On(&lora))
    );

    // Gradients reach every adapter variable and no base weight: the base model is frozen.
    let out = model
        .next_token_log_probs(&ids, Adapter::On(&lora))
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = out.backward().unwrap();
    for var in lora.vars() {
        assert!(grads.get(&var).is_some());
    }
    for (name, tensor) in &base {
        assert!(grads.get(tensor).is_none(), "{name} got a gradient");
    }
}

/// The training backward pass (completion positions only, the fused head, and with
/// `recompute` the layer-by-layer recomputation) gives the gradients of the plain
/// computation: whole logits, log-softmax built from ops, one backward pass.
#[test]
fn training_backward_matches_the_plain_computation_with_and_without_recompute() {
    let (_dir, model) = f64_model(4);
    let lora = Lora::new(
        &model,
        LoraConfig {
            r: 2,
            dropout: 0.1,
            seed: 4,
            ..LoraConfig::default()
        },
    )
    .unwrap();
    for (i, var) in lora.vars().iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        let v: Vec<f64> = (0..var.elem_count())
            .map(|j| 0.2 * (((i * 31 + j * 7) % 23) as f64 / 11.5 - 1.0))
            .collect();
        var.set(&Tensor::from_vec(v, var.dims(), &Device::Cpu).unwrap())
            .unwrap();
    }
    let ids = batch(&ROWS);
    let spans = [
        Span {
            row: 0,
            start: 2,
            len: 4,
        },
        Span {
            row: 1,
            start: 0,
            len: 3,
        },
    ];
    let weights = Tensor::new(&[1.0f64, -0.5, 2.0, 0.25, 1.5, -1.0, 0.75], &Device::Cpu).unwrap();
    let weighted = |lp: &Tensor| lp.mul(&weights).unwrap().sum_all().unwrap().neg().unwrap();

    // The plain computation.
    let logits = model
        .forward(
            &ids,
            Adapter::Train {
                lora: &lora,
                step: STEP,
            },
        )
        .unwrap();
    let all = atdp_trainer::token_log_probs(
        &logits.narrow(1, 0, ROWS[0].len() - 1).unwrap(),
        &ids.narrow(1, 1, ROWS[0].len() - 1).unwrap(),
    )
    .unwrap();
    let picked = Tensor::cat(
        &spans
            .iter()
            .map(|s| all.get(s.row).unwrap().narrow(0, s.start, s.len).unwrap())
            .collect::<Vec<_>>(),
        0,
    )
    .unwrap();
    let plain_store = weighted(&picked).backward().unwrap();
    let plain_lp = values(&picked);

    for recompute in [false, true] {
        let mut seen = Vec::new();
        let grads = model
            .backward(&ids, &lora, STEP, &spans, recompute, |stats| {
                seen = values(&stats.log_probs);
                Ok(weighted(&stats.log_probs))
            })
            .unwrap();
        for (a, b) in seen.iter().zip(&plain_lp) {
            assert!(
                (a - b).abs() < 1e-12,
                "recompute {recompute}: log-prob {a} vs {b}"
            );
        }
        assert_eq!(seen.len(), plain_lp.len());
        for (i, var) in lora.vars().iter().enumerate() {
            let got = values(grads.get(var).expect("a gradient for every LoRA variable"));
            let want = values(plain_store.get(var).unwrap());
            assert!(
                want.iter().any(|v| v.abs() > 1e-8),
                "variable {i}: gradient too small to compare"
            );
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-10 * b.abs().max(1.0),
                    "recompute {recompute}, variable {i}: {a} vs {b}"
                );
            }
        }
    }
}
