//! `atdp-train`: the trainer's command line.
//!
//! `atdp-train init-model --arch qwen2 --tiny OUT_DIR` writes a small random model with a
//! byte-level BPE tokenizer and a ChatML chat template (for tests, demos and benchmarks);
//! size flags override the preset, e.g. `--hidden 896 --intermediate 4864 --layers 24
//! --heads 14 --kv-heads 2 --vocab 151936` for a Qwen2-0.5B-shaped model; `--corpus FILE
//! --merges N` adds up to N merges learned from the text of FILE to the tokenizer.
//!
//! `atdp-train run --config train.toml [--model DIR] [--lake URL] [--out DIR] [--steps N]
//! [--seed N] [--lr X] [--accept-reward-change]` trains an adapter, printing one progress
//! line per optimizer step; with `--check` it validates the configuration (flags applied),
//! prints what it would train, and exits without reading the model or the lake. Errors are
//! one line
//! on stderr and exit status 2.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use atdp_model_files::Arch;
use atdp_trainer::{InitSpec, RawRunConfig, TrainOptions, init_model, learn_merges};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-train",
    version,
    about = "Train LoRA adapters from ATDP trajectories"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a random model (config, f32 safetensors, tokenizer, chat template) to OUT_DIR.
    InitModel(InitModelArgs),
    /// Train a LoRA adapter from the lake as train.toml says; flags override the file.
    Run(RunArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The run configuration.
    #[arg(long, env = "ATDP_TRAIN_CONFIG")]
    config: PathBuf,
    /// The base model directory (overrides `model`).
    #[arg(long, env = "ATDP_TRAIN_MODEL")]
    model: Option<PathBuf>,
    /// The lake URL or directory (overrides `lake`).
    #[arg(long, env = "ATDP_TRAIN_LAKE")]
    lake: Option<String>,
    /// The output directory (overrides `out`).
    #[arg(long, env = "ATDP_TRAIN_OUT")]
    out: Option<PathBuf>,
    /// Optimizer steps (overrides `train.steps`, and `train.epochs` with it).
    #[arg(long)]
    steps: Option<u64>,
    /// Seed (overrides `train.seed`).
    #[arg(long)]
    seed: Option<u64>,
    /// Peak learning rate (overrides `train.lr`).
    #[arg(long)]
    lr: Option<f64>,
    /// How placeholders of masked text are trained on: `surrogate` or `keep` (overrides
    /// `train.placeholders`).
    #[arg(long, env = "ATDP_TRAIN_PLACEHOLDERS")]
    placeholders: Option<String>,
    /// Train even if a reward function's version changed since the last run in --out.
    #[arg(long)]
    accept_reward_change: bool,
    /// Train on a reward name whose selected rows come from several function versions.
    #[arg(long)]
    allow_mixed_reward_versions: bool,
    /// Validate the configuration and exit: nothing is read from the model or the lake.
    #[arg(long)]
    check: bool,
}

fn train(args: RunArgs) -> anyhow::Result<()> {
    let mut raw = RawRunConfig::from_file(&args.config)?;
    if let Some(model) = args.model {
        raw.model = Some(model);
    }
    if let Some(lake) = args.lake {
        raw.lake = Some(lake);
    }
    if let Some(out) = args.out {
        raw.out = Some(out);
    }
    if let Some(steps) = args.steps {
        raw.train.steps = Some(steps);
        raw.train.epochs = None;
    }
    if let Some(seed) = args.seed {
        raw.train.seed = Some(seed);
    }
    if let Some(lr) = args.lr {
        raw.train.lr = Some(lr);
    }
    if let Some(placeholders) = args.placeholders {
        raw.train.placeholders = Some(placeholders);
    }
    raw.accept_reward_change |= args.accept_reward_change;
    raw.rewards.allow_mixed_versions |= args.allow_mixed_reward_versions;
    let config = raw.validate(&args.config)?;
    if args.check {
        println!(
            "{} is valid: model {}, lake {}, out {}, {:?}, lr {:e}, placeholders {}",
            args.config.display(),
            config.model_dir.display(),
            config.lake,
            config.out_dir.display(),
            config.length,
            config.lr,
            config.placeholders.name()
        );
        return Ok(());
    }
    let report = atdp_trainer::run(&config, &TrainOptions::default(), &mut |m| {
        println!(
            "step {}/{}  reward {:+.4}  loss {:+.4}  kl {:.4}  entropy {:.3}  grad {:.3}  lr {:.2e}  {:.0} tok/s",
            m.step,
            m.total_steps,
            m.reward_mean,
            m.loss,
            m.kl,
            m.entropy,
            m.grad_norm,
            m.lr,
            m.tokens_per_s
        );
    })?;
    if report.resumed_from > 0 {
        println!("resumed from step {}", report.resumed_from);
    }
    if report.unmatched_step_rewards > 0 {
        println!(
            "ignored {} step rewards whose step_id is not a selected step of their own trajectory",
            report.unmatched_step_rewards
        );
    }
    match report.adapter {
        Some(adapter) => println!(
            "wrote the adapter, {} and {} to {} ({} examples trained on, {} steps)",
            atdp_model_files::MANIFEST_FILE,
            atdp_trainer::METRICS_FILE,
            adapter.dir.display(),
            report.rewarded_examples,
            report.steps_done
        ),
        None => println!(
            "stopped at step {} of {}",
            report.steps_done, report.total_steps
        ),
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
struct InitModelArgs {
    /// Architecture: qwen2, llama or qwen3.
    #[arg(long)]
    arch: Arch,
    /// Start from the tiny preset (vocab 300, hidden 64, 2 layers, 4 heads, 2 kv heads,
    /// MLP 128); the only preset so far.
    #[arg(long, required = true)]
    tiny: bool,
    /// Seed of every weight; the same seed writes the same files.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Width of the residual stream.
    #[arg(long)]
    hidden: Option<usize>,
    /// Width of the MLP.
    #[arg(long)]
    intermediate: Option<usize>,
    /// Number of decoder layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Query heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Key/value heads (must divide --heads).
    #[arg(long)]
    kv_heads: Option<usize>,
    /// Width of one head (default: the preset's, or hidden / heads when --hidden or --heads
    /// is given).
    #[arg(long)]
    head_dim: Option<usize>,
    /// Vocabulary rows (at least the tokenizer's 300; extra rows are padding).
    #[arg(long)]
    vocab: Option<usize>,
    /// Standard deviation of the random embeddings, projections and biases.
    #[arg(long, default_value_t = 0.02)]
    init_std: f64,
    /// A text file the tokenizer learns merges from (repeatable; with --merges).
    #[arg(long, requires = "merges")]
    corpus: Vec<PathBuf>,
    /// Merges to learn from --corpus, after the built-in ones (their rows are added to the
    /// vocabulary).
    #[arg(long, requires = "corpus")]
    merges: Option<usize>,
    /// Where to write the model (created; must not already hold one).
    out_dir: PathBuf,
}

fn init(args: InitModelArgs) -> anyhow::Result<()> {
    let mut spec = InitSpec::tiny(args.arch);
    spec.seed = args.seed;
    spec.init_std = args.init_std;
    let c = &mut spec.config;
    if let Some(hidden) = args.hidden {
        c.hidden_size = hidden;
    }
    if let Some(heads) = args.heads {
        c.num_attention_heads = heads;
    }
    if args.hidden.is_some() || args.heads.is_some() {
        c.head_dim = c.hidden_size / c.num_attention_heads.max(1);
    }
    if let Some(head_dim) = args.head_dim {
        c.head_dim = head_dim;
    }
    if let Some(kv_heads) = args.kv_heads {
        c.num_key_value_heads = kv_heads;
    }
    if let Some(intermediate) = args.intermediate {
        c.intermediate_size = intermediate;
    }
    if let Some(layers) = args.layers {
        c.num_hidden_layers = layers;
    }
    if let Some(vocab) = args.vocab {
        c.vocab_size = vocab;
    }
    if let Some(count) = args.merges {
        let texts = args
            .corpus
            .iter()
            .map(|path| {
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the corpus {}", path.display()))
            })
            .collect::<anyhow::Result<Vec<String>>>()?;
        spec = spec.with_merges(learn_merges(&texts, count)?);
    }
    let report = init_model(&args.out_dir, &spec)
        .with_context(|| format!("cannot write a model to {}", args.out_dir.display()))?;
    println!(
        "wrote a random {} model ({} parameters, seed {}) to {}",
        args.arch,
        report.num_parameters,
        args.seed,
        report.dir.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::InitModel(args) => init(args),
        Command::Run(args) => train(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => atdp_lake::cli::fail("atdp-train", format!("{e:#}")),
    }
}
