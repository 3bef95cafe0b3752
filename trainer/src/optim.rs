//! AdamW over the LoRA variables, the warm-up + cosine learning-rate schedule, and gradient
//! clipping by global norm. The optimizer is this crate's own (candle-nn's `AdamW` keeps its
//! moments private, and a checkpoint must save them for an exact resume).

use candle_core::{Tensor, Var};

use crate::Result;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct AdamWConfig {
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// AdamW (Loshchilov and Hutter) with bias correction.
#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    vars: Vec<Var>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    t: u64,
}

impl AdamW {
    /// An optimizer of `vars` with zero moments.
    pub fn new(vars: Vec<Var>, config: AdamWConfig) -> Result<Self> {
        let m = vars
            .iter()
            .map(|v| v.as_tensor().zeros_like())
            .collect::<candle_core::Result<Vec<_>>>()?;
        let v = m.clone();
        Ok(AdamW {
            config,
            vars,
            m,
            v,
            t: 0,
        })
    }

    /// One update with `grads` (one per variable, in order) at learning rate `lr`.
    pub fn step(&mut self, grads: &[Tensor], lr: f64) -> Result<()> {
        self.t += 1;
        let c = &self.config;
        let t = self.t as i32;
        let correct1 = 1.0 - c.beta1.powi(t);
        let correct2 = 1.0 - c.beta2.powi(t);
        for (i, var) in self.vars.iter().enumerate() {
            let g = &grads[i];
            let m = self.m[i]
                .affine(c.beta1, 0.0)?
                .add(&g.affine(1.0 - c.beta1, 0.0)?)?;
            let v = self.v[i]
                .affine(c.beta2, 0.0)?
                .add(&g.sqr()?.affine(1.0 - c.beta2, 0.0)?)?;
            let m_hat = m.affine(1.0 / correct1, 0.0)?;
            let v_hat = v.affine(1.0 / correct2, 0.0)?;
            let update = m_hat.div(&v_hat.sqrt()?.affine(1.0, c.eps)?)?;
            let theta = var.as_tensor();
            let next = theta
                .affine(1.0 - lr * c.weight_decay, 0.0)?
                .sub(&update.affine(lr, 0.0)?)?;
            var.set(&next)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// The moments and the step count, for a checkpoint.
    pub fn state(&self) -> (&[Tensor], &[Tensor], u64) {
        (&self.m, &self.v, self.t)
    }

    /// Restores moments and step count from a checkpoint (shapes are checked).
    pub fn restore(&mut self, m: Vec<Tensor>, v: Vec<Tensor>, t: u64) -> Result<()> {
        let fits = |ts: &[Tensor]| {
            ts.len() == self.vars.len()
                && ts.iter().zip(&self.vars).all(|(a, b)| a.dims() == b.dims())
        };
        if !fits(&m) || !fits(&v) {
            return Err(crate::Error::invalid(
                "checkpoint",
                "the optimizer moments do not match the adapter; was the LoRA config changed?",
            ));
        }
        self.m = m;
        self.v = v;
        self.t = t;
        Ok(())
    }
}

/// The learning rate at optimizer step `step` (0-based) of `total`: linear warm-up from
/// `lr / warmup` to `lr` over `warmup` steps, then a cosine decay to `min_ratio · lr`.
pub fn learning_rate(step: u64, total: u64, lr: f64, warmup: u64, min_ratio: f64) -> f64 {
    if step < warmup {
        return lr * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let progress = ((step - warmup) as f64 / span).min(1.0);
    let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
    lr * (min_ratio + (1.0 - min_ratio) * cosine)
}

/// Scales `grads` in place so that their global L2 norm is at most `max_norm` (when
/// `max_norm > 0`); returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut [Tensor], max_norm: f64) -> Result<f64> {
    let mut total = 0.0f64;
    for g in grads.iter() {
        total += g
            .to_dtype(candle_core::DType::F64)?
            .sqr()?
            .sum_all()?
            .to_scalar::<f64>()?;
    }
    let norm = total.sqrt();
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-12);
        for g in grads.iter_mut() {
            *g = g.affine(scale, 0.0)?;
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use candle_core::Device;

    use super::*;

    #[test]
    fn adamw_first_step_moves_by_lr_against_the_gradient_sign() {
        let var = Var::new(&[1.0f64, -1.0], &Device::Cpu).unwrap();
        let mut opt = AdamW::new(vec![var.clone()], AdamWConfig::default()).unwrap();
        let g = Tensor::new(&[0.5f64, -3.0], &Device::Cpu).unwrap();
        opt.step(&[g], 0.1).unwrap();
        let v = var.as_tensor().to_vec1::<f64>().unwrap();
        assert!(
            (v[0] - 0.9).abs() < 1e-6 && (v[1] + 0.9).abs() < 1e-6,
            "{v:?}"
        );
    }

    #[test]
    fn schedule_and_clipping() {
        assert!((learning_rate(0, 100, 1.0, 10, 0.1) - 0.1).abs() < 1e-12);
        assert!((learning_rate(9, 100, 1.0, 10, 0.1) - 1.0).abs() < 1e-12);
        assert!((learning_rate(10, 100, 1.0, 10, 0.1) - 1.0).abs() < 1e-12);
        assert!((learning_rate(100, 100, 1.0, 10, 0.1) - 0.1).abs() < 1e-12);
        let mut g = vec![Tensor::new(&[3.0f64, 4.0], &Device::Cpu).unwrap()];
        assert_eq!(clip_grad_norm(&mut g, 1.0).unwrap(), 5.0);
        let v = g[0].to_vec1::<f64>().unwrap();
        assert!((v[0] - 0.6).abs() < 1e-9 && (v[1] - 0.8).abs() < 1e-9);
    }
}
