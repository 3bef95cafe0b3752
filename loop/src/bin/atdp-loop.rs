//! `atdp-loop`: the gate, one training cycle, continuous training on a schedule with
//! automatic rollback on live reward, and the live reward per version.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use atdp_deploy::{BaseModel, EngineOptions, Registry};
use atdp_lake::cli::{LakeArgs, init_logging, run_async};
use atdp_loop::{
    AdapterEvents, EnvArgs, Environment, GateConfig, GateSetup, RollbackConfig, blocking,
    check_canary, check_rollback, check_shadow, cycle, data_since, gate, live_rewards,
    record_decision, refuse_if_erased, retire_erased, rewarded_trajectories, shadow_scores,
    shadow_started,
};
use atdp_trainer::{RawRunConfig, RunConfig};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-loop",
    about = "Gate, train and promote adapters in a loop"
)]
struct Cli {
    /// The lake (the registry lives under it).
    #[command(flatten)]
    lake: LakeArgs,
    /// The registry's policy name.
    #[arg(long, env = "ATDP_SERVE_POLICY")]
    policy: String,
    /// The base model directory.
    #[arg(long, env = "ATDP_BASE_MODEL")]
    base: PathBuf,
    /// Where adapters are fetched to for evaluation.
    #[arg(long, default_value = "atdp-data/loop-cache")]
    cache: PathBuf,
    /// Who acts, in the registry's log.
    #[arg(long, env = "USER", default_value = "atdp-loop")]
    by: String,
    /// The environment the gate evaluates on, and whose reward automatic rollback compares.
    #[command(flatten)]
    env: EnvArgs,
    /// This process's write-ahead log for its audit events (one directory per process).
    #[arg(long, default_value = "atdp-data/loop-wal")]
    wal: PathBuf,
    /// The tenant its audit events are recorded under.
    #[arg(long, default_value = "_system")]
    tenant: String,
    /// Gate bounds (TOML with the fields of `[gate]` in docs/loop.md).
    #[arg(long)]
    gate: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Evaluate a published version against the served one; print the report. With
    /// `--record`, promote or reject it as the gate decides.
    Gate {
        /// The version number.
        version: u32,
        #[arg(long)]
        record: bool,
    },
    /// One cycle: train (train.toml; data since the newest published adapter), publish,
    /// gate, promote or reject.
    Cycle {
        #[arg(long)]
        train: PathBuf,
    },
    /// Cycles on a schedule, with automatic rollback on live reward.
    Run {
        #[arg(long)]
        train: PathBuf,
        /// A cycle at least this often (`90s`, `30m`, `24h` for nightly).
        #[arg(long)]
        every: Option<String>,
        /// A cycle as soon as this many new rewarded trajectories are in the lake.
        #[arg(long)]
        after: Option<usize>,
        /// How often to look at the lake and the schedule.
        #[arg(long, default_value = "60s")]
        poll: String,
        /// Roll back when the served version's live reward falls below the previous
        /// version's by more than this (needs `--rollback-window`).
        #[arg(long, default_value_t = 0.05)]
        rollback_margin: f64,
        /// Trajectories per version compared for automatic rollback (0: off).
        #[arg(long, default_value_t = 0)]
        rollback_window: usize,
        /// Published training runs (`training/` beside the tables: the console's Training
        /// page) that last wrote more than this many days ago are deleted, at start and then
        /// once a day; runs still running are kept (0: keep every run).
        #[arg(long, default_value_t = 90)]
        keep_runs_days: u64,
    },
    /// Retire every version of the policy that an erasure recorded in the lake lists as
    /// having learned from the erased data (`atdp-audit erase`), and print the retirements.
    /// `run` does the same at every poll.
    RetireErased {
        /// Leave the versions whose lineage is unknown (trained before it was recorded);
        /// by default they are retired too, never presumed clean.
        #[arg(long)]
        keep_unknown: bool,
    },
    /// The live reward per serving version (the latest N trajectories of each).
    Live {
        #[arg(long)]
        train: PathBuf,
        #[arg(long, default_value_t = 200)]
        window: usize,
    },
}

fn duration(text: &str) -> anyhow::Result<Duration> {
    let (number, unit) = text.split_at(text.trim_end_matches(char::is_alphabetic).len());
    let n: u64 = number
        .parse()
        .with_context(|| format!("{text:?} is not a duration like 90s, 30m or 24h"))?;
    Ok(Duration::from_secs(match unit {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => bail!("{text:?}: the unit must be s, m, h or d"),
    }))
}

fn train_config(path: &PathBuf) -> anyhow::Result<RunConfig> {
    Ok(RawRunConfig::from_file(path)?.validate(path)?)
}

async fn one_cycle(
    setup: &GateSetup,
    train: &RunConfig,
    env: &Environment,
    gate_config: &GateConfig,
    by: &str,
    trail: &AdapterEvents,
) -> anyhow::Result<()> {
    let mut train = train.clone();
    train.out_dir = train.out_dir.join(format!(
        "cycle-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ));
    let outcome = cycle(setup, train, env, gate_config, by, Some(trail)).await?;
    println!(
        "{}",
        serde_json::json!({
            "version": outcome.version,
            "promoted": outcome.promoted,
            "reason": outcome.event.reason,
            "examples": outcome.examples,
            "train_s": outcome.train_s,
            "gate_s": outcome.gate_s,
        })
    );
    Ok(())
}

/// Deletes the published training runs that last wrote more than `age` ago (not those still
/// running); returns their ids.
async fn prune_runs(
    lake: &str,
    options: &HashMap<String, String>,
    age: Duration,
) -> anyhow::Result<Vec<String>> {
    let lake = atdp_lake::Lake::new(lake, options.clone())?;
    Ok(
        atdp_lake::runs::prune(&lake, age, chrono::Utc::now(), false)
            .await?
            .runs,
    )
}

/// What continuous mode looks at on every poll.
struct Watch<'a> {
    lake: &'a str,
    options: &'a HashMap<String, String>,
    by: &'a str,
    registry: &'a Registry,
    train: &'a RunConfig,
    env: &'a Environment,
    rollback: &'a RollbackConfig,
    gate: &'a GateConfig,
    trail: &'a AdapterEvents,
}

impl Watch<'_> {
    /// One look at the lake: retires the versions erasures list, rolls back when the live
    /// reward says so, and returns how many rewarded trajectories arrived since the newest
    /// published adapter.
    async fn poll(&self) -> anyhow::Result<usize> {
        let lake = atdp_lake::Lake::new(self.lake, self.options.clone())?;
        for event in retire_erased(&lake, self.registry, self.by, Some(self.trail), false).await? {
            println!(
                "{}",
                serde_json::json!({"retired": event.version, "reason": event.reason})
            );
        }
        let mut selection = self.train.selection.clone();
        if let Some(since) = data_since(self.registry).await? {
            selection.since = Some(selection.since.map_or(since, |s| s.max(since)));
        }
        let reward = self.env.reward_name().to_owned();
        let (lake, opts, name) = (self.lake.to_owned(), self.options.clone(), reward.clone());
        let fresh = blocking("lake-read", move || {
            rewarded_trajectories(&lake, opts, &selection, &name)
        })
        .await?;
        if self.rollback.window > 0 {
            let (lake, opts) = (self.lake.to_owned(), self.options.clone());
            let (all, window) = (self.train.selection.clone(), self.rollback.window);
            let live = blocking("live", move || {
                live_rewards(&lake, opts, &all, &reward, window)
            })
            .await?;
            if let Some(event) = check_rollback(
                self.registry,
                &live,
                self.rollback,
                self.by,
                Some(self.trail),
            )
            .await?
            {
                println!(
                    "{}",
                    serde_json::json!({"rolled_back_to": event.version, "reason": event.reason})
                );
            }
            if let Some(event) = check_canary(
                self.registry,
                &live,
                self.rollback,
                self.by,
                Some(self.trail),
            )
            .await?
            {
                println!(
                    "{}",
                    serde_json::json!({"canary": event.version, "action": event.action, "reason": event.reason})
                );
            }
            if let Some(event) = self.check_shadow().await? {
                println!(
                    "{}",
                    serde_json::json!({"shadow": event.version, "action": event.action, "reason": event.reason})
                );
            }
        }
        Ok(fresh)
    }

    /// The verdict on the version in shadow, if one runs and the gate names its reward.
    async fn check_shadow(&self) -> anyhow::Result<Option<atdp_deploy::Event>> {
        let state = self.registry.state().await?;
        let (Some(shadow), Some(reward)) = (
            state.canary.filter(|c| c.shadow),
            self.gate.shadow_reward.clone(),
        ) else {
            return Ok(None);
        };
        let name = format!("{}@v{}", self.registry.policy(), shadow.version);
        let since = shadow_started(self.registry, shadow.version)
            .await?
            .unwrap_or(0);
        let (lake, opts) = (self.lake.to_owned(), self.options.clone());
        let (all, window) = (self.train.selection.clone(), self.rollback.window);
        let scores = blocking("shadow", move || {
            shadow_scores(&lake, opts, &all, &reward, &name, since, window)
        })
        .await?;
        Ok(check_shadow(
            self.registry,
            shadow.version,
            &scores,
            self.rollback,
            self.gate.canary_share,
            self.by,
            Some(self.trail),
        )
        .await?)
    }
}

async fn main_async(cli: Cli) -> anyhow::Result<()> {
    // The schema's parser: its errors name a pair's position, never its text (credentials).
    let options = cli.lake.options()?;
    let lake_url = cli.lake.url();
    let env = cli.env.environment()?;
    let gate_config: GateConfig = match &cli.gate {
        Some(path) => toml::from_str(&std::fs::read_to_string(path)?)
            .with_context(|| format!("{}", path.display()))?,
        None => GateConfig::default(),
    };
    gate_config.check()?;
    let registry = Registry::open(&lake_url, options.clone(), &cli.policy)?;
    let trail = AdapterEvents::open(&lake_url, options.clone(), &cli.wal, &cli.tenant).await?;
    let setup = GateSetup {
        registry: registry.clone(),
        base: BaseModel::open(&cli.base)?,
        cache: cli.cache.clone(),
        options: EngineOptions::default(),
    };
    match cli.command {
        Command::Gate { version, record } => {
            let mut report = gate(&setup, version, &env, &gate_config).await?;
            let lake = atdp_lake::Lake::new(&lake_url, options.clone())?;
            refuse_if_erased(&lake, &registry, version, &mut report).await?;
            for check in &report.checks {
                println!(
                    "{} {}: {}",
                    if check.passed { "pass" } else { "FAIL" },
                    check.name,
                    check.detail
                );
            }
            println!("{}", report.reason());
            if record {
                let event =
                    record_decision(&registry, &report, version, &cli.by, Some(&trail)).await?;
                println!(
                    "recorded: {:?} v{} (log entry {})",
                    event.action, event.version, event.seq
                );
            }
        }
        Command::Cycle { train } => {
            one_cycle(
                &setup,
                &train_config(&train)?,
                &env,
                &gate_config,
                &cli.by,
                &trail,
            )
            .await?;
        }
        Command::RetireErased { keep_unknown } => {
            let lake = atdp_lake::Lake::new(&lake_url, options.clone())?;
            for event in
                retire_erased(&lake, &registry, &cli.by, Some(&trail), keep_unknown).await?
            {
                println!(
                    "{}",
                    serde_json::json!({"retired": event.version, "reason": event.reason})
                );
            }
        }
        Command::Live { train, window } => {
            let train = train_config(&train)?;
            let (lake, selection, reward) = (
                lake_url.clone(),
                train.selection.clone(),
                env.reward_name().to_owned(),
            );
            let opts = options.clone();
            let live = blocking("live", move || {
                live_rewards(&lake, opts, &selection, &reward, window)
            })
            .await?;
            println!("{}", serde_json::to_string_pretty(&live)?);
        }
        Command::Run {
            train,
            every,
            after,
            poll,
            rollback_margin,
            rollback_window,
            keep_runs_days,
        } => {
            let train = train_config(&train)?;
            let keep_runs = (keep_runs_days > 0)
                .then(|| keep_runs_days.checked_mul(86_400).map(Duration::from_secs))
                .map(|age| age.context("--keep-runs-days is too large"))
                .transpose()?;
            let mut last_prune: Option<Instant> = None;
            let every = every.as_deref().map(duration).transpose()?;
            if every.is_none() && after.is_none() {
                bail!("give --every, --after or both");
            }
            let poll = duration(&poll)?;
            let rollback = RollbackConfig {
                window: rollback_window,
                margin: rollback_margin,
            };
            let mut last_cycle = Instant::now();
            loop {
                if let Some(age) = keep_runs
                    && last_prune.is_none_or(|at| at.elapsed() >= Duration::from_secs(86_400))
                {
                    last_prune = Some(Instant::now());
                    match prune_runs(&lake_url, &options, age).await {
                        Ok(runs) if !runs.is_empty() => {
                            println!("{}", serde_json::json!({"pruned_runs": runs}));
                        }
                        Ok(_) => {}
                        // Tried again the next day; a failed prune never stops the loop.
                        Err(e) => eprintln!("atdp-loop: pruning old training runs failed: {e:#}"),
                    }
                }
                tokio::time::sleep(poll).await;
                // A lake or registry that cannot be read now (storage down) is reported and
                // tried again at the next poll; the loop does not stop.
                let watch = Watch {
                    lake: &lake_url,
                    options: &options,
                    by: &cli.by,
                    registry: &registry,
                    train: &train,
                    env: &env,
                    rollback: &rollback,
                    gate: &gate_config,
                    trail: &trail,
                };
                let fresh = match watch.poll().await {
                    Ok(fresh) => fresh,
                    Err(e) => {
                        eprintln!("atdp-loop: {e:#}; trying again in {poll:?}");
                        continue;
                    }
                };
                let due = every.is_some_and(|e| last_cycle.elapsed() >= e)
                    || after.is_some_and(|m| fresh >= m);
                if !due {
                    continue;
                }
                last_cycle = Instant::now();
                if let Err(e) = one_cycle(&setup, &train, &env, &gate_config, &cli.by, &trail).await
                {
                    eprintln!("atdp-loop: the cycle failed: {e:#}; the served version stays");
                }
            }
        }
    }
    trail.close().await?;
    Ok(())
}

fn main() -> ExitCode {
    init_logging("info");
    let cli = Cli::parse();
    run_async("atdp-loop", async {
        main_async(cli).await?;
        Ok(ExitCode::SUCCESS)
    })
}
