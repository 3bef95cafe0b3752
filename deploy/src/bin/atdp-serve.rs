//! `atdp-serve`: serve a base model with the promoted LoRA adapters of one or several
//! policies (mistral.rs, an OpenAI-compatible API, the policy chosen per request by `model`),
//! and drive the adapter registry: publish, promote, rollback, status. See docs/deploy.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use atdp_deploy::{BaseModel, EngineOptions, Fleet, Registry, State, Watcher};
use atdp_lake::cli::{LakeArgs, init_logging, run_async};
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-serve",
    about = "Serve a policy's promoted LoRA adapter with mistral.rs; publish, promote, roll back"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct Common {
    /// The lake whose `adapters/` folder is the registry.
    #[command(flatten)]
    lake: LakeArgs,
    /// The policy: the registry's name for one agent's adapters.
    #[arg(long, env = "ATDP_POLICY", default_value = "default", global = true)]
    policy: String,
    /// Who is acting, for the registry's log.
    #[arg(long, env = "USER", default_value = "operator", global = true)]
    by: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the promoted version of each policy and follow their registries.
    Run {
        /// The policies to serve, comma-separated (default: `--policy`); a request picks one
        /// by its `model` field.
        #[arg(long, env = "ATDP_SERVE_POLICIES", value_delimiter = ',')]
        policies: Vec<String>,
        /// The policy that answers requests whose `model` names none of the served policies
        /// (with one policy served, that policy; with several and none named, such requests
        /// are a 404).
        #[arg(long, env = "ATDP_SERVE_DEFAULT_POLICY")]
        default_policy: Option<String>,
        /// Pinned versions (`support@v3`) kept loaded at once; 0 refuses pins.
        #[arg(long, default_value_t = 2)]
        max_pinned: usize,
        /// The base model directory (Hugging Face layout: config.json, safetensors,
        /// tokenizer.json, tokenizer_config.json).
        #[arg(long, env = "ATDP_BASE_MODEL")]
        base: PathBuf,
        /// Address to listen on.
        #[arg(long, env = "ATDP_SERVE_LISTEN", default_value = "127.0.0.1:8700")]
        listen: SocketAddr,
        /// Where fetched adapters are kept.
        #[arg(
            long,
            env = "ATDP_SERVE_CACHE",
            default_value = "atdp-data/serve-cache"
        )]
        cache: PathBuf,
        /// How often to read the registry, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        poll_ms: u64,
        /// How long a swap waits for the old version's requests, in seconds.
        #[arg(long, default_value_t = 120)]
        drain_secs: u64,
        /// Use a GPU when the build has one (`cuda` feature); the default is the CPU.
        #[arg(long)]
        gpu: bool,
        /// Sequences decoded together.
        #[arg(long, default_value_t = 16)]
        max_seqs: usize,
    },
    /// Upload a trained adapter directory as the next version (not served until promoted).
    Publish {
        /// The trainer's output directory (adapter_config.json, adapter_model.safetensors,
        /// manifest.json).
        adapter: PathBuf,
    },
    /// Serve a published version from now on.
    Promote {
        /// The version number.
        version: u32,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
    /// Go back to the version served before the current one.
    Rollback {
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
    /// Retire a version for good: it never serves again (it learned from erased data, say);
    /// when it is served, the last earlier version that is not retired takes its place.
    Retire {
        /// The version number.
        version: u32,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
    /// Start a version as a canary: it answers `--share` of the policy's requests beside the
    /// served version until it is promoted, rejected or retired (`atdp-loop run` decides on
    /// live reward).
    Canary {
        /// The version number.
        version: u32,
        /// The share of requests it takes (between 0 and 1, exclusive).
        #[arg(long)]
        share: f64,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
    /// Start a version in shadow: a copy of `--share` of the policy's requests goes to it
    /// through the proxy, whose replies are recorded and never returned, until it becomes a
    /// canary or is promoted, rejected or retired.
    Shadow {
        /// The version number.
        version: u32,
        /// The share of requests copied to it (between 0 and 1, exclusive).
        #[arg(long)]
        share: f64,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
    /// Refuse a version: it is not served (a running canary of it stops).
    Reject {
        /// The version number.
        version: u32,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
    /// The published versions, the served one, and the log.
    Status {
        /// Also ask a running server what it serves.
        #[arg(long)]
        server: Option<String>,
    },
}

/// What a canary or shadow entry does, for the terminal: `<policy>@v<N> <what> beside <the
/// served version> (log #<seq>)`.
fn trial_line(policy: &str, event: &atdp_deploy::Event, what: &str) -> String {
    let beside = event
        .previous
        .map_or_else(|| "the base model".into(), |v| format!("v{v}"));
    format!(
        "{policy}@v{} {what} beside {beside} (log #{})",
        event.version, event.seq
    )
}

fn main() -> ExitCode {
    init_logging("info,mistralrs_core=warn");
    let cli = Cli::parse();
    run_async("atdp-serve", async {
        serve(cli).await?;
        Ok(ExitCode::SUCCESS)
    })
}

async fn serve(cli: Cli) -> Result<()> {
    let c = &cli.common;
    let registry = Registry::open(&c.lake.url(), c.lake.options()?, &c.policy)?;
    match cli.command {
        Command::Run {
            policies,
            default_policy,
            max_pinned,
            base,
            listen,
            cache,
            poll_ms,
            drain_secs,
            gpu,
            max_seqs,
        } => {
            let base = BaseModel::open(&base)?;
            let mut engine = EngineOptions {
                max_num_seqs: max_seqs,
                ..EngineOptions::default()
            };
            if gpu {
                engine.force_cpu = false;
                engine.dtype = mistralrs::core::ModelDType::Auto;
            }
            let policies = if policies.is_empty() {
                vec![c.policy.clone()]
            } else {
                policies
            };
            let mut watchers = Vec::with_capacity(policies.len());
            for policy in &policies {
                watchers.push(Watcher {
                    registry: Registry::open(&c.lake.url(), c.lake.options()?, policy)?,
                    base: base.clone(),
                    cache: cache.clone(),
                    options: engine.clone(),
                    drain: Duration::from_secs(drain_secs),
                });
            }
            let fleet = Fleet::start(watchers, default_policy, max_pinned)
                .await
                .context("loading the promoted versions")?;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            let address = listener.local_addr()?;
            let status = fleet.status();
            for (policy, s) in &status.policies {
                tracing::info!(%address, %policy, serving = %s.serving, "Serving.");
            }
            // A line a supervising script can wait for.
            println!("atdp-serve listening on http://{address}");
            fleet.follow(Duration::from_millis(poll_ms.max(50)));
            axum::serve(listener, atdp_deploy::router(fleet))
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await?;
        }
        Command::Publish { adapter } => {
            let published = registry.publish(&adapter, &c.by).await?;
            println!(
                "published {}@v{} ({} files) at {}",
                c.policy,
                published.version,
                published.files.len(),
                registry.location()
            );
        }
        Command::Promote { version, reason } => {
            let event = registry.promote(version, &c.by, &reason, None).await?;
            println!(
                "promoted {}@v{} (log #{}, previously {})",
                c.policy,
                event.version,
                event.seq,
                event
                    .previous
                    .map_or_else(|| "the base model".into(), |v| format!("v{v}"))
            );
        }
        Command::Rollback { reason } => {
            let event = registry.rollback(&c.by, &reason, None).await?;
            println!(
                "rolled {} back to v{} (log #{}, from v{})",
                c.policy,
                event.version,
                event.seq,
                event.previous.unwrap_or_default()
            );
        }
        Command::Retire { version, reason } => {
            let event = registry.retire(version, &c.by, &reason, None).await?;
            let serving = registry.state().await?.serving;
            println!(
                "retired {}@v{} (log #{}); serving {}",
                c.policy,
                event.version,
                event.seq,
                serving.map_or_else(|| "the base model".into(), |v| format!("v{v}"))
            );
        }
        Command::Canary {
            version,
            share,
            reason,
        } => {
            let event = registry
                .canary(version, share, &c.by, &reason, None)
                .await?;
            let what = format!("takes {:.1}% of the requests", share * 100.0);
            println!("{}", trial_line(&c.policy, &event, &what));
        }
        Command::Shadow {
            version,
            share,
            reason,
        } => {
            let event = registry
                .shadow(version, share, &c.by, &reason, None)
                .await?;
            let what = format!(
                "answers copies of {:.1}% of the requests in shadow",
                share * 100.0
            );
            println!("{}", trial_line(&c.policy, &event, &what));
        }
        Command::Reject { version, reason } => {
            let event = registry.reject(version, &c.by, &reason, None).await?;
            println!(
                "rejected {}@v{} (log #{})",
                c.policy, event.version, event.seq
            );
        }
        Command::Status { server } => {
            let versions = registry.versions().await?;
            let log = registry.log().await?;
            let state = State::from_log(&log);
            println!("registry  {}", registry.location());
            println!(
                "versions  {}",
                versions
                    .iter()
                    .map(|v| format!("v{v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            println!(
                "promoted  {}",
                state
                    .serving
                    .map_or_else(|| "none (the base model)".into(), |v| format!("v{v}"))
            );
            if let Some(canary) = state.canary {
                println!(
                    "{}    v{} ({:.1}% of the requests)",
                    if canary.shadow { "shadow" } else { "canary" },
                    canary.version,
                    canary.share * 100.0
                );
            }
            if !state.retired.is_empty() {
                let retired: Vec<String> = state.retired.iter().map(|v| format!("v{v}")).collect();
                println!("retired   {}", retired.join(" "));
            }
            for event in &log {
                println!(
                    "  #{:<4} {} {:?} v{} by {}: {}",
                    event.seq, event.at, event.action, event.version, event.by, event.reason
                );
            }
            if let Some(server) = server {
                let url = format!("{}/atdp/status", server.trim_end_matches('/'));
                let status = fetch_status(&url).await?;
                println!("server    {status}");
            }
        }
    }
    Ok(())
}

/// GET over plain HTTP/1.1 on loopback or a private network (no TLS: run `status` next to
/// the server).
async fn fetch_status(url: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url
        .strip_prefix("http://")
        .context("--server must be an http:// URL")?;
    let (host, path) = rest.split_once('/').map_or((rest, "/"), |(h, p)| (h, p));
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(response.clone(), |(_, body)| body.to_owned()))
}
