//! Writes a synthetic ATDP lake through the same writer the proxy uses.
//!
//! `cargo run --release -p atdp-schema --example synth-lake -- --steps 10000 --out ./demo-lake`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::{LakeWriter, WriterConfig, parse_storage_options};
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Steps to generate.
    #[arg(long, default_value_t = 10_000)]
    steps: usize,
    /// The lake: a directory or an s3://, gs://, az:// URL.
    #[arg(long)]
    out: String,
    /// Object-store option KEY=VALUE (repeatable).
    #[arg(long = "lake-option", value_name = "KEY=VALUE")]
    lake_options: Vec<String>,
    /// Write-ahead log directory (a temporary one by default).
    #[arg(long)]
    wal_dir: Option<PathBuf>,
    /// Tenants.
    #[arg(long, default_value_t = 3)]
    tenants: usize,
    /// Days the traffic spans.
    #[arg(long, default_value_t = 3)]
    days: u32,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let scratch = tempfile::tempdir()?;
    let wal_dir = args
        .wal_dir
        .clone()
        .unwrap_or_else(|| scratch.path().join("wal"));
    let mut config = WriterConfig::new(&args.out, wal_dir);
    config.storage_options = parse_storage_options(&args.lake_options)?;
    config.segment_max_bytes = 256 << 20;
    config.segment_max_age = Duration::from_secs(3600);
    let writer = LakeWriter::open(config).await?;
    let started = Instant::now();
    let synth = SynthConfig {
        steps: args.steps,
        tenants: args.tenants,
        days: args.days,
        seed: args.seed,
        ..SynthConfig::default()
    };
    let summary = generate(&synth, |record| {
        // A bulk load outruns the disk at times: wait for the log as a proxy would not.
        loop {
            match writer.append_record(&record) {
                Err(atdp_lake::Error::Backpressure { .. }) => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                other => return other.map(|_| ()),
            }
        }
    })?;
    writer.flush().await?;
    writer.shutdown(Duration::from_secs(60)).await?;
    eprintln!(
        "wrote {} steps in {} trajectories, {} rewards, {} audit events, {} vault entries to {} in {:.1} s",
        summary.steps,
        summary.trajectories,
        summary.rewards,
        summary.audit_events,
        summary.vault_entries,
        args.out,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
