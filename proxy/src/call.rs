//! One model call, from its first byte to the recorded step: the stages of
//! [`crate::stages`] in order, run on a Pingora session. Every refusal is an error in the
//! API's own format, from [`crate::refusal`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use atdp_policies::{Consent, Destination, KeyRing, Policy, VaultItem};
use atdp_schema::AuditEvent;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use serde_json::Value;

use crate::config::{AuditMode, Trust, Upstream};
use crate::limits::{HEAVY_BODY_BYTES, InFlightSlot};
use crate::refusal::Refusal;
use crate::respond::{refuse, respond_error};
use crate::stages::admit::{self, Caller};
use crate::stages::decide::{self, CallFacts};
use crate::stages::mask::Outbound;
use crate::stages::place::{Named, place};
use crate::stages::record::{StepEnd, StepStart, decision_event, masked_request, now_micros};
use crate::stages::restore::Pump;
use crate::stages::{forward, mask, read, route};
use crate::state::State;
use crate::strict::{strict_audit, with_stored_request};
use crate::upstream::{Dispatch, Failure, Upstreams};
use crate::wire::{Added, ApiKind, RequestView};

/// The error a call returns for a reply that was cut after it began: Pingora then closes
/// the client's connection instead of ending the body (logged by the proxy itself).
pub const REPLY_CUT: &str = "reply cut";

/// A call that passed every stage up to forwarding.
struct Prepared {
    caller: Caller,
    /// Held until the call ends.
    _slot: InFlightSlot,
    request: RequestView,
    dispatch: Dispatch,
    body: Bytes,
    /// Placeholders to restore in the reply (empty when nothing was masked on the way out).
    restore: Arc<HashMap<String, VaultItem>>,
    start: StepStart,
    named: Named,
    record: bool,
    /// Fields the proxy asked the upstream for on its own account.
    added: Added,
    /// The Cedar policies that allowed the call.
    policies: Vec<String>,
}

/// Takes a stage's result: a refusal ends the preparation.
macro_rules! stage {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(refusal) => return Ok(Err(refusal)),
        }
    };
}

/// What the read stage gives: the request, parsed once, and what its headers say.
struct ReadRequest {
    /// The query string forwarded (only `beta=true`).
    query: Option<&'static str>,
    named: Named,
    consent: Option<Consent>,
    /// The body's size, for Cedar.
    bytes: usize,
    /// A large body, parsed and masked off the worker threads (`limits::HeavyWork`).
    heavy: bool,
    document: Value,
    request: RequestView,
}

/// Runs the stages up to forwarding, in order. A refusal after the decision is recorded (the
/// step as `denied`, with its audit event) when the call is recorded.
async fn prepare(
    state: &Arc<State>,
    session: &mut Session,
    api: ApiKind,
    started_at: i64,
) -> Result<std::result::Result<Prepared, Refusal>> {
    let (_, policy) = state.policy.current();
    let (caller, slot, record) = stage!(admit(state, &policy, session));
    let ReadRequest {
        query,
        named,
        consent,
        bytes,
        heavy,
        document,
        request,
    } = stage!(read_request(state, session, api).await?);
    let (upstream, model) = stage!(route::route(&state.config, &request.model));
    let mut forwarded = stage!(gates(
        state, &policy, session, api, &document, &request, &named, &upstream
    ));
    // Only the proxy marks a shadow copy, never a client.
    forwarded.retain(|(name, _)| name.as_str() != forward::COPY_HEADER);
    let keys = state.keys();
    let (mut document, mut outbound) =
        stage!(mask_for_upstream(state, &policy, &keys, &caller, &upstream, heavy, document).await);
    if state.config.mask && !outbound.by_context.is_empty() {
        let found = std::mem::take(&mut outbound.by_context);
        let (matching, trust) = (policy.clone(), upstream.trust);
        let known = state
            .heavy
            .run_if(heavy, move || {
                decide::context_matcher(&matching, trust, &found)
            })
            .await;
        let known = stage!(known.unwrap_or(Err(Refusal::Internal)));
        stage!(decide::check_names_against(
            &known, &request, &named, &forwarded
        ));
    }
    let decision = decide::decide(
        &policy.access,
        &caller,
        &request,
        CallFacts {
            model: &model,
            entities: &outbound.entities,
            trust: upstream.trust,
            request_bytes: bytes,
        },
    );
    let mut start = place(
        &state.trajectories,
        &caller,
        &named,
        api,
        &upstream,
        &request,
        started_at,
    );
    start.consent = consent;
    start.sent_masked = Arc::new(std::mem::take(&mut outbound.values));
    state.trajectories.note_step(
        &caller.identity.tenant,
        &start.trajectory_id,
        &start.step_id,
    );
    let policies = decision.policies();
    let decided = Decided {
        model: &model,
        upstream: &upstream,
        entities: &outbound.entities,
        policies: &policies,
        denial: decision.denial(),
        record,
        heavy,
    };
    let (start, request) =
        stage!(record_decision(state, &policy, &keys, decided, start, request).await);
    let added = forward::prepare(api, &mut document, &model, &upstream);
    let body = stage!(forward::body(&document));
    let dispatch = stage!(
        dispatch(
            state, session, api, upstream, query, forwarded, record, &start, &request
        )
        .await
    );
    Ok(Ok(Prepared {
        caller,
        _slot: slot,
        request,
        dispatch,
        body,
        restore: Arc::new(outbound.restore),
        start,
        named,
        record,
        added,
        policies,
    }))
}

/// Mask: what the upstream is sent, off the worker threads for a large body; the same pass
/// gives Cedar its entity types.
async fn mask_for_upstream(
    state: &State,
    policy: &Arc<Policy>,
    keys: &Arc<KeyRing>,
    caller: &Caller,
    upstream: &Upstream,
    heavy: bool,
    document: Value,
) -> std::result::Result<(Value, Outbound), Refusal> {
    let (policy, keys, tenant) = (policy.clone(), keys.clone(), caller.identity.tenant.clone());
    let (trust, enabled) = (upstream.trust, state.config.mask);
    let masked = state
        .heavy
        .run_if(heavy, move || {
            let mut document = document;
            mask::mask_outbound(&policy, &keys, &tenant, trust, enabled, &mut document)
                .map(|outbound| (document, outbound))
        })
        .await;
    let (document, outbound) = masked.unwrap_or(Err(Refusal::Internal))?;
    for entity in &outbound.found {
        state.metrics.masked(entity);
    }
    Ok((document, outbound))
}

/// What the decision event says of a decided call.
struct Decided<'a> {
    model: &'a str,
    upstream: &'a Upstream,
    /// Entity types found in what the upstream is sent.
    entities: &'a [String],
    /// The Cedar policies behind the verdict.
    policies: &'a [String],
    /// Why the call is denied, when it is.
    denial: Option<String>,
    record: bool,
    /// Whether the body is large (masked off the worker threads).
    heavy: bool,
}

/// Records the decision. A denial ends the call here: its event and the step as `denied`
/// are recorded (when the call is). An allow is recorded as an event, in strict audit mode
/// durable before anything leaves. Gives the step back.
async fn record_decision(
    state: &State,
    policy: &Arc<Policy>,
    keys: &Arc<KeyRing>,
    decided: Decided<'_>,
    start: StepStart,
    request: RequestView,
) -> std::result::Result<(StepStart, RequestView), Refusal> {
    if !decided.record {
        return match decided.denial {
            Some(why) => Err(Refusal::PolicyDenied { why }),
            None => Ok((start, request)),
        };
    }
    let offers: Vec<&str> = request.offers.iter().map(|o| o.entity.as_str()).collect();
    let detail = serde_json::json!({
        "model": decided.model,
        "upstream": decided.upstream.name,
        "entities": decided.entities,
        "tools": offers,
        "unscannable": request.unscannable,
        "fallback_models": request.extra_models,
    });
    let event = decision_event(
        &start.tenant_id,
        &start.agent_id,
        &start.step_id,
        decided.denial.is_none(),
        decided.policies,
        decided.denial.clone(),
        detail,
    );
    if let Some(why) = decided.denial {
        state.record_event(event).await;
        let end = StepEnd {
            status: "denied",
            error: Some(why.clone()),
            response: None,
            policy_version: None,
            restored_glued: Vec::new(),
        };
        state.record_step(start, request, end).await;
        return Err(Refusal::PolicyDenied { why });
    }
    let strict = state.config.audit_mode(decided.upstream) == AuditMode::Strict;
    record_allowed(
        state,
        policy,
        keys,
        strict,
        decided.heavy,
        event,
        start,
        request,
    )
    .await
}

/// Forward: where the body goes (the upstream's address, path and headers). An upstream that
/// cannot be resolved refuses the call, recorded as an upstream error.
#[allow(clippy::too_many_arguments)]
async fn dispatch(
    state: &State,
    session: &Session,
    api: ApiKind,
    upstream: Upstream,
    query: Option<&'static str>,
    forwarded: Vec<(HeaderName, HeaderValue)>,
    record: bool,
    start: &StepStart,
    request: &RequestView,
) -> std::result::Result<Dispatch, Refusal> {
    let address = match crate::upstream::resolve(&upstream).await {
        Ok(address) => address,
        Err(error) => {
            tracing::warn!(upstream = %upstream.name, error = %error, "Cannot resolve the upstream.");
            let refusal = Refusal::UpstreamUnresolvable {
                upstream: upstream.name.clone(),
            };
            if record {
                let end = StepEnd {
                    status: "upstream_error",
                    error: Some(refusal.message()),
                    response: None,
                    policy_version: None,
                    restored_glued: Vec::new(),
                };
                state.record_step(start.clone(), request.clone(), end).await;
            }
            return Err(refusal);
        }
    };
    let path = session.req_header().uri.path();
    let path = match query {
        Some(query) => format!("{}{path}?{query}", upstream.prefix),
        None => format!("{}{path}", upstream.prefix),
    };
    Ok(Dispatch {
        upstream,
        address,
        api,
        path,
        headers: forwarded,
    })
}

/// Admit: the API key, the rate and in-flight limits, and whether the call is recorded.
fn admit(
    state: &State,
    policy: &Policy,
    session: &Session,
) -> std::result::Result<(Caller, InFlightSlot, bool), Refusal> {
    let headers = &session.req_header().headers;
    let caller = admit::authenticate(&policy.access, headers)?;
    let limits = &state.config.limits;
    admit::take_rate(&state.limiter, limits, &caller)?;
    let slot = admit::enter(&state.in_flight_per_key, limits, &caller)?;
    let record = admit::recording(
        state.config.record,
        state.backlogged(),
        state.config.on_backpressure,
        &state.metrics,
    )?;
    Ok((caller, slot, record))
}

/// Read: the framing and headers, then the body in bounded size and time, parsed once.
async fn read_request(
    state: &State,
    session: &mut Session,
    api: ApiKind,
) -> Result<std::result::Result<ReadRequest, Refusal>> {
    let headers = &session.req_header().headers;
    let query = stage!(read::check_framing(headers, &session.req_header().uri));
    let named = stage!(Named::from_headers(headers));
    let consent = stage!(read::consent(headers));
    let raw = stage!(
        read::read_body(
            session,
            state.config.max_body_bytes,
            state.config.client_body_timeout
        )
        .await?
    );
    let heavy = raw.len() >= HEAVY_BODY_BYTES;
    let bytes = raw.len();
    let parsed = state
        .heavy
        .run_if(heavy, move || read::canonical(api, &raw))
        .await;
    let (document, request) = stage!(parsed.unwrap_or(Err(Refusal::Internal)));
    Ok(Ok(ReadRequest {
        query,
        named,
        consent,
        bytes,
        heavy,
        document,
        request,
    }))
}

/// Decide, the gates: what may be forwarded to this upstream at all (fields, betas,
/// headers, and names given in headers), before anything is masked. Returns the headers to
/// forward.
#[allow(clippy::too_many_arguments)]
fn gates(
    state: &State,
    policy: &Policy,
    session: &Session,
    api: ApiKind,
    document: &Value,
    request: &RequestView,
    named: &Named,
    upstream: &Upstream,
) -> std::result::Result<Vec<(HeaderName, HeaderValue)>, Refusal> {
    let headers = &session.req_header().headers;
    decide::check_request(api, document, request, upstream.trust, &policy.forwarding)?;
    decide::check_betas(headers, upstream.trust, &policy.forwarding)?;
    let forwarded = forward::forwarded_headers(headers, &policy.forwarding.headers)?;
    if state.config.mask {
        let masked = [
            policy.masking.policy(Destination::Storage),
            policy.masking.policy(mask::destination(upstream.trust)),
        ];
        decide::check_names(&policy.scanner, masked, request, named, &forwarded)?;
    }
    Ok(forwarded)
}

/// Records the allow decision. In strict audit mode the event carries the request as stored
/// and is durable before anything leaves: a request that cannot be masked for it, or an
/// audit trail that cannot be written, refuses the call. Gives the step back.
#[allow(clippy::too_many_arguments)]
async fn record_allowed(
    state: &State,
    policy: &Arc<Policy>,
    keys: &Arc<KeyRing>,
    strict: bool,
    heavy: bool,
    mut event: AuditEvent,
    start: StepStart,
    request: RequestView,
) -> std::result::Result<(StepStart, RequestView), Refusal> {
    if !strict {
        state.record_event(event).await;
        return Ok((start, request));
    }
    let (policy, keys) = (policy.clone(), keys.clone());
    let masked = state
        .heavy
        .run_if(heavy, move || {
            let masked = masked_request(&start, &request, &policy, &keys);
            (start, request, masked)
        })
        .await;
    let Some((start, request, masked)) = masked else {
        return Err(Refusal::Internal);
    };
    let (stored, vault) = masked.map_err(|error| {
        tracing::error!(tenant = %start.tenant_id, error = %error, "Masking the request for the audit trail failed; the request is refused.");
        Refusal::MaskingFailed
    })?;
    with_stored_request(&mut event, stored);
    strict_audit(state, event, vault).await?;
    Ok((start, request))
}

/// A model call: prepare, send upstream, record.
pub async fn call(
    state: &Arc<State>,
    upstreams: &Arc<Upstreams>,
    session: &mut Session,
    api: ApiKind,
) -> Result<()> {
    let arrived = Instant::now();
    let started_at = now_micros();
    // Idle keep-alive connections are closed after this long, whatever the client asked.
    session.set_keepalive(Some(state.config.client_idle_timeout.as_secs()));
    let prepared = match prepare(state, session, api, started_at).await? {
        Ok(prepared) => prepared,
        Err(refusal) => {
            return refuse(&state.metrics, session, api.family(), api.name(), &refusal).await;
        }
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
    // `atdp-serve`, the upstream that names shadows, answers OpenAI chat alone.
    if prepared.dispatch.upstream.trust == Trust::Internal && api == ApiKind::OpenAiChat {
        pump.allow_shadow();
    }
    let dispatched = Instant::now();
    let outcome = upstreams
        .exchange(
            session,
            &prepared.dispatch,
            prepared.body.clone(),
            &mut pump,
        )
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
                let (status, message) = crate::upstream::upstream_failure(&kind);
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
    state.metrics.request(api.name(), pump.status);
    if let Some(response) = &end.response {
        let tokens = response.prompt_tokens.unwrap_or(0) + response.completion_tokens.unwrap_or(0);
        let tokens = u64::try_from(tokens).unwrap_or(0);
        let limits = &state.config.limits;
        let (key_tokens, tenant_tokens) = prepared.caller.token_buckets();
        state
            .limiter
            .charge(&tenant_tokens, limits.tenant_tokens_per_minute, tokens);
        state
            .limiter
            .charge(&key_tokens, limits.key_tokens_per_minute, tokens);
    }
    if end.status == "ok" {
        let reply = end.response.as_ref().and_then(|r| r.message.as_ref());
        let placement = crate::grouping::Placement {
            trajectory_id: prepared.start.trajectory_id.clone(),
            parent_step_id: prepared.start.parent_step_id.clone(),
            turn_index: prepared.start.turn_index,
        };
        state.trajectories.remember(
            &prepared.start.tenant_id,
            prepared.named.borrow(),
            &placement,
            &prepared.start.step_id,
            &prepared.request.messages,
            reply,
        );
    }
    // A copy for the shadow the upstream named, when the served call ended well and is
    // recorded (the copy's reply is only ever recorded).
    let shadow = pump
        .take_shadow()
        .filter(|_| prepared.record && end.status == "ok")
        .map(|model| crate::shadow::Copy {
            strict: state.config.audit_mode(&prepared.dispatch.upstream) == AuditMode::Strict,
            model,
            dispatch: prepared.dispatch,
            body: prepared.body,
            served: prepared.start.clone(),
            request: prepared.request.clone(),
            restore: prepared.restore,
            added: prepared.added,
            policies: prepared.policies,
        });
    if prepared.record {
        state
            .record_step(prepared.start, prepared.request, end)
            .await;
    }
    if let Some(copy) = shadow {
        crate::shadow::spawn(state, upstreams, copy);
    }
    if cut {
        return Err(Error::explain(
            ErrorType::Custom(REPLY_CUT),
            "the reply was cut; the client's connection is closed",
        ));
    }
    Ok(())
}
