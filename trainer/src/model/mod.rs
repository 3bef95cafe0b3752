//! The differentiable Llama/Qwen2/Qwen3 forward pass: log-probabilities of the completion
//! tokens (or logits for every position), so that a policy-gradient loss can be taken over
//! whole completions, with gradients reaching the LoRA weights through every op. The base
//! weights are plain tensors (frozen): their matmuls have a backward pass for the input only,
//! and [`Model::backward`] can recompute activations layer by layer instead of keeping them.

mod attention;
mod head;
mod layers;
mod numeric;
pub(crate) mod rope;
pub(crate) mod weights;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::{D, DType, Device, Tensor, TensorId, Var};

use atdp_model_files::{LoraConfig, ModelConfig, TargetModule};

use crate::lora::Lora;
use crate::{Error, Result};
pub use head::TokenStats;
use layers::{Active, Attention, Block, Linear, Mlp, PassContext, RmsNorm};
use numeric::upcast;

/// Where and in which dtype a model is loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The dtype weights are converted to and the forward pass computes in: `F32` (the
    /// default), `BF16` (GPU only) or `F16` (reductions and softmax still run in f32), or
    /// `F64` (for numerical checks).
    pub dtype: DType,
    /// The device the weights live on.
    pub device: Device,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            dtype: DType::F32,
            device: Device::Cpu,
        }
    }
}

/// Which weights a forward pass runs with. The base weights are shared, so the reference
/// policy of a KL penalty is the same model with the adapter switched off: no second copy.
#[derive(Debug, Clone, Copy)]
pub enum Adapter<'a> {
    /// The frozen base model alone (the reference policy).
    Off,
    /// Base plus the adapter, without dropout (evaluation, log-probs for sampling).
    On(&'a Lora),
    /// Base plus the adapter with its dropout; `step` seeds the dropout masks, so a run
    /// resumed at a step draws the same masks as one that never stopped.
    Train {
        /// The adapter being trained.
        lora: &'a Lora,
        /// The optimizer step (or micro-batch counter) the masks are drawn for.
        step: u64,
    },
}

/// A causal language model of the Llama family, ready for forward passes.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    embed_tokens: Tensor,
    layers: Vec<Block>,
    norm: RmsNorm,
    /// `None` when tied to the embedding.
    lm_head: Option<Tensor>,
    inv_freq: Vec<f64>,
    dtype: DType,
    device: Device,
    weight_files: Vec<PathBuf>,
}

impl Model {
    /// Loads a local Hugging Face model directory: `config.json` and `model.safetensors` (or
    /// shards listed in `model.safetensors.index.json`), converting the weights to
    /// `options.dtype` on `options.device`. A missing or misshapen tensor is an error that
    /// names it.
    pub fn load(dir: impl AsRef<Path>, options: &LoadOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let config = ModelConfig::from_file(dir.join(atdp_model_files::CONFIG_FILE))?;
        check_dtype(options.dtype, &options.device)?;
        let specs = weights::expected_tensors(&config);
        let (tensors, files) = weights::load(dir, &specs, options.dtype, &options.device)?;
        let mut model = Self::assemble(config, tensors, options)?;
        model.weight_files = files;
        Ok(model)
    }

    /// Builds a model from tensors already in memory, named as in a Hugging Face checkpoint;
    /// each is checked for presence and shape and converted as `options` says.
    pub fn from_tensors(
        config: ModelConfig,
        tensors: HashMap<String, Tensor>,
        options: &LoadOptions,
    ) -> Result<Self> {
        config.validate()?;
        check_dtype(options.dtype, &options.device)?;
        let mut converted = HashMap::with_capacity(tensors.len());
        for spec in weights::expected_tensors(&config) {
            let Some(t) = tensors.get(&spec.name) else {
                return Err(Error::MissingTensor {
                    name: spec.name,
                    location: "the tensors given".into(),
                });
            };
            if t.dims() != spec.shape.as_slice() {
                return Err(Error::Shape {
                    name: spec.name,
                    location: "the tensors given".into(),
                    expected: spec.shape,
                    found: t.dims().to_vec(),
                });
            }
            let t = t
                .to_device(&options.device)?
                .to_dtype(options.dtype)?
                .detach();
            converted.insert(spec.name, t);
        }
        Self::assemble(config, converted, options)
    }

    /// Wires checked tensors into layers (every name of `expected_tensors` is present).
    fn assemble(
        config: ModelConfig,
        mut t: HashMap<String, Tensor>,
        options: &LoadOptions,
    ) -> Result<Self> {
        let mut take = |name: String| -> Result<Tensor> {
            t.remove(&name).ok_or(Error::MissingTensor {
                name,
                location: "the loaded weights".into(),
            })
        };
        let eps = config.rms_norm_eps;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for layer in 0..config.num_hidden_layers {
            let p = weights::layer_prefix(layer);
            let mut norm = |name: &str| -> Result<RmsNorm> {
                let weight = take(format!("{p}.{name}.weight"))?;
                Ok(RmsNorm { weight, eps })
            };
            let input_layernorm = norm("input_layernorm")?;
            let post_attention_layernorm = norm("post_attention_layernorm")?;
            let (q_norm, k_norm) = if config.qk_norm {
                (
                    Some(norm("self_attn.q_norm")?),
                    Some(norm("self_attn.k_norm")?),
                )
            } else {
                (None, None)
            };
            let mut linear = |module: TargetModule, bias: bool| -> Result<Linear> {
                let path = module.module_path(layer);
                let weight = take(format!("{path}.weight"))?;
                let bias = if bias {
                    Some(take(format!("{path}.bias"))?)
                } else {
                    None
                };
                Ok(Linear {
                    weight,
                    bias,
                    module,
                })
            };
            let attention = Attention {
                q_proj: linear(TargetModule::QProj, config.qkv_bias)?,
                k_proj: linear(TargetModule::KProj, config.qkv_bias)?,
                v_proj: linear(TargetModule::VProj, config.qkv_bias)?,
                o_proj: linear(TargetModule::OProj, config.o_proj_bias)?,
                q_norm,
                k_norm,
                num_heads: config.num_attention_heads,
                num_kv_heads: config.num_key_value_heads,
                head_dim: config.head_dim,
            };
            let mlp = Mlp {
                gate_proj: linear(TargetModule::GateProj, config.mlp_bias)?,
                up_proj: linear(TargetModule::UpProj, config.mlp_bias)?,
                down_proj: linear(TargetModule::DownProj, config.mlp_bias)?,
            };
            layers.push(Block {
                input_layernorm,
                attention,
                post_attention_layernorm,
                mlp,
            });
        }
        let embed_tokens = take("model.embed_tokens.weight".into())?;
        let norm = RmsNorm {
            weight: take("model.norm.weight".into())?,
            eps,
        };
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(take("lm_head.weight".into())?)
        };
        let inv_freq = rope::inv_freq(config.head_dim, config.rope_theta, config.rope_scaling);
        Ok(Model {
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
            inv_freq,
            dtype: options.dtype,
            device: options.device.clone(),
            weight_files: Vec::new(),
        })
    }

    /// The checked configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The dtype the weights are held and computed in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The safetensors files the weights were read from (empty for [`Model::from_tensors`]);
    /// the run manifest hashes them.
    pub fn weight_files(&self) -> &[PathBuf] {
        &self.weight_files
    }

    /// Logits `[batch, seq, vocab]` for every position of `input_ids` (`[batch, seq]`, u32 or
    /// i64), position `t` predicting token `t + 1`. Attention is causal and positions start at
    /// 0 in every row: pad on the right, and ignore the padded positions. Training does not
    /// need the whole `[batch, seq, vocab]` tensor: [`Model::score`] makes it a chunk at a time.
    pub fn forward(&self, input_ids: &Tensor, adapter: Adapter<'_>) -> Result<Tensor> {
        let (ids, batch, seq) = self.checked_input(input_ids)?;
        let ctx = self.pass_context(batch, seq, adapter)?;
        let x = self.norm.forward(&self.last_hidden(&ids, &ctx)?)?;
        let logits = layers::frozen_matmul(&x, self.head())?;
        Ok(logits.reshape((batch, seq, self.config.vocab_size))?)
    }

    /// `log p(input_ids[t + 1] | input_ids[..=t])` for every row, `[batch, seq - 1]`, in f32
    /// (f64 for an f64 model); differentiable when `adapter` is trainable.
    pub fn next_token_log_probs(&self, input_ids: &Tensor, adapter: Adapter<'_>) -> Result<Tensor> {
        let (batch, seq) = input_ids.dims2().map_err(|_| shape_error(input_ids))?;
        if seq < 2 {
            return Err(Error::invalid(
                "input_ids",
                "need at least 2 tokens to score a next token",
            ));
        }
        let spans: Vec<Span> = (0..batch)
            .map(|row| Span {
                row,
                start: 0,
                len: seq - 1,
            })
            .collect();
        let stats = self.score(input_ids, adapter, &spans)?;
        Ok(stats.log_probs.reshape((batch, seq - 1))?)
    }

    /// The log-probability of each next token at the positions `spans` name, and the
    /// entropy there, concatenated in the order of `spans`. Only those positions go through
    /// the output head, in chunks, so prompts cost no head computation and no
    /// `[tokens, vocab]` tensor is kept. Differentiable when `adapter` is trainable.
    pub fn score(
        &self,
        input_ids: &Tensor,
        adapter: Adapter<'_>,
        spans: &[Span],
    ) -> Result<TokenStats> {
        let (ids, batch, seq) = self.checked_input(input_ids)?;
        let (rows, targets) = span_rows(&ids, batch, seq, spans)?;
        let ctx = self.pass_context(batch, seq, adapter)?;
        self.score_hidden(&self.last_hidden(&ids, &ctx)?, &rows, &targets)
    }

    /// One backward pass for training: scores `spans` with `lora` in training mode, hands the
    /// scores to `loss` and returns the gradients of the loss it builds for the adapter's
    /// variables.
    ///
    /// With `recompute`, the forward pass keeps only each layer's input, and the backward
    /// pass runs layer by layer from the last, recomputing one layer's activations at a
    /// time: memory for one layer instead of all of them (what long sequences on large
    /// models need), for about one more forward pass of time. The gradients are the same.
    pub fn backward(
        &self,
        input_ids: &Tensor,
        lora: &Lora,
        step: u64,
        spans: &[Span],
        recompute: bool,
        loss: impl FnOnce(&TokenStats) -> Result<Tensor>,
    ) -> Result<Gradients> {
        let vars = lora.vars();
        let adapter = Adapter::Train { lora, step };
        if !recompute {
            let stats = self.score(input_ids, adapter, spans)?;
            let store = loss(&stats)?.backward()?;
            let mut grads = Gradients::default();
            for var in &vars {
                if let Some(g) = store.get(var) {
                    grads.add(var, g)?;
                }
            }
            return Ok(grads);
        }
        let (ids, batch, seq) = self.checked_input(input_ids)?;
        let (rows, targets) = span_rows(&ids, batch, seq, spans)?;
        let ctx = self.pass_context(batch, seq, adapter)?;
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut x = self.embed_tokens.index_select(&ids.flatten_all()?, 0)?;
        for (i, block) in self.layers.iter().enumerate() {
            let next = block.forward(&x, i, &ctx)?.detach();
            inputs.push(x);
            x = next;
        }
        let last = Var::from_tensor(&x)?;
        drop(x);
        let stats = self.score_hidden(last.as_tensor(), &rows, &targets)?;
        let store = loss(&stats)?.backward()?;
        drop(stats);
        let mut grads = Gradients::default();
        let Some(mut upstream) = store.get(&last).cloned() else {
            // The loss does not depend on the model's output.
            return Ok(grads);
        };
        drop(store);
        for (i, block) in self.layers.iter().enumerate().rev() {
            let Some(input) = inputs.pop() else { break };
            let input = Var::from_tensor(&input)?;
            let output = block.forward(input.as_tensor(), i, &ctx)?;
            let store = output.mul(&upstream)?.sum_all()?.backward()?;
            for var in &vars {
                if let Some(g) = store.get(var) {
                    grads.add(var, g)?;
                }
            }
            match store.get(&input) {
                Some(g) => upstream = g.clone(),
                None => break,
            }
        }
        Ok(grads)
    }

    /// The last layer's output `[batch * seq, hidden]` for checked `ids`.
    fn last_hidden(&self, ids: &Tensor, ctx: &PassContext<'_>) -> Result<Tensor> {
        let mut x = self.embed_tokens.index_select(&ids.flatten_all()?, 0)?;
        for (i, block) in self.layers.iter().enumerate() {
            x = block.forward(&x, i, ctx)?;
        }
        Ok(x)
    }

    /// The output head's weight (the embedding when tied).
    fn head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Final norm and head over the rows `rows` of the last layer's output `[batch * seq,
    /// hidden]`, scoring `targets`.
    fn score_hidden(&self, x: &Tensor, rows: &Tensor, targets: &Tensor) -> Result<TokenStats> {
        let x = self.norm.forward(&x.index_select(rows, 0)?)?;
        head::target_stats(&x, self.head(), targets)
    }

    /// Checked ids (u32) and the `[batch, seq]` shape.
    fn checked_input(&self, input_ids: &Tensor) -> Result<(Tensor, usize, usize)> {
        let (batch, seq) = input_ids.dims2().map_err(|_| shape_error(input_ids))?;
        if batch == 0 || seq == 0 {
            return Err(Error::invalid("input_ids", "empty batch or sequence"));
        }
        Ok((self.checked_ids(input_ids)?, batch, seq))
    }

    /// RoPE tables and the adapter for a pass over `[batch, seq]`.
    fn pass_context<'a>(
        &self,
        batch: usize,
        seq: usize,
        adapter: Adapter<'a>,
    ) -> Result<PassContext<'a>> {
        let active = match adapter {
            Adapter::Off => Active {
                lora: None,
                dropout_step: None,
            },
            Adapter::On(lora) => Active {
                lora: Some(lora),
                dropout_step: None,
            },
            Adapter::Train { lora, step } => Active {
                lora: Some(lora),
                dropout_step: Some(step),
            },
        };
        if let Some(lora) = active.lora {
            lora.check_fits(&self.config)?;
        }
        let (cos, sin) = rope::tables(&self.inv_freq, seq, self.dtype, &self.device)?;
        Ok(PassContext {
            batch,
            seq,
            cos: cos.unsqueeze(1)?,
            sin: sin.unsqueeze(1)?,
            causal_mask: OnceLock::new(),
            adapter: active,
        })
    }

    /// Token ids as u32, checked against the vocabulary.
    fn checked_ids(&self, ids: &Tensor) -> Result<Tensor> {
        let ids = match ids.dtype() {
            DType::U32 => ids.clone(),
            DType::U8 => ids.to_dtype(DType::U32)?,
            DType::I64 => {
                let min = ids.min_all()?.to_scalar::<i64>()?;
                if min < 0 {
                    return Err(Error::invalid(
                        "input_ids",
                        format!("negative token id {min}"),
                    ));
                }
                ids.to_dtype(DType::U32)?
            }
            other => {
                return Err(Error::invalid(
                    "input_ids",
                    format!("token ids must be u32 or i64, got {other:?}"),
                ));
            }
        };
        let max = ids.max_all()?.to_scalar::<u32>()?;
        if max as usize >= self.config.vocab_size {
            return Err(Error::invalid(
                "input_ids",
                format!(
                    "token id {max} is outside the vocabulary (vocab_size {}); is this the model's own tokenizer?",
                    self.config.vocab_size
                ),
            ));
        }
        Ok(ids)
    }
}

fn shape_error(input_ids: &Tensor) -> Error {
    Error::invalid(
        "input_ids",
        format!("expected shape [batch, seq], got {:?}", input_ids.dims()),
    )
}

/// Positions of one row whose next token is scored: `start..start + len`, position `t`
/// predicting token `t + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The row of the batch.
    pub row: usize,
    /// The first position.
    pub start: usize,
    /// How many positions.
    pub len: usize,
}

/// The flat row index (`row * seq + t`) of every scored position, and its target token.
fn span_rows(ids: &Tensor, batch: usize, seq: usize, spans: &[Span]) -> Result<(Tensor, Tensor)> {
    let flat = ids.flatten_all()?.to_vec1::<u32>()?;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for span in spans {
        if span.row >= batch || span.start + span.len > seq - 1 {
            return Err(Error::invalid(
                "spans",
                format!(
                    "row {} positions {}..{} are outside a [{batch}, {seq}] batch (the last position has no next token)",
                    span.row,
                    span.start,
                    span.start + span.len
                ),
            ));
        }
        for t in span.start..span.start + span.len {
            let at = span.row * seq + t;
            rows.push(at as u32);
            targets.push(flat[at + 1]);
        }
    }
    if rows.is_empty() {
        return Err(Error::invalid("spans", "no position to score"));
    }
    let device = ids.device();
    let n = rows.len();
    Ok((
        Tensor::from_vec(rows, n, device)?,
        Tensor::from_vec(targets, n, device)?,
    ))
}

/// Gradients of a loss for an adapter's variables.
#[derive(Debug, Default)]
pub struct Gradients(HashMap<TensorId, Tensor>);

impl Lora {
    /// A fresh adapter for `model`: `A` random (seeded by `config.seed`), `B` zero.
    pub fn new(model: &Model, config: LoraConfig) -> Result<Self> {
        Lora::init(model.config(), config, model.dtype(), model.device())
    }
}

impl Gradients {
    /// The gradient of `var`, if the loss depends on it.
    pub fn get(&self, var: &Var) -> Option<&Tensor> {
        self.0.get(&var.as_tensor().id())
    }

    fn add(&mut self, var: &Var, grad: &Tensor) -> Result<()> {
        let id = var.as_tensor().id();
        let sum = match self.0.remove(&id) {
            Some(sum) => sum.add(grad)?,
            None => grad.clone(),
        };
        self.0.insert(id, sum);
        Ok(())
    }
}

fn check_dtype(dtype: DType, device: &Device) -> Result<()> {
    match dtype {
        // candle 0.10's CPU matmul has no bf16 kernel.
        DType::BF16 if device.is_cpu() => Err(Error::invalid(
            "dtype",
            "bf16 computation needs a GPU (candle's CPU matmul has no bf16 kernel); on the CPU compute in f32 (bf16 weights are converted when loaded)",
        )),
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => Ok(()),
        other => Err(Error::invalid(
            "dtype",
            format!("{other:?}: compute in f32, bf16, f16 or f64"),
        )),
    }
}

/// `log softmax(logits)[.., target]`: the log-probability of each target token, for logits
/// `[.., vocab]` and targets `[..]` (the same leading shape). Computed in f32 (f64 for f64
/// logits) and differentiable.
pub fn token_log_probs(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let dims = logits.dims();
    if dims.is_empty() || targets.dims() != &dims[..dims.len() - 1] {
        return Err(Error::invalid(
            "targets",
            format!(
                "shape {:?} does not match logits {:?} without their last dimension",
                targets.dims(),
                dims
            ),
        ));
    }
    let x = logits.to_dtype(upcast(logits.dtype()))?;
    let max = x.max_keepdim(D::Minus1)?.detach();
    let log_sum_exp = x
        .broadcast_sub(&max)?
        .exp()?
        .sum_keepdim(D::Minus1)?
        .log()?
        .add(&max)?;
    let index = targets
        .to_dtype(DType::U32)?
        .unsqueeze(D::Minus1)?
        .contiguous()?;
    let picked = x.contiguous()?.gather(&index, D::Minus1)?;
    Ok(picked.sub(&log_sum_exp)?.squeeze(D::Minus1)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn token_log_probs_matches_log_softmax() {
        let logits = Tensor::new(&[[[1.0f64, 2.0, 3.0], [0.0, 0.0, 0.0]]], &Device::Cpu).unwrap();
        let targets = Tensor::new(&[[2u32, 1]], &Device::Cpu).unwrap();
        let lp = token_log_probs(&logits, &targets)
            .unwrap()
            .to_vec2::<f64>()
            .unwrap();
        let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((lp[0][0] - (3.0 - lse)).abs() < 1e-12);
        assert!((lp[0][1] + 3f64.ln()).abs() < 1e-12);
        let bad = Tensor::new(&[[2u32]], &Device::Cpu).unwrap();
        assert!(matches!(
            token_log_probs(&logits, &bad),
            Err(Error::Invalid { .. })
        ));
    }
}
