//! The numerics the layers and the attention share: the dtype reductions run in, and a
//! softmax with a backward pass.

use candle_core::{D, DType, Tensor};

use crate::Result;

/// The dtype reductions run in: f32 for half-precision weights (as transformers does for
/// RMSNorm and softmax), the weights' own dtype otherwise.
pub(crate) fn upcast(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// Softmax over the last dimension: `exp(x - max) / sum(exp(x - max))`. The max is a
/// constant for the gradient (the result does not depend on it).
pub(crate) fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let exp = x.broadcast_sub(&max)?.exp()?;
    let sum = exp.sum_keepdim(D::Minus1)?;
    Ok(exp.broadcast_div(&sum)?)
}
