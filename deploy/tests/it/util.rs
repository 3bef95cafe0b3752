//! Helpers: a tiny base model, adapters for it, a server on loopback, chat requests.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atdp_deploy::{
    BaseModel, EngineOptions, Fleet, Registry, Serving, Status, VERSION_HEADER, Watcher,
};
use atdp_model_files::{Arch, LoraConfig};
use atdp_trainer::{InitSpec, LoadOptions, Lora, Model, Rng, init_model, save_adapter};
use candle_core::{Device, Tensor};
use futures::StreamExt;
use serde_json::{Value, json};
use tempfile::TempDir;

/// A tiny random Qwen2 model (vocabulary of the trainer's byte-level tokenizer).
pub fn tiny_base(dir: &Path, hidden: Option<usize>) {
    let mut spec = InitSpec::tiny(Arch::Qwen2);
    spec.seed = 11;
    spec.init_std = 0.2;
    if let Some(h) = hidden {
        spec.config.hidden_size = h;
        spec.config.head_dim = h / spec.config.num_attention_heads;
    }
    init_model(dir, &spec).unwrap();
}

/// A tiny random Qwen2 model whose tokenizer learned up to 200 merges from `corpus` (token
/// ids past the byte-level vocabulary).
pub fn tiny_base_with_merges(dir: &Path, corpus: &[String]) {
    let mut spec = InitSpec::tiny(Arch::Qwen2);
    spec.seed = 11;
    spec.init_std = 0.2;
    let spec = spec.with_merges(atdp_trainer::learn_merges(corpus, 200).unwrap());
    assert!(spec.config.vocab_size > 300);
    init_model(dir, &spec).unwrap();
}

/// A PEFT adapter for the model in `base` with pseudo-random B drawn from `seed` (so that it
/// changes the outputs, the same way in every run), written to `out`.
pub fn random_adapter(base: &Path, out: &Path, scale: f64, seed: u64) {
    let model = Model::load(base, &LoadOptions::default()).unwrap();
    let config = LoraConfig {
        r: 4,
        alpha: 8.0,
        ..LoraConfig::default()
    };
    let lora = Lora::new(&model, config).unwrap();
    for (index, module, layer) in lora.layers() {
        let shape = layer.b().dims().to_vec();
        // Seeded, unlike candle's `randn`, so that every run serves the same outputs.
        let mut rng = Rng::stream(seed, &module.module_path(index));
        let values: Vec<f32> = (0..shape.iter().product::<usize>())
            .map(|_| (rng.normal() * scale) as f32)
            .collect();
        let b = Tensor::from_vec(values, shape, &Device::Cpu).unwrap();
        layer.b().set(&b).unwrap();
    }
    save_adapter(&lora, out, &base.display().to_string()).unwrap();
}

/// A server on 127.0.0.1:0 following its registries, polling them every 20 ms.
pub struct Server {
    pub addr: SocketAddr,
    /// The first policy's serving.
    pub serving: Arc<Serving>,
    pub fleet: Arc<Fleet>,
    pub _cache: TempDir,
}

pub async fn start(registry: Registry, base: &Path) -> Server {
    start_fleet(vec![registry], base, None, 2).await
}

/// A server of several policies over one base model.
pub async fn start_fleet(
    registries: Vec<Registry>,
    base: &Path,
    default: Option<&str>,
    max_pinned: usize,
) -> Server {
    let cache = tempfile::tempdir().unwrap();
    let base = BaseModel::open(base).unwrap();
    let watchers = registries
        .into_iter()
        .map(|registry| Watcher {
            registry,
            base: base.clone(),
            cache: cache.path().to_path_buf(),
            options: EngineOptions::default(),
            drain: Duration::from_secs(30),
        })
        .collect();
    let fleet = Fleet::start(watchers, default.map(str::to_owned), max_pinned)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    fleet.follow(Duration::from_millis(20));
    let app = atdp_deploy::router(fleet.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let first = fleet.policies().next().unwrap().to_owned();
    Server {
        addr,
        serving: fleet.serving(&first).unwrap().clone(),
        fleet,
        _cache: cache,
    }
}

/// Waits until the server's status satisfies `ready` (30 s at most).
pub async fn wait_for(serving: &Serving, ready: impl Fn(&Status) -> bool) -> Status {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = serving.status();
        if ready(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "timed out; status: {status:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One answer: the version header, the `model` field of every chunk (one for a whole
/// response), the text, and the token log-probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub header: String,
    pub models: Vec<String>,
    pub text: String,
    pub logprobs: Vec<f64>,
}

impl Answer {
    /// The version, when the header and every chunk agree on one.
    pub fn version(&self) -> Option<&str> {
        self.models
            .iter()
            .all(|m| *m == self.header)
            .then_some(self.header.as_str())
    }
}

pub fn request(prompt: &str, stream: bool, max_tokens: usize) -> Value {
    json!({
        "model": "default",
        "messages": [{"role": "system", "content": "Answer with one word."},
                     {"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": true,
        "stream": stream,
    })
}

/// Sends a greedy chat request; panics on anything but a whole 200 answer.
pub async fn chat(client: &reqwest::Client, addr: SocketAddr, body: &Value) -> Answer {
    let response = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let header = response.headers()[VERSION_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    let mut answer = Answer {
        header,
        models: Vec::new(),
        text: String::new(),
        logprobs: Vec::new(),
    };
    let mut add = |choice: &Value, key: &str| {
        if let Some(t) = choice
            .pointer(&format!("/{key}/content"))
            .and_then(Value::as_str)
        {
            answer.text.push_str(t);
        }
        for entry in choice
            .pointer("/logprobs/content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            answer.logprobs.push(entry["logprob"].as_f64().unwrap());
        }
    };
    if body["stream"] == true {
        let mut bytes = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            bytes.extend_from_slice(&chunk.unwrap());
        }
        let text = String::from_utf8(bytes).unwrap();
        let mut done = false;
        let mut models = Vec::new();
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            if line == "[DONE]" {
                done = true;
                continue;
            }
            let chunk: Value = serde_json::from_str(line).unwrap();
            assert!(chunk.get("error").is_none(), "{chunk}");
            models.push(chunk["model"].as_str().unwrap().to_owned());
            add(&chunk["choices"][0], "delta");
        }
        assert!(done, "the stream did not end with [DONE]");
        answer.models = models;
    } else {
        let whole: Value = response.json().await.unwrap();
        answer.models = vec![whole["model"].as_str().unwrap().to_owned()];
        add(&whole["choices"][0], "message");
    }
    answer
}

/// Posts a chat request; returns the status and the JSON body.
pub async fn post(client: &reqwest::Client, addr: SocketAddr, body: &Value) -> (u16, Value) {
    let response = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Posts a streamed chat request; returns the raw SSE bytes (checked to end with `[DONE]`)
/// and the chunks.
pub async fn post_stream(
    client: &reqwest::Client,
    addr: SocketAddr,
    body: &Value,
) -> (Vec<u8>, Vec<Value>) {
    let response = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut bytes = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(bytes.clone()).unwrap();
    let mut chunks = Vec::new();
    let mut done = false;
    for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            done = true;
        } else {
            let chunk: Value = serde_json::from_str(line).unwrap();
            assert!(chunk.get("error").is_none(), "{chunk}");
            chunks.push(chunk);
        }
    }
    assert!(done, "the stream did not end with [DONE]");
    (bytes, chunks)
}

/// The quickstart policy's key for tenant `demo`, agent `demo-agent`.
pub const DEMO_KEY: &str = "sk-atdp-demo-agent";

/// Starts `atdp-proxy` (Pingora, on its own thread) in front of `upstream`, recording into
/// `dir/lake`; returns where agents connect. The quickstart's keys and Cedar schema, a policy
/// that lets active keys call models and tools, and masking that leaves text as it is (this
/// proxy records what `atdp-serve` returns; a masked reply would be stored without its ids,
/// by design).
pub async fn start_proxy(dir: &std::path::Path, upstream: SocketAddr) -> SocketAddr {
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    let quickstart = atdp_testkit::repo_root().join("policies/examples/quickstart");
    for name in ["entities.json", "schema.cedarschema"] {
        std::fs::copy(quickstart.join(name), policy.join(name)).unwrap();
    }
    std::fs::write(
        policy.join("policies.cedar"),
        r#"permit (principal, action == Atdp::Action::"invoke_model", resource) when { principal.active };
permit (principal, action == Atdp::Action::"call_tool", resource) when { principal.active };
"#,
    )
    .unwrap();
    std::fs::write(
        policy.join("masking.toml"),
        "[masking.storage]\ndefault = \"allow\"\n\n[masking.external]\ndefault = \"allow\"\n\n[masking.internal]\ndefault = \"allow\"\n",
    )
    .unwrap();
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
    let config = atdp_proxy::RawConfig::from_toml(&toml)
        .and_then(|raw| raw.validate())
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        atdp_proxy::run_with(config, move |bound| {
            let _ = tx.send(bound);
        })
    });
    let bound = tokio::task::spawn_blocking(move || {
        rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    for _ in 0..600 {
        let healthy = client
            .get(format!("http://{}/healthz", bound.admin))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if healthy {
            return bound.listen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("atdp-proxy did not answer");
}

/// The steps of tenant `demo` in `lake` that may be trained on, once there are `want` of
/// them (60 s at most).
pub async fn recorded_steps(lake: std::path::PathBuf, want: usize) -> Vec<atdp_schema::Step> {
    read_steps(lake, want, false).await
}

/// The steps of tenant `demo` in `lake` (every one, whatever its training marks when
/// `all`), once there are `want` of them (60 s at most).
pub async fn read_steps(
    lake: std::path::PathBuf,
    want: usize,
    all: bool,
) -> Vec<atdp_schema::Step> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let location = lake.display().to_string();
        // The reader blocks on a runtime of its own: a plain thread, outside tokio's.
        let steps = tokio::task::spawn_blocking(move || {
            std::thread::spawn(move || {
                let selection = atdp_trainer::Selection {
                    tenants: ["demo".to_owned()].into(),
                    ..atdp_trainer::Selection::default()
                };
                let read = if all {
                    atdp_trainer::read_lake_to_monitor
                } else {
                    atdp_trainer::read_lake
                };
                read(&location, Default::default(), &selection)
                    .unwrap()
                    .steps
            })
            .join()
            .unwrap()
        })
        .await
        .unwrap();
        if steps.len() >= want {
            return steps;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {want} steps",
            steps.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
