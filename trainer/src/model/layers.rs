//! The decoder block: RMSNorm, attention with grouped-query heads and RoPE, the SwiGLU MLP,
//! and the projections LoRA attaches to. Everything is composed from tensor ops that have a
//! backward pass; hidden states travel as `[batch * seq, hidden]`.

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, D, Layout, Shape, Storage, Tensor};

use super::numeric::upcast;
use super::{attention, rope};
use crate::Result;
use atdp_model_files::TargetModule;

use crate::lora::Lora;

/// The adapter in effect for one forward pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Active<'a> {
    pub(crate) lora: Option<&'a Lora>,
    /// `Some(step)` in training: dropout on, masks seeded by the step.
    pub(crate) dropout_step: Option<u64>,
}

/// `y = x Wᵀ + b`, plus the LoRA update of this module when an adapter is active.
#[derive(Debug)]
pub(crate) struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
    pub(crate) module: TargetModule,
}

impl Linear {
    /// `x` is `[rows, in_features]`.
    pub(crate) fn forward(&self, x: &Tensor, layer: usize, adapter: Active<'_>) -> Result<Tensor> {
        let mut y = frozen_matmul(x, &self.weight)?;
        if let Some(bias) = &self.bias {
            y = y.broadcast_add(bias)?;
        }
        if let Some(lora) = adapter.lora
            && let Some(delta) = lora.delta(layer, self.module, x, adapter.dropout_step)?
        {
            y = y.add(&delta)?;
        }
        Ok(y)
    }
}

/// `x Wᵀ` for `x` `[rows, in]` and a frozen `weight` `[out, in]`, with a backward pass that
/// gives only the gradient of `x`. candle's own matmul backward also computes the gradient of
/// the weight, `xᵀ · grad`, even for a tensor that is not a variable: for a base model that
/// is one more matmul per projection and a weight-sized tensor held until the end of the
/// backward pass (2 GB of f32 for a 0.5B model), both wasted on frozen weights.
pub(crate) fn frozen_matmul(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    Ok(x.apply_op1(FrozenMatmul {
        weight: weight.clone(),
    })?)
}

struct FrozenMatmul {
    weight: Tensor,
}

/// `x Wᵀ` on one backend's storage: the weight's transposed layout, no copy.
fn matmul_transposed<S: BackendStorage>(
    x: &S,
    x_layout: &Layout,
    w: &S,
    w_layout: &Layout,
) -> candle_core::Result<(S, Shape)> {
    let (rows, inner) = x_layout.shape().dims2()?;
    let (out, w_inner) = w_layout.shape().dims2()?;
    if inner != w_inner {
        candle_core::bail!(
            "frozen matmul: input [{rows}, {inner}] does not fit weight [{out}, {w_inner}]"
        );
    }
    let y = x.matmul(
        w,
        (1, rows, out, inner),
        x_layout,
        &w_layout.transpose(0, 1)?,
    )?;
    Ok((y, Shape::from((rows, out))))
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (storage, w_layout) = self.weight.storage_and_layout();
        match &*storage {
            Storage::Cpu(w) => matmul_transposed(x, layout, w, w_layout),
            _ => candle_core::bail!("frozen matmul: the weight is not on the CPU"),
        }
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (storage, w_layout) = self.weight.storage_and_layout();
        match &*storage {
            Storage::Cuda(w) => matmul_transposed(x, layout, w, w_layout),
            _ => candle_core::bail!("frozen matmul: the weight is not on the GPU"),
        }
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.matmul(&self.weight)?))
    }
}

/// `x / sqrt(mean(x²) + eps) * weight` over the last dimension, computed in f32 for
/// half-precision inputs.
#[derive(Debug)]
pub(crate) struct RmsNorm {
    pub(crate) weight: Tensor,
    pub(crate) eps: f64,
}

impl RmsNorm {
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let wide = x.to_dtype(upcast(dtype))?;
        let inv_rms = wide
            .sqr()?
            .mean_keepdim(D::Minus1)?
            .affine(1.0, self.eps)?
            .sqrt()?
            .recip()?;
        Ok(wide
            .broadcast_mul(&inv_rms)?
            .to_dtype(dtype)?
            .broadcast_mul(&self.weight)?)
    }
}

/// What every layer of one forward pass shares: the batch shape, RoPE tables and the mask.
#[derive(Debug)]
pub(crate) struct PassContext<'a> {
    pub(crate) batch: usize,
    pub(crate) seq: usize,
    /// `[seq, 1, head_dim]`, broadcast over the heads of `[batch, seq, heads, head_dim]`.
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    /// `[seq, seq]`, 0 on and below the diagonal, -inf above, in the upcast dtype; made on
    /// first use, by the attention that builds its scores from ops (not the fused one).
    pub(crate) causal_mask: OnceLock<Tensor>,
    pub(crate) adapter: Active<'a>,
}

impl PassContext<'_> {
    fn causal_mask(&self) -> Result<Tensor> {
        if let Some(mask) = self.causal_mask.get() {
            return Ok(mask.clone());
        }
        let mask = attention::causal_mask(self.seq, self.cos.dtype(), self.cos.device())?;
        Ok(self.causal_mask.get_or_init(|| mask).clone())
    }
}

#[derive(Debug)]
pub(crate) struct Attention {
    pub(crate) q_proj: Linear,
    pub(crate) k_proj: Linear,
    pub(crate) v_proj: Linear,
    pub(crate) o_proj: Linear,
    pub(crate) q_norm: Option<RmsNorm>,
    pub(crate) k_norm: Option<RmsNorm>,
    pub(crate) num_heads: usize,
    pub(crate) num_kv_heads: usize,
    pub(crate) head_dim: usize,
}

impl Attention {
    /// `[batch, seq, heads, head_dim]` from a projection's `[batch * seq, heads * head_dim]`
    /// (a reshape, no copy), with the per-head norm (Qwen3) applied.
    fn heads(
        &self,
        x: &Tensor,
        heads: usize,
        norm: Option<&RmsNorm>,
        ctx: &PassContext<'_>,
    ) -> Result<Tensor> {
        let x = x.reshape((ctx.batch, ctx.seq, heads, self.head_dim))?;
        match norm {
            Some(norm) => norm.forward(&x),
            None => Ok(x),
        }
    }

    fn forward(&self, x: &Tensor, layer: usize, ctx: &PassContext<'_>) -> Result<Tensor> {
        let adapter = ctx.adapter;
        let q = self.q_proj.forward(x, layer, adapter)?;
        let k = self.k_proj.forward(x, layer, adapter)?;
        let v = self.v_proj.forward(x, layer, adapter)?;
        let q = self.heads(&q, self.num_heads, self.q_norm.as_ref(), ctx)?;
        let k = self.heads(&k, self.num_kv_heads, self.k_norm.as_ref(), ctx)?;
        let v = self.heads(&v, self.num_kv_heads, None, ctx)?;
        let q = rope::apply(&q, &ctx.cos, &ctx.sin)?;
        let k = rope::apply(&k, &ctx.cos, &ctx.sin)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let out = attention::causal_attention(&q, &k, &v, scale, || ctx.causal_mask())?
            .reshape((ctx.batch * ctx.seq, self.num_heads * self.head_dim))?;
        self.o_proj.forward(&out, layer, adapter)
    }
}

/// `down(silu(gate(x)) * up(x))`.
#[derive(Debug)]
pub(crate) struct Mlp {
    pub(crate) gate_proj: Linear,
    pub(crate) up_proj: Linear,
    pub(crate) down_proj: Linear,
}

impl Mlp {
    fn forward(&self, x: &Tensor, layer: usize, adapter: Active<'_>) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x, layer, adapter)?.silu()?;
        let up = self.up_proj.forward(x, layer, adapter)?;
        self.down_proj.forward(&gate.mul(&up)?, layer, adapter)
    }
}

/// One pre-norm decoder layer.
#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) input_layernorm: RmsNorm,
    pub(crate) attention: Attention,
    pub(crate) post_attention_layernorm: RmsNorm,
    pub(crate) mlp: Mlp,
}

impl Block {
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        layer: usize,
        ctx: &PassContext<'_>,
    ) -> Result<Tensor> {
        let attn = self
            .attention
            .forward(&self.input_layernorm.forward(x)?, layer, ctx)?;
        let x = x.add(&attn)?;
        let mlp = self.mlp.forward(
            &self.post_attention_layernorm.forward(&x)?,
            layer,
            ctx.adapter,
        )?;
        Ok(x.add(&mlp)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use candle_core::Device;

    use crate::model::numeric::softmax_last_dim;

    use super::*;

    #[test]
    fn softmax_matches_definition_and_ignores_minus_infinity() {
        let x = Tensor::new(
            &[[1.0f64, 2.0, f64::NEG_INFINITY], [1000.0, 1000.0, 1000.0]],
            &Device::Cpu,
        )
        .unwrap();
        let p = softmax_last_dim(&x).unwrap().to_vec2::<f64>().unwrap();
        let e = 1f64.exp() + 2f64.exp();
        assert!((p[0][0] - 1f64.exp() / e).abs() < 1e-15);
        assert_eq!(p[0][2], 0.0);
        assert!(p[1].iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-15));
    }

    #[test]
    fn rms_norm_matches_definition() {
        let x = Tensor::new(&[[3.0f64, 4.0]], &Device::Cpu).unwrap();
        let norm = RmsNorm {
            weight: Tensor::new(&[1.0f64, 2.0], &Device::Cpu).unwrap(),
            eps: 0.5,
        };
        let y = norm.forward(&x).unwrap().to_vec2::<f64>().unwrap();
        let rms = (12.5f64 + 0.5).sqrt();
        assert!((y[0][0] - 3.0 / rms).abs() < 1e-15 && (y[0][1] - 8.0 / rms).abs() < 1e-15);
    }
}
