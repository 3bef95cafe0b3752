//! The forward pass against a reference written from the transformers modelling code in
//! plain loops over f64, one sequence at a time, reading `config.json` and
//! `model.safetensors` itself (nothing from the crate but the files `init_model` wrote).

use std::collections::BTreeMap;
use std::path::Path;

use atdp_model_files::Arch;

use atdp_trainer::{Adapter, LoadOptions, Model};
use candle_core::{DType, Device};
use serde_json::Value;

use crate::util::{batch, read_safetensors, tiny_model, values};

struct Reference {
    config: Value,
    weights: BTreeMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Reference {
    fn load(dir: &Path) -> Self {
        let config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        Reference {
            config,
            weights: read_safetensors(&dir.join("model.safetensors")),
        }
    }

    fn usize(&self, key: &str) -> usize {
        self.config[key].as_u64().unwrap() as usize
    }

    fn w(&self, name: &str) -> &[f64] {
        &self
            .weights
            .get(name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
            .1
    }

    fn has(&self, name: &str) -> bool {
        self.weights.contains_key(name)
    }

    /// `x Wᵀ + b` for one vector; `W` is `[out, in]`.
    fn linear(&self, x: &[f64], prefix: &str) -> Vec<f64> {
        let (shape, w) = &self.weights[&format!("{prefix}.weight")];
        let (out, inp) = (shape[0], shape[1]);
        assert_eq!(x.len(), inp);
        let bias = self.weights.get(&format!("{prefix}.bias")).map(|b| &b.1);
        (0..out)
            .map(|o| {
                let dot: f64 = (0..inp).map(|i| w[o * inp + i] * x[i]).sum();
                dot + bias.map_or(0.0, |b| b[o])
            })
            .collect()
    }

    fn rms_norm(&self, x: &[f64], weight: &str) -> Vec<f64> {
        let eps = self.config["rms_norm_eps"].as_f64().unwrap();
        let w = self.w(weight);
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        x.iter().zip(w).map(|(v, g)| v * inv * g).collect()
    }

    /// transformers' default, linear and llama3 RoPE frequencies.
    fn inv_freq(&self, head_dim: usize) -> Vec<f64> {
        let theta = self.config["rope_theta"].as_f64().unwrap();
        let mut freqs: Vec<f64> = (0..head_dim / 2)
            .map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64))
            .collect();
        let scaling = &self.config["rope_scaling"];
        if let Some(kind) = scaling.get("rope_type").and_then(Value::as_str) {
            let factor = scaling["factor"].as_f64().unwrap();
            match kind {
                "linear" => freqs.iter_mut().for_each(|f| *f /= factor),
                "llama3" => {
                    let low = scaling["low_freq_factor"].as_f64().unwrap();
                    let high = scaling["high_freq_factor"].as_f64().unwrap();
                    let old = scaling["original_max_position_embeddings"]
                        .as_f64()
                        .unwrap();
                    for f in &mut freqs {
                        let wavelen = 2.0 * std::f64::consts::PI / *f;
                        // torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
                        let llama = if wavelen > old / low { *f / factor } else { *f };
                        let smooth = (old / wavelen - low) / (high - low);
                        let smoothed = (1.0 - smooth) * llama / factor + smooth * llama;
                        // is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
                        let medium = wavelen >= old / high && wavelen <= old / low;
                        *f = if medium { smoothed } else { llama };
                    }
                }
                other => panic!("reference does not know rope type {other}"),
            }
        }
        freqs
    }

    /// Logits `[seq][vocab]` for one sequence.
    // Index loops, as the formulas are written.
    #[allow(clippy::needless_range_loop)]
    fn logits(&self, tokens: &[u32]) -> Vec<Vec<f64>> {
        let hidden = self.usize("hidden_size");
        let heads = self.usize("num_attention_heads");
        let kv_heads = self.usize("num_key_value_heads");
        let head_dim = self.config["head_dim"]
            .as_u64()
            .map_or(hidden / heads, |d| d as usize);
        let layers = self.usize("num_hidden_layers");
        let freqs = self.inv_freq(head_dim);
        let half = head_dim / 2;
        let rope = |x: &mut [f64], pos: usize| {
            for i in 0..half {
                let (c, s) = ((pos as f64 * freqs[i]).cos(), (pos as f64 * freqs[i]).sin());
                let (a, b) = (x[i], x[i + half]);
                x[i] = a * c - b * s;
                x[i + half] = b * c + a * s;
            }
        };
        let embed = self.w("model.embed_tokens.weight");
        let mut h: Vec<Vec<f64>> = tokens
            .iter()
            .map(|&t| embed[t as usize * hidden..(t as usize + 1) * hidden].to_vec())
            .collect();
        let seq = tokens.len();
        for l in 0..layers {
            let p = format!("model.layers.{l}");
            let x: Vec<Vec<f64>> = h
                .iter()
                .map(|v| self.rms_norm(v, &format!("{p}.input_layernorm.weight")))
                .collect();
            // Per position, per head vectors after the optional head norm and RoPE.
            let project = |proj: &str,
                           n_heads: usize,
                           norm: Option<&str>,
                           rotate: bool|
             -> Vec<Vec<Vec<f64>>> {
                x.iter()
                    .enumerate()
                    .map(|(pos, xv)| {
                        let y = self.linear(xv, &format!("{p}.self_attn.{proj}"));
                        (0..n_heads)
                            .map(|hd| {
                                let mut v = y[hd * head_dim..(hd + 1) * head_dim].to_vec();
                                if let Some(norm) = norm {
                                    v = self.rms_norm(&v, norm);
                                }
                                if rotate {
                                    rope(&mut v, pos);
                                }
                                v
                            })
                            .collect()
                    })
                    .collect()
            };
            let q_norm = format!("{p}.self_attn.q_norm.weight");
            let k_norm = format!("{p}.self_attn.k_norm.weight");
            let q = project(
                "q_proj",
                heads,
                self.has(&q_norm).then_some(q_norm.as_str()),
                true,
            );
            let k = project(
                "k_proj",
                kv_heads,
                self.has(&k_norm).then_some(k_norm.as_str()),
                true,
            );
            let v = project("v_proj", kv_heads, None, false);
            let group = heads / kv_heads;
            for t in 0..seq {
                let mut concat = Vec::with_capacity(heads * head_dim);
                for hd in 0..heads {
                    let kv = hd / group;
                    let scores: Vec<f64> = (0..=t)
                        .map(|s| {
                            q[t][hd]
                                .iter()
                                .zip(&k[s][kv])
                                .map(|(a, b)| a * b)
                                .sum::<f64>()
                                / (head_dim as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = exp.iter().sum();
                    for d in 0..head_dim {
                        concat.push((0..=t).map(|s| exp[s] / total * v[s][kv][d]).sum());
                    }
                }
                let o = self.linear(&concat, &format!("{p}.self_attn.o_proj"));
                h[t].iter_mut().zip(o).for_each(|(a, b)| *a += b);
            }
            for hv in h.iter_mut() {
                let x = self.rms_norm(hv, &format!("{p}.post_attention_layernorm.weight"));
                let gate = self.linear(&x, &format!("{p}.mlp.gate_proj"));
                let up = self.linear(&x, &format!("{p}.mlp.up_proj"));
                let act: Vec<f64> = gate
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let down = self.linear(&act, &format!("{p}.mlp.down_proj"));
                hv.iter_mut().zip(down).for_each(|(a, b)| *a += b);
            }
        }
        let head = if self.has("lm_head.weight") {
            "lm_head.weight"
        } else {
            "model.embed_tokens.weight"
        };
        let (shape, w) = &self.weights[head];
        h.iter()
            .map(|hv| {
                let x = self.rms_norm(hv, "model.norm.weight");
                (0..shape[0])
                    .map(|r| (0..hidden).map(|i| w[r * hidden + i] * x[i]).sum())
                    .collect()
            })
            .collect()
    }
}

const ROWS: [&[u32]; 2] = [
    &[296, 72, 101, 108, 108, 111, 297, 10, 5],
    &[1, 250, 33, 299, 0, 120, 64, 64, 295],
];

/// Compares the crate's logits, in f64 and f32, with the reference for both rows of a batch.
fn check(arch: Arch, expect: impl Fn(&Reference)) {
    let dir = tiny_model(arch, 11);
    let reference = Reference::load(dir.path());
    expect(&reference);
    let want: Vec<f64> = ROWS
        .iter()
        .flat_map(|r| reference.logits(r).into_iter().flatten())
        .collect();
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(scale > 1.0, "logits too flat to test anything: {scale}");
    for (dtype, tolerance) in [(DType::F64, 1e-9), (DType::F32, 2e-4)] {
        let model = Model::load(
            dir.path(),
            &LoadOptions {
                dtype,
                device: Device::Cpu,
            },
        )
        .unwrap();
        let logits = model.forward(&batch(&ROWS), Adapter::Off).unwrap();
        assert_eq!(logits.dims(), &[2, ROWS[0].len(), 300]);
        let got = values(&logits);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            worst < tolerance * scale,
            "{arch} {dtype:?}: max |diff| {worst} (logit scale {scale})"
        );
    }
}

#[test]
fn qwen2_with_qkv_bias_matches_reference() {
    check(Arch::Qwen2, |r| {
        assert!(r.has("model.layers.1.self_attn.v_proj.bias"));
        assert!(!r.has("lm_head.weight"));
    });
}

#[test]
fn llama_with_llama3_rope_and_untied_head_matches_reference() {
    check(Arch::Llama, |r| {
        assert_eq!(r.config["rope_scaling"]["rope_type"], "llama3");
        assert!(r.has("lm_head.weight"));
        // All three bands of the llama3 scaling occur at head_dim 16.
        let base: Vec<f64> = (0..8)
            .map(|i| 500_000f64.powf(-(2.0 * i as f64) / 16.0))
            .collect();
        let scaled = r.inv_freq(16);
        assert_eq!(scaled[0], base[0]);
        assert!(scaled[1] < base[1] && scaled[1] > base[1] / 8.0);
        assert!((scaled[7] - base[7] / 8.0).abs() < 1e-18);
    });
}

#[test]
fn qwen3_with_qk_norm_and_wide_heads_matches_reference() {
    check(Arch::Qwen3, |r| {
        assert!(r.has("model.layers.0.self_attn.k_norm.weight"));
        assert_eq!(r.usize("head_dim"), 32);
        assert_ne!(
            r.usize("head_dim"),
            r.usize("hidden_size") / r.usize("num_attention_heads")
        );
    });
}

#[test]
fn rows_of_a_batch_do_not_see_each_other_and_positions_are_causal() {
    let dir = tiny_model(Arch::Qwen2, 3);
    let model = Model::load(dir.path(), &LoadOptions::default()).unwrap();
    let full = values(&model.forward(&batch(&ROWS), Adapter::Off).unwrap());
    let first = values(&model.forward(&batch(&ROWS[..1]), Adapter::Off).unwrap());
    let worst = full
        .iter()
        .zip(&first)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-5, "row 0 alone vs in a batch: {worst}");
    // Changing the last token changes nothing at earlier positions.
    let mut changed = ROWS[0].to_vec();
    *changed.last_mut().unwrap() = 7;
    let other = values(&model.forward(&batch(&[&changed]), Adapter::Off).unwrap());
    let before_last = (ROWS[0].len() - 1) * 300;
    assert_eq!(&other[..before_last], &first[..before_last]);
    assert_ne!(&other[before_last..], &first[before_last..]);
}
