//! Shadow copies: a candidate version answers beside the served one, and its replies are
//! recorded and never returned.
//!
//! An upstream of internal trust (`atdp-serve`) names, on the reply to an OpenAI chat call,
//! the version that is to answer a copy of the call (`x-atdp-shadow: <policy>@v<N>`, for the
//! share of the policy's requests its registry puts in shadow). Once the served call has ended
//! well and the client has its reply, the proxy sends the same request, as it went to that
//! upstream, with `model` set to that version and the copy header `x-atdp-shadow-copy`, on a
//! task of its own. The copy's reply goes through the same restore and storage masking as any
//! reply and is recorded as a step of a trajectory of its own: tagged `shadow_of` (the served
//! step's id), never eligible for training (`consent_source` `shadow` when the policy and
//! consent would have let it be), `policy_version` the shadow's. Its audit event
//! (`request_allowed`, with `shadow_of` in its detail) is written before it leaves, durable in
//! strict audit mode. The header is taken off every reply, so no client sees it; from an
//! upstream that is not internal it is ignored.
//!
//! A copy spends the tenant's token budget like a call (its tokens are charged once it has
//! answered; the key is not charged, it did not ask for the copy), and none starts while that
//! budget is spent. At most [`SHADOW_MAX_IN_FLIGHT`](crate::limits::SHADOW_MAX_IN_FLIGHT)
//! copies run at once, [`SHADOW_MAX_PER_TENANT`](crate::limits::SHADOW_MAX_PER_TENANT) of one
//! tenant's; a copy beyond that is skipped, as is one under back-pressure or while the proxy
//! shuts down. Each ends counted in `atdp_shadow_calls_total` (`recorded`, `failed`,
//! `skipped`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use atdp_policies::VaultItem;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::limits::ShadowSlot;
use crate::stages::admit::tenant_token_bucket;
use crate::stages::forward::COPY_HEADER;
use crate::stages::record::{SHADOW_TAG, StepStart, decision_event, now_micros};
use crate::stages::restore::Pump;
use crate::state::State;
use crate::upstream::{Dispatch, Upstreams};
use crate::wire::{Added, RequestView};

/// A served call whose copy is to be answered in shadow.
pub struct Copy {
    /// Whether the upstream's audit mode is strict: the copy's audit event, with the request
    /// as stored, is durable before the copy leaves, else it does not leave.
    pub strict: bool,
    /// The version named by the upstream.
    pub model: String,
    /// Where the served call went.
    pub dispatch: Dispatch,
    /// The body the upstream was sent.
    pub body: Bytes,
    /// The served call's start.
    pub served: StepStart,
    /// The request, as read.
    pub request: RequestView,
    /// Placeholders sent upstream, restored in the reply.
    pub restore: Arc<HashMap<String, VaultItem>>,
    /// What the proxy asked the upstream for on its own account.
    pub added: Added,
    /// The Cedar policies that allowed the served call.
    pub policies: Vec<String>,
}

/// Starts the copy on a task of its own, or skips it (the tenant's token budget spent, no
/// place free, back-pressure, shutting down).
pub fn spawn(state: &Arc<State>, upstreams: &Arc<Upstreams>, copy: Copy) {
    let tenant = &copy.served.tenant_id;
    let budget = state.config.limits.tenant_tokens_per_minute;
    if state.draining.load(Ordering::SeqCst)
        || state.backlogged()
        || state
            .limiter
            .check(&tenant_token_bucket(tenant), budget)
            .is_err()
    {
        state.metrics.shadow("skipped");
        return;
    }
    let Some(slot) = state.shadows.enter(tenant) else {
        state.metrics.shadow("skipped");
        return;
    };
    let (state, upstreams) = (state.clone(), upstreams.clone());
    tokio::spawn(async move {
        let outcome = run(&state, &upstreams, copy, slot).await;
        state.metrics.shadow(outcome);
    });
}

/// The body of the copy: the served body with `model` set to the shadow's version.
fn copy_body(body: &[u8], model: &str) -> Option<Bytes> {
    let mut document: Value = serde_json::from_slice(body).ok()?;
    document
        .as_object_mut()?
        .insert("model".into(), json!(model));
    serde_json::to_vec(&document).ok().map(Bytes::from)
}

/// Sends the copy and records its reply; returns how it ended.
/// The place is held until the step is queued for recording.
async fn run(
    state: &Arc<State>,
    upstreams: &Upstreams,
    copy: Copy,
    slot: ShadowSlot,
) -> &'static str {
    let Some(body) = copy_body(&copy.body, &copy.model) else {
        return "failed";
    };
    let served = &copy.served;
    // A copy is no turn of the conversation the client named (`x-atdp-session-id`).
    let mut tags = served.tags.clone();
    tags.remove("session");
    tags.insert(SHADOW_TAG.to_owned(), served.step_id.clone());
    let start = StepStart {
        step_id: uuid::Uuid::now_v7().to_string(),
        trajectory_id: uuid::Uuid::now_v7().to_string(),
        parent_step_id: None,
        turn_index: 0,
        started_at: now_micros(),
        model_requested: copy.model.clone(),
        tags,
        ..served.clone()
    };
    let detail = json!({
        "model": copy.model,
        "upstream": copy.dispatch.upstream.name,
        "shadow_of": served.step_id,
    });
    let event = decision_event(
        &start.tenant_id,
        &start.agent_id,
        &start.step_id,
        true,
        &copy.policies,
        None,
        detail,
    );
    if copy.strict {
        if !strict_audit(state, event, &start, &copy.request).await {
            return "failed";
        }
    } else {
        state.record_event(event).await;
    }
    let mut dispatch = copy.dispatch;
    dispatch
        .headers
        .retain(|(name, _)| name.as_str() != COPY_HEADER);
    dispatch.headers.push((
        http::HeaderName::from_static(COPY_HEADER),
        http::HeaderValue::from_static("1"),
    ));
    let mut pump = Pump::new(
        dispatch.api,
        &start,
        start.tenant_id.clone(),
        copy.restore.clone(),
        state.keys(),
        copy.added,
        true,
    );
    let outcome = upstreams.exchange_unseen(&dispatch, body, &mut pump).await;
    let failure = outcome.err().map(|f| (f.from_upstream, f.kind));
    let end = pump.finish(failure);
    if let Some(response) = &end.response {
        let tokens = response.prompt_tokens.unwrap_or(0) + response.completion_tokens.unwrap_or(0);
        state.limiter.charge(
            &tenant_token_bucket(&start.tenant_id),
            state.config.limits.tenant_tokens_per_minute,
            u64::try_from(tokens).unwrap_or(0),
        );
    }
    let ended = if end.status == "ok" {
        "recorded"
    } else {
        "failed"
    };
    state.record_step(start, copy.request, end).await;
    drop(slot);
    ended
}

/// The copy's audit event in strict mode: with the request as stored, and durable with its
/// vault entries; false when it cannot be (the copy then does not leave).
async fn strict_audit(
    state: &Arc<State>,
    mut event: atdp_schema::AuditEvent,
    start: &StepStart,
    request: &RequestView,
) -> bool {
    let (_, policy) = state.policy.current();
    let (keys, start, request) = (state.keys(), start.clone(), request.clone());
    let masked = tokio::task::spawn_blocking(move || {
        crate::stages::record::masked_request(&start, &request, &policy, &keys)
    })
    .await;
    let Ok(Ok((stored, vault))) = masked else {
        tracing::error!(
            "Masking a shadow copy's request for the strict audit trail failed; the copy is not sent."
        );
        return false;
    };
    crate::strict::with_stored_request(&mut event, stored);
    crate::strict::strict_audit(state, event, vault)
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_differs_from_the_served_body_only_in_its_model() {
        let served =
            br#"{"model":"support","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let copy = copy_body(served, "support@v8").unwrap();
        let mut want: Value = serde_json::from_slice(served).unwrap();
        want["model"] = json!("support@v8");
        assert_eq!(serde_json::from_slice::<Value>(&copy).unwrap(), want);
        assert_eq!(copy_body(b"[1]", "support@v8"), None);
    }
}
