//! The HTTP side of `atdp-serve`: an OpenAI-compatible API over the engines the fleet's
//! policies serve, the swap between a policy's engines, and `/atdp/status`.
//!
//! Each request takes its policy's current engine (an `Arc`) when it arrives and keeps it
//! until its last byte is sent, so a response comes whole from one version; a swap only
//! changes which engine the next request takes. The old engine stops when its last request
//! finishes. A request that a dead engine failed before it had any output runs once more on
//! the fresh load of the same version that replaced it: still one version, and every byte
//! from one engine.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::{Engine, Shared};
use crate::fleet::{Fleet, FleetStatus};
use crate::generate;
use crate::openai::{self, ApiError};
use crate::reply::{self, Shape, StreamWriter};
use crate::tools::{ReplyParser, Tools};

/// The response header naming the version that produced a response; the proxy records it as
/// the step's `policy_version`.
pub const VERSION_HEADER: &str = "x-atdp-policy-version";

/// The largest request body read.
const MAX_BODY: usize = 16 << 20;

/// What one swap took.
#[derive(Debug, Clone, Serialize)]
pub struct SwapReport {
    /// The version served before.
    pub from: String,
    /// The version served now.
    pub to: String,
    /// Loading and checking the new engine (while the old one kept serving).
    pub load_ms: u64,
    /// From the switch until the old engine's last request finished.
    pub drain_ms: u64,
    /// Requests still on the old engine when the drain deadline passed (they finish on it).
    pub left_draining: usize,
    /// When the switch happened (RFC 3339).
    pub at: String,
}

/// What `/atdp/status` reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// The version served.
    pub serving: String,
    /// Its adapter number (none: the base model).
    pub number: Option<u32>,
    /// Swaps done since start.
    pub swaps: u64,
    /// The last swap.
    pub last_swap: Option<SwapReport>,
    /// The last version refused, and why (the served version stayed).
    pub last_refusal: Option<String>,
    /// Requests answered since start.
    pub requests: u64,
    /// Requests that failed inside the engine since start.
    pub failures: u64,
    /// Engines found dead (failing requests and the trial request) and replaced by a fresh
    /// load of the same version, since start.
    pub repairs: u64,
}

/// The engine served now and what happened to it.
#[derive(Debug)]
pub struct Serving {
    current: RwLock<Shared>,
    status: Mutex<Status>,
    /// A watcher replaces this policy's engine when it dies.
    repaired: AtomicBool,
}

/// How long a request that a dead engine failed waits for the watcher to load the version
/// afresh (its next poll, a trial token of up to 30 s, the load) before it is answered 500.
const REPAIR_WAIT: Duration = Duration::from_secs(120);

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Serving {
    /// Starts serving `engine`.
    pub fn new(engine: Engine) -> Arc<Serving> {
        let status = Status {
            serving: engine.version.to_string(),
            number: engine.version.number,
            ..Status::default()
        };
        Arc::new(Serving {
            current: RwLock::new(Arc::new(engine)),
            status: Mutex::new(status),
            repaired: AtomicBool::new(false),
        })
    }

    /// The engine a request arriving now gets.
    pub fn current(&self) -> Shared {
        match self.current.read() {
            Ok(engine) => Arc::clone(&engine),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Marks this policy's engine as one a watcher repairs (see [`Serving::replacement`]).
    pub(crate) fn watched(&self) {
        self.repaired.store(true, Ordering::Relaxed);
    }

    /// After `engine` failed a request: the engine the watcher loaded afresh in its place on
    /// finding it dead, on which a request that had nothing from the dead one yet runs again.
    /// None when no watcher repairs this policy, once a request started after the failure
    /// (or the watcher's trial token) is answered (the failure was the request's own), once
    /// `engine` is no longer served without having been repaired (a pinned version, a swap),
    /// and after [`REPAIR_WAIT`].
    pub(crate) async fn replacement(&self, engine: &Shared) -> Option<Shared> {
        if !self.repaired.load(Ordering::Relaxed) {
            return None;
        }
        let deadline = Instant::now() + REPAIR_WAIT;
        loop {
            // Read before the replacement: `replace` records it before the swap shows.
            let served = Arc::ptr_eq(&self.current(), engine);
            if let Some(fresh) = engine.repaired_by() {
                return Some(fresh);
            }
            if !served || engine.failing() == 0 || Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A copy of the status.
    pub fn status(&self) -> Status {
        match self.status.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        match self.status.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Counts a request `engine` answered (`failed`: the engine failed it), which started
    /// with `ticket` ([`Engine::ticket`]). A request run again counts once per run.
    pub(crate) fn count(&self, engine: &Engine, ticket: u64, failed: bool) {
        engine.note(ticket, failed);
        self.update(|s| {
            if failed {
                s.failures += 1;
            } else {
                s.requests += 1;
            }
        });
    }

    /// Records that a version was refused.
    pub fn refused(&self, message: String) {
        self.update(|s| s.last_refusal = Some(message));
    }

    /// Sends new requests to `engine`, then waits up to `drain` for the old engine's requests
    /// to finish. Requests still running after that finish on the old engine all the same.
    pub async fn swap(&self, engine: Engine, load_ms: u64, drain: Duration) -> SwapReport {
        self.replace(engine, load_ms, drain, false).await
    }

    /// Replaces a dead engine with `engine`, a fresh load of the same version: counted as a
    /// repair, not a swap.
    pub async fn repair(&self, engine: Engine, load_ms: u64, drain: Duration) -> SwapReport {
        self.replace(engine, load_ms, drain, true).await
    }

    async fn replace(
        &self,
        engine: Engine,
        load_ms: u64,
        drain: Duration,
        repair: bool,
    ) -> SwapReport {
        let to = engine.version.to_string();
        let number = engine.version.number;
        let fresh = Arc::new(engine);
        let old = {
            let mut current = match self.current.write() {
                Ok(c) => c,
                Err(poisoned) => poisoned.into_inner(),
            };
            if repair {
                current.replaced_by(&fresh);
            }
            std::mem::replace(&mut *current, fresh)
        };
        let switched = Instant::now();
        let at = now();
        while Arc::strong_count(&old) > 1 && switched.elapsed() < drain {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let report = SwapReport {
            from: old.version.to_string(),
            to: to.clone(),
            load_ms,
            drain_ms: switched.elapsed().as_millis() as u64,
            left_draining: Arc::strong_count(&old).saturating_sub(1),
            at,
        };
        drop(old);
        self.update(|s| {
            s.serving = to;
            s.number = number;
            if repair {
                s.repairs += 1;
            } else {
                s.swaps += 1;
                s.last_swap = Some(report.clone());
            }
        });
        report
    }
}

/// The API's routes over the policies of `fleet`.
pub fn router(fleet: Arc<Fleet>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/atdp/status", get(status))
        .fallback(not_found)
        .with_state(fleet)
}

fn error_response(error: &ApiError, version: Option<&str>) -> Response {
    let mut response = (error.status, axum::Json(error.body())).into_response();
    if let Some(v) = version.and_then(|v| HeaderValue::from_str(v).ok()) {
        response.headers_mut().insert(VERSION_HEADER, v);
    }
    response
}

async fn not_found() -> Response {
    let error = ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        message: "unknown path: atdp-serve answers POST /v1/chat/completions and GET /v1/models"
            .into(),
        param: None,
        code: None,
    };
    error_response(&error, None)
}

async fn health() -> &'static str {
    "ok"
}

async fn status(State(fleet): State<Arc<Fleet>>) -> axum::Json<FleetStatus> {
    axum::Json(fleet.status())
}

/// Every served policy, with the version it serves now.
async fn models(State(fleet): State<Arc<Fleet>>) -> Response {
    let data: Vec<Value> = fleet
        .policies()
        .filter_map(|policy| fleet.serving(policy))
        .map(|serving| {
            let engine = serving.current();
            json!({
                "id": engine.version.policy,
                "object": "model",
                "created": 0,
                "owned_by": "atdp",
                "version": engine.version.to_string(),
            })
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

async fn chat(State(fleet): State<Arc<Fleet>>, body: Bytes) -> Response {
    if body.len() > MAX_BODY {
        let error = ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            message: format!("the request body is over {} MiB", MAX_BODY >> 20),
            param: None,
            code: None,
        };
        return error_response(&error, None);
    }
    let request = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return error_response(&e, None),
    };
    // The engine is taken once; only the fresh load that replaces it, dead, runs it again.
    let (serving, engine) = match fleet.route(request.model.as_deref()).await {
        Ok(route) => (route.serving, route.engine),
        Err(e) => return error_response(&e, None),
    };
    let version = engine.version.to_string();
    let job = match request.job(&engine.format, engine.context) {
        Ok(job) => job,
        Err(e) => return error_response(&e, Some(&version)),
    };
    let shape = Shape {
        id: format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()),
        created: chrono::Utc::now().timestamp().max(0) as u64,
        version: version.clone(),
        prompt_tokens: job.prompt.len(),
        logprobs: request.logprobs,
        stop: request.stop.clone(),
    };
    if request.stream {
        return stream(serving, engine, request, job, shape);
    }
    // A fresh load of the same version has the same prompt format and context, so the job
    // runs again unchanged on the engine that replaced a dead one.
    let mut engine = engine;
    let mut retried = false;
    loop {
        let ticket = engine.ticket();
        let runs = (0..request.n).map(|_| generate::whole(&engine, &job));
        let results = futures::future::join_all(runs).await;
        let error = match results.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(choices) => {
                serving.count(&engine, ticket, false);
                let tools = request.tools;
                let body = reply::completion(&shape, choices, || parser(tools.as_ref()));
                let mut response = axum::Json(body).into_response();
                if let Ok(v) = HeaderValue::from_str(&version) {
                    response.headers_mut().insert(VERSION_HEADER, v);
                }
                return response;
            }
            Err(e) => e,
        };
        if error.status.is_server_error() {
            serving.count(&engine, ticket, true);
            // The message may quote the prompt: log only that it failed.
            tracing::warn!(version = %version, "Engine failed a request.");
            if !retried && let Some(fresh) = serving.replacement(&engine).await {
                tracing::warn!(version = %version, "Running a failed request again on the engine that replaced a dead one.");
                engine = fresh;
                retried = true;
                continue;
            }
        }
        return error_response(&error, Some(&version));
    }
}

/// The reply parser of a request: tool calls split out when tools are offered.
fn parser(tools: Option<&Tools>) -> ReplyParser {
    tools.map_or_else(|| ReplyParser::new(Vec::new(), 0), Tools::parser)
}

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn stream(
    serving: Arc<Serving>,
    engine: Shared,
    request: openai::ChatRequest,
    job: generate::Job,
    shape: Shape,
) -> Response {
    let version = engine.version.to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(32);
    let task_version = version.clone();
    tokio::spawn(async move {
        let version = task_version;
        let mut writer = StreamWriter::new(shape, parser(request.tools.as_ref()));
        let mut engine = engine;
        let mut retried = false;
        let ticket = loop {
            // Whether the engine gave a token: after one, the stream cannot start again.
            let mut started = false;
            let mut failed = None;
            let ticket = engine.ticket();
            match generate::stream(&engine, &job).await {
                Err(e) => failed = Some(e),
                Ok(mut tokens) => {
                    while let Some(step) = tokens.next().await {
                        match step {
                            Ok(step) => {
                                started = true;
                                for chunk in writer.step(step) {
                                    if tx.send(sse(&chunk)).await.is_err() {
                                        // The client left; dropping the stream cancels the
                                        // sequence.
                                        return;
                                    }
                                }
                            }
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                }
            }
            let Some(error) = failed else {
                break ticket;
            };
            serving.count(&engine, ticket, true);
            tracing::warn!(version = %version, "Engine failed a streamed request.");
            let fresh = if started || retried {
                None
            } else {
                tokio::select! {
                    fresh = serving.replacement(&engine) => fresh,
                    // A client that left is not answered on the fresh engine.
                    () = tx.closed() => return,
                }
            };
            if let Some(fresh) = fresh {
                tracing::warn!(version = %version, "Running a failed request again on the engine that replaced a dead one.");
                engine = fresh;
                retried = true;
                continue;
            }
            let _ = tx.send(sse(&error.body())).await;
            return;
        };
        serving.count(&engine, ticket, false);
        if request.include_usage {
            let _ = tx.send(sse(&writer.usage_chunk())).await;
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
        drop(engine);
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, Infallible>(bytes), rx))
    }));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&version) {
        headers.insert(VERSION_HEADER, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use atdp_trainer::{Arch, InitSpec, init_model};

    use super::*;
    use crate::engine::{BaseModel, EngineOptions, Version};

    async fn load(dir: &Path, number: Option<u32>) -> Engine {
        let base = BaseModel::open(dir).unwrap();
        let version = Version {
            policy: "support".into(),
            number,
        };
        Engine::load(&base, None, version, &EngineOptions::default())
            .await
            .unwrap()
    }

    /// Starts waiting for the replacement of `engine` and checks that the wait has not ended
    /// on its own.
    async fn waiting(
        serving: &Arc<Serving>,
        engine: &Shared,
    ) -> tokio::task::JoinHandle<Option<Shared>> {
        let (serving, engine) = (Arc::clone(serving), Arc::clone(engine));
        let task = tokio::spawn(async move { serving.replacement(&engine).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!task.is_finished(), "gave up on an engine that may be dead");
        task
    }

    /// Waits at most a second for `task`: the wait ended on its own, not at [`REPAIR_WAIT`].
    async fn ended(task: tokio::task::JoinHandle<Option<Shared>>) -> Option<Shared> {
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("the wait should have ended at once")
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_request_runs_again_only_on_the_engine_that_replaced_a_dead_one() {
        let dir = tempfile::tempdir().unwrap();
        init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let serving = Serving::new(load(dir.path(), None).await);
        let first = serving.current();
        let before = first.ticket();
        serving.count(&first, before, true);
        let unwatched = {
            let (serving, first) = (Arc::clone(&serving), Arc::clone(&first));
            tokio::spawn(async move { serving.replacement(&first).await })
        };
        assert!(
            ended(unwatched).await.is_none(),
            "no watcher repairs this policy: the failure stands at once"
        );

        serving.watched();
        let task = waiting(&serving, &first).await;
        // A request that started before the failure and ends after it says nothing about
        // the engine now.
        serving.count(&first, before, false);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !task.is_finished(),
            "an older request's answer ended the wait"
        );
        let after = first.ticket();
        serving.count(&first, after, false);
        assert!(
            ended(task).await.is_none(),
            "a later request was answered: the failure was the request's own"
        );

        serving.count(&first, first.ticket(), true);
        let task = waiting(&serving, &first).await;
        let repair = {
            let serving = Arc::clone(&serving);
            let fresh = load(dir.path(), None).await;
            tokio::spawn(async move { serving.repair(fresh, 0, Duration::from_millis(100)).await })
        };
        let fresh = ended(task).await.expect("the engine that replaced it");
        assert!(Arc::ptr_eq(&fresh, &serving.current()));
        assert!(!Arc::ptr_eq(&fresh, &first));
        repair.await.unwrap();
        assert_eq!(serving.status().repairs, 1);
        assert!(
            Arc::ptr_eq(&first.repaired_by().unwrap(), &fresh),
            "a request that fails on the dead engine later still finds its replacement"
        );

        // An engine of the served version that is not the one served (a pin loaded before a
        // rollback made its version the served one): nothing repairs it.
        let pinned: Shared = Arc::new(load(dir.path(), None).await);
        serving.count(&pinned, pinned.ticket(), true);
        let task = {
            let (serving, pinned) = (Arc::clone(&serving), Arc::clone(&pinned));
            tokio::spawn(async move { serving.replacement(&pinned).await })
        };
        assert!(
            ended(task).await.is_none(),
            "a pinned engine is not repaired"
        );

        // A swap to another version while a request waits: the request is not run on it.
        serving.count(&fresh, fresh.ticket(), true);
        let task = waiting(&serving, &fresh).await;
        serving
            .swap(load(dir.path(), Some(1)).await, 0, Duration::ZERO)
            .await;
        assert!(ended(task).await.is_none(), "a swap is not a repair");
    }
}
