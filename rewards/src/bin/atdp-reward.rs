//! `atdp-reward`: run, preview and compare reward functions over the lake. See
//! `docs/rewards.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use atdp_lake::cli::{LakeArgs, init_logging, run_async};
use atdp_lake::{Catalog, LakeWriter, WriterConfig};
use atdp_rewards::{Progress, RewardFn, Selection, Target};
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-reward",
    version,
    about = "Reward functions over the atdp lake: run, preview, diff"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct Common {
    #[command(flatten)]
    lake: LakeArgs,
    /// Only this tenant.
    #[arg(long, global = true)]
    tenant: Option<String>,
    /// Only this agent.
    #[arg(long, global = true)]
    agent: Option<String>,
    /// Only steps started at or after this (RFC 3339, or YYYY-MM-DD for midnight UTC).
    #[arg(long, global = true)]
    since: Option<String>,
    /// Only steps started before this (RFC 3339, or YYYY-MM-DD for midnight UTC).
    #[arg(long, global = true)]
    until: Option<String>,
    /// Steps without a training mark (written before ATDP 1.1): `excluded` (default, not
    /// labelled) or `eligible`.
    #[arg(long, global = true, env = "ATDP_UNMARKED", default_value = "excluded")]
    unmarked: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Label what this function version has not labelled yet, and commit it to the lake.
    Run {
        /// The reward function spec (TOML).
        #[arg(long = "fn")]
        function: PathBuf,
        /// This process's write-ahead log (one per running process).
        #[arg(long, env = "ATDP_REWARD_WAL", default_value = "atdp-data/wal-reward")]
        wal: PathBuf,
    },
    /// Show the function's value distribution on a sample, with examples. Writes nothing.
    Preview {
        /// The reward function spec (TOML).
        #[arg(long = "fn")]
        function: PathBuf,
        /// Steps (or trajectories) in the sample.
        #[arg(long, default_value_t = 200)]
        sample: usize,
        /// Changes which units are sampled.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Compare two functions on the same sample. Writes nothing.
    Diff {
        /// The two specs: --fn A --fn B.
        #[arg(long = "fn", num_args = 1, required = true)]
        functions: Vec<PathBuf>,
        /// Steps (or trajectories) in the sample.
        #[arg(long, default_value_t = 200)]
        sample: usize,
        /// Changes which units are sampled.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn parse_time(flag: &str, text: &str) -> Result<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_micros());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(t.and_utc().timestamp_micros());
    }
    bail!("--{flag} {text:?}: expected RFC 3339 (2026-11-29T09:00:00Z) or YYYY-MM-DD")
}

fn load(path: &Path) -> Result<RewardFn> {
    let function = RewardFn::load(path)?;
    eprintln!(
        "reward {} · source {} · reward_fn_version {}",
        function.name, function.source, function.version
    );
    Ok(function)
}

fn unit(target: Target) -> &'static str {
    match target {
        Target::Step => "steps",
        Target::Trajectory => "trajectories",
    }
}

async fn main_async(cli: Cli) -> Result<()> {
    let c = &cli.common;
    let selection = Selection {
        tenant_id: c.tenant.clone(),
        agent_id: c.agent.clone(),
        since: c
            .since
            .as_deref()
            .map(|t| parse_time("since", t))
            .transpose()?,
        until: c
            .until
            .as_deref()
            .map(|t| parse_time("until", t))
            .transpose()?,
        unmarked: atdp_schema::Unmarked::from_name(&c.unmarked).ok_or_else(|| {
            anyhow::anyhow!("--unmarked {:?}: use excluded or eligible", c.unmarked)
        })?,
    };
    let options = c.lake.options()?;
    let lake = c.lake.open()?;
    let catalog = Catalog::open(&lake, &BTreeMap::new())
        .await
        .context("opening the lake")?;
    match &cli.command {
        Command::Run { function, wal } => {
            let function = load(function)?;
            let mut config = WriterConfig::new(c.lake.url(), wal.clone());
            config.storage_options = options;
            let writer = LakeWriter::open(config).await?;
            let units = unit(function.target);
            let mut last = Instant::now();
            let mut print = |p: Progress| {
                if last.elapsed() >= Duration::from_secs(1) || p.done == p.total {
                    last = Instant::now();
                    eprintln!(
                        "labelled {}/{} {units} ({:.0} {units}/s), {} rewards written",
                        p.done, p.total, p.per_second, p.written
                    );
                }
            };
            let result =
                atdp_rewards::run(&catalog, &function, &selection, &writer, &mut print).await;
            let clean = writer.shutdown(Duration::from_secs(30)).await?;
            let report = result?;
            println!(
                "{} {units} pending, {} rewards written in {:.1} s ({:.0} {units}/s)",
                report.pending,
                report.written,
                report.elapsed.as_secs_f64(),
                report.per_second()
            );
            if !clean {
                bail!(
                    "the write-ahead log still holds records; they are committed by the next run"
                );
            }
        }
        Command::Preview {
            function,
            sample,
            seed,
        } => {
            let function = load(function)?;
            let preview =
                atdp_rewards::preview(&catalog, &function, &selection, *sample, *seed).await?;
            print!("{preview}");
        }
        Command::Diff {
            functions,
            sample,
            seed,
        } => {
            let [a, b] = functions.as_slice() else {
                bail!("diff takes exactly two functions: --fn A --fn B");
            };
            let (a, b) = (load(a)?, load(b)?);
            let diff = atdp_rewards::diff(&catalog, &a, &b, &selection, *sample, *seed).await?;
            print!("{diff}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    init_logging("warn");
    let cli = Cli::parse();
    run_async("atdp-reward", async {
        main_async(cli).await?;
        Ok(ExitCode::SUCCESS)
    })
}
