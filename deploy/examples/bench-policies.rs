//! Resident memory and throughput of one `atdp-serve` process serving several policies.
//!
//! For each count of policies, a fresh child process starts a fleet over one generated base
//! model (each policy with its own promoted LoRA adapter) and reports its resident memory; the
//! figure for one process per policy is that count times the one-policy process. The child
//! with the most policies also measures greedy decoding throughput with requests spread over
//! all its policies against the same requests to one policy.
//!
//! ```sh
//! cargo run --release -p atdp-deploy --example bench-policies -- --hidden 512 --layers 4
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use atdp_deploy::{BaseModel, EngineOptions, Fleet, Registry, Watcher};
use atdp_model_files::{Arch, LoraConfig};
use atdp_trainer::{InitSpec, LoadOptions, Lora, Model, init_model, save_adapter};
use serde_json::{Value, json};

struct Options {
    hidden: usize,
    layers: usize,
    counts: Vec<usize>,
    requests: usize,
    tokens: usize,
    child: Option<(usize, PathBuf)>,
}

fn options() -> Result<Options> {
    let mut o = Options {
        hidden: 512,
        layers: 4,
        counts: vec![1, 4, 16],
        requests: 32,
        tokens: 32,
        child: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).context("every option takes a value")?;
        match args[i].as_str() {
            "--hidden" => o.hidden = value.parse()?,
            "--layers" => o.layers = value.parse()?,
            "--counts" => {
                o.counts = value.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--requests" => o.requests = value.parse()?,
            "--tokens" => o.tokens = value.parse()?,
            "--child" => {
                let dir = args.get(i + 2).context("--child N DIR")?;
                o.child = Some((value.parse()?, PathBuf::from(dir)));
                i += 1;
            }
            other => bail!("unknown option {other}"),
        }
        i += 2;
    }
    Ok(o)
}

fn resident_mib() -> Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(kib / 1024.0)
}

fn policy(i: usize) -> String {
    format!("agent-{i:02}")
}

/// The base model, one adapter, and a registry where every policy has it promoted.
async fn prepare(o: &Options, dir: &Path) -> Result<()> {
    let base = dir.join("base");
    let mut spec = InitSpec::tiny(Arch::Qwen2);
    spec.config.hidden_size = o.hidden;
    spec.config.intermediate_size = o.hidden * 11 / 4;
    spec.config.num_hidden_layers = o.layers;
    spec.config.num_attention_heads = 8;
    spec.config.num_key_value_heads = 2;
    spec.config.head_dim = o.hidden / 8;
    init_model(&base, &spec)?;
    let model = Model::load(&base, &LoadOptions::default())?;
    let lora = Lora::new(
        &model,
        LoraConfig {
            r: 8,
            alpha: 16.0,
            ..LoraConfig::default()
        },
    )?;
    let adapter = dir.join("adapter");
    save_adapter(&lora, &adapter, &base.display().to_string())?;
    let lake = dir.join("lake");
    for i in 0..o.counts.iter().copied().max().unwrap_or(1) {
        let registry = Registry::open(
            lake.to_str().context("path")?,
            Default::default(),
            &policy(i),
        )?;
        registry.publish(&adapter, "bench").await?;
        registry.promote(1, "bench", "bench", None).await?;
    }
    Ok(())
}

async fn child(o: &Options, count: usize, dir: &Path) -> Result<Value> {
    let before = resident_mib()?;
    let base = BaseModel::open(dir.join("base"))?;
    let lake = dir.join("lake");
    let cache = tempfile::tempdir()?;
    let mut watchers = Vec::new();
    for i in 0..count {
        watchers.push(Watcher {
            registry: Registry::open(
                lake.to_str().context("path")?,
                Default::default(),
                &policy(i),
            )?,
            base: base.clone(),
            cache: cache.path().to_path_buf(),
            options: EngineOptions::default(),
            drain: Duration::from_secs(30),
        });
    }
    let started = Instant::now();
    let fleet = Fleet::start(watchers, None, 0).await?;
    let load_s = started.elapsed().as_secs_f64();
    let resident = resident_mib()?;
    let mut out = json!({
        "policies": count,
        "resident_mib": resident,
        "before_mib": before,
        "load_s": load_s,
    });
    if count > 1 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = atdp_deploy::router(fleet.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        // Warm every engine once.
        for i in 0..count {
            send(&client, addr, &policy(i), 2).await?;
        }
        out["single_tok_s"] = json!(throughput(o, &client, addr, |_| policy(0)).await?);
        out["mixed_tok_s"] = json!(throughput(o, &client, addr, |r| policy(r % count)).await?);
    }
    Ok(out)
}

async fn send(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    model: &str,
    tokens: usize,
) -> Result<u64> {
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Summarise the ticket in one line."}],
        "max_tokens": tokens,
        "temperature": 0,
    });
    let answer: Value = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    answer["usage"]["completion_tokens"]
        .as_u64()
        .context("no usage in the answer")
}

/// Completion tokens per second with all requests in flight at once, `model(r)` naming the
/// policy of request `r`.
async fn throughput(
    o: &Options,
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    model: impl Fn(usize) -> String,
) -> Result<f64> {
    let started = Instant::now();
    let runs = (0..o.requests).map(|r| {
        let (client, model, tokens) = (client.clone(), model(r), o.tokens);
        async move { send(&client, addr, &model, tokens).await }
    });
    let tokens: u64 = futures::future::try_join_all(runs).await?.into_iter().sum();
    Ok(tokens as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let o = options()?;
    if let Some((count, dir)) = &o.child {
        let out = child(&o, *count, dir).await?;
        println!("{out}");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    prepare(&o, dir.path()).await?;
    println!(
        "base: Qwen2, hidden {}, {} layers, f32, CPU; {} requests of up to {} tokens in flight at once",
        o.hidden, o.layers, o.requests, o.tokens
    );
    let me = std::env::current_exe()?;
    let mut one = None;
    for &count in &o.counts {
        let output = std::process::Command::new(&me)
            .args([
                "--hidden",
                &o.hidden.to_string(),
                "--layers",
                &o.layers.to_string(),
            ])
            .args([
                "--requests",
                &o.requests.to_string(),
                "--tokens",
                &o.tokens.to_string(),
            ])
            .arg("--child")
            .arg(count.to_string())
            .arg(dir.path())
            .output()?;
        if !output.status.success() {
            bail!(
                "the child for {count} policies failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let line = String::from_utf8_lossy(&output.stdout);
        let result: Value = serde_json::from_str(line.lines().last().unwrap_or_default())?;
        let resident = result["resident_mib"].as_f64().unwrap_or_default();
        let single = *one.get_or_insert(resident);
        println!(
            "{count:>3} policies: one process {resident:>8.1} MiB ({:>6.1} MiB per added policy), one process per policy {:>8.1} MiB, loaded in {:.2} s",
            if count > 1 {
                (resident - single) / (count - 1) as f64
            } else {
                0.0
            },
            single * count as f64,
            result["load_s"].as_f64().unwrap_or_default(),
        );
        if let (Some(s), Some(m)) = (
            result["single_tok_s"].as_f64(),
            result["mixed_tok_s"].as_f64(),
        ) {
            println!(
                "     tokens/s: all requests to one policy {s:.1}, spread over {count} policies {m:.1}"
            );
        }
    }
    Ok(())
}
