//! Rotary position embeddings, composed from basic tensor ops (narrow, neg, cat, mul, add) so
//! that gradients flow through them; candle's fused `rope` kernels have no backward.

use candle_core::{D, DType, Device, Tensor};

use crate::Result;
use atdp_model_files::RopeScaling;

/// The inverse frequencies `theta^(-2i/d)` for `i < d/2`, rescaled as `rope_scaling` says
/// (transformers' `_compute_linear_scaling_rope_parameters` and
/// `_compute_llama3_parameters`).
pub(crate) fn inv_freq(head_dim: usize, theta: f64, scaling: Option<RopeScaling>) -> Vec<f64> {
    let base: Vec<f64> = (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
        .collect();
    match scaling {
        None => base,
        Some(RopeScaling::Linear { factor }) => base.into_iter().map(|f| f / factor).collect(),
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        }) => {
            let old = original_max_position_embeddings as f64;
            let low_freq_wavelen = old / low_freq_factor;
            let high_freq_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|freq| {
                    let wavelen = std::f64::consts::TAU / freq;
                    if wavelen < high_freq_wavelen {
                        freq
                    } else if wavelen > low_freq_wavelen {
                        freq / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * freq / factor + smooth * freq
                    }
                })
                .collect()
        }
    }
}

/// The cos and sin tables `[seq, head_dim]` for positions `0..seq`, each frequency repeated
/// in both halves as the rotate-half formulation expects.
pub(crate) fn tables(
    inv_freq: &[f64],
    seq: usize,
    dtype: DType,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let half = inv_freq.len();
    let mut cos = Vec::with_capacity(seq * half * 2);
    let mut sin = Vec::with_capacity(seq * half * 2);
    for pos in 0..seq {
        for _ in 0..2 {
            for f in inv_freq {
                let angle = pos as f64 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
    }
    let cos = Tensor::from_vec(cos, (seq, half * 2), device)?.to_dtype(dtype)?;
    let sin = Tensor::from_vec(sin, (seq, half * 2), device)?.to_dtype(dtype)?;
    Ok((cos, sin))
}

/// `x * cos + rotate_half(x) * sin` for `x: [.., head_dim]` and tables that broadcast to it
/// (`[seq, 1, head_dim]` for `[batch, seq, heads, head_dim]`), where
/// `rotate_half([x1, x2]) = [-x2, x1]`.
pub(crate) fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let x1 = x.narrow(D::Minus1, 0, half)?;
    let x2 = x.narrow(D::Minus1, half, half)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    Ok(x.broadcast_mul(cos)?.add(&rotated.broadcast_mul(sin)?)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn llama3_scaling_keeps_high_scales_low_and_blends_between() {
        // head_dim 16, theta 10000: wavelengths 2π·10000^(i/8) ≈ 6.3, 19.9, 62.8, 198.7, …
        let scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64,
        };
        let base = inv_freq(16, 10_000.0, None);
        let scaled = inv_freq(16, 10_000.0, Some(scaling));
        assert_eq!(scaled[0], base[0]); // wavelength 6.3 < 64/4: kept
        for i in 3..8 {
            assert!((scaled[i] - base[i] / 8.0).abs() < 1e-15); // > 64: divided
        }
        // Wavelength 19.9 sits between 16 and 64: smooth = (64/19.87 - 1) / 3.
        let wavelen = std::f64::consts::TAU / base[1];
        let smooth = (64.0 / wavelen - 1.0) / 3.0;
        let want = (1.0 - smooth) * base[1] / 8.0 + smooth * base[1];
        assert!((scaled[1] - want).abs() < 1e-15);
        assert!(scaled[1] < base[1] && scaled[1] > base[1] / 8.0);

        let linear = inv_freq(16, 10_000.0, Some(RopeScaling::Linear { factor: 2.0 }));
        assert!(
            linear
                .iter()
                .zip(&base)
                .all(|(l, b)| (l - b / 2.0).abs() < 1e-15)
        );
    }

    #[test]
    fn rotation_preserves_pairs_norm_and_position_zero() {
        let device = Device::Cpu;
        let freqs = inv_freq(4, 10_000.0, None);
        let (cos, sin) = tables(&freqs, 3, DType::F64, &device).unwrap();
        let x = Tensor::from_vec([1.0f64, 2.0, 3.0, 4.0].repeat(3), (1, 1, 3, 4), &device).unwrap();
        let y = apply(&x, &cos, &sin).unwrap().squeeze(0).unwrap();
        let y = y.to_vec3::<f64>().unwrap();
        let rows = &y[0];
        assert_eq!(rows[0], vec![1.0, 2.0, 3.0, 4.0]);
        // Position 1: the pair (x0, x2) turns by angle 1·f0 = 1.
        let (c, s) = (1f64.cos(), 1f64.sin());
        assert!((rows[1][0] - (1.0 * c - 3.0 * s)).abs() < 1e-12);
        assert!((rows[1][2] - (3.0 * c + 1.0 * s)).abs() < 1e-12);
        for row in rows {
            let n0 = row[0].powi(2) + row[2].powi(2);
            let n1 = row[1].powi(2) + row[3].powi(2);
            assert!((n0 - 10.0).abs() < 1e-12 && (n1 - 20.0).abs() < 1e-12);
        }
    }
}
