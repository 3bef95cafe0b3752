//! `atdp-lake`: maintenance of the ATDP lake (statistics, compaction, vacuum).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use atdp_schema::{Lake, Table, maintenance, parse_storage_options};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-lake",
    version,
    about = "Maintain the ATDP Delta Lake tables"
)]
struct Cli {
    /// The lake: a local directory or a file://, s3://, gs:// or az:// URL.
    #[arg(long, env = "ATDP_LAKE", default_value = "./atdp-data/lake")]
    lake: String,
    /// Object-store option KEY=VALUE (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000.
    /// Also read from ATDP_STORAGE_OPTIONS as comma-separated KEY=VALUE pairs.
    #[arg(long = "storage-option", value_name = "KEY=VALUE")]
    storage_options: Vec<String>,
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
}

fn storage_options(cli: &Cli) -> anyhow::Result<HashMap<String, String>> {
    let from_env = std::env::var("ATDP_STORAGE_OPTIONS").unwrap_or_default();
    let pairs = from_env
        .split(',')
        .map(str::to_owned)
        .chain(cli.storage_options.iter().cloned());
    Ok(parse_storage_options(pairs)?)
}

fn tables(name: Option<&str>) -> anyhow::Result<Vec<Table>> {
    match name {
        None => Ok(Table::ALL.to_vec()),
        Some(name) => Table::from_name(name).map(|t| vec![t]).with_context(|| {
            format!("unknown table {name:?}: use steps, rewards, audit or pii_vault")
        }),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let lake = Lake::new(&cli.lake, storage_options(&cli)?)?;
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
    }
    Ok(())
}
