//! Training speed on CPU: tokens/s of a LoRA policy-gradient step (forward over every
//! position, log-probs of the targets, backward, AdamW) and peak memory, for a random model of
//! a given shape.
//!
//! `cargo run --release -p atdp-trainer --example bench-train -- --preset tiny --seq 256`
//! `cargo run --release -p atdp-trainer --example bench-train -- --preset qwen2-0.5b --seq 1024 --steps 2 --recompute`
//!
//! The model is generated once under `--dir` (the 0.5B shape is 2 GB of f32 weights).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use atdp_model_files::LoraConfig;
use atdp_trainer::{AdamW, AdamWConfig, InitSpec, LoadOptions, Lora, Model, Span};
use candle_core::Tensor;
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// `tiny` (the test model) or `qwen2-0.5b` (Qwen2-0.5B's shape, random weights).
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Sequence length.
    #[arg(long, default_value_t = 256)]
    seq: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Measured steps (one more runs first, unmeasured).
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Positions per sequence whose next token is scored (the completion; the rest is
    /// prompt). Default: all but the last.
    #[arg(long)]
    completion: Option<usize>,
    /// Recompute each layer's activations in the backward pass instead of keeping them
    /// (`train.recompute_activations`).
    #[arg(long)]
    recompute: bool,
    /// Where generated models are kept.
    #[arg(long, default_value = "/tmp/atdp-bench-train")]
    dir: PathBuf,
    /// Print one line of JSON (the fields of `bench_train_torch.py`'s line) instead of text.
    #[arg(long)]
    json: bool,
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.seq < 2 || args.batch == 0 || args.steps == 0 {
        bail!("--seq must be at least 2, --batch and --steps at least 1");
    }
    let spec = InitSpec::preset(&args.preset)
        .with_context(|| format!("unknown preset {}: tiny or qwen2-0.5b", args.preset))?;
    let dir = args.dir.join(&args.preset);
    if !dir.join("config.json").exists() {
        let started = Instant::now();
        atdp_trainer::init_model(&dir, &spec)?;
        println!(
            "generated {} in {:.1} s",
            dir.display(),
            started.elapsed().as_secs_f64()
        );
    }
    let model = Model::load(&dir, &LoadOptions::default())?;
    let lora = Lora::new(&model, LoraConfig::default())?;
    let vars = lora.vars();
    let params: usize = vars.iter().map(|v| v.as_tensor().elem_count()).sum();
    let mut adamw = AdamW::new(vars.clone(), AdamWConfig::default())?;
    let vocab = model.config().vocab_size as u64;
    let scored = args
        .completion
        .unwrap_or(args.seq - 1)
        .clamp(1, args.seq - 1);
    let mut times = Vec::new();
    for step in 0..=args.steps {
        // Deterministic spread of token ids (the speed does not depend on which ones).
        let ids: Vec<u32> = (0..args.batch * args.seq)
            .map(|i| ((i as u64 * 2_654_435_761 + step as u64 * 97) % vocab) as u32)
            .collect();
        let ids = Tensor::from_vec(ids, (args.batch, args.seq), model.device())?;
        let started = Instant::now();
        let spans: Vec<Span> = (0..args.batch)
            .map(|row| Span {
                row,
                start: args.seq - 1 - scored,
                len: scored,
            })
            .collect();
        let grads = model.backward(&ids, &lora, step as u64, &spans, args.recompute, |stats| {
            Ok(stats.log_probs.mean_all()?.neg()?)
        })?;
        let grads = vars
            .iter()
            .map(|v| {
                grads
                    .get(v)
                    .cloned()
                    .context("no gradient for a LoRA variable")
            })
            .collect::<anyhow::Result<Vec<Tensor>>>()?;
        adamw.step(&grads, 1e-4)?;
        if step > 0 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let tokens_per_s = (args.batch * args.seq) as f64 / median;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "system": "atdp",
                "seq": args.seq,
                "batch": args.batch,
                "scored": scored,
                "recompute": args.recompute,
                "lora_parameters": params,
                "step_s": (median * 1000.0).round() / 1000.0,
                "tokens_per_s": (tokens_per_s * 10.0).round() / 10.0,
                "peak_rss_mb": peak_rss_mb().round(),
            })
        );
        return Ok(());
    }
    println!(
        "preset {} seq {} batch {} scored {} recompute {}: {} LoRA parameters (r 8, all projections), step median {:.3} s, {:.0} tokens/s, peak RSS {:.0} MB",
        args.preset,
        args.seq,
        args.batch,
        scored,
        args.recompute,
        params,
        median,
        tokens_per_s,
        peak_rss_mb()
    );
    Ok(())
}
