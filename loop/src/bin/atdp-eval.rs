//! `atdp-eval`: plays N episodes of an environment (built in, or a command's) against a model (through the
//! proxy, or straight at a server) and writes a JSON report; with `--before`, also an HTML
//! page comparing that earlier report with this one.

use std::path::PathBuf;
use std::process::ExitCode;

use atdp_lake::cli::{EXIT_PROBLEM_FOUND, fail};
use atdp_loop::{Agent, EnvArgs, EvalPlan, EvalReport, compare_html, evaluate};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "atdp-eval",
    about = "Evaluate a model on an atdp environment (built in, or your own as a command)"
)]
struct Cli {
    /// The API root the agent calls (the proxy's, or a server's), e.g. http://127.0.0.1:8080/v1.
    #[arg(long, env = "ATDP_BASE_URL")]
    base_url: String,
    /// The bearer key (the proxy's key for the agent); none for a server without keys.
    #[arg(long, env = "ATDP_API_KEY")]
    key: Option<String>,
    /// The `model` to ask for.
    #[arg(long, default_value = "local/policy")]
    model: String,
    /// The environment.
    #[command(flatten)]
    env: EnvArgs,
    /// Episodes.
    #[arg(long, default_value_t = 200)]
    episodes: u64,
    /// First seed (held-out seeds by default: keep evaluation apart from training).
    #[arg(long, default_value_t = 1_000_000_000)]
    seed: u64,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Episodes in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Post each episode's reward through the proxy's rewards API (then the episodes become
    /// training data).
    #[arg(long)]
    post_rewards: bool,
    /// The report's label.
    #[arg(long, default_value = "eval")]
    label: String,
    /// Where to write the JSON report.
    #[arg(long, default_value = "eval.json")]
    out: PathBuf,
    /// An earlier report to compare with.
    #[arg(long)]
    before: Option<PathBuf>,
    /// Where to write the comparison page (with `--before`).
    #[arg(long, default_value = "eval.html")]
    html: PathBuf,
}

async fn main_async(cli: Cli) -> anyhow::Result<EvalReport> {
    let env = cli.env.environment()?;
    let before: Option<EvalReport> = match &cli.before {
        Some(path) => Some(serde_json::from_slice(&std::fs::read(path)?)?),
        None => None,
    };
    let agent = Agent::new(&cli.base_url, cli.key.clone(), &cli.model);
    let plan = EvalPlan {
        label: cli.label.clone(),
        env,
        first_seed: cli.seed,
        episodes: cli.episodes,
        temperature: cli.temperature,
        concurrency: cli.concurrency,
        post_rewards: cli.post_rewards,
    };
    let report = evaluate(&agent, &plan).await;
    std::fs::write(&cli.out, serde_json::to_vec_pretty(&report)?)?;
    if let Some(before) = before {
        std::fs::write(&cli.html, compare_html(&before, &report))?;
    }
    Ok(report)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail("atdp-eval", format!("cannot start a runtime: {e}")),
    };
    match runtime.block_on(main_async(cli)) {
        Ok(r) => {
            println!(
                "{}: {} episodes, success {:.1}% [95% CI {:.1}–{:.1}], mean reward {:.3}, {} failed, versions {:?}, {:.1} s",
                r.env,
                r.episodes,
                r.success_rate * 100.0,
                r.ci95[0] * 100.0,
                r.ci95[1] * 100.0,
                r.mean_reward,
                r.failed,
                r.versions,
                r.wall_s
            );
            if r.failed > 0 {
                for f in &r.failures {
                    eprintln!("failed: {f}");
                }
                ExitCode::from(EXIT_PROBLEM_FOUND)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail("atdp-eval", format!("{e:#}")),
    }
}
