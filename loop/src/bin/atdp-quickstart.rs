//! `atdp-quickstart`: the closed loop on this machine, no keys, no network. A tiny model
//! starts near random; agents talk through the proxy; the trainer learns from the lake; the
//! gate compares; the server swaps under load; the success rate is measured before and after.

use std::path::PathBuf;
use std::process::ExitCode;

use atdp_lake::cli::{EXIT_FAILURE, EXIT_PROBLEM_FOUND, fail, init_logging};
use atdp_loop::Env;
use atdp_loop::quickstart::{QuickstartConfig, run};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "atdp-quickstart",
    about = "Run the whole atdp loop on loopback with a tiny model"
)]
struct Cli {
    /// Work directory: model, lake, registry, reports. An earlier run's is emptied; any other
    /// non-empty directory is refused.
    #[arg(long, default_value = "atdp-data/quickstart")]
    dir: PathBuf,
    /// The environment: `routing` (a ticket to one of four tools, answered as a letter),
    /// `tool_use` (a tool call with an argument from the ticket, then an answer from the
    /// tool's result), `order_lookup` (a lookup whose result feeds a second call, then an
    /// answer) or `guess` (a number in three turns; not tuned for the quickstart).
    #[arg(long, default_value = "routing")]
    env: String,
    /// Training episodes collected through the proxy.
    #[arg(long, default_value_t = 800)]
    collect: u64,
    /// Held-out episodes before and after.
    #[arg(long, default_value_t = 300)]
    eval: u64,
    /// Passes over the collected episodes.
    #[arg(long, default_value_t = 8)]
    epochs: u64,
    /// Peak learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Examples per optimizer step.
    #[arg(long)]
    batch_size: Option<usize>,
    /// LoRA rank.
    #[arg(long)]
    rank: Option<usize>,
}

/// Warnings, less Pingora's error when a pooled upstream connection was closed (it
/// reconnects); `init_logging` silences delta-rs's kernel.
const QUIET: &str = "warn,pingora_core::connectors=off";

fn main() -> ExitCode {
    init_logging(QUIET);
    let cli = Cli::parse();
    let Some(env) = Env::from_name(&cli.env) else {
        return fail(
            "atdp-quickstart",
            format!("unknown environment {:?} ({})", cli.env, Env::names()),
        );
    };
    let mut config = QuickstartConfig::new(cli.dir);
    config.env = env;
    config.collect = cli.collect;
    config.eval = cli.eval;
    config.epochs = cli.epochs;
    config.lr = cli.lr.unwrap_or(config.lr);
    config.batch_size = cli.batch_size.unwrap_or(config.batch_size);
    config.rank = cli.rank.unwrap_or(config.rank);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail("atdp-quickstart", format!("cannot start a runtime: {e}")),
    };
    let started = std::time::Instant::now();
    let say = |line: &str| println!("[{:>6.1} s] {line}", started.elapsed().as_secs_f64());
    let result = runtime.block_on(run(&config, &say));
    let code = match result {
        Ok(report) => {
            let (b, a) = (&report.before, &report.after);
            println!(
                "\n{} on {} held-out {} episodes: before {:.1}% [95% CI {:.1}–{:.1}], after {:.1}% [{:.1}–{:.1}]",
                if env.calls_tools() {
                    "tool-call accuracy"
                } else {
                    "success rate"
                },
                a.episodes,
                env.name(),
                b.success_rate * 100.0,
                b.ci95[0] * 100.0,
                b.ci95[1] * 100.0,
                a.success_rate * 100.0,
                a.ci95[0] * 100.0,
                a.ci95[1] * 100.0
            );
            println!(
                "report: {0}/quickstart.json, comparison: {0}/before-after.html, total {1:.1} s",
                config.dir.display(),
                started.elapsed().as_secs_f64()
            );
            if report.improved() {
                println!("improved: yes (intervals apart, no failed request)");
                ExitCode::SUCCESS
            } else {
                println!("improved: NO (see the gate's checks above)");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("atdp-quickstart: {e}");
            std::process::exit(EXIT_FAILURE.into())
        }
    };
    // The proxy runs until the process ends.
    std::process::exit(if code == ExitCode::SUCCESS {
        0
    } else {
        EXIT_PROBLEM_FOUND.into()
    })
}
