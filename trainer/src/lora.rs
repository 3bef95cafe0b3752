//! LoRA: a trainable low-rank update `ΔW = (alpha / r) · B A` on chosen projections, the
//! base weights staying frozen. `A` starts Kaiming-uniform (as PEFT: `kaiming_uniform_` with
//! `a = √5`, i.e. `U(-1/√in, 1/√in)`) and `B` at zero, so an untrained adapter changes
//! nothing. `A` and `B` are candle [`Var`]s, held in f32 whatever the model computes in
//! (f64 for an f64 model), and cast to the model's dtype in the forward pass.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, Var};

use crate::rng::Rng;
use crate::{Error, Result};
use atdp_model_files::{LoraConfig, ModelConfig, TargetModule};

/// The trainable pair of one adapted projection: `A: [r, in]`, `B: [out, r]`.
#[derive(Debug)]
pub struct LoraLayer {
    a: Var,
    b: Var,
}

impl LoraLayer {
    /// `A`, `[r, in_features]`.
    pub fn a(&self) -> &Var {
        &self.a
    }

    /// `B`, `[out_features, r]`.
    pub fn b(&self) -> &Var {
        &self.b
    }
}

/// The sizes an adapter was built for; an adapter only runs on a model of the same shape.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dims {
    num_layers: usize,
    hidden: usize,
    intermediate: usize,
    q_dim: usize,
    kv_dim: usize,
}

impl Dims {
    fn of(c: &ModelConfig) -> Self {
        Dims {
            num_layers: c.num_hidden_layers,
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            q_dim: c.q_dim(),
            kv_dim: c.kv_dim(),
        }
    }
}

/// A LoRA adapter: one [`LoraLayer`] per adapted projection of every layer.
#[derive(Debug)]
pub struct Lora {
    config: LoraConfig,
    dims: Dims,
    layers: BTreeMap<(usize, TargetModule), LoraLayer>,
}

impl Lora {
    /// A fresh adapter for a model of config `c` whose weights are in `dtype` on `device`:
    /// `A` random (seeded by `config.seed`), `B` zero. [`Lora::new`] takes them from a
    /// loaded model.
    pub(crate) fn init(
        c: &ModelConfig,
        config: LoraConfig,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let dtype = param_dtype(dtype);
        config.validate()?;
        let mut pairs = BTreeMap::new();
        for layer in 0..c.num_hidden_layers {
            for &module in &config.target_modules {
                let (fan_in, fan_out) = module.in_out(c);
                let bound = 1.0 / (fan_in as f64).sqrt();
                let mut rng = Rng::stream(
                    config.seed,
                    &format!("lora_A/{}", module.module_path(layer)),
                );
                let values: Vec<f64> = (0..config.r * fan_in)
                    .map(|_| (2.0 * rng.uniform() - 1.0) * bound)
                    .collect();
                let a = Tensor::from_vec(values, (config.r, fan_in), device)?.to_dtype(dtype)?;
                let b = Tensor::zeros((fan_out, config.r), dtype, device)?;
                pairs.insert((layer, module), (a, b));
            }
        }
        Self::from_pairs(c, config, pairs)
    }

    /// An adapter from given `A`/`B` tensors (loading a saved adapter); shapes are checked.
    pub(crate) fn from_pairs(
        c: &ModelConfig,
        config: LoraConfig,
        pairs: BTreeMap<(usize, TargetModule), (Tensor, Tensor)>,
    ) -> Result<Self> {
        config.validate()?;
        let mut layers = BTreeMap::new();
        for ((layer, module), (a, b)) in pairs {
            let (fan_in, fan_out) = module.in_out(c);
            let expected = [
                (&a, [config.r, fan_in], "lora_A"),
                (&b, [fan_out, config.r], "lora_B"),
            ];
            for (t, shape, which) in expected {
                if t.dims() != shape.as_slice() {
                    return Err(Error::Shape {
                        name: format!("{}.{which}.weight", module.module_path(layer)),
                        location: "the adapter".into(),
                        expected: shape.to_vec(),
                        found: t.dims().to_vec(),
                    });
                }
            }
            layers.insert(
                (layer, module),
                LoraLayer {
                    a: Var::from_tensor(&a)?,
                    b: Var::from_tensor(&b)?,
                },
            );
        }
        Ok(Lora {
            config,
            dims: Dims::of(c),
            layers,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The pair adapting `module` of layer `layer`, if it is a target.
    pub fn layer(&self, layer: usize, module: TargetModule) -> Option<&LoraLayer> {
        self.layers.get(&(layer, module))
    }

    /// Every adapted projection, by layer then module.
    pub fn layers(&self) -> impl Iterator<Item = (usize, TargetModule, &LoraLayer)> {
        self.layers.iter().map(|(&(l, m), pair)| (l, m, pair))
    }

    /// The trainable variables for an optimizer, in a fixed order (by layer, module, `A`
    /// before `B`). They share storage with the adapter: updating them updates it.
    pub fn vars(&self) -> Vec<Var> {
        self.layers
            .values()
            .flat_map(|p| [p.a.clone(), p.b.clone()])
            .collect()
    }

    /// Number of trainable scalars.
    pub fn num_parameters(&self) -> usize {
        self.layers
            .values()
            .map(|p| p.a.elem_count() + p.b.elem_count())
            .sum()
    }

    /// Refuses a model of another shape than the one the adapter was built for.
    pub(crate) fn check_fits(&self, c: &ModelConfig) -> Result<()> {
        let model = Dims::of(c);
        if model != self.dims {
            return Err(Error::invalid(
                "adapter",
                format!(
                    "built for a model of shape {:?}, used with one of shape {model:?}",
                    self.dims
                ),
            ));
        }
        Ok(())
    }

    /// `dropout(x) Aᵀ Bᵀ · alpha / r` for the input `x: [n, in]` of `module` in `layer`, or
    /// `None` when that projection is not adapted. Dropout applies when `dropout_step` is
    /// given, with masks drawn from (seed, step, layer, module).
    pub(crate) fn delta(
        &self,
        layer: usize,
        module: TargetModule,
        x: &Tensor,
        dropout_step: Option<u64>,
    ) -> Result<Option<Tensor>> {
        let Some(pair) = self.layers.get(&(layer, module)) else {
            return Ok(None);
        };
        let dtype = x.dtype();
        let mut input = x.clone();
        if let Some(step) = dropout_step
            && self.config.dropout > 0.0
        {
            let mask = self.dropout_mask(step, layer, module, x.dims2()?, x.device())?;
            input = input.mul(&mask.to_dtype(dtype)?)?;
        }
        let a = pair.a.as_tensor().to_dtype(dtype)?;
        let b = pair.b.as_tensor().to_dtype(dtype)?;
        let delta = input
            .matmul(&a.t()?)?
            .matmul(&b.t()?)?
            .affine(self.config.scale(), 0.0)?;
        Ok(Some(delta))
    }

    /// Inverted dropout: each element kept with probability `1 - p` and scaled by `1 / (1 - p)`.
    fn dropout_mask(
        &self,
        step: u64,
        layer: usize,
        module: TargetModule,
        (rows, cols): (usize, usize),
        device: &Device,
    ) -> Result<Tensor> {
        let p = self.config.dropout;
        let keep = (1.0 / (1.0 - p)) as f32;
        let mut rng = Rng::stream(
            self.config.seed,
            &format!("dropout/{step}/{}", module.module_path(layer)),
        );
        let values: Vec<f32> = (0..rows * cols)
            .map(|_| if rng.uniform() < p { 0.0 } else { keep })
            .collect();
        Ok(Tensor::from_vec(values, (rows, cols), device)?)
    }
}

/// The dtype LoRA weights are held in: f32, or f64 for an f64 model.
fn param_dtype(model: DType) -> DType {
    if model == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tiny() -> ModelConfig {
        ModelConfig::from_json_str(
            r#"{"model_type": "qwen2", "hidden_size": 16, "intermediate_size": 32,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 40}"#,
        )
        .unwrap()
    }

    #[test]
    fn init_is_kaiming_uniform_a_and_zero_b_and_deterministic() {
        let c = tiny();
        let config = LoraConfig {
            r: 4,
            seed: 3,
            ..LoraConfig::default()
        };
        let lora = Lora::init(&c, config.clone(), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(lora.layers().count(), 2 * 7);
        assert_eq!(lora.vars().len(), 2 * 2 * 7);
        let down = lora.layer(1, TargetModule::DownProj).unwrap();
        assert_eq!(down.a().dims(), &[4, 32]);
        assert_eq!(down.b().dims(), &[16, 4]);
        let a = down.a().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let bound = 1.0 / 32f32.sqrt();
        assert!(a.iter().all(|v| v.abs() <= bound));
        assert!(a.iter().any(|v| v.abs() > bound / 2.0));
        let b = down.b().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(b.iter().all(|v| *v == 0.0));

        let again = Lora::init(&c, config, DType::F32, &Device::Cpu).unwrap();
        let a2 = again
            .layer(1, TargetModule::DownProj)
            .unwrap()
            .a()
            .flatten_all()
            .unwrap();
        assert_eq!(a, a2.to_vec1::<f32>().unwrap());
        let q0 = lora
            .layer(0, TargetModule::QProj)
            .unwrap()
            .a()
            .flatten_all()
            .unwrap();
        let q1 = lora
            .layer(1, TargetModule::QProj)
            .unwrap()
            .a()
            .flatten_all()
            .unwrap();
        assert_ne!(q0.to_vec1::<f32>().unwrap(), q1.to_vec1::<f32>().unwrap());
    }

    #[test]
    fn dropout_is_seeded_by_step_and_keeps_the_expected_share() {
        let c = tiny();
        let config = LoraConfig {
            dropout: 0.25,
            target_modules: vec![TargetModule::QProj],
            ..LoraConfig::default()
        };
        let lora = Lora::init(&c, config, DType::F32, &Device::Cpu).unwrap();
        let mask = |step| {
            lora.dropout_mask(step, 0, TargetModule::QProj, (50, 40), &Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let m = mask(1);
        assert_eq!(m, mask(1));
        assert_ne!(m, mask(2));
        let kept = m.iter().filter(|v| **v > 0.0).count() as f64 / m.len() as f64;
        assert!((kept - 0.75).abs() < 0.05, "{kept}");
        assert!(
            m.iter()
                .all(|v| *v == 0.0 || (*v - 1.0 / 0.75).abs() < 1e-6)
        );
    }

    #[test]
    fn config_is_checked() {
        let bad = [
            LoraConfig {
                r: 0,
                ..LoraConfig::default()
            },
            LoraConfig {
                alpha: f64::NAN,
                ..LoraConfig::default()
            },
            LoraConfig {
                dropout: 1.0,
                ..LoraConfig::default()
            },
            LoraConfig {
                target_modules: vec![],
                ..LoraConfig::default()
            },
            LoraConfig {
                target_modules: vec![TargetModule::QProj, TargetModule::QProj],
                ..LoraConfig::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(
                    config.validate(),
                    Err(atdp_model_files::Error::Invalid { .. })
                ),
                "{config:?}"
            );
        }
        assert_eq!(
            "down_proj".parse::<TargetModule>().unwrap(),
            TargetModule::DownProj
        );
        assert!("lm_head".parse::<TargetModule>().is_err());
        assert_eq!(
            TargetModule::GateProj.module_path(3),
            "model.layers.3.mlp.gate_proj"
        );
    }
}
