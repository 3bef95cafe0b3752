//! One client request, from its first byte to the recorded step.
//!
//! Order of checks (each refusal is an error in the API's own format): path and method (404,
//! 405) → API key (401) → rate limits (429) → lake back-pressure (503, or served unrecorded)
//! → content type (415) → size (413) → JSON (400) → fields (400) → route (404) → masking
//! (500: nothing is forwarded when masking fails) → Cedar for the dispatched model and every
//! offered tool (403). Then the call goes upstream ([`crate::upstream`]) from this task.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::{Method, header};
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use policies::{JsonMasker, KeyIdentity, VaultItem, hash_api_key};
use serde_json::{Value, json};

use crate::config::{OnBackpressure, Trust};
use crate::pump::Pump;
use crate::record::{StepEnd, StepStart, decision_event, now_micros};
use crate::service::{resolve, respond_error};
use crate::state::State;
use crate::trajectory::Naming;
use crate::upstream::{Dispatch, Failure, Upstreams};
use crate::wire::{Added, ApiFamily, ApiKind, RequestView, parse_json_body, parse_request};

/// The error `call::handle` returns for a reply that was cut after it began: Pingora then
/// closes the client's connection instead of ending the body (logged by the proxy itself).
pub const REPLY_CUT: &str = "reply cut";

/// A refusal, written as an error in the API's format.
#[derive(Debug)]
pub struct Reject {
    /// HTTP status.
    pub status: u16,
    /// For the agent developer: what is wrong and what to do (no request content).
    pub message: String,
    /// Metric label.
    pub reason: &'static str,
    /// Seconds to wait, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl Reject {
    /// A refusal without a wait.
    pub fn new(status: u16, reason: &'static str, message: impl Into<String>) -> Reject {
        Reject {
            status,
            message: message.into(),
            reason,
            retry_after: None,
        }
    }
}

/// Writes a refusal and counts it.
pub async fn refuse(
    state: &State,
    session: &mut Session,
    family: ApiFamily,
    api: &str,
    reject: Reject,
) -> Result<()> {
    state.metrics.request(api, reject.status);
    state.metrics.denied(reject.reason);
    let headers: Vec<(&'static str, String)> = reject
        .retry_after
        .map(|s| vec![("retry-after", s.to_string())])
        .unwrap_or_default();
    respond_error(
        session,
        family,
        reject.status,
        reject.reason,
        &reject.message,
        &headers,
    )
    .await
}

/// The caller, once its key is known.
#[derive(Debug, Clone)]
pub struct Caller {
    /// SHA-256 of the key (the Cedar `ApiKey` id).
    pub key_hash: String,
    /// Its agent and tenant.
    pub identity: KeyIdentity,
}

/// Finds and checks the API key: `Authorization: Bearer …` or `x-api-key`.
pub fn authenticate(state: &State, session: &Session) -> std::result::Result<Caller, Reject> {
    let headers = &session.req_header().headers;
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key);
    let key = bearer
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            Reject::new(
                401,
                "missing_api_key",
                "no API key: send the key atdp issued you as `Authorization: Bearer <key>` or `x-api-key`",
            )
        })?;
    let key_hash = hash_api_key(key);
    let identity = state
        .policy
        .current()
        .1
        .access
        .key_identity(&key_hash)
        .ok_or_else(|| {
            Reject::new(
                401,
                "invalid_api_key",
                "invalid API key: this key is not known to the proxy's policy",
            )
        })?;
    if !identity.active {
        return Err(Reject::new(
            401,
            "api_key_revoked",
            "API key revoked: ask your atdp administrator for a new one",
        ));
    }
    Ok(Caller { key_hash, identity })
}

/// The names of the caller's token buckets: its key's and its tenant's.
fn token_buckets(caller: &Caller) -> (String, String) {
    (
        format!("key-tokens:{}", caller.key_hash),
        format!("tokens:{}", caller.identity.tenant),
    )
}

/// Routes a request by path.
pub async fn handle(
    state: &Arc<State>,
    upstreams: &Upstreams,
    session: &mut Session,
) -> Result<()> {
    let _in_flight = crate::state::InFlight::enter(&state.in_flight);
    let path = session.req_header().uri.path().to_owned();
    let method = session.req_header().method.clone();
    let family = ApiFamily::from_path(&path);
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        session.set_keepalive(None);
        let reject = Reject {
            retry_after: Some(1),
            ..Reject::new(
                503,
                "shutting_down",
                "this proxy instance is shutting down; retry",
            )
        };
        return refuse(state, session, family, "other", reject).await;
    }
    if let Some(api) = ApiKind::from_path(&path) {
        if method != Method::POST {
            let reject = Reject::new(405, "method_not_allowed", format!("{path} takes POST"));
            return refuse(state, session, family, api.name(), reject).await;
        }
        return call(state, upstreams, session, api).await;
    }
    match (method.as_str(), path.as_str()) {
        ("GET", "/v1/models") => crate::endpoints::models(state, session).await,
        ("POST", "/v1/atdp/rewards") => crate::rewards::handle(state, session).await,
        _ => {
            let message = format!(
                "unknown path {method} {path}: the proxy serves POST /v1/chat/completions, POST /v1/responses, POST /v1/messages, GET /v1/models and POST /v1/atdp/rewards"
            );
            refuse(
                state,
                session,
                family,
                "other",
                Reject::new(404, "unknown_path", message),
            )
            .await
        }
    }
}

/// Reads the whole body, up to `limit` bytes; answers `Expect: 100-continue` first.
pub async fn read_body(
    session: &mut Session,
    limit: usize,
) -> Result<std::result::Result<Bytes, Reject>> {
    let too_big = || {
        Reject::new(
            413,
            "request_too_large",
            format!("request body over the proxy's limit of {limit} bytes"),
        )
    };
    let declared = session
        .req_header()
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        session.set_keepalive(None);
        return Ok(Err(too_big()));
    }
    let expects = session
        .req_header()
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects {
        session.write_continue_response().await?;
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = session.read_request_body().await? {
        if body.len() + chunk.len() > limit {
            session.set_keepalive(None);
            return Ok(Err(too_big()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body.freeze()))
}

/// A call that passed every check, ready to go upstream.
struct Prepared {
    caller: Caller,
    request: RequestView,
    dispatch: Dispatch,
    body: Bytes,
    /// Placeholders to restore in the reply (empty when nothing was masked on the way out).
    restore: Arc<HashMap<String, VaultItem>>,
    start: StepStart,
    naming: NamingOwned,
    record: bool,
    /// Fields the proxy asked the upstream for on its own account.
    added: Added,
}

#[derive(Debug, Clone)]
enum NamingOwned {
    Trajectory(String),
    Session(String),
    Automatic,
}

impl NamingOwned {
    fn borrow(&self) -> Naming<'_> {
        match self {
            NamingOwned::Trajectory(id) => Naming::Trajectory(id),
            NamingOwned::Session(key) => Naming::Session(key),
            NamingOwned::Automatic => Naming::Automatic,
        }
    }
}

fn header_id(session: &Session, name: &str) -> std::result::Result<Option<String>, Reject> {
    let Some(value) = session.req_header().headers.get(name) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text.is_empty() || text.len() > 200 || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Reject::new(
            400,
            "invalid_header",
            format!("header {name} must be 1 to 200 visible ASCII characters"),
        ));
    }
    Ok(Some(text.to_owned()))
}

async fn prepare(
    state: &Arc<State>,
    session: &mut Session,
    api: ApiKind,
    started_at: i64,
) -> Result<std::result::Result<Prepared, Reject>> {
    let caller = check!(authenticate(state, session));
    let tenant = caller.identity.tenant.clone();
    let limits = state.config.limits;
    let wait = |s| Reject {
        retry_after: Some(s),
        ..Reject::new(
            429,
            "rate_limit_exceeded",
            "rate limit reached for this key or tenant; retry after the time in Retry-After",
        )
    };
    // Tokens are only checked; then the tenant's and the key's request buckets are taken
    // from, the tenant's given back when the key's refuses.
    let (key_bucket, tenant_bucket) = (
        format!("key:{}", caller.key_hash),
        format!("tenant:{tenant}"),
    );
    let (key_rate, tenant_rate) = (
        u64::from(limits.key_requests_per_minute),
        u64::from(limits.tenant_requests_per_minute),
    );
    let (key_tokens, tenant_tokens) = token_buckets(&caller);
    check!(
        state
            .limiter
            .check(&tenant_tokens, limits.tenant_tokens_per_minute)
            .map_err(wait)
    );
    check!(
        state
            .limiter
            .check(&key_tokens, limits.key_tokens_per_minute)
            .map_err(wait)
    );
    check!(
        state
            .limiter
            .take(&tenant_bucket, tenant_rate)
            .map_err(wait)
    );
    if let Err(seconds) = state.limiter.take(&key_bucket, key_rate) {
        state.limiter.give_back(&tenant_bucket, tenant_rate);
        return Ok(Err(wait(seconds)));
    }

    let backlogged = state.writer.backlogged();
    let record = if !state.config.record {
        false
    } else if backlogged {
        match state.config.on_backpressure {
            OnBackpressure::Refuse => {
                state
                    .metrics
                    .refused_backpressure
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(Err(Reject {
                    retry_after: Some(5),
                    ..Reject::new(
                        503,
                        "recording_unavailable",
                        "the proxy cannot record calls right now (lake back-log); retry shortly",
                    )
                }));
            }
            OnBackpressure::ServeUnrecorded => {
                let served = state
                    .metrics
                    .unrecorded
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if served.is_multiple_of(1000) {
                    tracing::warn!(
                        unrecorded = served + 1,
                        "Lake back-log over budget: serving calls without recording them (x-atdp-recorded: false)."
                    );
                }
                false
            }
        }
    } else {
        true
    };

    let content_type = session
        .req_header()
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if !content_type
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("application/json")
    {
        return Ok(Err(Reject::new(
            415,
            "unsupported_content_type",
            "the request body must be JSON (Content-Type: application/json)",
        )));
    }
    let trajectory = check!(header_id(session, "x-atdp-trajectory-id"));
    let session_key = check!(header_id(session, "x-atdp-session-id"));
    let raw = check!(read_body(session, state.config.max_body_bytes).await?);
    let mut document = check!(parse_json_body(&raw).map_err(|e| Reject::new(
        e.status(),
        "invalid_json",
        e.to_string()
    )));
    let request = check!(parse_request(api, &document).map_err(|e| Reject::new(
        e.status(),
        "invalid_request",
        e.to_string()
    )));
    let Some((upstream, model)) = state.config.route(&request.model) else {
        return Ok(Err(Reject::new(
            404,
            "model_not_found",
            format!(
                "model {:?} is not routed by this proxy; ask your administrator to add a route",
                request.model
            ),
        )));
    };
    let upstream = upstream.clone();

    // Mask what goes upstream, by the upstream's trust level; the same pass finds the entity
    // types for the policy decision.
    let (_, policy) = state.policy.current();
    let keys = state.keys();
    let destination = match upstream.trust {
        Trust::External => policies::Destination::External,
        Trust::Internal => policies::Destination::Internal,
    };
    let masker = JsonMasker {
        scanner: &policy.scanner,
        policy: policy.masking.policy(destination),
        tenant: &tenant,
        keys: &keys,
    };
    let masked = if !state.config.mask {
        policies::JsonMasked::default()
    } else {
        match masker.mask(&mut document) {
            Ok(masked) => masked,
            Err(error) => {
                tracing::error!(tenant = %tenant, error = %error, "Masking failed; the request is refused.");
                return Ok(Err(Reject::new(
                    500,
                    "masking_failed",
                    "masking failed, so the request was not forwarded; the proxy's operator has the details",
                )));
            }
        }
    };
    let mut entities: Vec<String> = masked.spans.iter().map(|(_, s)| s.entity.clone()).collect();
    entities.sort();
    entities.dedup();
    for (_, span) in &masked.spans {
        state.metrics.masked(&span.entity);
    }
    let changed = masked
        .spans
        .iter()
        .any(|(_, s)| s.action != policies::Action::Allow);

    let context = json!({
        "entities": entities,
        "upstream_trust": upstream.trust.name(),
        "request_bytes": raw.len() as i64,
    });
    let principal = ("ApiKey", caller.key_hash.as_str());
    let mut verdicts = vec![(
        format!("model {model}"),
        policy.access.decide(
            principal,
            "invoke_model",
            ("Model", &model),
            context.clone(),
        ),
    )];
    for tool in &request.tool_names {
        verdicts.push((
            format!("tool {tool}"),
            policy
                .access
                .decide(principal, "call_tool", ("Tool", tool), context.clone()),
        ));
    }
    let step_id = uuid::Uuid::now_v7().to_string();
    let naming = match (trajectory, session_key) {
        (Some(id), _) => NamingOwned::Trajectory(id),
        (None, Some(key)) => NamingOwned::Session(key),
        (None, None) => NamingOwned::Automatic,
    };
    let placement = state
        .trajectories
        .place(&tenant, naming.borrow(), &request.messages);
    let mut tags = BTreeMap::new();
    if let NamingOwned::Session(key) = &naming {
        tags.insert("session".to_owned(), key.clone());
    }
    let start = StepStart {
        step_id: step_id.clone(),
        trajectory_id: placement.trajectory_id,
        parent_step_id: placement.parent_step_id,
        turn_index: placement.turn_index,
        tenant_id: tenant.clone(),
        agent_id: caller.identity.agent.clone(),
        started_at,
        api: api.name(),
        upstream: upstream.name.clone(),
        model_requested: request.model.clone(),
        tags,
    };
    let denied = verdicts.iter().find(|(_, v)| !v.allowed);
    let decided: Vec<String> = verdicts
        .iter()
        .flat_map(|(_, v)| v.policies.clone())
        .collect();
    let detail = json!({"model": model, "upstream": upstream.name, "entities": entities, "tools": request.tool_names});
    if let Some((what, verdict)) = denied {
        let why = if !verdict.errors.is_empty() {
            format!("{what} is not allowed: the policy could not be evaluated for this request")
        } else if verdict.policies.is_empty() {
            format!("{what} is not allowed: no policy permits it for this key")
        } else {
            format!(
                "{what} is not allowed: denied by policy {}",
                verdict.policies.join(", ")
            )
        };
        let event = decision_event(
            &tenant,
            &caller.identity.agent,
            &step_id,
            false,
            &verdict.policies,
            Some(why.clone()),
            detail,
        );
        if record {
            state.record_event(event);
            let end = StepEnd {
                status: "denied",
                error: Some(why.clone()),
                response: None,
                policy_version: None,
            };
            state.record_step(start.clone(), request.clone(), end);
        }
        return Ok(Err(Reject::new(403, "policy_denied", why)));
    }
    if record {
        let event = decision_event(
            &tenant,
            &caller.identity.agent,
            &step_id,
            true,
            &decided,
            None,
            detail,
        );
        state.record_event(event);
    }

    if let Value::Object(map) = &mut document
        && model != request.model
    {
        map.insert("model".into(), Value::String(model.clone()));
    }
    // Behaviour log-probs and token ids for the trainer, when the upstream is set to give
    // them and the client did not ask itself; stripped from the reply.
    let mut added = Added::default();
    if api == ApiKind::OpenAiChat
        && let Value::Object(map) = &mut document
    {
        let asked = |map: &serde_json::Map<String, Value>, key: &str| {
            map.get(key) == Some(&Value::Bool(true))
        };
        if upstream.record_logprobs && !asked(map, "logprobs") {
            map.insert("logprobs".into(), Value::Bool(true));
            added.logprobs = true;
        }
        if upstream.record_token_ids && !asked(map, "return_token_ids") {
            map.insert("return_token_ids".into(), Value::Bool(true));
            added.token_ids = true;
        }
    }
    let body = if changed || model != request.model || added.any() {
        match serde_json::to_vec(&document) {
            Ok(bytes) => Bytes::from(bytes),
            Err(_) => {
                return Ok(Err(Reject::new(
                    500,
                    "masking_failed",
                    "the masked request could not be encoded; it was not forwarded",
                )));
            }
        }
    } else {
        raw
    };
    let address = match resolve(&upstream).await {
        Ok(address) => address,
        Err(error) => {
            tracing::warn!(upstream = %upstream.name, error = %error, "Cannot resolve the upstream.");
            if record {
                let end = StepEnd {
                    status: "upstream_error",
                    error: Some(format!("upstream {} cannot be resolved", upstream.name)),
                    response: None,
                    policy_version: None,
                };
                state.record_step(start.clone(), request.clone(), end);
            }
            return Ok(Err(Reject::new(
                502,
                "upstream_unresolvable",
                format!("upstream {} cannot be resolved", upstream.name),
            )));
        }
    };
    let path = format!(
        "{}{}",
        upstream.prefix,
        session
            .req_header()
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
    );
    let restore: HashMap<String, VaultItem> = masked
        .vault
        .into_iter()
        .map(|v| (v.token.clone(), v))
        .collect();
    Ok(Ok(Prepared {
        caller,
        request,
        dispatch: Dispatch {
            upstream,
            address,
            api,
            path,
        },
        body,
        restore: Arc::new(restore),
        start,
        naming,
        record,
        added,
    }))
}

/// A model call: prepare, send upstream, record.
async fn call(
    state: &Arc<State>,
    upstreams: &Upstreams,
    session: &mut Session,
    api: ApiKind,
) -> Result<()> {
    let arrived = Instant::now();
    let started_at = now_micros();
    let prepared = match prepare(state, session, api, started_at).await? {
        Ok(prepared) => prepared,
        Err(reject) => return refuse(state, session, api.family(), api.name(), reject).await,
    };
    state.metrics.added.observe(arrived.elapsed());
    let mut pump = Pump::new(
        api,
        &prepared.start,
        prepared.caller.identity.tenant.clone(),
        prepared.restore.clone(),
        state.keys(),
        prepared.added,
        prepared.record,
    );
    let dispatched = Instant::now();
    let outcome = upstreams
        .exchange(session, &prepared.dispatch, prepared.body, &mut pump)
        .await;
    if let Some(at) = pump.header_at {
        state
            .metrics
            .upstream
            .observe(at.duration_since(dispatched));
    }
    // A reply that began and then failed (upstream cut, client gone, a placeholder that
    // would not restore) ends with the client's connection closed before the end of the
    // body, so the client sees the cut, as it would from the upstream itself, instead of a
    // well-formed partial reply.
    let mut cut = false;
    let failure = match outcome {
        Ok(()) => None,
        Err(Failure {
            from_upstream,
            header_sent,
            kind,
        }) => {
            cut = !from_upstream || header_sent;
            if from_upstream && header_sent {
                tracing::warn!(upstream = %prepared.dispatch.upstream.name, error_kind = ?kind, "The upstream cut its reply.");
            }
            if from_upstream && !header_sent {
                // The upstream failed before answering and nothing reached the client yet:
                // say what happened.
                let (status, message) = crate::service::upstream_failure(&kind);
                tracing::warn!(upstream = %prepared.dispatch.upstream.name, error_kind = ?kind, status, "Upstream call failed.");
                let _ = respond_error(
                    session,
                    api.family(),
                    status,
                    "upstream_failed",
                    message,
                    &[],
                )
                .await;
                pump.status = status;
            }
            Some((from_upstream, kind))
        }
    };
    let end = pump.finish(failure);
    let status = pump.status;
    state.metrics.request(api.name(), status);
    if let Some(response) = &end.response {
        let tokens = response.prompt_tokens.unwrap_or(0) + response.completion_tokens.unwrap_or(0);
        let tokens = u64::try_from(tokens).unwrap_or(0);
        let limits = &state.config.limits;
        let (key_tokens, tenant_tokens) = token_buckets(&prepared.caller);
        state
            .limiter
            .charge(&tenant_tokens, limits.tenant_tokens_per_minute, tokens);
        state
            .limiter
            .charge(&key_tokens, limits.key_tokens_per_minute, tokens);
    }
    let reply = end.response.as_ref().and_then(|r| r.message.clone());
    let placement = crate::trajectory::Placement {
        trajectory_id: prepared.start.trajectory_id.clone(),
        parent_step_id: prepared.start.parent_step_id.clone(),
        turn_index: prepared.start.turn_index,
    };
    if end.status == "ok" {
        state.trajectories.remember(
            &prepared.start.tenant_id,
            prepared.naming.borrow(),
            &placement,
            &prepared.start.step_id,
            &prepared.request.messages,
            reply.as_ref(),
        );
    }
    if prepared.record {
        state.record_step(prepared.start, prepared.request, end);
    }
    if cut {
        return Err(Error::explain(
            ErrorType::Custom(REPLY_CUT),
            "the reply was cut; the client's connection is closed",
        ));
    }
    Ok(())
}
