//! The training loop: data from the lake (placeholders rendered as surrogates), returns, advantages, then optimizer steps of AdamW
//! over the LoRA variables (warm-up + cosine schedule, clipping by global norm, gradient
//! accumulation, micro-batches by a token budget), metrics as JSON Lines, checkpoints and an
//! exact resume, and finally the PEFT adapter with its manifest.

mod checkpoint;
mod runs;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Tensor};

use crate::data::{
    ChatFormat, Example, ExampleStats, Placeholders, assign_credit, build_examples, read_lake,
    render_step,
};
use crate::manifest::{self, Manifest, RewardVersions};
use crate::model::{Adapter, LoadOptions, Model, Span, TokenStats};
use crate::objective::{Advantage, grpo_advantages, reinforce_advantages, token_terms};
use crate::optim::{AdamW, clip_grad_norm, learning_rate};
use crate::peft::{SavedAdapter, save_adapter};
use crate::report::StepMetrics;
use crate::returns::step_returns;
use crate::rng::Rng;
use crate::run_config::{Length, RunConfig};
use crate::{Error, Lora, Result};
pub use checkpoint::CHECKPOINT_DIR;
use runs::RunPublisher;

/// Above this estimate of a micro-batch's activations, layers are recomputed in the
/// backward pass unless `train.recompute_activations` says otherwise.
const AUTO_RECOMPUTE_BYTES: usize = 4 << 30;

/// The metrics file in the output directory.
pub const METRICS_FILE: &str = "metrics.jsonl";

/// Options of one invocation that are not part of the run's identity.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Stop after this many optimizer steps in this invocation, without writing the adapter
    /// (as if interrupted); a later run resumes from the last checkpoint.
    pub stop_after: Option<u64>,
    /// Model dtype and device (default f32 on the CPU).
    pub load: LoadOptions,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The adapter, when the run finished.
    pub adapter: Option<SavedAdapter>,
    /// Optimizer steps done in total (including before a resume).
    pub steps_done: u64,
    /// Steps of the whole run.
    pub total_steps: u64,
    /// The step a resumed run started from (0 for a fresh run).
    pub resumed_from: u64,
    /// How steps became examples.
    pub examples: ExampleStats,
    /// Examples with a return (those trained on).
    pub rewarded_examples: usize,
    /// Step rewards that credited nothing: their `step_id` is not a selected step of their
    /// own tenant and trajectory.
    pub unmatched_step_rewards: usize,
    /// The last step's metrics.
    pub final_metrics: Option<StepMetrics>,
    /// The run's id beside the lake's tables (`atdp_lake::runs`, `training/<id>/`), also when
    /// its publication did not reach the store (publishing is best effort); `None` when the
    /// run stopped before training or no publisher thread could start.
    pub run_id: Option<String>,
}

/// Runs the training `config` describes, calling `progress` after every optimizer step.
/// Resumes from the checkpoint in the output directory when there is one. Blocking: call
/// it from a plain thread, not from async code.
///
/// The run is published beside the lake's tables as it happens (`atdp_lake::runs`, read by
/// the console's live view), best effort.
pub fn run(
    config: &RunConfig,
    options: &TrainOptions,
    progress: &mut dyn FnMut(&StepMetrics),
) -> Result<RunReport> {
    let mut publisher = RunPublisher::none();
    let outcome = train(config, options, progress, &mut publisher);
    publisher.finish(
        outcome
            .as_ref()
            .map(|report| report.steps_done >= report.total_steps),
    );
    outcome
}

fn train(
    config: &RunConfig,
    options: &TrainOptions,
    progress: &mut dyn FnMut(&StepMetrics),
    publisher: &mut RunPublisher,
) -> Result<RunReport> {
    let model = Model::load(&config.model_dir, &options.load)?;
    let chat = ChatFormat::load(&config.model_dir)?;
    let mut data = read_lake(&config.lake, config.lake_options.clone(), &config.selection)?;
    if config.placeholders == Placeholders::Surrogate {
        for step in &mut data.steps {
            render_step(step)?;
        }
    }
    let (examples, stats) = build_examples(
        &data.steps,
        &chat,
        model.config().vocab_size,
        config.max_len,
    )?;
    let credited = step_returns(&data.steps, &data.rewards, &config.rewards)?;
    let (mut examples, returns): (Vec<Example>, Vec<f64>) = examples
        .into_iter()
        .filter_map(|e| credited.of(&e.key()).map(|g| (e, g)))
        .unzip();
    assign_credit(&mut examples, &chat, config.credit)?;
    if examples.is_empty() {
        let names: Vec<&str> = config.rewards.weights.keys().map(String::as_str).collect();
        return Err(Error::EmptySelection(format!(
            "{} steps matched the selection, {} became examples, none has a reward named {}; check the tenant, agent, time range and reward names",
            stats.steps,
            stats.examples,
            names.join(", ")
        )));
    }
    let versions = RewardVersions::of(&data.rewards, &config.rewards);
    std::fs::create_dir_all(&config.out_dir).map_err(|e| Error::io(&config.out_dir, e))?;
    manifest::check_mixed_versions(&versions, config.allow_mixed_reward_versions)?;
    manifest::check_reward_versions(&config.out_dir, &versions, config.accept_reward_change)?;

    let grpo = match &config.advantage {
        Advantage::Grpo { group_by } => Some(grpo_advantages(&examples, &returns, group_by)),
        Advantage::Reinforce { .. } => None,
    };
    let per_step = config.batch_size * config.grad_accumulation;
    let total_steps = match config.length {
        Length::Steps(s) => s,
        Length::Epochs(e) => (e as usize * examples.len()).div_ceil(per_step) as u64,
    };

    let lora = Lora::new(&model, config.lora.clone())?;
    let mut opt = AdamW::new(lora.vars(), config.adamw.clone())?;
    let mut running_baseline = None;
    let mut start = 0;
    let digest = checkpoint::data_digest(&examples);
    if let Some(state) = checkpoint::load(&config.out_dir, &lora, &mut opt)? {
        if state.data.as_deref() != Some(digest.as_str()) && state.examples == examples.len() {
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "{} was written by a run over other examples (other tenants, trajectories, steps or tokens), or by a version of atdp-train that did not record them; its weights may have learned from data this run's manifest would not name: remove it or use another output directory",
                    config.out_dir.join(CHECKPOINT_DIR).display(),
                ),
            ));
        }
        if state.seed != config.seed || state.examples != examples.len() {
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "{} was written by a run with seed {} over {} examples, this one has seed {} over {}; remove it or use another output directory",
                    config.out_dir.join(CHECKPOINT_DIR).display(),
                    state.seed,
                    state.examples,
                    config.seed,
                    examples.len()
                ),
            ));
        }
        start = state.step;
        running_baseline = state.running_baseline;
    }
    let metrics_path = config.out_dir.join(METRICS_FILE);
    let mut metrics_file = open_metrics(&metrics_path, start)?;
    *publisher = RunPublisher::start(config, &data.rewards, examples.len(), start, total_steps);

    let mut order = Order::new(config.seed, examples.len());
    let mut last = None;
    let mut step = start;
    while step < total_steps {
        if options.stop_after.is_some_and(|n| step - start >= n) {
            break;
        }
        let began = Instant::now();
        let picked: Vec<usize> = (0..per_step)
            .map(|j| order.get(step as usize * per_step + j))
            .collect();
        let step_returns: Vec<f64> = picked.iter().map(|&i| returns[i]).collect();
        let advantages = match (&config.advantage, &grpo) {
            (_, Some(all)) => picked.iter().map(|&i| all[i]).collect(),
            (Advantage::Reinforce { baseline }, None) => {
                reinforce_advantages(&step_returns, *baseline, &mut running_baseline)
            }
            (Advantage::Grpo { .. }, None) => vec![0.0; picked.len()],
        };
        let lr = learning_rate(
            step,
            total_steps,
            config.lr,
            config.warmup_steps,
            config.min_lr_ratio,
        );
        let batch: Vec<(&Example, f64)> = picked
            .iter()
            .zip(&advantages)
            .map(|(&i, &a)| (&examples[i], a))
            .collect();
        let sums = accumulate(&model, &lora, &batch, config, step)?;
        let mut grads = sums.grads;
        let grad_norm = clip_grad_norm(&mut grads, config.max_grad_norm)?;
        opt.step(&grads, lr)?;
        step += 1;

        let tokens = sums.completion_tokens.max(1) as f64;
        let (adv_mean, adv_std) = mean_std(&advantages);
        let metrics = StepMetrics {
            step,
            total_steps,
            loss: sums.loss,
            reward_mean: mean_std(&step_returns).0,
            advantage_mean: adv_mean,
            advantage_std: adv_std,
            advantage_min: advantages.iter().copied().fold(f64::INFINITY, f64::min),
            advantage_max: advantages.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            kl: sums.kl / tokens,
            entropy: sums.entropy / tokens,
            grad_norm,
            lr,
            examples: picked.len(),
            completion_tokens: sums.completion_tokens,
            tokens_per_s: sums.all_tokens as f64 / began.elapsed().as_secs_f64().max(1e-9),
        };
        let line = serde_json::to_string(&metrics).map_err(|e| Error::json(&metrics_path, e))?;
        writeln!(metrics_file, "{line}").map_err(|e| Error::io(&metrics_path, e))?;
        progress(&metrics);
        publisher.step(&metrics);
        last = Some(metrics);
        let state = checkpoint::LoopState {
            step,
            adam_t: opt.state().2,
            running_baseline,
            seed: config.seed,
            examples: examples.len(),
            data: Some(digest.clone()),
        };
        if config.checkpoint_every > 0 && step % config.checkpoint_every == 0 {
            checkpoint::save(&config.out_dir, &lora, &opt, &state)?;
        }
    }
    metrics_file
        .flush()
        .map_err(|e| Error::io(&metrics_path, e))?;

    let mut report = RunReport {
        adapter: None,
        steps_done: step,
        total_steps,
        resumed_from: start,
        examples: stats,
        rewarded_examples: examples.len(),
        unmatched_step_rewards: credited.unmatched_step_rewards,
        final_metrics: last,
        run_id: publisher.run_id(),
    };
    if step < total_steps {
        return Ok(report);
    }
    let final_metrics = report
        .final_metrics
        .clone()
        .or_else(|| manifest::previous_final_metrics(&config.out_dir));
    let base_name = config.model_dir.display().to_string();
    let adapter = save_adapter(&lora, &config.out_dir, &base_name)?;
    checkpoint::save(
        &config.out_dir,
        &lora,
        &opt,
        &checkpoint::LoopState {
            step,
            adam_t: opt.state().2,
            running_baseline,
            seed: config.seed,
            examples: examples.len(),
            data: Some(digest.clone()),
        },
    )?;
    let manifest = Manifest::build(
        config,
        &model,
        &data.reads,
        versions,
        &report.examples,
        examples.len(),
        credited.unmatched_step_rewards,
        step,
        final_metrics,
        manifest::Lineage::of(&examples),
        publisher.run_id(),
    )?;
    manifest.write(&config.out_dir)?;
    let all_metrics: Vec<StepMetrics> = std::fs::read_to_string(&metrics_path)
        .map_err(|e| Error::io(&metrics_path, e))?
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let manifest_json = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Error::json(config.out_dir.join(atdp_model_files::MANIFEST_FILE), e))?;
    crate::report::write(&config.out_dir, &all_metrics, &manifest_json)?;
    report.adapter = Some(adapter);
    Ok(report)
}

/// Opens the metrics file for appending; on a resume, lines of steps after the checkpoint
/// (written by the interrupted run) are dropped first.
fn open_metrics(path: &Path, resumed_at: u64) -> Result<std::fs::File> {
    let kept: Vec<String> = if resumed_at == 0 {
        Vec::new()
    } else {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| serde_json::from_str::<StepMetrics>(l).is_ok_and(|m| m.step <= resumed_at))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    std::fs::write(path, kept.concat()).map_err(|e| Error::io(path, e))?;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

fn mean_std(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// The order examples are visited in: a fresh seeded shuffle each epoch, a function of
/// (seed, epoch) only, so a resumed run visits the same examples.
struct Order {
    seed: u64,
    n: usize,
    epochs: HashMap<usize, Vec<usize>>,
}

impl Order {
    fn new(seed: u64, n: usize) -> Self {
        Order {
            seed,
            n,
            epochs: HashMap::new(),
        }
    }

    /// The `k`-th example visited.
    fn get(&mut self, k: usize) -> usize {
        let (epoch, pos) = (k / self.n, k % self.n);
        let (seed, n) = (self.seed, self.n);
        let perm = self.epochs.entry(epoch).or_insert_with(|| {
            let mut rng = Rng::stream(seed, &format!("shuffle/{epoch}"));
            let mut p: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                p.swap(i, j);
            }
            p
        });
        perm[pos]
    }
}

/// Sums over one optimizer step.
struct StepSums {
    grads: Vec<Tensor>,
    /// The step's loss (already a mean: the policy term over the credited tokens, the KL
    /// penalty over every completion token).
    loss: f64,
    kl: f64,
    entropy: f64,
    completion_tokens: usize,
    all_tokens: usize,
    /// Micro-batches done in this step: with the step, it seeds the dropout masks, so that
    /// micro-batches of the same shape do not share masks.
    micro_batches: u64,
}

/// Forward and backward passes over `batch` in micro-batches within the token budget; the
/// gradients are those of the token-mean loss over the whole step.
fn accumulate(
    model: &Model,
    lora: &Lora,
    batch: &[(&Example, f64)],
    config: &RunConfig,
    step: u64,
) -> Result<StepSums> {
    let vars = lora.vars();
    // The policy term is a mean over the tokens the reward is credited to (every completion
    // token unless weighted), the KL penalty a mean over every completion token.
    let total_tokens: usize = batch.iter().map(|(e, _)| e.completion_len()).sum();
    let credited: f64 = batch.iter().map(|(e, _)| e.credited_tokens()).sum();
    let policy_scale = if credited > 0.0 { 1.0 / credited } else { 0.0 };
    let kl_scale = config.loss.kl_coef / total_tokens.max(1) as f64;
    let mut sums = StepSums {
        grads: vars
            .iter()
            .map(|v| v.as_tensor().zeros_like())
            .collect::<candle_core::Result<_>>()?,
        loss: 0.0,
        kl: 0.0,
        entropy: 0.0,
        completion_tokens: total_tokens,
        all_tokens: 0,
        micro_batches: 0,
    };
    let device = model.device();
    let mut micro: Vec<(&Example, f64)> = Vec::new();
    let flush = |micro: &mut Vec<(&Example, f64)>, sums: &mut StepSums| -> Result<()> {
        if micro.is_empty() {
            return Ok(());
        }
        let len = micro.iter().map(|(e, _)| e.tokens.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(micro.len() * len);
        for (e, _) in micro.iter() {
            ids.extend_from_slice(&e.tokens);
            ids.extend(std::iter::repeat_n(0u32, len - e.tokens.len()));
        }
        sums.all_tokens += micro.iter().map(|(e, _)| e.tokens.len()).sum::<usize>();
        let input = Tensor::from_vec(ids, (micro.len(), len), device)?;
        let dropout_key = (step << 20) | sums.micro_batches;
        sums.micro_batches += 1;
        // Only completion positions are scored: position `prompt_len - 1` predicts the
        // first completion token.
        let spans: Vec<Span> = micro
            .iter()
            .enumerate()
            .map(|(row, (e, _))| Span {
                row,
                start: e.prompt_len - 1,
                len: e.completion_len(),
            })
            .collect();
        let reference = if config.loss.kl_coef > 0.0 {
            Some(
                model
                    .score(&input, Adapter::Off, &spans)?
                    .log_probs
                    .detach(),
            )
        } else {
            None
        };
        let loss = |stats: &TokenStats| -> Result<Tensor> {
            let mut loss_sum: Option<Tensor> = None;
            let mut offset = 0;
            for (span, (e, advantage)) in spans.iter().zip(micro.iter()) {
                let n = span.len;
                let lp = stats.log_probs.narrow(0, offset, n)?;
                let behaviour = e
                    .behaviour_logprobs
                    .as_ref()
                    .map(|b| Tensor::new(b.as_slice(), device)?.to_dtype(lp.dtype()))
                    .transpose()?;
                let reference = reference
                    .as_ref()
                    .map(|r| r.narrow(0, offset, n))
                    .transpose()?;
                let terms = token_terms(
                    &lp,
                    behaviour.as_ref(),
                    reference.as_ref(),
                    *advantage,
                    &config.loss,
                )?;
                let policy = match &e.weights {
                    Some(w) if w.len() == n => terms
                        .policy
                        .mul(&Tensor::new(w.as_slice(), device)?.to_dtype(lp.dtype())?)?
                        .sum_all()?,
                    Some(w) => {
                        return Err(Error::invalid(
                            "weights",
                            format!("{} token weights for {n} completion tokens", w.len()),
                        ));
                    }
                    None => terms.policy.sum_all()?,
                };
                let row_loss = policy
                    .affine(policy_scale, 0.0)?
                    .add(&terms.kl.sum_all()?.affine(kl_scale, 0.0)?)?;
                sums.loss += scalar(&row_loss)?;
                sums.kl += scalar(&terms.kl.sum_all()?)?;
                sums.entropy += scalar(&stats.entropy.narrow(0, offset, n)?.sum_all()?)?;
                loss_sum = Some(match loss_sum {
                    Some(s) => s.add(&row_loss)?,
                    None => row_loss,
                });
                offset += n;
            }
            loss_sum.ok_or_else(|| Error::invalid("batch", "a micro-batch without examples"))
        };
        let grads = model.backward(
            &input,
            lora,
            dropout_key,
            &spans,
            config.recompute_activations.unwrap_or_else(|| {
                model.config().activation_bytes(
                    micro.len(),
                    len,
                    model.dtype(),
                    !model.device().is_cpu(),
                ) > AUTO_RECOMPUTE_BYTES
            }),
            loss,
        )?;
        for (acc, var) in sums.grads.iter_mut().zip(&vars) {
            if let Some(g) = grads.get(var) {
                *acc = acc.add(&g.to_dtype(acc.dtype())?)?;
            }
        }
        micro.clear();
        Ok(())
    };
    for &(e, a) in batch {
        let len = micro
            .iter()
            .map(|(m, _)| m.tokens.len())
            .max()
            .unwrap_or(0)
            .max(e.tokens.len());
        if !micro.is_empty() && len * (micro.len() + 1) > config.token_budget {
            flush(&mut micro, &mut sums)?;
        }
        micro.push((e, a));
    }
    flush(&mut micro, &mut sums)?;
    Ok(sums)
}

/// A one-element tensor as f64.
fn scalar(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}
