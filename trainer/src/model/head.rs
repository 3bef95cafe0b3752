//! The output head fused with the log-probabilities of the target tokens: logits are made and
//! dropped a chunk of rows at a time, so no `[tokens, vocab]` tensor outlives its chunk. For a
//! 151,936-token vocabulary the full logits of 1,024 positions take 0.6 GB in f32, and the
//! log-softmax built from ops keeps several such tensors alive for the backward pass.
//!
//! The gradient is exact. For a row with hidden state `h`, head `W` and target `t`,
//! `∂ log p(t) / ∂h = W[t] - softmax(h Wᵀ) W`; it is computed with the chunk's logits and
//! attached to the result through a surrogate whose value is the log-probability and whose
//! gradient with respect to `h` is that vector: `lp + (h·g - stop(h·g))`.

use candle_core::{D, Tensor};

use super::numeric::upcast;
use crate::Result;

/// Logit elements made at once (per chunk of rows): 16M, 64 MB in f32.
const CHUNK_ELEMENTS: usize = 16 << 20;

/// Per-row log-probability of the target and entropy of the next-token distribution.
#[derive(Debug, Clone)]
pub struct TokenStats {
    /// `log p(target)` for each scored position, differentiable when the pass was.
    pub log_probs: Tensor,
    /// The entropy of each scored position's distribution (no gradient).
    pub entropy: Tensor,
}

/// `log softmax(x Wᵀ)[target]` and the entropy for each row of `x` (`[rows, hidden]`), with
/// `head` `[vocab, hidden]` and `targets` `[rows]` (u32). Computed in f32 (f64 for an f64
/// model). Differentiable with respect to `x` when `x` is tracked.
pub(crate) fn target_stats(x: &Tensor, head: &Tensor, targets: &Tensor) -> Result<TokenStats> {
    let chunk = CHUNK_ELEMENTS / head.dim(0)?.max(1);
    target_stats_in_chunks(x, head, targets, chunk)
}

fn target_stats_in_chunks(
    x: &Tensor,
    head: &Tensor,
    targets: &Tensor,
    chunk: usize,
) -> Result<TokenStats> {
    let (rows, _) = x.dims2()?;
    let need_grad = x.track_op();
    let detached = x.detach();
    let chunk = chunk.clamp(1, rows.max(1));
    let (mut picked, mut entropy, mut grads) = (Vec::new(), Vec::new(), Vec::new());
    let mut from = 0;
    while from < rows {
        let n = chunk.min(rows - from);
        let h = detached.narrow(0, from, n)?;
        let t = targets.narrow(0, from, n)?.unsqueeze(1)?.contiguous()?;
        let logits = h.matmul(&head.t()?)?;
        let logits = logits.to_dtype(upcast(logits.dtype()))?;
        let max = logits.max_keepdim(D::Minus1)?;
        let shifted = logits.broadcast_sub(&max)?;
        drop(logits);
        let log_z = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
        let log_p = shifted.broadcast_sub(&log_z)?;
        drop(shifted);
        picked.push(log_p.gather(&t, D::Minus1)?.squeeze(1)?);
        let p = log_p.exp()?;
        entropy.push(p.mul(&log_p)?.sum(D::Minus1)?.neg()?);
        drop(log_p);
        if need_grad {
            // W[t] - pᵀW, in the hidden states' dtype.
            let expected = p.to_dtype(head.dtype())?.matmul(head)?;
            let target_rows = head.index_select(&t.squeeze(1)?, 0)?;
            grads.push(target_rows.sub(&expected)?.to_dtype(x.dtype())?);
        }
        from += n;
    }
    let picked = Tensor::cat(&picked, 0)?;
    let entropy = Tensor::cat(&entropy, 0)?;
    if !need_grad {
        return Ok(TokenStats {
            log_probs: picked,
            entropy,
        });
    }
    let grad = Tensor::cat(&grads, 0)?;
    let dot = x.mul(&grad)?.sum(D::Minus1)?.to_dtype(picked.dtype())?;
    let log_probs = dot.sub(&dot.detach())?.add(&picked)?;
    Ok(TokenStats { log_probs, entropy })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use candle_core::{Device, Var};

    use super::*;
    use crate::model::token_log_probs;

    /// The fused head against logits built whole: the same values, the same gradient.
    #[test]
    fn matches_the_unfused_log_softmax_in_value_and_gradient() {
        let dev = Device::Cpu;
        let (rows, hidden, vocab) = (5, 4, 7);
        let xs: Vec<f64> = (0..rows * hidden)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0)
            .collect();
        let ws: Vec<f64> = (0..vocab * hidden)
            .map(|i| ((i * 5 % 13) as f64 - 6.0) / 4.0)
            .collect();
        let head = Tensor::from_vec(ws, (vocab, hidden), &dev).unwrap();
        let targets = Tensor::new(&[0u32, 6, 3, 3, 1], &dev).unwrap();
        let weights = Tensor::new(&[1.0f64, -2.0, 0.5, 3.0, -1.0], &dev).unwrap();

        // d(Σ weights · log-probs)/dx, flattened.
        let weighted_grad = |lp: &Tensor, x: &Var| -> Vec<f64> {
            let grads = lp
                .mul(&weights)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let g = grads.get(x).unwrap().flatten_all().unwrap();
            g.to_vec1::<f64>().unwrap()
        };
        let var = || Var::from_tensor(&Tensor::from_vec(xs.clone(), (rows, hidden), &dev).unwrap());

        let x = var().unwrap();
        let fused = target_stats(x.as_tensor(), &head, &targets).unwrap();
        let fused_grad = weighted_grad(&fused.log_probs, &x);

        let y = var().unwrap();
        let logits = y.as_tensor().matmul(&head.t().unwrap()).unwrap();
        let plain = token_log_probs(&logits, &targets).unwrap();
        let plain_grad = weighted_grad(&plain, &y);

        let (a, b) = (
            fused.log_probs.to_vec1::<f64>().unwrap(),
            plain.to_vec1::<f64>().unwrap(),
        );
        for (a, b) in a.iter().zip(&b) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        for (a, b) in fused_grad.iter().zip(&plain_grad) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        // Entropy of row 0 by its definition.
        let l = logits.get(0).unwrap().to_vec1::<f64>().unwrap();
        let z: f64 = l.iter().map(|v| v.exp()).sum();
        let h: f64 = -l.iter().map(|v| (v.exp() / z) * (v - z.ln())).sum::<f64>();
        let e = fused.entropy.to_vec1::<f64>().unwrap()[0];
        assert!((e - h).abs() < 1e-12, "{e} vs {h}");
    }

    /// Rows split over several chunks give what one chunk gives.
    #[test]
    fn chunking_does_not_change_the_result() {
        let dev = Device::Cpu;
        let head = Tensor::new(&[[0.5f64, -1.0], [2.0, 0.25], [-0.75, 1.5]], &dev).unwrap();
        let x = Var::new(
            &[
                [1.0f64, 0.0],
                [2.0, -1.0],
                [-1.0, 3.0],
                [0.5, 0.5],
                [3.0, 1.0],
            ],
            &dev,
        )
        .unwrap();
        let targets = Tensor::new(&[0u32, 1, 2, 2, 1], &dev).unwrap();
        let run = |chunk: usize| {
            let stats = target_stats_in_chunks(x.as_tensor(), &head, &targets, chunk).unwrap();
            let grads = stats.log_probs.sum_all().unwrap().backward().unwrap();
            let grad = grads
                .get(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f64>()
                .unwrap();
            let mut all = stats.log_probs.to_vec1::<f64>().unwrap();
            all.extend(stats.entropy.to_vec1::<f64>().unwrap());
            all.extend(grad);
            all
        };
        let whole = run(5);
        assert_eq!(whole.len(), 5 + 5 + 10);
        for chunk in [1, 2, 3] {
            let chunked = run(chunk);
            for (a, b) in chunked.iter().zip(&whole) {
                assert!((a - b).abs() < 1e-12, "chunk {chunk}: {a} vs {b}");
            }
        }
    }
}
