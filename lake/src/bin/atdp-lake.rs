//! `atdp-lake`: maintenance of the ATDP lake (statistics, compaction, vacuum).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use atdp_lake::cli::{LakeArgs, init_logging, run_async};
use atdp_lake::maintenance;
use atdp_schema::Table;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-lake",
    version,
    about = "Maintain the ATDP Delta Lake tables"
)]
struct Cli {
    #[command(flatten)]
    lake: LakeArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print each table's version, files, bytes, rows and partitions as JSON.
    Stats,
    /// Compact small files into larger ones (safe while writers append).
    Optimize {
        /// Only this table (steps, rewards, audit, pii_vault); all by default.
        #[arg(long)]
        table: Option<String>,
        /// Target file size in MiB.
        #[arg(long, default_value_t = 128)]
        target_mib: u64,
    },
    /// Delete files no longer referenced and older than the retention.
    Vacuum {
        /// Only this table; all by default.
        #[arg(long)]
        table: Option<String>,
        /// Retention in hours (Delta's minimum is 168 unless --force).
        #[arg(long, default_value_t = 168)]
        retention_hours: u64,
        /// List what would be deleted without deleting.
        #[arg(long)]
        dry_run: bool,
        /// Allow a retention under the table's minimum (breaks time travel before it).
        #[arg(long)]
        force: bool,
    },
    /// Delete the published training runs (`training/`, the console's training page) that
    /// last wrote more than --older-than-days ago; runs still running are kept.
    PruneRuns {
        /// Age in days.
        #[arg(long, default_value_t = 90)]
        older_than_days: u64,
        /// List what would be deleted without deleting.
        #[arg(long)]
        dry_run: bool,
    },
}

fn tables(name: Option<&str>) -> anyhow::Result<Vec<Table>> {
    match name {
        None => Ok(Table::ALL.to_vec()),
        Some(name) => Table::from_name(name).map(|t| vec![t]).with_context(|| {
            format!("unknown table {name:?}: use steps, rewards, audit or pii_vault")
        }),
    }
}

fn main() -> ExitCode {
    init_logging("warn");
    let cli = Cli::parse();
    run_async("atdp-lake", maintain(cli))
}

async fn maintain(cli: Cli) -> anyhow::Result<ExitCode> {
    let lake = cli.lake.open()?;
    match &cli.command {
        Command::Stats => {
            let stats = maintenance::stats(&lake).await?;
            println!("{}", serde_json::to_string_pretty(&stats)?);
        }
        Command::Optimize { table, target_mib } => {
            for table in tables(table.as_deref())? {
                let target = target_mib
                    .checked_mul(1 << 20)
                    .context("--target-mib is too large")?;
                let report = maintenance::optimize(&lake, table, target).await?;
                println!("{}", serde_json::to_string(&report)?);
            }
        }
        Command::Vacuum {
            table,
            retention_hours,
            dry_run,
            force,
        } => {
            if *retention_hours < 1 {
                bail!(
                    "--retention-hours must be at least 1: a writer's Parquet files exist for a moment before their commit, and a full vacuum would delete them"
                );
            }
            for table in tables(table.as_deref())? {
                let retention = retention_hours
                    .checked_mul(3600)
                    .map(Duration::from_secs)
                    .context("--retention-hours is too large")?;
                let report = maintenance::vacuum(&lake, table, retention, *dry_run, *force).await?;
                println!("{}", serde_json::to_string(&report)?);
            }
        }
        Command::PruneRuns {
            older_than_days,
            dry_run,
        } => {
            let age = older_than_days
                .checked_mul(86_400)
                .map(Duration::from_secs)
                .context("--older-than-days is too large")?;
            let report = atdp_lake::runs::prune(&lake, age, chrono::Utc::now(), *dry_run).await?;
            println!("{}", serde_json::to_string(&report)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}
