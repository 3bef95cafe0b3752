//! The whole loop on one machine (`atdp-quickstart`): a tiny model, `atdp-serve` and
//! `atdp-proxy` on loopback, a built-in environment (routing by default; `tool_use` for tool
//! calls) collecting rewarded trajectories through the proxy, training, the gate, a hot swap under load, and the success rate before
//! and after on held-out episodes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use atdp_deploy::{BaseModel, EngineOptions, Event, Fleet, Registry, Serving, Watcher};
use atdp_model_files::Arch;
use atdp_trainer::{InitSpec, RawRunConfig, Selection};
use serde::{Deserialize, Serialize};

use crate::adapter_events::AdapterEvents;
use crate::client::Agent;
use crate::cycle::{Trained, record_decision, rewarded_trajectories, train_and_publish};
use crate::env::{Env, Episode};
use crate::error::blocking;
use crate::eval::{EvalPlan, EvalReport, evaluate};
use crate::gate::{GateConfig, GateReport, GateSetup, gate};
use crate::{Error, Result};

/// The quickstart policy (keys, Cedar, masking), written into the work directory so that the
/// binary runs from anywhere.
const POLICY_FILES: [(&str, &str); 4] = [
    (
        "entities.json",
        include_str!("../../policies/examples/quickstart/entities.json"),
    ),
    (
        "masking.toml",
        include_str!("../../policies/examples/quickstart/masking.toml"),
    ),
    (
        "policies.cedar",
        include_str!("../../policies/examples/quickstart/policies.cedar"),
    ),
    (
        "schema.cedarschema",
        include_str!("../../policies/examples/quickstart/schema.cedarschema"),
    ),
];

/// The demo agent's key in the quickstart policy (tenant `demo`, agent `demo-agent`).
pub const DEMO_KEY: &str = "sk-atdp-demo-agent";
/// The registry's policy name.
pub const POLICY: &str = "quickstart";
/// The file marking a work directory as the quickstart's own.
const MARKER: &str = ".atdp-quickstart";

/// Sizes and settings of a quickstart run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuickstartConfig {
    /// The work directory: created, or emptied when an earlier run made it; any other
    /// non-empty directory is refused.
    pub dir: PathBuf,
    /// The environment played, trained on and gated.
    #[serde(default = "routing")]
    pub env: Env,
    /// Training episodes collected through the proxy.
    pub collect: u64,
    /// Held-out episodes before and after.
    pub eval: u64,
    /// Episodes in flight.
    pub concurrency: usize,
    /// Passes over the collected episodes.
    pub epochs: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// LoRA rank.
    pub rank: usize,
    /// Examples per optimizer step.
    pub batch_size: usize,
    /// The gate.
    pub gate: GateConfig,
    /// Clients sending requests through the proxy during the swap.
    pub load_clients: usize,
}

impl QuickstartConfig {
    /// The defaults of `atdp-quickstart`.
    pub fn new(dir: PathBuf) -> Self {
        QuickstartConfig {
            dir,
            env: Env::Routing,
            collect: 800,
            eval: 300,
            concurrency: 8,
            epochs: 8,
            lr: 1e-2,
            rank: 16,
            batch_size: 16,
            gate: GateConfig {
                episodes: 200,
                train_episodes: 100,
                // The KL is over the whole vocabulary: learning to answer with 4 of its 300
                // tokens moves most of the mass (4.3 nats measured); 20 still catches an
                // adapter that has run off.
                max_kl: 20.0,
                ..GateConfig::default()
            },
            load_clients: 4,
        }
    }
}

/// Requests sent through the proxy while the new version was promoted and swapped in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SwapUnderLoad {
    /// Episodes (one request each) completed during the window.
    pub requests: usize,
    /// Requests that failed.
    pub failed: usize,
    /// Requests per version that answered.
    pub versions: BTreeMap<String, usize>,
    /// From the promotion (the log entry written) until all traffic was on the new version
    /// (new requests on it, the old engine's requests finished), in milliseconds.
    pub promotion_to_serving_ms: u64,
    /// Loading and checking the new engine (part of the above).
    pub load_ms: u64,
    /// Waiting for the old engine's requests to finish.
    pub drain_ms: u64,
}

/// Everything a quickstart run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuickstartReport {
    /// The settings.
    pub config: QuickstartConfig,
    /// Held-out episodes on the base model, through the proxy.
    pub before: EvalReport,
    /// The same episodes after the swap, through the proxy.
    pub after: EvalReport,
    /// Collected training episodes and their success rate.
    pub collected: EvalReport,
    /// The gate's report.
    pub gate: GateReport,
    /// Whether the candidate was promoted.
    pub promoted: bool,
    /// The swap, when there was one.
    pub swap: Option<SwapUnderLoad>,
    /// Examples trained on.
    pub trained_examples: usize,
    /// Seconds per phase.
    pub seconds: BTreeMap<String, f64>,
    /// The proxy's API root (`http://…/v1`), running until the process ends.
    pub proxy_url: String,
    /// `atdp-serve`'s address, running until the process ends.
    pub serve_url: String,
}

impl QuickstartReport {
    /// Whether the after interval lies wholly above the before interval, with no failed
    /// request anywhere.
    pub fn improved(&self) -> bool {
        self.promoted
            && self.after.ci95[0] > self.before.ci95[1]
            && self.before.failed + self.after.failed + self.collected.failed == 0
            && self.swap.as_ref().is_some_and(|s| s.failed == 0)
    }
}

fn write(path: &Path, contents: &[u8]) -> Result<()> {
    std::fs::write(path, contents).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
}

/// Starts `atdp-proxy` (Pingora) on its own threads, in front of `upstream`, and waits until
/// it answers. It runs until the process ends.
async fn start_proxy(dir: &Path, upstream: SocketAddr) -> Result<SocketAddr> {
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy)
        .map_err(|e| Error::Io(format!("{}: {e}", policy.display())))?;
    for (name, text) in POLICY_FILES {
        write(&policy.join(name), text.as_bytes())?;
    }
    let toml = format!(
        r#"listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
policy = {policy:?}
data = {data:?}
lake = {lake:?}
generate_keys = true

[[upstream]]
name = "atdp-serve"
url = "http://{upstream}"
trust = "internal"

[[route]]
model = "*"
upstream = "atdp-serve"
"#,
        policy = policy.display().to_string(),
        data = dir.join("proxy").display().to_string(),
        lake = dir.join("lake").display().to_string(),
    );
    write(&dir.join("proxy.toml"), toml.as_bytes())?;
    let config = atdp_proxy::RawConfig::from_toml(&toml)
        .and_then(|raw| raw.validate())
        .map_err(|e| Error::Proxy(e.to_string()))?;
    // Port 0: the proxy takes free ports and says which.
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("atdp-proxy".into())
        .spawn(move || {
            atdp_proxy::run_with(config, move |bound| {
                let _ = bound_tx.send(bound);
            })
        })
        .map_err(|e| Error::Io(format!("cannot start the proxy thread: {e}")))?;
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut bound = None;
    loop {
        if bound.is_none() {
            bound = bound_rx.try_recv().ok();
        }
        if thread.is_finished() {
            let why = match thread.join() {
                Ok(Err(e)) => e.to_string(),
                _ => "it stopped".to_owned(),
            };
            return Err(Error::Proxy(format!("atdp-proxy did not start: {why}")));
        }
        if let Some(atdp_proxy::Bound { listen, admin, .. }) = bound {
            let healthy = http
                .get(format!("http://{admin}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            let serving = tokio::net::TcpStream::connect(listen).await.is_ok();
            if healthy && serving {
                return Ok(listen);
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Proxy("atdp-proxy did not answer within 60 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `atdp-serve` for the quickstart policy on loopback, following the registry.
async fn start_serve(
    registry: &Registry,
    base: &BaseModel,
    cache: &Path,
) -> Result<(SocketAddr, Arc<Serving>)> {
    let watcher = Watcher {
        registry: registry.clone(),
        base: base.clone(),
        cache: cache.to_path_buf(),
        options: EngineOptions::default(),
        drain: Duration::from_secs(30),
    };
    let fleet = Fleet::start(vec![watcher], None, 0).await?;
    let serving = fleet
        .serving(registry.policy())
        .cloned()
        .ok_or_else(|| Error::Loop("the fleet lost its only policy".into()))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::Io(format!("cannot listen on loopback: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Io(format!("no local address: {e}")))?;
    fleet.follow(Duration::from_millis(200));
    let app = atdp_deploy::router(fleet);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, serving))
}

/// Waits until the lake holds `want` rewarded trajectories of the selection.
async fn wait_for_lake(lake: &str, selection: &Selection, reward: &str, want: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (lake_s, selection_s, reward_s) =
            (lake.to_owned(), selection.clone(), reward.to_owned());
        let have = blocking("lake-read", move || {
            rewarded_trajectories(&lake_s, Default::default(), &selection_s, &reward_s)
        })
        .await?;
        if have >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Loop(format!(
                "the lake holds {have} of the {want} rewarded trajectories after 120 s"
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn routing() -> Env {
    Env::Routing
}

/// Sends episodes of `env` through `agent` from `clients` tasks until `stop`.
fn start_load(
    env: Env,
    agent: &Agent,
    clients: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Episode>>> {
    (0..clients)
        .map(|c| {
            let (agent, stop) = (agent.clone(), stop.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                let mut seed = 2_000_000_000 + c as u64 * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    done.push(env.episode(&agent, seed, 1.0, false).await);
                    seed += 1;
                }
                done
            })
        })
        .collect()
}

/// Runs the loop; `say` gets one line per phase.
pub async fn run(
    config: &QuickstartConfig,
    say: &(dyn Fn(&str) + Sync),
) -> Result<QuickstartReport> {
    let dir = prepare_dir(&config.dir)?;
    let mut seconds = BTreeMap::new();
    let mut clock = Instant::now();
    let mut lap = |name: &str, seconds: &mut BTreeMap<String, f64>| {
        seconds.insert(name.to_owned(), clock.elapsed().as_secs_f64());
        clock = Instant::now();
    };

    let model = dir.join("model");
    let base = tiny_model(&model, config.env)?;
    let lake = dir.join("lake").display().to_string();
    let registry = Registry::open(&lake, Default::default(), POLICY)?;
    let cache = dir.join("serve-cache");
    let (serve_addr, serving) = start_serve(&registry, &base, &cache).await?;
    let proxy_addr = start_proxy(&dir, serve_addr).await?;
    say(&format!(
        "tiny Qwen2 model in {}; atdp-serve on http://{serve_addr}, atdp-proxy on http://{proxy_addr}",
        model.display()
    ));
    lap("start", &mut seconds);

    let agent = Agent::new(
        &format!("http://{proxy_addr}/v1"),
        Some(DEMO_KEY.to_owned()),
        "local/support-router",
    );
    let heldout = config.gate.heldout_seed;
    let before = evaluate(&agent, &plan(config, "before", heldout, config.eval, false)).await;
    say(&rate_line(&before));
    lap("eval_before", &mut seconds);

    let (collected, collect_start) = collect(config, &agent, &lake, say).await?;
    lap("collect", &mut seconds);

    let trained = train(config, &model, &lake, &dir, &registry, collect_start, say).await?;
    lap("train", &mut seconds);

    let trail =
        AdapterEvents::open(&lake, Default::default(), &dir.join("loop-wal"), "demo").await?;
    let report = run_gate(config, &registry, &base, &dir, trained.version, say).await?;
    lap("gate", &mut seconds);

    let swap = promote_or_record(
        config,
        &agent,
        &serving,
        &registry,
        &report,
        trained.version,
        &trail,
        say,
    )
    .await?;
    trail.close().await?;
    lap("swap", &mut seconds);

    let after = evaluate(&agent, &plan(config, "after", heldout, config.eval, false)).await;
    say(&rate_line(&after));
    lap("eval_after", &mut seconds);

    let report = QuickstartReport {
        config: config.clone(),
        before,
        after,
        collected,
        promoted: report.promote,
        gate: report,
        swap,
        trained_examples: trained.examples,
        seconds,
        proxy_url: format!("http://{proxy_addr}/v1"),
        serve_url: format!("http://{serve_addr}"),
    };
    write_report(&dir, &report)?;
    Ok(report)
}

/// Seeds of the conversations the tool-calling environments' tokenizer learns its merges
/// from: apart from every seed the loop plays.
const CORPUS_SEEDS: std::ops::Range<u64> = 3_000_000_000..3_000_000_064;

/// Merges the tool-calling environments' tokenizer learns.
const CORPUS_MERGES: usize = 400;

/// Writes the tiny random Qwen2 model the loop trains into `model` and opens it as the
/// serving base. For an environment that calls tools, its tokenizer first learns merges
/// from conversations like the environment's (its tools' JSON, calls and results), so that
/// the tiny model reads and writes them in words, as a real model's vocabulary has them, not
/// a byte at a time.
fn tiny_model(model: &Path, env: Env) -> Result<BaseModel> {
    let mut spec = InitSpec::tiny(Arch::Qwen2);
    if env.calls_tools() {
        let chat = atdp_trainer::chat_format(&[])?;
        let corpus = env.tokenizer_corpus(&chat, CORPUS_SEEDS)?;
        spec = spec.with_merges(atdp_trainer::learn_merges(&corpus, CORPUS_MERGES)?);
    }
    // At the default 0.02 the random network attends almost uniformly and its last position
    // hardly sees the ticket: trained on the same episodes, it learned one letter preference
    // for all tickets (measured). At 0.2 its random features tell the tickets apart.
    spec.init_std = 0.2;
    atdp_trainer::init_model(model, &spec)?;
    Ok(BaseModel::open(model)?)
}

/// The evaluation plan of one phase: `episodes` episodes of the configured environment from
/// `first_seed`, at temperature 1.
fn plan(
    config: &QuickstartConfig,
    label: &str,
    first_seed: u64,
    episodes: u64,
    post_rewards: bool,
) -> EvalPlan {
    EvalPlan {
        label: label.to_owned(),
        env: config.env.into(),
        first_seed,
        episodes,
        temperature: 1.0,
        concurrency: config.concurrency,
        post_rewards,
    }
}

/// Plays the training episodes through the proxy with their rewards posted, and waits until the
/// lake holds every one of them with its reward. Returns the episodes' report and when the
/// collection began (the training run selects steps from then on). More than a tenth of the
/// episodes failing is an error; fewer are reported through `say` and leave enough to train on
/// (a model server that restarts its engine loses the calls in flight).
async fn collect(
    config: &QuickstartConfig,
    agent: &Agent,
    lake: &str,
    say: &(dyn Fn(&str) + Sync),
) -> Result<(EvalReport, chrono::DateTime<chrono::Utc>)> {
    let collect_start = chrono::Utc::now();
    let collected = evaluate(
        agent,
        &plan(
            config,
            "collected",
            config.gate.train_seed,
            config.collect,
            true,
        ),
    )
    .await;
    say(&format!(
        "collected {} rewarded {} episodes through the proxy ({} failed; success {:.1}%)",
        collected.episodes,
        config.env.name(),
        collected.failed,
        collected.success_rate * 100.0
    ));
    if collected.failed > 0 {
        let reasons: std::collections::BTreeSet<&String> = collected.failures.iter().collect();
        say(&format!(
            "{} collection episodes failed: {reasons:?}",
            collected.failed
        ));
    }
    if collected.failed as u64 * 10 > config.collect {
        return Err(Error::Loop(format!(
            "{} of {} collection episodes failed (more than a tenth): {:?}",
            collected.failed, config.collect, collected.failures
        )));
    }
    let selection = Selection {
        tenants: ["demo".to_owned()].into(),
        agent_id: Some("demo-agent".into()),
        since: Some(collect_start.timestamp_micros() - 1_000_000),
        ..Selection::default()
    };
    wait_for_lake(
        lake,
        &selection,
        config.env.reward_name(),
        collected.episodes,
    )
    .await?;
    Ok((collected, collect_start))
}

/// Writes the training run's configuration into the work directory, trains on the steps
/// collected since `collect_start` and publishes the adapter in the registry.
async fn train(
    config: &QuickstartConfig,
    model: &Path,
    lake: &str,
    dir: &Path,
    registry: &Registry,
    collect_start: chrono::DateTime<chrono::Utc>,
    say: &(dyn Fn(&str) + Sync),
) -> Result<Trained> {
    let train_toml = train_toml(config, model, lake, dir, collect_start);
    let train_path = dir.join("train.toml");
    write(&train_path, train_toml.as_bytes())?;
    let train = RawRunConfig::from_toml_str(&train_toml, &train_path)?.validate(&train_path)?;
    let trained = train_and_publish(registry, train, "atdp-quickstart").await?;
    say(&format!(
        "trained on {} examples in {:.1} s; published as {POLICY}@v{}",
        trained.examples, trained.train_s, trained.version
    ));
    Ok(trained)
}

/// Gates the candidate `version` on held-out episodes of the configured environment, each
/// check reported through `say`.
async fn run_gate(
    config: &QuickstartConfig,
    registry: &Registry,
    base: &BaseModel,
    dir: &Path,
    version: u32,
    say: &(dyn Fn(&str) + Sync),
) -> Result<GateReport> {
    let setup = GateSetup {
        registry: registry.clone(),
        base: base.clone(),
        cache: dir.join("gate-cache"),
        options: EngineOptions::default(),
    };
    let report = gate(&setup, version, &config.env.into(), &config.gate).await?;
    for check in &report.checks {
        say(&format!(
            "  gate {} {}: {}",
            if check.passed { "✓" } else { "✗" },
            check.name,
            check.detail
        ));
    }
    Ok(report)
}

/// Acts on the gate's decision: a promotion is recorded while clients keep calling and the swap
/// is measured (`Some`); a refusal is recorded and reported (`None`). Either way the decision
/// is an adapter event in the lake's audit trail.
#[allow(clippy::too_many_arguments)]
async fn promote_or_record(
    config: &QuickstartConfig,
    agent: &Agent,
    serving: &Serving,
    registry: &Registry,
    report: &GateReport,
    version: u32,
    trail: &AdapterEvents,
    say: &(dyn Fn(&str) + Sync),
) -> Result<Option<SwapUnderLoad>> {
    Ok(if report.promote {
        let promote = record_decision(registry, report, version, "atdp-quickstart", Some(trail));
        let want = format!("{POLICY}@v{}", version);
        let measured = swap_under_load(config, agent, serving, promote, &want).await?;
        say(&format!(
            "promoted {want}: all traffic on it {} ms after the promotion (fetch, checks, load and trial token {} ms, old engine drained {} ms); {} requests during the swap, {} failed",
            measured.promotion_to_serving_ms,
            measured.load_ms,
            measured.drain_ms,
            measured.requests,
            measured.failed
        ));
        Some(measured)
    } else {
        record_decision(registry, report, version, "atdp-quickstart", Some(trail)).await?;
        say(&format!("not promoted: {}", report.reason()));
        None
    })
}

/// Writes the report as `quickstart.json` and the before/after comparison as
/// `before-after.html` into the work directory.
fn write_report(dir: &Path, report: &QuickstartReport) -> Result<()> {
    let json = serde_json::to_vec_pretty(report)
        .map_err(|e| Error::Loop(format!("the report does not serialize: {e}")))?;
    write(&dir.join("quickstart.json"), &json)?;
    write(
        &dir.join("before-after.html"),
        crate::eval::compare_html(&report.before, &report.after).as_bytes(),
    )
}

/// Makes `dir` the quickstart's own, empty directory and returns its canonical path. Only a
/// directory an earlier quickstart made (its marker inside) is emptied; anything else that is
/// not empty is left alone.
fn prepare_dir(dir: &Path) -> Result<PathBuf> {
    let nonempty = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
    if nonempty {
        if !dir.join(MARKER).is_file() {
            return Err(Error::Io(format!(
                "{} is not empty and was not made by atdp-quickstart (no {MARKER}); choose another --dir",
                dir.display()
            )));
        }
        std::fs::remove_dir_all(dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    write(
        &dir.join(MARKER),
        b"made by atdp-quickstart; emptied by its next run\n",
    )?;
    dir.canonicalize()
        .map_err(|e| Error::Io(format!("{}: {e}", dir.display())))
}

/// The `train.toml` of the quickstart's run: the demo agent's steps since the collection
/// began, REINFORCE on the environment's reward.
fn train_toml(
    config: &QuickstartConfig,
    model: &Path,
    lake: &str,
    dir: &Path,
    collect_start: chrono::DateTime<chrono::Utc>,
) -> String {
    format!(
        r#"model = {model:?}
lake = {lake:?}
out = {out:?}

[select]
tenant = "demo"
agent = "demo-agent"
since = "{since}"

[rewards]
weights = {{ {reward} = 1.0 }}

[objective]
kind = "reinforce"
tool_call_credit = "tool_choices"

[train]
lr = {lr}
epochs = {epochs}
batch_size = {batch}
warmup_steps = 2
seed = 1

[lora]
r = {rank}
alpha = {alpha}
"#,
        model = model.display().to_string(),
        out = dir.join("train").display().to_string(),
        reward = config.env.reward_name(),
        since = (collect_start - chrono::Duration::seconds(1)).to_rfc3339(),
        lr = config.lr,
        epochs = config.epochs,
        batch = config.batch_size,
        rank = config.rank,
        alpha = config.rank * 2,
    )
}

/// Promotes the candidate (`promote`, the registry decision) while clients keep calling, and
/// measures the swap: how long until the server serves `want`, and how many of the calls in
/// the meantime failed.
async fn swap_under_load(
    config: &QuickstartConfig,
    agent: &Agent,
    serving: &Serving,
    promote: impl std::future::Future<Output = Result<Event>>,
    want: &str,
) -> Result<SwapUnderLoad> {
    let stop = Arc::new(AtomicBool::new(false));
    let load = start_load(config.env, agent, config.load_clients, &stop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let swaps_before = serving.status().swaps;
    let promoted_at = Instant::now();
    promote.await?;
    let deadline = promoted_at + Duration::from_secs(120);
    let status = loop {
        let status = serving.status();
        if status.swaps > swaps_before || status.last_refusal.is_some() {
            break status;
        }
        if Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let promotion_to_serving_ms = promoted_at.elapsed().as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut episodes = Vec::new();
    for task in load {
        episodes.extend(
            task.await
                .map_err(|e| Error::Io(format!("a load task failed: {e}")))?,
        );
    }
    let mut versions = BTreeMap::new();
    for v in episodes.iter().flat_map(|e| e.versions.iter()) {
        *versions.entry(v.clone()).or_insert(0) += 1;
    }
    if status.serving != want {
        return Err(Error::Loop(format!(
            "the server did not swap to {want}: {:?}",
            status.last_refusal
        )));
    }
    let last = status.last_swap.clone();
    let measured = SwapUnderLoad {
        requests: episodes.len(),
        failed: episodes.iter().filter(|e| e.error.is_some()).count(),
        versions,
        promotion_to_serving_ms,
        load_ms: last.as_ref().map_or(0, |s| s.load_ms),
        drain_ms: last.as_ref().map_or(0, |s| s.drain_ms),
    };
    Ok(measured)
}

/// `label: N held-out episodes on versions: success x% [lo, hi]`.
fn rate_line(report: &EvalReport) -> String {
    let versions: Vec<&str> = report.versions.keys().map(String::as_str).collect();
    format!(
        "{}: {} held-out episodes on {}: success {:.1}% [{:.1}, {:.1}]",
        report.label,
        report.episodes,
        versions.join(", "),
        report.success_rate * 100.0,
        report.ci95[0] * 100.0,
        report.ci95[1] * 100.0
    )
}
