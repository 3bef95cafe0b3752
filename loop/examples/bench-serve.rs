//! Serving speed and hot-swap cost on CPU: completion tokens/s with 1 and 4 clients, then
//! promotions under 4 clients' load: time from the promotion until all traffic is on the new
//! version (new requests on it, the old engine's drained), and requests failed (target: zero).
//!
//! `cargo run --release -p atdp-loop --example bench-serve -- --preset tiny`
//! `cargo run --release -p atdp-loop --example bench-serve -- --preset qwen2-0.5b --tokens 32 --seconds 60`
//!
//! Models are generated once under `--dir` (shared with the trainer's `bench-train`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use atdp_deploy::{BaseModel, EngineOptions, Fleet, Registry, Watcher};
use atdp_model_files::LoraConfig;
use atdp_trainer::{InitSpec, LoadOptions, Lora, Model, save_adapter};
use candle_core::{Device, Tensor};
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Args {
    /// `tiny` (the test model) or `qwen2-0.5b` (Qwen2-0.5B's shape, random weights).
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Completion tokens asked per request.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// Seconds per throughput measurement.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Promotions measured under load.
    #[arg(long, default_value_t = 5)]
    swaps: usize,
    /// Where generated models are kept.
    #[arg(long, default_value = "/tmp/atdp-bench-train")]
    dir: PathBuf,
}

fn spec(preset: &str) -> InitSpec {
    InitSpec::preset(preset)
        .unwrap_or_else(|| panic!("unknown preset {preset}: tiny or qwen2-0.5b"))
}

fn adapter(base: &std::path::Path, out: &std::path::Path, seed: u64) {
    let model = Model::load(base, &LoadOptions::default()).unwrap();
    let lora = Lora::new(
        &model,
        LoraConfig {
            r: 8,
            alpha: 16.0,
            seed,
            ..LoraConfig::default()
        },
    )
    .unwrap();
    for (_, _, layer) in lora.layers() {
        let b = Tensor::randn(0f32, 0.01, layer.b().dims().to_vec(), &Device::Cpu).unwrap();
        layer.b().set(&b).unwrap();
    }
    save_adapter(&lora, out, "bench").unwrap();
}

/// One client: requests until `stop`; counts completion tokens, requests and failures.
async fn client(
    addr: std::net::SocketAddr,
    tokens: usize,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    completion: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    id: usize,
) {
    let http = reqwest::Client::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        // The grammar keeps the random model's tokens inside the tokenizer's 300.
        let body = json!({
            "messages": [{"role": "user", "content": format!("Client {id} request {n}: write.")}],
            "max_tokens": tokens,
            "temperature": 0,
            "grammar": {"type": "regex", "value": format!("[a-z ]{{{tokens}}}")},
        });
        let answer = http
            .post(format!("http://{addr}/v1/chat/completions"))
            .json(&body)
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => {
                let v: Value = r.json().await.unwrap_or(Value::Null);
                let c = v
                    .pointer("/usage/completion_tokens")
                    .and_then(Value::as_u64);
                match c {
                    Some(c) => {
                        completion.fetch_add(c, Ordering::Relaxed);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ => {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    completion: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn start_load(addr: std::net::SocketAddr, clients: usize, tokens: usize) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let (done, completion, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let tasks = (0..clients)
        .map(|id| {
            tokio::spawn(client(
                addr,
                tokens,
                stop.clone(),
                done.clone(),
                completion.clone(),
                failed.clone(),
                id,
            ))
        })
        .collect();
    Load {
        stop,
        done,
        completion,
        failed,
        tasks,
    }
}

impl Load {
    async fn finish(self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        (
            self.done.load(Ordering::Relaxed),
            self.completion.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = Args::parse();
    let base_dir = args.dir.join(&args.preset);
    if !base_dir.join("config.json").exists() {
        atdp_trainer::init_model(&base_dir, &spec(&args.preset)).unwrap();
    }
    let work = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(work.path().to_str().unwrap(), Default::default(), "bench").unwrap();
    for seed in [1, 2] {
        let dir = work.path().join(format!("a{seed}"));
        adapter(&base_dir, &dir, seed);
        registry.publish(&dir, "bench").await.unwrap();
    }
    registry.promote(1, "bench", "start", None).await.unwrap();
    let cache = work.path().join("cache");
    let watcher = Watcher {
        registry: registry.clone(),
        base: BaseModel::open(&base_dir).unwrap(),
        cache,
        options: EngineOptions::default(),
        drain: Duration::from_secs(60),
    };
    let started = Instant::now();
    let policy = registry.policy().to_owned();
    let fleet = Fleet::start(vec![watcher], None, 0).await.unwrap();
    let serving = fleet.serving(&policy).unwrap().clone();
    println!(
        "preset {}: first engine loaded in {:.2} s",
        args.preset,
        started.elapsed().as_secs_f64()
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    fleet.follow(Duration::from_millis(20));
    let app = atdp_deploy::router(fleet.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    for clients in [1, 4] {
        let load = start_load(addr, clients, args.tokens);
        let clock = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.seconds)).await;
        let (done, completion, failed) = load.finish().await;
        let secs = clock.elapsed().as_secs_f64();
        println!(
            "{clients} client(s), {} tokens per request: {:.1} completion tokens/s, {:.2} requests/s, {failed} failed ({done} requests in {secs:.1} s)",
            args.tokens,
            completion as f64 / secs,
            done as f64 / secs
        );
    }

    let load = start_load(addr, 4, args.tokens);
    tokio::time::sleep(Duration::from_secs(1)).await;
    for k in 0..args.swaps {
        let target = if k % 2 == 0 { 2 } else { 1 };
        let swaps = serving.status().swaps;
        let clock = Instant::now();
        registry
            .promote(target, "bench", "swap", None)
            .await
            .unwrap();
        while serving.status().swaps == swaps {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let to_serving = clock.elapsed();
        let status = serving.status();
        let swap = status.last_swap.unwrap();
        assert_eq!(status.serving, format!("bench@v{target}"));
        println!(
            "swap {} → {}: all traffic on the new version {:.0} ms after the promotion (fetch, checks, load and trial token {} ms; old engine drained {} ms after new requests went to the new one)",
            swap.from,
            swap.to,
            to_serving.as_secs_f64() * 1000.0,
            swap.load_ms,
            swap.drain_ms
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (done, _, failed) = load.finish().await;
    println!(
        "under load during {} swaps: {done} requests served, {failed} failed",
        args.swaps
    );
}
