//! Causal self-attention for training that never holds the `[heads, seq, seq]` scores.
//!
//! On the CPU, [`causal_attention`] is one candle op with its own backward pass, built the way
//! flash attention is built: the queries are taken a block of [`BLOCK`] positions at a time,
//! and for each block the scores against the keys it may see (`q kᵀ · scale`, one matrix
//! product per key/value head, the query heads that share it stacked as rows), their causal
//! softmax and the product with the values are made and dropped. What the block keeps is its
//! output rows and each row's log-sum-exp. The backward pass recomputes a block's
//! probabilities from the queries, the keys and that log-sum-exp, and makes the gradients of
//! the queries, keys and values from them; nothing of size `seq²` outlives its block. A
//! block's scores are whole rows (`heads · BLOCK · seq` values, 14 MB for 14 heads at 4,096
//! positions in f32), so the softmax is exact per block and needs no running rescaling.
//!
//! Layout: queries `[batch, seq, heads, head_dim]`, keys and values `[batch, seq, kv_heads,
//! head_dim]` (the projections' own layout: no transpose, and no copy of the key/value heads
//! for grouped-query attention), output `[batch, seq, heads, head_dim]`. Query head `h` reads
//! key/value head `h / (heads / kv_heads)`, as transformers' `repeat_kv` orders them.
//!
//! The matrix products are candle's CPU matmul (the `gemm` crate, threaded); the softmax and
//! its gradient run over rows in parallel on rayon's pool, which `gemm` uses too. f32 and f64
//! compute natively, f16 and bf16 in f32. Elsewhere (CUDA) [`causal_attention_unfused`] is
//! used: the scores built from ops, as in the reference formulation, with a `[seq, seq]` mask.

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Storage, Tensor, WithDType};
use rayon::prelude::*;

use super::numeric::{softmax_last_dim, upcast};
use crate::Result;

/// Query positions per block. With Qwen2-0.5B's 7 query heads per key/value head, a block is a
/// 448-row matrix product per key/value head.
pub(crate) const BLOCK: usize = 64;

/// `softmax(q kᵀ · scale + causal mask) v` for `q` `[batch, seq, heads, head_dim]` and `k`,
/// `v` `[batch, seq, kv_heads, head_dim]`, giving `[batch, seq, heads, head_dim]`.
/// Differentiable in all three. `causal_mask` makes the `[seq, seq]` mask (0 on and below the
/// diagonal, -inf above) when the unfused path needs it.
pub(crate) fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    causal_mask: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    if !q.device().is_cpu() {
        return causal_attention_unfused(q, k, v, scale, &causal_mask()?);
    }
    fused(q, k, v, scale, BLOCK)
}

/// The fused op with a chosen block size (tests use small blocks to cross block boundaries).
pub(crate) fn fused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    block: usize,
) -> Result<Tensor> {
    let dtype = q.dtype();
    let wide = upcast(dtype);
    let op = |t: &Tensor| -> Result<Tensor> { Ok(t.to_dtype(wide)?.contiguous()?) };
    let out = op(q)?.apply_op3(
        &op(k)?,
        &op(v)?,
        FusedCausalAttention {
            scale,
            block: block.max(1),
            lse: OnceLock::new(),
        },
    )?;
    Ok(out.to_dtype(dtype)?)
}

/// The same attention composed from tensor ops (scores, mask, softmax, product), holding the
/// `[batch, heads, seq, seq]` scores: the path for devices without the fused op, and the
/// reference the fused op is tested against.
pub(crate) fn causal_attention_unfused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    causal_mask: &Tensor,
) -> Result<Tensor> {
    let (_, _, heads, _) = q.dims4()?;
    let (_, _, kv_heads, _) = k.dims4()?;
    let n_rep = heads / kv_heads.max(1);
    let q = q.transpose(1, 2)?.contiguous()?;
    let k = repeat_kv(&k.transpose(1, 2)?, n_rep)?.contiguous()?;
    let v = repeat_kv(&v.transpose(1, 2)?, n_rep)?.contiguous()?;
    let dtype = q.dtype();
    let scores = q
        .matmul(&k.t()?)?
        .to_dtype(upcast(dtype))?
        .affine(scale, 0.0)?
        .broadcast_add(causal_mask)?;
    let probs = softmax_last_dim(&scores)?.to_dtype(dtype)?;
    Ok(probs.matmul(&v)?.transpose(1, 2)?)
}

/// Repeats each key/value head `n_rep` times, head `h` of the result being kv head
/// `h / n_rep` (transformers' `repeat_kv`), for `x` `[batch, kv_heads, seq, head_dim]`.
fn repeat_kv(x: &Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x.clone());
    }
    let (b, kv, s, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?
        .broadcast_as((b, kv, n_rep, s, d))?
        .reshape((b, kv * n_rep, s, d))?)
}

/// A float the fused op computes in.
trait Element: WithDType {
    const NEG_INFINITY: Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
}

impl Element for f32 {
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn ln(self) -> Self {
        f32::ln(self)
    }
}

impl Element for f64 {
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
}

/// The sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Dims {
    batch: usize,
    seq: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Dims {
    fn of(q: &Layout, k: &Layout, v: &Layout) -> candle_core::Result<Self> {
        let (batch, seq, heads, head_dim) = q.shape().dims4()?;
        let (kb, ks, kv_heads, kd) = k.shape().dims4()?;
        if (kb, ks, kd) != (batch, seq, head_dim)
            || v.dims() != k.dims()
            || kv_heads == 0
            || heads % kv_heads != 0
        {
            candle_core::bail!(
                "fused attention: queries {:?} do not fit keys {:?} and values {:?}",
                q.dims(),
                k.dims(),
                v.dims()
            );
        }
        Ok(Dims {
            batch,
            seq,
            heads,
            kv_heads,
            head_dim,
        })
    }

    fn n_rep(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Offset of `(row, position, head)` in a `[batch, seq, heads, head_dim]` tensor.
    fn q_at(&self, row: usize, pos: usize, head: usize) -> usize {
        ((row * self.seq + pos) * self.heads + head) * self.head_dim
    }

    /// Offset of `(row, position, kv head)` in a `[batch, seq, kv_heads, head_dim]` tensor.
    fn kv_at(&self, row: usize, pos: usize, head: usize) -> usize {
        ((row * self.seq + pos) * self.kv_heads + head) * self.head_dim
    }

    /// The keys or values of batch row `row` at positions `..end`, as the right operand of a
    /// product batched over key/value heads: `[kv_heads, end, head_dim]`, or transposed
    /// `[kv_heads, head_dim, end]`. No copy: strides into the `[batch, seq, kv_heads,
    /// head_dim]` storage starting at `offset`.
    fn kv_layout(&self, offset: usize, row: usize, end: usize, transposed: bool) -> Layout {
        let d = self.head_dim;
        let start = offset + self.kv_at(row, 0, 0);
        if transposed {
            Layout::new(
                Shape::from((self.kv_heads, d, end)),
                vec![d, 1, self.kv_heads * d],
                start,
            )
        } else {
            Layout::new(
                Shape::from((self.kv_heads, end, d)),
                vec![d, self.kv_heads * d, 1],
                start,
            )
        }
    }
}

/// One block of query positions `start..start + len` of one batch row. Its rows, in the
/// order of the packed matrices, are `(kv head g, repeat j, position t)`:
/// `(g * n_rep + j) * len + t`, query head `g * n_rep + j` at position `start + t`.
#[derive(Debug, Clone, Copy)]
struct Block {
    row: usize,
    start: usize,
    len: usize,
}

impl Block {
    /// Keys the block sees: positions `..end`.
    fn end(&self) -> usize {
        self.start + self.len
    }

    /// Packed rows per key/value head.
    fn rows(&self, dims: &Dims) -> usize {
        dims.n_rep() * self.len
    }

    /// For packed row `r` (over all key/value heads): the query head and the position.
    fn head_and_position(&self, r: usize) -> (usize, usize) {
        (r / self.len, self.start + r % self.len)
    }

    /// Copies the block's rows of `x` (`[batch, seq, heads, head_dim]`, from `offset`) into a
    /// packed `[kv_heads, n_rep * len, head_dim]` matrix, times `factor`.
    fn pack<T: Element>(&self, dims: &Dims, x: &[T], factor: T) -> Vec<T> {
        let d = dims.head_dim;
        let mut packed = vec![T::from_f64(0.0); dims.heads * self.len * d];
        for (r, dst) in packed.chunks_exact_mut(d).enumerate() {
            let (head, pos) = self.head_and_position(r);
            let at = dims.q_at(self.row, pos, head);
            for (o, &i) in dst.iter_mut().zip(&x[at..at + d]) {
                *o = i * factor;
            }
        }
        packed
    }

    /// Adds packed rows `[kv_heads, n_rep * len, head_dim]` times `factor` into their places
    /// in `x` (`[batch, seq, heads, head_dim]`).
    fn unpack_add<T: Element>(&self, dims: &Dims, packed: &[T], factor: T, x: &mut [T]) {
        let d = dims.head_dim;
        for (r, src) in packed.chunks_exact(d).enumerate() {
            let (head, pos) = self.head_and_position(r);
            let at = dims.q_at(self.row, pos, head);
            for (o, &i) in x[at..at + d].iter_mut().zip(src) {
                *o += i * factor;
            }
        }
    }
}

/// The blocks of a call, in order.
fn blocks(dims: &Dims, block: usize) -> impl Iterator<Item = Block> + '_ {
    (0..dims.batch).flat_map(move |row| {
        (0..dims.seq).step_by(block).map(move |start| Block {
            row,
            start,
            len: block.min(dims.seq - start),
        })
    })
}

/// `lhs · rhs` for products batched over key/value heads: `lhs` `[kv_heads, m, k]` and `rhs`
/// `[kv_heads, k, n]` as their layouts say; the result is `[kv_heads, m, n]`, contiguous.
fn matmul<T: Element>(
    lhs: &CpuStorage,
    lhs_layout: &Layout,
    rhs: &CpuStorage,
    rhs_layout: &Layout,
) -> candle_core::Result<Vec<T>> {
    let (b, m, k) = lhs_layout.shape().dims3()?;
    let (_, _, n) = rhs_layout.shape().dims3()?;
    T::cpu_storage_data(lhs.matmul(rhs, (b, m, n, k), lhs_layout, rhs_layout)?)
}

/// A packed `[kv_heads, rows, cols]` matrix as an operand: its storage and layout, or the
/// layout of its transpose.
fn packed_layout(kv_heads: usize, rows: usize, cols: usize, transposed: bool) -> Layout {
    if transposed {
        Layout::new(
            Shape::from((kv_heads, cols, rows)),
            vec![rows * cols, 1, cols],
            0,
        )
    } else {
        Layout::contiguous((kv_heads, rows, cols))
    }
}

/// The row of scores of a query at `pos`, whose keys are `..=pos`: turned into its softmax,
/// zero past `pos`; returns the log-sum-exp.
fn softmax_row<T: Element>(row: &mut [T], pos: usize) -> T {
    let (seen, masked) = row.split_at_mut(pos + 1);
    let max = seen
        .iter()
        .fold(T::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    let mut sum = T::from_f64(0.0);
    for x in seen.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    let inv = T::from_f64(1.0) / sum;
    for x in seen.iter_mut() {
        *x *= inv;
    }
    masked.fill(T::from_f64(0.0));
    max + sum.ln()
}

/// The probabilities of a query at `pos` recomputed from its scores and log-sum-exp.
fn probabilities_row<T: Element>(row: &mut [T], pos: usize, lse: T) {
    let (seen, masked) = row.split_at_mut(pos + 1);
    for x in seen.iter_mut() {
        *x = (*x - lse).exp();
    }
    masked.fill(T::from_f64(0.0));
}

/// Adds `[kv_heads, end, head_dim]` rows into `x` (`[batch, seq, kv_heads, head_dim]`) at
/// batch row `row`, positions `..end`.
fn add_kv<T: Element>(dims: &Dims, row: usize, end: usize, src: &[T], x: &mut [T]) {
    let d = dims.head_dim;
    for (r, src) in src.chunks_exact(d).enumerate() {
        let (g, pos) = (r / end, r % end);
        let at = dims.kv_at(row, pos, g);
        for (o, &i) in x[at..at + d].iter_mut().zip(src) {
            *o += i;
        }
    }
}

/// The fused op. The forward pass leaves each query row's log-sum-exp
/// (`[batch, seq, heads]`) here for the backward pass.
struct FusedCausalAttention {
    scale: f64,
    block: usize,
    lse: OnceLock<CpuStorage>,
}

/// The storages of `k` and `v` with their start offsets.
struct KeysValues<'a> {
    k: &'a CpuStorage,
    k_offset: usize,
    v: &'a CpuStorage,
    v_offset: usize,
}

fn contiguous_start(layout: &Layout) -> candle_core::Result<usize> {
    match layout.contiguous_offsets() {
        Some((start, _)) => Ok(start),
        None => candle_core::bail!("fused attention: inputs must be contiguous"),
    }
}

impl FusedCausalAttention {
    fn forward<T: Element>(
        &self,
        dims: &Dims,
        q: &[T],
        kv: &KeysValues<'_>,
    ) -> candle_core::Result<(Vec<T>, Vec<T>)> {
        let (kvh, d) = (dims.kv_heads, dims.head_dim);
        let mut out = vec![T::from_f64(0.0); dims.batch * dims.seq * dims.heads * d];
        let mut lse = vec![T::from_f64(0.0); dims.batch * dims.seq * dims.heads];
        for block in blocks(dims, self.block) {
            let (rows, end) = (block.rows(dims), block.end());
            let q_packed = T::to_cpu_storage_owned(block.pack(dims, q, T::from_f64(self.scale)));
            let q_layout = packed_layout(kvh, rows, d, false);
            let mut scores = matmul::<T>(
                &q_packed,
                &q_layout,
                kv.k,
                &dims.kv_layout(kv.k_offset, block.row, end, true),
            )?;
            let row_lse: Vec<T> = scores
                .par_chunks_mut(end)
                .enumerate()
                .map(|(r, row)| softmax_row(row, block.head_and_position(r).1))
                .collect();
            for (r, value) in row_lse.into_iter().enumerate() {
                let (head, pos) = block.head_and_position(r);
                lse[(block.row * dims.seq + pos) * dims.heads + head] = value;
            }
            let probs = T::to_cpu_storage_owned(scores);
            let o = matmul::<T>(
                &probs,
                &packed_layout(kvh, rows, end, false),
                kv.v,
                &dims.kv_layout(kv.v_offset, block.row, end, false),
            )?;
            block.unpack_add(dims, &o, T::from_f64(1.0), &mut out);
        }
        Ok((out, lse))
    }

    fn backward<T: Element>(
        &self,
        dims: &Dims,
        q: &[T],
        kv: &KeysValues<'_>,
        out: &[T],
        grad: &[T],
        lse: &[T],
    ) -> candle_core::Result<(Vec<T>, Vec<T>, Vec<T>)> {
        let (kvh, d) = (dims.kv_heads, dims.head_dim);
        let zero = T::from_f64(0.0);
        let mut dq = vec![zero; q.len()];
        let mut dk = vec![zero; dims.batch * dims.seq * kvh * d];
        let mut dv = dk.clone();
        // D_i = Σ_x dO[i, x] · O[i, x], per query row.
        let delta: Vec<T> = grad
            .par_chunks(d)
            .zip(out.par_chunks(d))
            .map(|(g, o)| g.iter().zip(o).fold(zero, |acc, (&a, &b)| acc + a * b))
            .collect();
        let scale = T::from_f64(self.scale);
        for block in blocks(dims, self.block) {
            let (rows, end) = (block.rows(dims), block.end());
            let q_layout = packed_layout(kvh, rows, d, false);
            let q_packed = T::to_cpu_storage_owned(block.pack(dims, q, scale));
            let grad_packed = T::to_cpu_storage_owned(block.pack(dims, grad, T::from_f64(1.0)));
            // P, recomputed.
            let mut probs = matmul::<T>(
                &q_packed,
                &q_layout,
                kv.k,
                &dims.kv_layout(kv.k_offset, block.row, end, true),
            )?;
            probs.par_chunks_mut(end).enumerate().for_each(|(r, row)| {
                let (head, pos) = block.head_and_position(r);
                let at = (block.row * dims.seq + pos) * dims.heads + head;
                probabilities_row(row, pos, lse[at]);
            });
            // dP = dO · Vᵀ, then dS = P ⊙ (dP - D) in its place.
            let mut dscores = matmul::<T>(
                &grad_packed,
                &q_layout,
                kv.v,
                &dims.kv_layout(kv.v_offset, block.row, end, true),
            )?;
            dscores
                .par_chunks_mut(end)
                .zip(probs.par_chunks(end))
                .enumerate()
                .for_each(|(r, (ds, p))| {
                    let (head, pos) = block.head_and_position(r);
                    let delta = delta[(block.row * dims.seq + pos) * dims.heads + head];
                    for (ds, &p) in ds.iter_mut().zip(p) {
                        *ds = p * (*ds - delta);
                    }
                });
            let probs = T::to_cpu_storage_owned(probs);
            let dscores = T::to_cpu_storage_owned(dscores);
            // dV += Pᵀ · dO; dK += dSᵀ · (q · scale); dq = dS · K · scale.
            let block_dv = matmul::<T>(
                &probs,
                &packed_layout(kvh, rows, end, true),
                &grad_packed,
                &q_layout,
            )?;
            add_kv(dims, block.row, end, &block_dv, &mut dv);
            let block_dk = matmul::<T>(
                &dscores,
                &packed_layout(kvh, rows, end, true),
                &q_packed,
                &q_layout,
            )?;
            add_kv(dims, block.row, end, &block_dk, &mut dk);
            let block_dq = matmul::<T>(
                &dscores,
                &packed_layout(kvh, rows, end, false),
                kv.k,
                &dims.kv_layout(kv.k_offset, block.row, end, false),
            )?;
            block.unpack_add(dims, &block_dq, scale, &mut dq);
        }
        Ok((dq, dk, dv))
    }
}

impl CustomOp3 for FusedCausalAttention {
    fn name(&self) -> &'static str {
        "fused-causal-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        q_layout: &Layout,
        k: &CpuStorage,
        k_layout: &Layout,
        v: &CpuStorage,
        v_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = Dims::of(q_layout, k_layout, v_layout)?;
        let q_start = contiguous_start(q_layout)?;
        let kv = KeysValues {
            k,
            k_offset: contiguous_start(k_layout)?,
            v,
            v_offset: contiguous_start(v_layout)?,
        };
        let (out, lse) = match q {
            CpuStorage::F32(q) => {
                let (out, lse) = self.forward::<f32>(&dims, &q[q_start..], &kv)?;
                (CpuStorage::F32(out), CpuStorage::F32(lse))
            }
            CpuStorage::F64(q) => {
                let (out, lse) = self.forward::<f64>(&dims, &q[q_start..], &kv)?;
                (CpuStorage::F64(out), CpuStorage::F64(lse))
            }
            other => candle_core::bail!(
                "fused attention computes in f32 or f64, not {:?}",
                other.dtype()
            ),
        };
        if self.lse.set(lse).is_err() {
            candle_core::bail!("fused attention: the op ran twice");
        }
        Ok((out, q_layout.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Grads> {
        let grad = grad.contiguous()?;
        let Some(lse) = self.lse.get() else {
            candle_core::bail!("fused attention: backward before forward");
        };
        let (qs, ql) = q.storage_and_layout();
        let (ks, kl) = k.storage_and_layout();
        let (vs, vl) = v.storage_and_layout();
        let (os, ol) = out.storage_and_layout();
        let (gs, gl) = grad.storage_and_layout();
        let (
            Storage::Cpu(qs),
            Storage::Cpu(ks),
            Storage::Cpu(vs),
            Storage::Cpu(os),
            Storage::Cpu(gs),
        ) = (&*qs, &*ks, &*vs, &*os, &*gs)
        else {
            candle_core::bail!("fused attention: tensors are not on the CPU");
        };
        let dims = Dims::of(ql, kl, vl)?;
        let kv = KeysValues {
            k: ks,
            k_offset: contiguous_start(kl)?,
            v: vs,
            v_offset: contiguous_start(vl)?,
        };
        let (q0, o0, g0) = (
            contiguous_start(ql)?,
            contiguous_start(ol)?,
            contiguous_start(gl)?,
        );
        let sizes = (q.shape(), k.shape(), v.shape());
        match q.dtype() {
            DType::F32 => {
                self.gradients::<f32>(&dims, sizes, (qs, q0), &kv, (os, o0), (gs, g0), lse)
            }
            DType::F64 => {
                self.gradients::<f64>(&dims, sizes, (qs, q0), &kv, (os, o0), (gs, g0), lse)
            }
            other => candle_core::bail!("fused attention computes in f32 or f64, not {other:?}"),
        }
    }
}

type Grads = (Option<Tensor>, Option<Tensor>, Option<Tensor>);

impl FusedCausalAttention {
    /// The backward pass on storages (each with its start offset), as tensors of the inputs'
    /// shapes.
    #[allow(clippy::too_many_arguments)]
    fn gradients<T: Element>(
        &self,
        dims: &Dims,
        (q_shape, k_shape, v_shape): (&Shape, &Shape, &Shape),
        (q, q0): (&CpuStorage, usize),
        kv: &KeysValues<'_>,
        (out, o0): (&CpuStorage, usize),
        (grad, g0): (&CpuStorage, usize),
        lse: &CpuStorage,
    ) -> candle_core::Result<Grads> {
        let (dq, dk, dv) = self.backward::<T>(
            dims,
            &T::cpu_storage_as_slice(q)?[q0..],
            kv,
            &T::cpu_storage_as_slice(out)?[o0..],
            &T::cpu_storage_as_slice(grad)?[g0..],
            T::cpu_storage_as_slice(lse)?,
        )?;
        let cpu = candle_core::Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dq, q_shape, &cpu)?),
            Some(Tensor::from_vec(dk, k_shape, &cpu)?),
            Some(Tensor::from_vec(dv, v_shape, &cpu)?),
        ))
    }
}

/// The `[seq, seq]` causal mask in `dtype`: 0 on and below the diagonal, -inf above.
pub(crate) fn causal_mask(
    seq: usize,
    dtype: DType,
    device: &candle_core::Device,
) -> Result<Tensor> {
    let mut mask = Vec::with_capacity(seq * seq);
    for i in 0..seq {
        mask.extend((0..seq).map(|j| if j <= i { 0.0 } else { f64::NEG_INFINITY }));
    }
    Ok(Tensor::from_vec(mask, (seq, seq), device)?.to_dtype(upcast(dtype))?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use candle_core::{Device, Var};

    use super::*;

    /// Random `[batch, seq, heads, head_dim]` values in `dtype`, from candle's generator.
    fn random(shape: (usize, usize, usize, usize), dtype: DType) -> Var {
        let t = Tensor::randn(0f64, 1.0, shape, &Device::Cpu).unwrap();
        Var::from_tensor(&t.to_dtype(dtype).unwrap()).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a.to_dtype(DType::F64).unwrap() - b.to_dtype(DType::F64).unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    }

    /// Output and the gradients of `Σ out ⊙ w` for q, k, v, by the fused op with `block`
    /// (`Some`) or by the unfused reference (`None`).
    fn run(q: &Var, k: &Var, v: &Var, w: &Tensor, block: Option<usize>) -> (Tensor, [Tensor; 3]) {
        let scale = 1.0 / (q.dim(3).unwrap() as f64).sqrt();
        let out = match block {
            Some(block) => fused(q, k, v, scale, block).unwrap(),
            None => {
                let mask = causal_mask(q.dim(1).unwrap(), q.dtype(), &Device::Cpu).unwrap();
                causal_attention_unfused(q, k, v, scale, &mask).unwrap()
            }
        };
        let grads = (&out * w).unwrap().sum_all().unwrap().backward().unwrap();
        let grad = |x: &Var| grads.get(x).unwrap().clone();
        (out.clone(), [grad(q), grad(k), grad(v)])
    }

    fn check(shape: (usize, usize, usize, usize, usize), block: usize, dtype: DType, tol: f64) {
        let (batch, seq, heads, kv_heads, d) = shape;
        let q = random((batch, seq, heads, d), dtype);
        let k = random((batch, seq, kv_heads, d), dtype);
        let v = random((batch, seq, kv_heads, d), dtype);
        let w = random((batch, seq, heads, d), dtype).as_tensor().clone();
        let (out, grads) = run(&q, &k, &v, &w, Some(block));
        let (want, want_grads) = run(&q, &k, &v, &w, None);
        assert_eq!(out.dims(), want.dims());
        let diff = max_diff(&out, &want);
        assert!(
            diff < tol,
            "output differs by {diff} ({shape:?}, block {block})"
        );
        for (name, (got, want)) in ["q", "k", "v"].iter().zip(grads.iter().zip(&want_grads)) {
            assert_eq!(got.dims(), want.dims());
            let diff = max_diff(got, want);
            assert!(
                diff < tol,
                "d{name} differs by {diff} ({shape:?}, block {block})"
            );
        }
    }

    #[test]
    fn fused_attention_matches_the_reference_across_block_boundaries() {
        // Blocks that divide the sequence, that do not, of one position, and one block for all.
        for block in [1, 3, 4, 7, 64] {
            check((2, 7, 4, 2, 3), block, DType::F64, 1e-12);
        }
    }

    #[test]
    fn fused_attention_matches_the_reference_with_and_without_grouped_heads() {
        check((1, 9, 3, 3, 4), 4, DType::F64, 1e-12);
        check((1, 9, 6, 1, 2), 4, DType::F64, 1e-12);
        check((3, 5, 2, 1, 8), 2, DType::F64, 1e-12);
    }

    #[test]
    fn fused_attention_in_f32_and_half_precision_stays_near_the_reference() {
        check((2, 33, 4, 2, 16), 8, DType::F32, 1e-4);
        // bf16 is computed in f32 and rounded back (candle's CPU matmul has no bf16, so the
        // reference runs in f32 on the same values): equal at bf16's precision.
        let q = random((1, 17, 2, 8), DType::BF16);
        let k = random((1, 17, 1, 8), DType::BF16);
        let v = random((1, 17, 1, 8), DType::BF16);
        let out = fused(&q, &k, &v, 0.5, 4).unwrap();
        assert_eq!(out.dtype(), DType::BF16);
        let wide = |x: &Var| x.to_dtype(DType::F32).unwrap();
        let mask = causal_mask(17, DType::F32, &Device::Cpu).unwrap();
        let want = causal_attention_unfused(&wide(&q), &wide(&k), &wide(&v), 0.5, &mask).unwrap();
        let diff = max_diff(&out, &want);
        assert!(diff < 0.02, "bf16 output differs by {diff}");
    }

    #[test]
    fn a_masked_position_gets_no_weight_and_no_gradient() {
        // The last position's key and value cannot change any earlier output: their gradients
        // from a loss on the earlier outputs are exactly zero.
        let (batch, seq, heads, kv, d) = (1, 6, 2, 1, 4);
        let q = random((batch, seq, heads, d), DType::F64);
        let k = random((batch, seq, kv, d), DType::F64);
        let v = random((batch, seq, kv, d), DType::F64);
        let mut w = vec![1.0f64; batch * seq * heads * d];
        w[(seq - 1) * heads * d..].fill(0.0);
        let w = Tensor::from_vec(w, (batch, seq, heads, d), &Device::Cpu).unwrap();
        let (_, [_, dk, dv]) = run(&q, &k, &v, &w, Some(2));
        for g in [dk, dv] {
            let last = g
                .narrow(1, seq - 1, 1)
                .unwrap()
                .abs()
                .unwrap()
                .sum_all()
                .unwrap();
            assert_eq!(last.to_scalar::<f64>().unwrap(), 0.0);
        }
    }

    #[test]
    fn inputs_that_do_not_fit_are_refused() {
        let q = random((1, 4, 3, 2), DType::F64);
        let k = random((1, 4, 2, 2), DType::F64);
        assert!(fused(&q, &k, &k, 1.0, 2).is_err());
    }
}
