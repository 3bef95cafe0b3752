//! Benchmark of the lake writer: append (write-ahead log, group-commit fsync) and then
//! roll + Parquet + commit of realistic steps, and the resident memory the writing adds
//! (sampled every 5 ms). Prints figures; see docs/benchmarks.md.
//!
//! `cargo run --release -p atdp-schema --example bench-writer -- --steps 50000`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::{LakeWriter, WriterConfig, maintenance};
use atdp_schema::Record;
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Steps to append.
    #[arg(long, default_value_t = 50_000)]
    steps: usize,
    /// Disable fsync of the write-ahead log (to see its cost).
    #[arg(long)]
    no_fsync: bool,
    /// Segment size in MiB.
    #[arg(long, default_value_t = 64)]
    segment_mib: u64,
    /// Records converted and written at a time, at most (`WriterConfig::chunk_rows`).
    #[arg(long, default_value_t = 4096)]
    chunk_rows: usize,
    /// … and fewer when they take this many KiB in the log (`WriterConfig::chunk_bytes`).
    #[arg(long, default_value_t = 4096)]
    chunk_kib: usize,
    /// Data files open at once per table (`WriterConfig::open_files`).
    #[arg(long, default_value_t = 32)]
    open_files: usize,
}

/// The process's resident memory, in bytes (Linux; 0 elsewhere).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Samples resident memory every 5 ms into `peak` until stopped.
fn sample_peak(stop: Arc<AtomicBool>, peak: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            peak.fetch_max(resident_bytes(), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut steps = Vec::with_capacity(args.steps);
    generate(
        &SynthConfig {
            steps: args.steps,
            ..SynthConfig::default()
        },
        |record| {
            if matches!(record, Record::Step(_)) {
                steps.push(record);
            }
            Ok(())
        },
    )?;
    let json_bytes: usize = steps
        .iter()
        .map(|r| match r {
            Record::Step(s) => serde_json::to_vec(s).map(|v| v.len()).unwrap_or(0),
            _ => 0,
        })
        .sum();
    let n = steps.len();

    let dir = tempfile::tempdir()?;
    let mut config = WriterConfig::new(
        dir.path().join("lake").to_string_lossy(),
        dir.path().join("wal"),
    );
    config.fsync = !args.no_fsync;
    config.segment_max_bytes = args.segment_mib << 20;
    config.segment_max_age = Duration::from_secs(3600);
    config.chunk_rows = args.chunk_rows;
    config.chunk_bytes = args.chunk_kib << 10;
    config.open_files = args.open_files;
    let writer = LakeWriter::open(config).await?;

    // What the generated steps hold is there before timing starts; the writer's memory is
    // what comes on top of it.
    let baseline = resident_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = sample_peak(stop.clone(), peak.clone());
    let started = Instant::now();
    let mut last = None;
    let mut waits = 0u64;
    for record in &steps {
        loop {
            match writer.append_record(record) {
                Ok(appended) => {
                    last = Some(appended);
                    break;
                }
                // The disk is behind: wait for it as a proxy would, then go on.
                Err(atdp_lake::Error::Backpressure { .. }) => {
                    waits += 1;
                    if let Some(last) = last {
                        writer.durable(last).await?;
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    if let Some(last) = last {
        writer.durable(last).await?;
    }
    let appended = started.elapsed();
    let peak_appending = peak.swap(resident_bytes(), Ordering::Relaxed);
    let before_flush = resident_bytes();
    writer.flush().await?;
    let total = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let peak_flushing = peak.load(Ordering::Relaxed).max(resident_bytes());
    writer.shutdown(Duration::from_secs(60)).await?;

    let stats = maintenance::stats(writer.lake()).await?;
    let lake_bytes: u64 = stats
        .iter()
        .filter(|s| s.table == "steps")
        .map(|s| s.bytes)
        .sum();
    let files: usize = stats
        .iter()
        .filter(|s| s.table == "steps")
        .map(|s| s.files)
        .sum();
    let mb = json_bytes as f64 / 1e6;
    println!("steps                      {n}");
    println!(
        "mean step size (JSON)      {:.1} KB",
        json_bytes as f64 / n as f64 / 1e3
    );
    println!("fsync                      {}", !args.no_fsync);
    println!("back-pressure waits        {waits}");
    println!(
        "append + fsync             {:.2} s  {:.0} steps/s  {:.0} MB/s",
        appended.as_secs_f64(),
        n as f64 / appended.as_secs_f64(),
        mb / appended.as_secs_f64()
    );
    println!(
        "append + roll + commit     {:.2} s  {:.0} steps/s  {:.0} MB/s",
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64(),
        mb / total.as_secs_f64()
    );
    println!(
        "chunk rows, KiB, files     {}, {}, {}",
        args.chunk_rows, args.chunk_kib, args.open_files
    );
    let mb = |bytes: u64| bytes as f64 / 1e6;
    println!(
        "resident memory            {:.0} MB before; peak +{:.0} MB while appending, +{:.0} MB over the last flush's start while it committed",
        mb(baseline),
        mb(peak_appending.saturating_sub(baseline)),
        mb(peak_flushing.saturating_sub(before_flush))
    );
    println!("parquet files              {files}");
    println!(
        "lake bytes per step        {:.0}",
        lake_bytes as f64 / n as f64
    );
    println!(
        "JSON bytes per step        {:.0}",
        json_bytes as f64 / n as f64
    );
    println!(
        "JSON / Parquet size        {:.1}x",
        json_bytes as f64 / lake_bytes.max(1) as f64
    );
    Ok(())
}
