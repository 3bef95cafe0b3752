//! `POST /v1/atdp/rewards`: named float rewards on a step or a trajectory, one or a batch.
//!
//! A reward is stored under the caller's own tenant, always: a key can never write into
//! another tenant's partition, and readers join rewards to steps on (tenant, trajectory,
//! step). A trajectory id another tenant also uses is answered exactly like one that exists
//! nowhere (both accepted, into the caller's own partition), so the answer says nothing about
//! other tenants. A step reward whose `step_id` this proxy knows as a step of another of the
//! caller's trajectories is refused (400). A reward may arrive before its step reaches the
//! lake (the step may still be in some writer's log, or another proxy's): it is accepted and
//! stored as it came, never dropped. The answer is sent once the rewards are on local disk
//! (fsynced), so an acknowledged reward survives a crash.

use std::collections::BTreeMap;
use std::sync::Arc;

use atdp_detect::Scanner;

use atdp_policies::{Action, Destination, MaskPolicy, Policy};
use atdp_schema::Reward;
use bytes::Bytes;
use pingora::Result;
use pingora::proxy::Session;
use serde::Deserialize;
use serde_json::json;

use crate::limits::HEAVY_BODY_BYTES;
use crate::refusal::Refusal;
use crate::respond::{refuse, respond};
use crate::stages::admit::{self, authenticate};
use crate::stages::read::read_body;
use crate::stages::record::{decision_event, now_micros};
use crate::state::State;
use crate::wire::{ApiFamily, parse_json_body};

/// Most rewards in one request.
const MAX_BATCH: usize = 10_000;

/// One reward as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RewardIn {
    /// The trajectory (`x-atdp-trajectory-id` of the responses).
    trajectory_id: String,
    /// The step, for a step reward; absent for a trajectory reward.
    step_id: Option<String>,
    /// Reward name (`resolved`, `user_rating`, …).
    name: String,
    /// Its value.
    value: f64,
    /// Whether this ends the trajectory.
    #[serde(default)]
    terminal: bool,
    /// Client-chosen id, making a retried request idempotent for readers that deduplicate.
    reward_id: Option<String>,
    /// Free-form labels.
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

/// A batch as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    /// The rewards.
    rewards: Vec<RewardIn>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Body {
    Batch(Batch),
    One(RewardIn),
}

/// The most tags a reward carries, and the longest value.
const MAX_TAGS: usize = 32;
const MAX_TAG_BYTES: usize = 256;

fn bad(message: String) -> Refusal {
    Refusal::InvalidReward { message }
}

/// Takes a result: a refusal ends the handling.
macro_rules! check {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(refusal) => return Ok(Err(refusal)),
        }
    };
}

fn check(index: usize, reward: &RewardIn) -> std::result::Result<(), Refusal> {
    let id_ok =
        |id: &str| !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_graphic());
    if !id_ok(&reward.trajectory_id) {
        return Err(bad(format!(
            "rewards[{index}].trajectory_id must be 1 to 200 visible ASCII characters"
        )));
    }
    if reward.step_id.as_deref().is_some_and(|id| !id_ok(id)) {
        return Err(bad(format!(
            "rewards[{index}].step_id must be 1 to 200 visible ASCII characters"
        )));
    }
    // Names are read by people and programs (`atdp-reward`, dashboards): no look-alikes,
    // controls or spaces, the characters reward functions' names take.
    let name_ok = |name: &str| {
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if !name_ok(&reward.name) {
        return Err(bad(format!(
            "rewards[{index}].name must be 1 to 64 letters, digits, `_`, `-` or `.`"
        )));
    }
    if reward.reward_id.as_deref().is_some_and(|id| !id_ok(id)) {
        return Err(bad(format!(
            "rewards[{index}].reward_id must be 1 to 200 visible ASCII characters"
        )));
    }
    if reward.tags.len() > MAX_TAGS
        || reward
            .tags
            .iter()
            .any(|(k, v)| k.is_empty() || k.len() > 64 || v.len() > MAX_TAG_BYTES)
    {
        return Err(bad(format!(
            "rewards[{index}].tags holds at most {MAX_TAGS} labels: keys of 1 to 64 bytes, values of at most {MAX_TAG_BYTES}"
        )));
    }
    if !reward.value.is_finite() {
        return Err(bad(format!(
            "rewards[{index}].value must be a finite number"
        )));
    }
    Ok(())
}

/// Refuses a reward whose ids, name or tags hold a value the detectors find that the policy
/// masks for storage: they are stored and audited as given, so they may not carry personal data. The refusal names the field and
/// the entity type, never the value.
fn check_stored_as_given(
    scanner: &Scanner,
    storage: &MaskPolicy,
    index: usize,
    reward: &RewardIn,
) -> std::result::Result<(), Refusal> {
    let mut fields: Vec<(String, &str)> = vec![
        ("trajectory_id".into(), &reward.trajectory_id),
        ("name".into(), &reward.name),
    ];
    fields.extend(reward.step_id.as_deref().map(|id| ("step_id".into(), id)));
    fields.extend(
        reward
            .reward_id
            .as_deref()
            .map(|id| ("reward_id".into(), id)),
    );
    for (key, value) in &reward.tags {
        fields.push(("tags".into(), key));
        fields.push((format!("tags.{key}"), value));
    }
    for (field, text) in fields {
        let masked = |entity: &str| storage.action(entity) != Action::Allow;
        if let Some(span) = crate::stages::decide::scan_as_read(scanner, text, &masked).first() {
            return Err(bad(format!(
                "rewards[{index}].{field} holds a value the detectors find ({}); reward ids, \
                 names and tags are stored as given, so they may not carry personal data",
                span.entity
            )));
        }
    }
    Ok(())
}

/// Handles the endpoint.
pub async fn handle(state: &Arc<State>, session: &mut Session) -> Result<()> {
    let family = ApiFamily::OpenAi;
    match accept(state, session).await? {
        Ok(body) => {
            state.metrics.request("rewards", 200);
            respond(session, 200, &[], "application/json", body).await
        }
        Err(refusal) => refuse(&state.metrics, session, family, "rewards", &refusal).await,
    }
}

/// The rewards of a request body, each checked: its ids, name, value and tags, and that none
/// carries a value the policy masks for storage.
fn read_rewards(raw: &[u8], policy: &Policy) -> std::result::Result<Vec<RewardIn>, Refusal> {
    let document = parse_json_body(raw).map_err(|e| bad(e.to_string()))?;
    let body: Body = serde_json::from_value(document).map_err(|e| bad(format!(
        "the body must be a reward {{\"trajectory_id\", \"name\", \"value\", …}} or {{\"rewards\": [...]}} ({})",
        atdp_policies::json_error_kind(&e),
    )))?;
    let rewards = match body {
        Body::Batch(batch) => batch.rewards,
        Body::One(reward) => vec![reward],
    };
    if rewards.is_empty() || rewards.len() > MAX_BATCH {
        return Err(bad(format!("send 1 to {MAX_BATCH} rewards per request")));
    }
    for (index, reward) in rewards.iter().enumerate() {
        check(index, reward)?;
        check_stored_as_given(
            &policy.scanner,
            policy.masking.policy(Destination::Storage),
            index,
            reward,
        )?;
    }
    Ok(rewards)
}

async fn accept(
    state: &Arc<State>,
    session: &mut Session,
) -> Result<std::result::Result<Bytes, Refusal>> {
    let (_, policy) = state.policy.current();
    let caller = check!(authenticate(&policy.access, &session.req_header().headers));
    // Rewards count against the key's rate and calls in flight like model calls.
    let limits = &state.config.limits;
    check!(admit::take_rate(&state.limiter, limits, &caller));
    let _slot = check!(admit::enter(&state.in_flight_per_key, limits, &caller));
    let raw = check!(
        read_body(
            session,
            state.config.max_body_bytes,
            state.config.client_body_timeout
        )
        .await?
    );
    // A large body is read and checked (the detectors run over every id, name and tag) on
    // the blocking pool, as a model call's is, so that it holds up no other tenant's calls.
    let heavy = raw.len() >= HEAVY_BODY_BYTES;
    let checking = Arc::clone(&policy);
    let rewards = state
        .heavy
        .run_if(heavy, move || read_rewards(&raw, &checking))
        .await;
    let rewards = check!(rewards.unwrap_or(Err(Refusal::Internal)));
    let tenant = caller.identity.tenant.clone();
    for (index, reward) in rewards.iter().enumerate() {
        let Some(step_id) = &reward.step_id else {
            continue;
        };
        if state
            .trajectories
            .is_step_of(&tenant, step_id, &reward.trajectory_id)
            == Some(false)
        {
            return Ok(Err(bad(format!(
                "rewards[{index}].step_id {step_id} is not a step of trajectory {}",
                reward.trajectory_id
            ))));
        }
    }
    // One decision per distinct trajectory, over one copy of the entities that holds them all.
    let mut ids: Vec<&str> = rewards.iter().map(|r| r.trajectory_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let verdicts = policy.access.decide_on_trajectories(
        ("ApiKey", &caller.key_hash),
        "write_reward",
        &ids,
        &tenant,
        json!({}),
    );
    let mut decided: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, verdict) in ids.into_iter().zip(verdicts) {
        if !verdict.allowed {
            let why = if verdict.policies.is_empty() {
                "no policy permits this key to write rewards".to_owned()
            } else {
                format!("denied by policy {}", verdict.policies.join(", "))
            };
            return Ok(Err(Refusal::PolicyDenied { why }));
        }
        decided.insert(id, verdict.policies);
    }
    let policies_of: BTreeMap<String, Vec<String>> = decided
        .into_iter()
        .map(|(id, p)| (id.to_owned(), p))
        .collect();
    // Refuse the whole batch up front rather than write part of it.
    if state.writer.backlogged() {
        return Ok(Err(Refusal::RecordingUnavailable { what: "rewards" }));
    }
    // Steps still queued for recording are appended before the rewards: the log is
    // sequential, so making the rewards durable makes those steps durable too, and a durable
    // reward never points at a step that a crash could still lose.
    state.recorder.drain().await;
    let created_at = now_micros();
    let mut last = None;
    let mut out = Vec::with_capacity(rewards.len());
    for reward in rewards {
        let row = Reward {
            reward_id: reward
                .reward_id
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            trajectory_id: reward.trajectory_id,
            step_id: reward.step_id,
            tenant_id: tenant.clone(),
            name: reward.name,
            value: reward.value,
            source: "api".to_owned(),
            reward_fn_version: None,
            terminal: reward.terminal,
            created_at,
            tags: reward.tags,
        };
        out.push(json!({"reward_id": row.reward_id, "trajectory_id": row.trajectory_id}));
        let event = decision_event(
            &tenant,
            &caller.identity.agent,
            &row.trajectory_id,
            true,
            policies_of
                .get(&row.trajectory_id)
                .map_or(&[][..], Vec::as_slice),
            None,
            json!({"reward": row.name, "reward_id": row.reward_id}),
        );
        match state.writer.append(row) {
            Ok(appended) => last = Some(appended),
            Err(error) => {
                tracing::error!(error = %error, "Could not record a reward.");
                return Ok(Err(Refusal::RecordingUnavailable { what: "rewards" }));
            }
        }
        let event = atdp_schema::AuditEvent {
            kind: "reward_written".into(),
            ..event
        };
        if let Err(error) = state.writer.append_audit(event) {
            tracing::error!(error = %error, "Could not record an audit event.");
        }
    }
    if let Some(appended) = last
        && let Err(error) = state.writer.durable(appended).await
    {
        tracing::error!(error = %error, "Rewards did not reach the disk.");
        return Ok(Err(Refusal::RecordingUnavailable { what: "rewards" }));
    }
    let count = out.len();
    Ok(Ok(Bytes::from(
        json!({"recorded": count, "rewards": out}).to_string(),
    )))
}
