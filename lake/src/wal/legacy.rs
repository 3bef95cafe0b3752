//! Records as segments of the first format (`ATDPWAL1`) hold them: protocol version 1, whose
//! steps have no governance columns. A log that an earlier writer left (a crash, an upgrade
//! with segments not yet committed) is read through these types; its steps come out unmarked
//! (`training_eligible` null), as their rows would read from a version 1 table.
//!
//! postcard is not self-describing: these types keep the fields and variants of that format in
//! their order, and never change.

use std::collections::BTreeMap;

use serde::Deserialize;

use atdp_schema::{AuditEvent, Message, PiiSpan, Record, Reward, Step, Tool, VaultEntry};

/// A `steps` row of protocol version 1.
#[derive(Deserialize)]
struct StepV1 {
    step_id: String,
    trajectory_id: String,
    parent_step_id: Option<String>,
    turn_index: i32,
    tenant_id: String,
    agent_id: String,
    started_at: i64,
    ended_at: Option<i64>,
    api: String,
    upstream: String,
    model_requested: String,
    model_served: Option<String>,
    policy_version: Option<String>,
    request_messages: Vec<Message>,
    tools: Vec<Tool>,
    params: Option<String>,
    response_message: Option<Message>,
    finish_reason: Option<String>,
    status: String,
    error: Option<String>,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    completion_token_ids: Option<Vec<i32>>,
    completion_logprobs: Option<Vec<f32>>,
    pii: Vec<PiiSpan>,
    tags: BTreeMap<String, String>,
    extra_json: Option<String>,
}

/// A record of the first segment format.
#[derive(Deserialize)]
enum RecordV1 {
    Step(Box<StepV1>),
    Reward(Reward),
    Audit(AuditEvent),
    Vault(VaultEntry),
}

impl From<StepV1> for Step {
    fn from(s: StepV1) -> Step {
        Step {
            step_id: s.step_id,
            trajectory_id: s.trajectory_id,
            parent_step_id: s.parent_step_id,
            turn_index: s.turn_index,
            tenant_id: s.tenant_id,
            agent_id: s.agent_id,
            started_at: s.started_at,
            ended_at: s.ended_at,
            api: s.api,
            upstream: s.upstream,
            model_requested: s.model_requested,
            model_served: s.model_served,
            policy_version: s.policy_version,
            request_messages: s.request_messages,
            tools: s.tools,
            params: s.params,
            response_message: s.response_message,
            finish_reason: s.finish_reason,
            status: s.status,
            error: s.error,
            prompt_tokens: s.prompt_tokens,
            completion_tokens: s.completion_tokens,
            completion_token_ids: s.completion_token_ids,
            completion_logprobs: s.completion_logprobs,
            pii: s.pii,
            tags: s.tags,
            extra_json: s.extra_json,
            training_eligible: None,
            legal_basis: None,
            retention_until: None,
            consent_source: None,
        }
    }
}

/// Decodes one payload of a first-format segment.
pub(super) fn decode(payload: &[u8]) -> Option<Record> {
    Some(match postcard::from_bytes::<RecordV1>(payload).ok()? {
        RecordV1::Step(step) => Record::Step(Box::new(Step::from(*step))),
        RecordV1::Reward(reward) => Record::Reward(reward),
        RecordV1::Audit(event) => Record::Audit(event),
        RecordV1::Vault(entry) => Record::Vault(entry),
    })
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    /// The first format's encoding, as its writer made it (the same fields, in order).
    #[derive(Serialize)]
    enum WrittenV1 {
        Step(Box<WrittenStepV1>),
    }

    #[derive(Serialize, Default)]
    struct WrittenStepV1 {
        step_id: String,
        trajectory_id: String,
        parent_step_id: Option<String>,
        turn_index: i32,
        tenant_id: String,
        agent_id: String,
        started_at: i64,
        ended_at: Option<i64>,
        api: String,
        upstream: String,
        model_requested: String,
        model_served: Option<String>,
        policy_version: Option<String>,
        request_messages: Vec<Message>,
        tools: Vec<Tool>,
        params: Option<String>,
        response_message: Option<Message>,
        finish_reason: Option<String>,
        status: String,
        error: Option<String>,
        prompt_tokens: Option<i64>,
        completion_tokens: Option<i64>,
        completion_token_ids: Option<Vec<i32>>,
        completion_logprobs: Option<Vec<f32>>,
        pii: Vec<PiiSpan>,
        tags: BTreeMap<String, String>,
        extra_json: Option<String>,
    }

    #[test]
    fn first_format_steps_decode_unmarked() {
        let written = WrittenV1::Step(Box::new(WrittenStepV1 {
            step_id: "s1".into(),
            tenant_id: "acme".into(),
            started_at: 42,
            extra_json: Some("{}".into()),
            ..WrittenStepV1::default()
        }));
        let payload = postcard::to_allocvec(&written).unwrap();
        let Some(Record::Step(step)) = decode(&payload) else {
            panic!("the first format's step does not decode");
        };
        assert_eq!(
            (
                step.step_id.as_str(),
                step.started_at,
                step.extra_json.as_deref()
            ),
            ("s1", 42, Some("{}"))
        );
        assert_eq!(step.training_eligible, None);
        // The current format does not read it: segments say which format they hold.
        assert!(postcard::from_bytes::<Record>(&payload).is_err());
    }
}
