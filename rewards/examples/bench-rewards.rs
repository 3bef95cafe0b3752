//! Benchmark: steps labelled per second by a SQL function and by a trivial Python program
//! (`examples/python/tool_use.py`) over a synthetic lake. Prints numbers; not a test.
//!
//! ```text
//! cargo run --release -p atdp-rewards --example bench-rewards -- [STEPS] [DIR]
//! ```
//!
//! STEPS defaults to 1,000,000. DIR (default: a temporary folder, removed afterwards) holds
//! the lake; an existing lake there with at least STEPS steps is reused. `ATDP_PYTHON`
//! chooses the interpreter (default `python3`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::{Catalog, Lake, LakeWriter, WriterConfig};
use atdp_rewards::{RewardFn, Selection};
use atdp_schema::Table;

async fn steps_in(lake: &Lake) -> Result<u64> {
    let catalog = Catalog::open(lake, &BTreeMap::new()).await?;
    let n = catalog.frame(Table::Steps).await?.count().await?;
    Ok(n as u64)
}

async fn label(dir: &Path, lake_url: &str, spec: &Path, name: &str, steps: u64) -> Result<()> {
    let function = RewardFn::load(spec)?;
    let lake = Lake::new(lake_url, Default::default())?;
    let catalog = Catalog::open(&lake, &BTreeMap::new()).await?;
    let mut config = WriterConfig::new(lake_url, dir.join(format!("wal-{name}")));
    config.segment_max_bytes = 256 << 20;
    let writer = LakeWriter::open(config).await?;
    let started = Instant::now();
    let mut last = Instant::now();
    let report = atdp_rewards::run(
        &catalog,
        &function,
        &Selection::default(),
        &writer,
        &mut |p| {
            if last.elapsed() >= Duration::from_secs(5) {
                last = Instant::now();
                eprintln!(
                    "  {name}: {}/{} steps ({:.0}/s)",
                    p.done, p.total, p.per_second
                );
            }
        },
    )
    .await?;
    writer.shutdown(Duration::from_secs(60)).await?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{name:<8} {:>9} steps labelled ({} pending of {steps}) in {secs:>7.1} s = {:>9.0} steps/s ({})",
        report.written,
        report.pending,
        report.pending as f64 / secs,
        function.version
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let steps: usize = match args.next() {
        Some(n) => n
            .replace(['_', ','], "")
            .parse()
            .context("STEPS must be a number")?,
        None => 1_000_000,
    };
    let temp = tempfile::tempdir()?;
    let dir: PathBuf = args
        .next()
        .map_or_else(|| temp.path().to_owned(), PathBuf::from);
    std::fs::create_dir_all(&dir)?;
    let lake_url = dir.join("lake").display().to_string();
    let lake = Lake::new(&lake_url, Default::default())?;
    let have = steps_in(&lake).await.unwrap_or(0);
    if have < steps as u64 {
        let started = Instant::now();
        let mut config = WriterConfig::new(lake_url.clone(), dir.join("wal-synth"));
        config.fsync = false;
        config.segment_max_bytes = 256 << 20;
        let writer = LakeWriter::open(config).await?;
        let mut appended = 0usize;
        generate(
            &SynthConfig {
                steps: steps - have as usize,
                seed: 11 + have,
                ..SynthConfig::default()
            },
            |record| {
                appended += 1;
                loop {
                    match writer.append_record(&record) {
                        Err(atdp_lake::Error::Backpressure { .. }) => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        other => return other.map(|_| ()),
                    }
                }
            },
        )?;
        writer.flush().await?;
        writer.shutdown(Duration::from_secs(120)).await?;
        println!(
            "synthetic lake: {} steps written in {:.1} s ({appended} records)",
            steps as u64 - have,
            started.elapsed().as_secs_f64()
        );
    }
    let total = steps_in(&lake).await?;
    println!("lake {lake_url}: {total} steps");

    // A fresh name per run, so that a reused lake is labelled again (a new version).
    let run_id = atdp_schema::now_micros() / 1_000_000;
    let sql = dir.join("bench_sql.toml");
    std::fs::write(
        &sql,
        format!(
            "name = \"bench_stop_ok_{run_id}\"\nkind = \"sql\"\nexpression = \"CASE WHEN finish_reason = 'stop' AND status = 'ok' THEN 1.0 ELSE 0.0 END\"\n"
        ),
    )?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/tool_use.py");
    let python = std::env::var("ATDP_PYTHON").unwrap_or_else(|_| "python3".into());
    let program = dir.join("bench_program.toml");
    std::fs::write(
        &program,
        format!(
            "name = \"bench_tool_use_{run_id}\"\nkind = \"program\"\ncommand = [{python:?}, {:?}]\nbatch = 2000\ntimeout_secs = 600\n",
            script.display().to_string()
        ),
    )?;
    label(&dir, &lake_url, &sql, "sql", total).await?;
    label(&dir, &lake_url, &program, "python", total).await?;
    Ok(())
}
