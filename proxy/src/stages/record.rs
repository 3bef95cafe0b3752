//! Record: turning a call into ATDP records. The step is masked for storage (every text
//! field, through the same JSON masker as the outbound body) and handed with its vault
//! entries to the lake writer; the decision becomes an audit event. A masked reply's token
//! ids (and the log-probs aligned with them) are not stored, since they decode straight back
//! to the unmasked text: the step's tag `token_ids` says `dropped`, and the trainer
//! re-tokenizes the masked reply. Any masking failure stores nothing of the step.
//!
//! Every stored step carries its training marks (`training_eligible`, `legal_basis`,
//! `retention_until`, `consent_source`), decided by the policy's `training.toml` on the step as
//! stored (its tenant, agent, upstream and the entity types found in it) and narrowed by the
//! caller's `x-atdp-consent` ([`mark_for_training`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use atdp_detect::Scanner;

use atdp_lake::LakeWriter;
use atdp_policies::{
    Action, Consent, FoundValues, JsonMasker, KeyRing, KnownValues, MaskPolicy, Policy, StepFacts,
    Training, VaultItem,
};
use atdp_schema::{AuditEvent, PiiSpan, Step, VaultEntry};
use serde_json::{Map, Value};

use crate::config::Trust;
use crate::metrics::Metrics;
use crate::wire::{RequestView, ResponseView};

/// The tag of a reply recorded in shadow (`crate::shadow`): the id of the served step it copies.
pub const SHADOW_TAG: &str = "shadow_of";
/// The `consent_source` of a reply recorded in shadow that the policy and consent would have
/// let be trained on: it is never trained on, and reward functions read it.
pub const SHADOW_SOURCE: &str = "shadow";

/// The tag that says a step's token ids were not stored, and its value.
pub const TOKEN_IDS_TAG: (&str, &str) = ("token_ids", "dropped");

/// The tag that says none of a step's text was stored, because it could not be masked.
pub const TEXT_TAG: (&str, &str) = ("text", "dropped");

pub use atdp_schema::now_micros;

/// What is known about a call when it starts.
#[derive(Debug, Clone)]
pub struct StepStart {
    /// Step id.
    pub step_id: String,
    /// Trajectory id.
    pub trajectory_id: String,
    /// Parent step.
    pub parent_step_id: Option<String>,
    /// Turn index.
    pub turn_index: i32,
    /// Tenant.
    pub tenant_id: String,
    /// Agent.
    pub agent_id: String,
    /// Arrival time (µs).
    pub started_at: i64,
    /// `openai.chat`, …
    pub api: &'static str,
    /// Upstream name.
    pub upstream: String,
    /// The upstream's trust level.
    pub upstream_trust: Trust,
    /// The end user's consent to training, as the caller stated it (`x-atdp-consent`).
    pub consent: Option<Consent>,
    /// The model the client asked for.
    pub model_requested: String,
    /// Tags (`session`, …).
    pub tags: BTreeMap<String, String>,
    /// The originals of the values masked in what was sent upstream, with their types; only
    /// in memory, for masking them by their exact text in the stored step ([`mask_step`]).
    pub sent_masked: Arc<FoundValues>,
}

/// How a call ended.
#[derive(Debug, Clone)]
pub struct StepEnd {
    /// `ok`, `upstream_error`, `interrupted` or `denied`.
    pub status: &'static str,
    /// Why, for any status but `ok` (never containing request or response text).
    pub error: Option<String>,
    /// The reply as the client received it.
    pub response: Option<ResponseView>,
    /// The version of the adapter that served, from the upstream's `x-atdp-policy-version`.
    pub policy_version: Option<String>,
    /// The originals that the reply had restored glued to other text (where the model wrote
    /// `report_<PERSON_…>.pdf`), with their entity: found there in storage however they read.
    pub restored_glued: Vec<(String, String)>,
}

/// The step, unmasked (it only lives in memory until [`mask_step`]).
pub fn build_step(start: &StepStart, request: &RequestView, end: StepEnd) -> Step {
    let response = end.response.unwrap_or_default();
    Step {
        step_id: start.step_id.clone(),
        trajectory_id: start.trajectory_id.clone(),
        parent_step_id: start.parent_step_id.clone(),
        turn_index: start.turn_index,
        tenant_id: start.tenant_id.clone(),
        agent_id: start.agent_id.clone(),
        started_at: start.started_at,
        ended_at: Some(now_micros()),
        api: start.api.to_owned(),
        upstream: start.upstream.clone(),
        model_requested: start.model_requested.clone(),
        model_served: response.model,
        policy_version: end.policy_version,
        request_messages: request.messages.clone(),
        tools: request.tools.clone(),
        params: request.params.clone(),
        response_message: response.message,
        finish_reason: response.finish_reason,
        status: end.status.to_owned(),
        error: end.error,
        prompt_tokens: response.prompt_tokens,
        completion_tokens: response.completion_tokens,
        completion_token_ids: response.token_ids,
        completion_logprobs: response.logprobs,
        pii: Vec::new(),
        tags: start.tags.clone(),
        extra_json: request.extra.clone(),
        // Set when the step is stored, from what masking found in it (`mark_for_training`).
        training_eligible: None,
        legal_basis: None,
        retention_until: None,
        consent_source: None,
    }
}

/// Microseconds in a day.
const DAY_MICROS: i64 = 86_400_000_000;

/// Sets the training marks of a step masked for storage (`step.pii` says which entity types
/// were found): `training` decides on its tenant, agent, upstream and those entity types; a
/// `consent` header can only narrow. The retention deadline counts from `started_at`.
pub fn mark_for_training(
    step: &mut Step,
    training: &Training,
    upstream_trust: Trust,
    consent: Option<Consent>,
) {
    let mut entities: Vec<&str> = step.pii.iter().map(|p| p.entity.as_str()).collect();
    entities.sort_unstable();
    entities.dedup();
    let marks = training.mark(
        &StepFacts {
            tenant: &step.tenant_id,
            agent: &step.agent_id,
            upstream: &step.upstream,
            upstream_trust: upstream_trust.name(),
            entities: &entities,
        },
        consent,
    );
    step.training_eligible = Some(marks.eligible);
    step.legal_basis = marks.legal_basis;
    step.retention_until = marks
        .retention_days
        .map(|days| step.started_at.saturating_add(i64::from(days) * DAY_MICROS));
    step.consent_source = Some(marks.consent_source);
}

/// Masks every text field of `step` for storage, fills `step.pii`, and returns the vault
/// items to store. Any failure is an error: the step must then not be stored at all.
///
/// The fields that carry text from the conversation go through JSON, which the masker walks,
/// as objects keyed by field (so a span's `field` reads `request_messages[0].content`); ids,
/// times and log-probs carry none. Two passes:
///
/// 1. the request's fields (`request_messages`, `tools`, `params`, `extra_json`), with every
///    value that was masked in what went upstream (`sent_masked`) masked by its exact text too,
///    so what the policy kept from the provider is never stored in the clear;
/// 2. the reply (`response_message`), with those values and every value pass 1 masked masked by their exact text wherever the reply
///    repeats them: the originals restored into the reply, or a value found in the request by
///    its context (a phone number after "mobile", a name after a cue) that the model repeats
///    without that context, are masked in the stored reply without being detected a second
///    time. A shaped value is found even glued to other text (`x<EMAIL_…>x` restored as
///    `xjane@example.comx`); a name, or a value of letters alone, only as a word of its own.
///    What the upstream reports of itself (model, policy version, finish reason, error) is
///    left out where it holds one of those values.
///
/// Token ids carry text too: when anything in the reply is masked, they and their log-probs are
/// dropped and the step is tagged [`TOKEN_IDS_TAG`].
pub fn mask_step(
    step: &mut Step,
    scanner: &Scanner,
    policy: &MaskPolicy,
    keys: &KeyRing,
    sent_masked: &FoundValues,
    restored_glued: &[(String, String)],
) -> atdp_policies::Result<Vec<VaultItem>> {
    let encode = |e: serde_json::Error| atdp_policies::Error::Mask(format!("step encoding: {e}"));
    let fields = |named: Vec<(&str, serde_json::Result<Value>)>| {
        named
            .into_iter()
            .map(|(name, value)| Ok((name.to_owned(), value.map_err(encode)?)))
            .collect::<atdp_policies::Result<Map<String, Value>>>()
    };
    let mut request = Value::Object(fields(vec![
        (
            "request_messages",
            serde_json::to_value(&step.request_messages),
        ),
        ("tools", serde_json::to_value(&step.tools)),
        ("params", serde_json::to_value(&step.params)),
        ("extra_json", serde_json::to_value(&step.extra_json)),
    ])?);
    let mut reply = Value::Object(fields(vec![(
        "response_message",
        serde_json::to_value(&step.response_message),
    )])?);
    let sent = KnownValues::new(sent_masked.iter())?;
    let masker = JsonMasker {
        scanner,
        policy,
        tenant: &step.tenant_id,
        keys,
        known: (!sent.is_empty()).then_some(&sent),
    };
    let masked_request = masker.mask(&mut request)?;
    // A model writes a placeholder glued to other text as readily as apart, and the proxy
    // restores it there: a shaped value (with a digit or a sign) is found glued too. A name,
    // or a value of letters alone, only as a word of its own (`Stan` is not in `understand`,
    // nor in the step's own `assistant`).
    let known = KnownValues::with_glued(
        sent_masked
            .iter()
            .chain(masked_request.values.iter())
            .map(|(value, entity)| (value, entity, KnownValues::gluable(value, entity))),
    )?;
    let mut masked_reply = JsonMasker {
        known: (!known.is_empty()).then_some(&known),
        ..masker
    }
    .mask(&mut reply)?;
    if !restored_glued.is_empty() {
        mask_restored_glued(
            &mut reply,
            policy,
            &step.tenant_id,
            keys,
            restored_glued,
            &mut masked_reply,
        )?;
    }
    let (Value::Object(mut request), Value::Object(mut reply)) = (request, reply) else {
        return Err(atdp_policies::Error::Mask(
            "masked fields are not an object".into(),
        ));
    };
    let mut field = |name: &str| {
        request
            .remove(name)
            .or_else(|| reply.remove(name))
            .unwrap_or(Value::Null)
    };
    // Decoded into locals first: the step changes only when every field decodes.
    let request_messages = serde_json::from_value(field("request_messages")).map_err(encode)?;
    let tools = serde_json::from_value(field("tools")).map_err(encode)?;
    let params = serde_json::from_value(field("params")).map_err(encode)?;
    let response_message = serde_json::from_value(field("response_message")).map_err(encode)?;
    let extra_json = serde_json::from_value(field("extra_json")).map_err(encode)?;
    // What the upstream reports of itself is restored like any string of its reply (a
    // reply's `model`), but it is a name, not text to mask (the detectors would read
    // `claude-…` as a person): one that holds a value of the call is left out.
    for reported in [
        &mut step.model_served,
        &mut step.policy_version,
        &mut step.finish_reason,
        &mut step.error,
    ] {
        if let Some(text) = reported.as_deref()
            && known.first_in(text)?.is_some()
        {
            *reported = None;
        }
    }
    step.request_messages = request_messages;
    step.tools = tools;
    step.params = params;
    step.response_message = response_message;
    step.extra_json = extra_json;
    let reply_masked = masked_reply
        .spans
        .iter()
        .any(|(_, span)| span.action != Action::Allow);
    if reply_masked && (step.completion_token_ids.is_some() || step.completion_logprobs.is_some()) {
        step.completion_token_ids = None;
        step.completion_logprobs = None;
        step.tags
            .insert(TOKEN_IDS_TAG.0.to_owned(), TOKEN_IDS_TAG.1.to_owned());
    }
    step.pii = masked_request
        .spans
        .into_iter()
        .chain(masked_reply.spans)
        .map(|(field, span)| PiiSpan {
            field,
            entity: span.entity,
            token: span.token,
            action: span.action.name().to_owned(),
        })
        .collect();
    let mut vault = masked_request.vault;
    for item in masked_reply.vault {
        if !vault.iter().any(|v| v.token == item.token) {
            vault.push(item);
        }
    }
    Ok(vault)
}

/// Masks the step for storage (`start.sent_masked`: the values masked in what went upstream),
/// marks it for training, and hands it, with its vault entries, to the lake writer. A step
/// whose text cannot be masked (a reply nested too deep to check, which a model can write on
/// purpose) is stored without any of its text ([`without_text`]), so that the call stays in
/// the lake; the failure is counted and never reaches the client, which already has its
/// response.
pub fn store_step(
    writer: &LakeWriter,
    policy: &Policy,
    keys: &KeyRing,
    metrics: &Metrics,
    step: Step,
    start: &StepStart,
    restored_glued: &[(String, String)],
) {
    let mut step = step;
    let vault = match mask_step(
        &mut step,
        &policy.scanner,
        &policy.masking.storage,
        keys,
        &start.sent_masked,
        restored_glued,
    ) {
        Ok(vault) => vault,
        Err(error) => {
            metrics.record_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(step_id = %step.step_id, error = %error, "Masking the step for storage failed; it is recorded without its text.");
            without_text(&mut step);
            Vec::new()
        }
    };
    mark_for_training(
        &mut step,
        &policy.training,
        start.upstream_trust,
        start.consent,
    );
    if step.tags.contains_key(TEXT_TAG.0) {
        step.training_eligible = Some(false);
    }
    if step.tags.contains_key(SHADOW_TAG) {
        // A reply nobody received is never trained on. When the policy and consent would
        // have let it be, `shadow` says that this is the only reason (reward functions read
        // such steps to score the shadow); otherwise the policy's own reason stays.
        if step.training_eligible == Some(true) {
            step.consent_source = Some(SHADOW_SOURCE.to_owned());
        }
        step.training_eligible = Some(false);
    }
    for entry in vault_entries(&step.tenant_id, vault) {
        if let Err(error) = writer.append(entry) {
            metrics.record_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(step_id = %step.step_id, error = %error, "Could not record a vault entry.");
        }
    }
    let step_id = step.step_id.clone();
    if let Err(error) = writer.append(step) {
        metrics.record_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(step_id = %step_id, error = %error, "Could not record the step.");
    }
}

/// Masks the names (and values of letters alone) that the reply had restored glued to other
/// text (`report_<PERSON_…>.pdf`) wherever its text and tool-call arguments hold them, glued
/// or not, outside the placeholders already there; only there: the reply's role and the
/// step's field names are no text of the model. Adds what it masked to `masked`.
fn mask_restored_glued(
    reply: &mut Value,
    storage: &MaskPolicy,
    tenant: &str,
    keys: &KeyRing,
    restored_glued: &[(String, String)],
    masked: &mut atdp_policies::JsonMasked,
) -> atdp_policies::Result<()> {
    let Some(message) = reply
        .get_mut("response_message")
        .and_then(Value::as_object_mut)
    else {
        return Ok(());
    };
    let mut mask = |text: &mut String, place: String| -> atdp_policies::Result<()> {
        let ranges = glued_ranges(text, restored_glued);
        if ranges.is_empty() {
            return Ok(());
        }
        let done = atdp_policies::mask_ranges(text, ranges, storage, tenant, keys)?;
        masked
            .spans
            .extend(done.spans.into_iter().map(|span| (place.clone(), span)));
        masked.vault.extend(done.vault);
        *text = done.text;
        Ok(())
    };
    if let Some(Value::String(text)) = message.get_mut("content") {
        mask(text, "response_message.content".to_owned())?;
    }
    if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
        for (i, call) in calls.iter_mut().enumerate() {
            if let Some(Value::String(text)) = call.get_mut("arguments") {
                mask(text, format!("response_message.tool_calls[{i}].arguments"))?;
            }
        }
    }
    Ok(())
}

/// Where `text` holds one of `values` (letter case aside), outside the placeholders in it
/// (`<EMAIL_ADDRESS_…>`, `<PHONE_NUMBER#…>`, `[PERSON]`), ordered and not overlapping, the
/// longest first where two start together.
fn glued_ranges<'v>(
    text: &str,
    values: &'v [(String, String)],
) -> Vec<(std::ops::Range<usize>, &'v str)> {
    let protected = placeholders_in(text);
    // Lower-casing keeps every byte offset only where it keeps each character's length.
    let same_offsets = |s: &str| {
        s.chars()
            .all(|c| c.to_lowercase().map(char::len_utf8).sum::<usize>() == c.len_utf8())
    };
    let lower = text.to_lowercase();
    let text_lowers = same_offsets(text);
    let mut found: Vec<(std::ops::Range<usize>, &str)> = Vec::new();
    for (value, entity) in values {
        let needle = value.to_lowercase();
        // Matched letter case aside where offsets stay, else as spelled.
        let (haystack, needle) = if text_lowers && same_offsets(value) {
            (lower.as_str(), needle.as_str())
        } else {
            (text, value.as_str())
        };
        if needle.is_empty() {
            continue;
        }
        for (start, _) in haystack.match_indices(needle) {
            let range = start..start + needle.len();
            let inside = protected
                .iter()
                .any(|p| p.start < range.end && range.start < p.end);
            if !inside && text.is_char_boundary(range.start) && text.is_char_boundary(range.end) {
                found.push((range, entity.as_str()));
            }
        }
    }
    found.sort_by_key(|(range, _)| (range.start, std::cmp::Reverse(range.end)));
    let mut kept: Vec<(std::ops::Range<usize>, &str)> = Vec::new();
    for (range, entity) in found {
        if kept.last().is_none_or(|(last, _)| last.end <= range.start) {
            kept.push((range, entity));
        }
    }
    kept
}

/// The byte ranges of placeholder-shaped text in `text`: `<` or `[`, upper-case letters,
/// digits and `_`, then optionally `_` or `#` and lower-case hex digits, then `>` or `]`.
fn placeholders_in(text: &str) -> Vec<std::ops::Range<usize>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let close = match bytes[at] {
            b'<' => b'>',
            b'[' => b']',
            _ => {
                at += 1;
                continue;
            }
        };
        let mut end = at + 1;
        while end < bytes.len()
            && (bytes[end].is_ascii_uppercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'_')
        {
            end += 1;
        }
        let named = end > at + 1;
        if named && end < bytes.len() && bytes[end] == b'#' {
            end += 1;
        }
        while end < bytes.len() && matches!(bytes[end], b'0'..=b'9' | b'a'..=b'f') {
            end += 1;
        }
        if named && end < bytes.len() && bytes[end] == close {
            out.push(at..end + 1);
            at = end + 1;
        } else {
            at += 1;
        }
    }
    out
}

/// The request of a call as stored, for the strict audit trail: the step so far (no reply)
/// masked for storage, its text fields as a JSON object, and the vault entries its
/// placeholders need.
pub fn masked_request(
    start: &StepStart,
    request: &RequestView,
    policy: &Policy,
    keys: &KeyRing,
) -> atdp_policies::Result<(Value, Vec<VaultEntry>)> {
    let end = StepEnd {
        status: "forwarded",
        error: None,
        response: None,
        policy_version: None,
        restored_glued: Vec::new(),
    };
    let mut step = build_step(start, request, end);
    let vault = mask_step(
        &mut step,
        &policy.scanner,
        &policy.masking.storage,
        keys,
        &start.sent_masked,
        &[],
    )?;
    let encode =
        |e: serde_json::Error| atdp_policies::Error::Mask(format!("request encoding: {e}"));
    let fields = serde_json::json!({
        "request_messages": serde_json::to_value(&step.request_messages).map_err(encode)?,
        "tools": serde_json::to_value(&step.tools).map_err(encode)?,
        "params": step.params,
        "extra_json": step.extra_json,
        "pii": serde_json::to_value(&step.pii).map_err(encode)?,
    });
    Ok((fields, vault_entries(&start.tenant_id, vault)))
}

/// Leaves out every field of `step` that carries text of the conversation or of the
/// upstream (what it reports of itself included), and tags it [`TEXT_TAG`]: what stays are
/// its ids, times, the names checked when the call was admitted, its status and counts.
fn without_text(step: &mut Step) {
    step.request_messages.clear();
    step.tools.clear();
    step.params = None;
    step.extra_json = None;
    step.response_message = None;
    step.model_served = None;
    step.policy_version = None;
    step.finish_reason = None;
    step.error = None;
    step.completion_token_ids = None;
    step.completion_logprobs = None;
    step.pii.clear();
    step.tags
        .insert(TEXT_TAG.0.to_owned(), TEXT_TAG.1.to_owned());
}

/// The `pii_vault` rows for `items`.
pub fn vault_entries(tenant: &str, items: Vec<VaultItem>) -> Vec<VaultEntry> {
    let created_at = now_micros();
    items
        .into_iter()
        .map(|item| VaultEntry {
            tenant_id: tenant.to_owned(),
            token: item.token,
            entity: item.entity,
            key_id: item.sealed.key_id,
            nonce: item.sealed.nonce,
            ciphertext: item.sealed.ciphertext,
            created_at,
        })
        .collect()
}

/// An audit event for a policy decision on a call (chain fields are set by the writer).
pub fn decision_event(
    tenant: &str,
    actor: &str,
    subject: &str,
    allowed: bool,
    policies: &[String],
    reason: Option<String>,
    detail: Value,
) -> AuditEvent {
    let kind = if allowed {
        "request_allowed"
    } else {
        "request_denied"
    };
    AuditEvent {
        subject: Some(subject.to_owned()),
        decision: Some(if allowed { "allow" } else { "deny" }.to_owned()),
        policy_id: (!policies.is_empty()).then(|| policies.join(",")),
        reason,
        detail_json: Some(detail.to_string()),
        ..AuditEvent::new(kind, actor, tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atdp_schema::{Message, ToolCall};

    #[test]
    fn stored_steps_carry_no_plaintext_and_name_their_spans() {
        let mut keys = KeyRing::default();
        keys.generate("acme");
        let scanner = Scanner::new(None).unwrap();
        let request = RequestView {
            model: "m".into(),
            messages: vec![Message {
                role: "user".into(),
                content: Some("mail jane@example.com".into()),
                ..Message::default()
            }],
            tools: vec![atdp_schema::Tool {
                kind: "function".into(),
                name: "lookup".into(),
                description: Some("escalate to ops@example.com".into()),
                parameters: None,
            }],
            params: Some(r#"{"user":"bob@example.com"}"#.into()),
            extra: Some(r#"{"metadata":{"owner":"ann@example.com"}}"#.into()),
            ..RequestView::default()
        };
        let start = StepStart {
            step_id: "s".into(),
            trajectory_id: "t".into(),
            parent_step_id: None,
            turn_index: 0,
            tenant_id: "acme".into(),
            agent_id: "a".into(),
            started_at: 1,
            api: "openai.chat",
            upstream: "u".into(),
            upstream_trust: Trust::External,
            consent: None,
            model_requested: "m".into(),
            tags: BTreeMap::new(),
            sent_masked: Default::default(),
        };
        let response = ResponseView {
            message: Some(Message {
                role: "assistant".into(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "lookup".into(),
                    arguments: r#"{"card":"4111 1111 1111 1111"}"#.into(),
                }],
                ..Message::default()
            }),
            ..ResponseView::default()
        };
        let mut step = build_step(
            &start,
            &request,
            StepEnd {
                status: "ok",
                error: None,
                response: Some(response),
                policy_version: None,
                restored_glued: Vec::new(),
            },
        );
        let vault = mask_step(
            &mut step,
            &scanner,
            &MaskPolicy::all(Action::Tokenize),
            &keys,
            &FoundValues::default(),
            &[],
        )
        .unwrap();
        let text = serde_json::to_string(&step).unwrap();
        assert!(
            !text.contains("@example.com") && !text.contains("4111"),
            "{text}"
        );
        assert_eq!(vault.len(), 5);
        let mut fields: Vec<&str> = step.pii.iter().map(|p| p.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "extra_json#.metadata.owner",
                "params#.user",
                "request_messages[0].content",
                "response_message.tool_calls[0].arguments#.card",
                "tools[0].description",
            ]
        );
        assert_eq!(step.tools[0].name, "lookup");
        assert_eq!(step.model_requested, "m");
        assert_eq!(step.step_id, "s");
        assert_eq!(vault_entries("acme", vault).len(), 5);
    }

    fn step_with_reply(text: &str) -> Step {
        let start = StepStart {
            step_id: "s".into(),
            trajectory_id: "t".into(),
            parent_step_id: None,
            turn_index: 0,
            tenant_id: "acme".into(),
            agent_id: "a".into(),
            started_at: 1,
            api: "openai.chat",
            upstream: "u".into(),
            upstream_trust: Trust::External,
            consent: None,
            model_requested: "m".into(),
            tags: BTreeMap::new(),
            sent_masked: Default::default(),
        };
        let response = ResponseView {
            message: Some(Message {
                role: "assistant".into(),
                content: Some(text.into()),
                ..Message::default()
            }),
            token_ids: Some(vec![1, 2, 3]),
            logprobs: Some(vec![-0.1, -0.2, -0.3]),
            ..ResponseView::default()
        };
        let end = StepEnd {
            status: "ok",
            error: None,
            response: Some(response),
            policy_version: None,
            restored_glued: Vec::new(),
        };
        build_step(&start, &RequestView::default(), end)
    }

    #[test]
    fn a_masked_replys_token_ids_are_not_stored_and_the_step_says_so() {
        let (keys, scanner, policy) = tokenizing();
        let none = FoundValues::default();
        let mut masked = step_with_reply("Mail jane@example.com");
        mask_step(&mut masked, &scanner, &policy, &keys, &none, &[]).unwrap();
        assert_eq!(masked.completion_token_ids, None);
        assert_eq!(masked.completion_logprobs, None);
        assert_eq!(
            masked.tags.get("token_ids").map(String::as_str),
            Some("dropped")
        );

        let mut clean = step_with_reply("All done.");
        mask_step(&mut clean, &scanner, &policy, &keys, &none, &[]).unwrap();
        assert_eq!(clean.completion_token_ids, Some(vec![1, 2, 3]));
        assert!(clean.tags.is_empty());

        // A value found but allowed is not masked: the token ids decode to what is stored.
        let mut allowed = step_with_reply("Mail jane@example.com");
        mask_step(
            &mut allowed,
            &scanner,
            &MaskPolicy::all(Action::Allow),
            &keys,
            &none,
            &[],
        )
        .unwrap();
        assert_eq!(allowed.completion_token_ids, Some(vec![1, 2, 3]));
    }

    fn step_with(request: &str, reply: &str) -> Step {
        let mut step = step_with_reply(reply);
        step.request_messages = vec![Message {
            role: "user".into(),
            content: Some(request.into()),
            ..Message::default()
        }];
        step
    }

    /// Keys of the tenant `acme`, the built-in detectors, and a policy that tokenizes every
    /// entity type.
    fn tokenizing() -> (KeyRing, Scanner, MaskPolicy) {
        let mut keys = KeyRing::default();
        keys.generate("acme");
        let scanner = Scanner::new(None).unwrap();
        (keys, scanner, MaskPolicy::all(Action::Tokenize))
    }

    /// The values masking `text` on the way out masked.
    fn sent_masked(
        scanner: &Scanner,
        policy: &MaskPolicy,
        keys: &KeyRing,
        text: &str,
    ) -> FoundValues {
        let mut sent = serde_json::json!({ "m": text });
        let masker = JsonMasker {
            scanner,
            policy,
            tenant: "acme",
            keys,
            known: None,
        };
        masker.mask(&mut sent).unwrap().values
    }

    fn stored_text(step: &Step) -> String {
        serde_json::to_string(&(&step.request_messages, &step.response_message)).unwrap()
    }

    #[test]
    fn a_value_found_in_the_request_by_its_context_is_masked_where_the_reply_repeats_it() {
        let (keys, scanner, policy) = tokenizing();
        // "mobile" is what makes the number a phone number; the reply repeats it without.
        let mut step = step_with(
            "My mobile is 0612345678, call after six.",
            "Noted: 0612345678. Anything else?",
        );
        mask_step(
            &mut step,
            &scanner,
            &policy,
            &keys,
            &FoundValues::default(),
            &[],
        )
        .unwrap();
        let stored = stored_text(&step);
        assert!(!stored.contains("1234 5678"), "{stored}");
        let tokens: Vec<&str> = step.pii.iter().map(|p| p.token.as_str()).collect();
        assert_eq!(tokens.len(), 2, "{:?}", step.pii);
        assert_eq!(tokens[0], tokens[1], "one value, one placeholder");
        assert!(step.pii[1].field.starts_with("response_message"));
        // Without the request's finding, the reply alone would be stored as it is.
        let mut alone = step_with("Hello.", "Noted: 0612345678. Anything else?");
        mask_step(
            &mut alone,
            &scanner,
            &policy,
            &keys,
            &FoundValues::default(),
            &[],
        )
        .unwrap();
        assert!(stored_text(&alone).contains("0612345678"));
    }

    #[test]
    fn a_restored_value_glued_to_other_text_is_masked_in_storage() {
        let (keys, scanner, policy) = tokenizing();
        let sent = sent_masked(
            &scanner,
            &policy,
            &keys,
            "I am Jane Doe, mail jane.doe@example.com, card 4111 1111 1111 1111, \
             mobile 415-555-0172",
        );
        // The model wrote each placeholder glued to letters, digits or `_`; the proxy
        // restored the originals there.
        let reply = "Saved: xjane.doe@example.comx 14111 1111 1111 11119 \
            ref_415-555-0172_ok, for Jane Doe";
        let mut step = step_with("Hello.", reply);
        // The reply's `model` names a value of the call; a model name is kept as given.
        step.model_served = Some("m-xjane.doe@example.com".into());
        step.finish_reason = Some("stop".into());
        mask_step(&mut step, &scanner, &policy, &keys, &sent, &[]).unwrap();
        let stored = stored_text(&step);
        for value in ["jane.doe@", "Jane Doe", "1111 1111", "555-0172"] {
            assert!(!stored.contains(value), "{value}: {stored}");
        }
        assert_eq!(step.model_served, None);
        assert_eq!(step.finish_reason.as_deref(), Some("stop"));
        let mut named = step_with("Hello.", "Done.");
        named.model_served = Some("claude-sonnet-4-5".into());
        mask_step(&mut named, &scanner, &policy, &keys, &sent, &[]).unwrap();
        assert_eq!(named.model_served.as_deref(), Some("claude-sonnet-4-5"));
        // A name is masked only as a word of its own: the model writes its letters in other
        // words, and the step's own fields (`role`, `tool_calls`) hold them too.
        let sent = sent_masked(&scanner, &policy, &keys, "Ask Stan. Then ask Cal.");
        let names: Vec<(&str, &str)> = sent.iter().collect();
        assert!(
            names.iter().any(|(v, _)| *v == "Stan" || *v == "Cal"),
            "{names:?}"
        );
        let mut step = step_with("Hello.", "I understand the standard; Stan will call.");
        mask_step(&mut step, &scanner, &policy, &keys, &sent, &[]).unwrap();
        let stored = stored_text(&step);
        assert!(stored.contains("I understand the standard"), "{stored}");
        assert!(stored.contains("\"role\":\"assistant\""), "{stored}");
        assert!(!stored.contains("Stan will"), "{stored}");
        // Where the reply had a name restored glued (`report_<PERSON_…>.pdf`), it is found
        // glued too; elsewhere in that reply its letters are then masked inside other words.
        let glued = vec![("Stan".to_owned(), "PERSON".to_owned())];
        let mut step = step_with("Hello.", "Saved report_Stan.pdf; I understand.");
        mask_step(&mut step, &scanner, &policy, &keys, &sent, &glued).unwrap();
        let stored = stored_text(&step);
        assert!(!stored.contains("Stan"), "{stored}");
        assert!(stored.contains("report_<PERSON_"), "{stored}");
        assert!(stored.contains("\"role\":\"assistant\""), "{stored}");
        // Placeholders already in the reply stay whole, whatever letters the name shares
        // with them.
        let glued = vec![("Tim".to_owned(), "PERSON".to_owned())];
        let reply = "Saved report_Tim.pdf at <DATE_TIME_0123456789ab> for [PERSON_TIM]";
        let mut step = step_with("Hello.", reply);
        mask_step(&mut step, &scanner, &policy, &keys, &sent, &glued).unwrap();
        let stored = stored_text(&step);
        assert!(!stored.contains("report_Tim"), "{stored}");
        assert!(stored.contains("<DATE_TIME_0123456789ab>"), "{stored}");
        assert!(stored.contains("[PERSON_TIM]"), "{stored}");
    }

    #[test]
    fn every_value_masked_on_the_way_out_is_masked_in_storage() {
        let (keys, scanner, policy) = tokenizing();
        // What the upstream's masking found (its context words made the number a phone).
        let sent = sent_masked(&scanner, &policy, &keys, "mobile 0612345678");
        assert_eq!(sent.len(), 1);
        // Stored without that context: the request and the reply restored from the upstream's
        // placeholder.
        let mut step = step_with("Ring me: 0612345678", "I will ring 0612345678 at six.");
        mask_step(&mut step, &scanner, &policy, &keys, &sent, &[]).unwrap();
        let stored = stored_text(&step);
        assert!(!stored.contains("1234 5678"), "{stored}");
        assert_eq!(
            step.tags.get("token_ids").map(String::as_str),
            Some("dropped"),
            "the reply's ids decode to the value"
        );
    }
}
