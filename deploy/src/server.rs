//! The HTTP side of `atdp-serve`: an OpenAI-compatible API over the engines the fleet's
//! policies serve (`serving`), and `/atdp/status`.
//!
//! Each request takes its policy's current engine (an `Arc`) when it arrives and keeps it
//! until its last byte is sent, so a response comes whole from one version; a swap only
//! changes which engine the next request takes. The old engine stops when its last request
//! finishes. A request that a dead engine failed before it had any output runs once more on
//! the fresh load of the same version that replaced it: still one version, and every byte
//! from one engine.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::engine::Shared;
use crate::error::ApiError;
use crate::fleet::{COPY_HEADER, Fleet, FleetStatus};
use crate::generate;
use crate::openai;
use crate::reply::{self, Shape, StreamWriter};
use crate::serving::Serving;
use crate::tools::{ReplyParser, Tools};

/// The response header naming the version that produced a response; the proxy records it as
/// the step's `policy_version`.
pub const VERSION_HEADER: &str = "x-atdp-policy-version";

/// The response header naming the version (`support@v8`) that is to answer a copy of the
/// request in shadow; the proxy sends the copy, records its reply and never returns it.
pub const SHADOW_HEADER: &str = "x-atdp-shadow";

/// The largest request body read.
const MAX_BODY: usize = 16 << 20;
/// A body from which size on it is parsed on the blocking pool.
const LARGE_BODY: usize = 64 << 10;

/// The API's routes over the policies of `fleet`.
pub fn router(fleet: Arc<Fleet>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/atdp/status", get(status))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
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

async fn method_not_allowed() -> Response {
    let error = ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        kind: "invalid_request_error",
        message:
            "method not allowed: atdp-serve answers POST /v1/chat/completions and GET /v1/models"
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

async fn chat(
    State(fleet): State<Arc<Fleet>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // A body over the limit is refused by the reader, before it is all read.
    let Ok(body) = body else {
        let error = ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            message: format!(
                "the request body is over {} MiB, or could not be read",
                MAX_BODY >> 20
            ),
            param: None,
            code: None,
        };
        return error_response(&error, None);
    };
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
    // A large body is parsed off the runtime's threads, as its prompt is prepared below.
    let parsed = if body.len() < LARGE_BODY {
        Ok(openai::parse(&body))
    } else {
        tokio::task::spawn_blocking(move || openai::parse(&body)).await
    };
    let request = match parsed {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return error_response(&e, None),
        Err(_) => {
            return error_response(&ApiError::server("reading the request failed"), None);
        }
    };
    // The engine is taken once; only the fresh load that replaces it, dead, runs it again.
    let copy = headers.contains_key(COPY_HEADER);
    let (serving, engine, shadow) = match fleet.route(request.model.as_deref(), copy).await {
        Ok(route) => (route.serving, route.engine, route.shadow),
        Err(e) => return error_response(&e, None),
    };
    let version = engine.version.to_string();
    // Rendering the prompt and tokenizing it take time in the size of the request: off the
    // runtime's few threads, so that one large request holds up no other.
    let (format, context) = (engine.format.clone(), engine.context);
    let prepared = tokio::task::spawn_blocking(move || {
        let job = request.job(&format, context);
        (request, job)
    })
    .await;
    let (request, job) = match prepared {
        Ok((request, Ok(job))) => (request, job),
        Ok((_, Err(e))) => return error_response(&e, Some(&version)),
        Err(_) => {
            return error_response(
                &ApiError::server("preparing the prompt failed"),
                Some(&version),
            );
        }
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
        return with_shadow(stream(serving, engine, request, job, shape), shadow);
    }
    // A fresh load of the same version has the same prompt format and context, so the job
    // runs again unchanged on the engine that replaced a dead one.
    let mut engine = engine;
    let mut retried = false;
    loop {
        let ticket = engine.ticket();
        // Each choice runs on a task of its own: a client that leaves drops this handler, and
        // the engine of mistral.rs 0.8.1 fails every sequence of its batch when it cannot
        // send to one of them; the task reads its sequence to the end regardless.
        let runs = (0..request.n).map(|_| {
            let (engine, job) = (engine.clone(), job.clone());
            tokio::spawn(async move { generate::whole(&engine, &job).await })
        });
        let results = futures::future::join_all(runs).await;
        let results = results.into_iter().map(|run| {
            run.unwrap_or_else(|_| Err(ApiError::server("generating the reply failed")))
        });
        let error = match results.collect::<Result<Vec<_>, _>>() {
            Ok(choices) => {
                serving.count(&engine, ticket, false);
                let tools = request.tools;
                let body = reply::completion(&shape, choices, || parser(tools.as_ref()));
                let mut response = axum::Json(body).into_response();
                if let Ok(v) = HeaderValue::from_str(&version) {
                    response.headers_mut().insert(VERSION_HEADER, v);
                }
                return with_shadow(response, shadow);
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

/// A served reply, naming the version that is to answer its copy in shadow, if any.
fn with_shadow(mut response: Response, shadow: Option<String>) -> Response {
    if let Some(v) = shadow.and_then(|s| HeaderValue::from_str(&s).ok()) {
        response.headers_mut().insert(SHADOW_HEADER, v);
    }
    response
}

/// The reply parser of a request: tool calls split out when tools are offered.
fn parser(tools: Option<&Tools>) -> ReplyParser {
    tools.map_or_else(|| ReplyParser::new(Vec::new(), 0), Tools::parser)
}

/// How long a streamed chunk may wait for the client to take it (the channel to the client's
/// connection is full) before the client is let go: the engine's sequences wait meanwhile.
const CLIENT_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
                                    // A client that left, or stopped reading, is let go; its
                                    // sequence runs out unread rather than failing the others
                                    // of its batch, and waiting on it would hold the engine.
                                    let sent = tokio::time::timeout(
                                        CLIENT_WRITE_TIMEOUT,
                                        tx.send(sse(&chunk)),
                                    )
                                    .await;
                                    if !matches!(sent, Ok(Ok(()))) {
                                        tokens.abandon();
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
