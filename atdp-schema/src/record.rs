//! The ATDP v1 records, as Rust types. `docs/atdp-v1.md` is the normative description;
//! field docs here are kept short and point at the same meanings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The protocol version written into every table's metadata: `1.1` adds the training
/// governance columns of `steps` (`docs/atdp-v1.md` §3.2, §10).
pub const PROTOCOL_VERSION: &str = "1.1";

/// The protocol versions a reader accepts: this one, and `1` (tables written before the
/// governance columns, whose rows read them as null).
pub const READABLE_VERSIONS: [&str; 2] = ["1", PROTOCOL_VERSION];

/// A new identifier: a UUIDv7 in its canonical lowercase hyphenated form.
///
/// UUIDv7 sorts by creation time, so ids of one period cluster in the same files and
/// Parquet statistics on id columns prune well.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Microseconds since the Unix epoch, UTC, now.
pub fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Days since the Unix epoch (the `date` partition value) of a UTC microsecond timestamp.
pub fn date_of_micros(micros: i64) -> i32 {
    const MICROS_PER_DAY: i64 = 86_400_000_000;
    // Saturate rather than wrap: a timestamp beyond ±5.8 million years is not a real one.
    i32::try_from(micros.div_euclid(MICROS_PER_DAY)).unwrap_or(if micros < 0 {
        i32::MIN
    } else {
        i32::MAX
    })
}

/// The four ATDP tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Table {
    /// One row per model call.
    Steps,
    /// Rewards attached to a step or a trajectory.
    Rewards,
    /// The tamper-evident audit trail.
    Audit,
    /// Encrypted originals of tokenized values.
    PiiVault,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Table; 4] = [Table::Steps, Table::Rewards, Table::Audit, Table::PiiVault];

    /// The table's name, which is also its folder under `<root>/atdp/v1/`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Steps => "steps",
            Table::Rewards => "rewards",
            Table::Audit => "audit",
            Table::PiiVault => "pii_vault",
        }
    }

    /// The table named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A tool call made by the model (or replayed in a request's history).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's tool-call id (`call_…`, `toolu_…`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the JSON text the model produced (masked).
    pub arguments: String,
}

/// One message of a conversation, normalised across APIs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text content (text parts joined), masked; `None` when the message has no text.
    pub content: Option<String>,
    /// The participant or tool name, where the API carries one.
    pub name: Option<String>,
    /// For `tool` messages: the id of the call this message answers.
    pub tool_call_id: Option<String>,
    /// Tool calls requested in this message.
    pub tool_calls: Vec<ToolCall>,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Tool {
    /// `function` for function tools; otherwise the provider's tool type.
    pub kind: String,
    /// The tool's name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its JSON Schema for the arguments, as JSON text.
    pub parameters: Option<String>,
}

/// One masked span.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PiiSpan {
    /// Where the span is, as a path into the row: `request_messages[2].content`.
    pub field: String,
    /// The entity type (Presidio names: `EMAIL_ADDRESS`, `US_SSN`, `SECRET`, …).
    pub entity: String,
    /// What replaced the value in the stored text (`<EMAIL_ADDRESS_7f3a9c>`, `[US_SSN]`, …).
    pub token: String,
    /// The action taken: `redact`, `mask`, `hash`, `tokenize` or `allow`.
    pub action: String,
}

/// Row of the `steps` table: one model call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Step {
    /// UUIDv7 of this call.
    pub step_id: String,
    /// UUIDv7 of the trajectory (episode) the call belongs to.
    pub trajectory_id: String,
    /// The step this call continues; `None` for a trajectory's first call.
    pub parent_step_id: Option<String>,
    /// Position in the trajectory: 0 for the first call, parent's + 1 after.
    pub turn_index: i32,
    /// Tenant that owns the call.
    pub tenant_id: String,
    /// Agent (application) that made the call.
    pub agent_id: String,
    /// When the proxy received the request (µs since epoch, UTC).
    pub started_at: i64,
    /// When the last byte of the response was sent (µs since epoch, UTC).
    pub ended_at: Option<i64>,
    /// `openai.chat`, `openai.responses` or `anthropic.messages`.
    pub api: String,
    /// Name of the upstream the call was dispatched to.
    pub upstream: String,
    /// The model string the client sent.
    pub model_requested: String,
    /// The model the upstream reports having served.
    pub model_served: Option<String>,
    /// Version of the served policy (adapter), when the upstream reports one.
    pub policy_version: Option<String>,
    /// The request's messages, system prompt first, masked.
    pub request_messages: Vec<Message>,
    /// Tools offered to the model.
    pub tools: Vec<Tool>,
    /// Sampling parameters as a JSON object (`temperature`, `top_p`, `max_tokens`, …).
    pub params: Option<String>,
    /// The model's reply, masked; `None` when there was none.
    pub response_message: Option<Message>,
    /// `stop`, `length`, `tool_calls`, `content_filter`, … as the API reported it.
    pub finish_reason: Option<String>,
    /// `ok`, `upstream_error`, `interrupted` or `denied`.
    pub status: String,
    /// Why the call did not complete, for any status but `ok`.
    pub error: Option<String>,
    /// Prompt tokens as reported by the upstream.
    pub prompt_tokens: Option<i64>,
    /// Completion tokens as reported by the upstream.
    pub completion_tokens: Option<i64>,
    /// Token ids of the completion, when the upstream returns them.
    pub completion_token_ids: Option<Vec<i32>>,
    /// Log-probability of each completion token under the behaviour policy.
    pub completion_logprobs: Option<Vec<f32>>,
    /// Masked spans in this row.
    pub pii: Vec<PiiSpan>,
    /// Free-form labels (`session`, `env`, …).
    pub tags: BTreeMap<String, String>,
    /// Request/response fields the columns do not model, as a masked JSON object.
    pub extra_json: Option<String>,
    /// Whether the step may be trained on, as the recording policy and the caller's consent
    /// decided; `None` in rows written before ATDP 1.1 (unmarked: see [`Unmarked`]).
    pub training_eligible: Option<bool>,
    /// The legal basis the step is kept and used under (`consent`, `contract`,
    /// `legitimate_interests`, …), as the policy names it.
    pub legal_basis: Option<String>,
    /// Until when the step may be kept and trained on (µs since epoch, UTC); after it, no
    /// reader selects it for training.
    pub retention_until: Option<i64>,
    /// What decided `training_eligible`: `header` (the caller's `x-atdp-consent`) or
    /// `policy:<rule>` (`policy:default` when no rule matched).
    pub consent_source: Option<String>,
}

/// How a training reader treats steps without a training mark (`training_eligible` null:
/// rows written before ATDP 1.1, or by a producer that does not set it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unmarked {
    /// Not trained on: nobody decided they may be (the default).
    #[default]
    Excluded,
    /// Trained on, as before the marks existed: only when the operator says so.
    Eligible,
}

impl Unmarked {
    /// `excluded` or `eligible`.
    pub fn name(self) -> &'static str {
        match self {
            Unmarked::Excluded => "excluded",
            Unmarked::Eligible => "eligible",
        }
    }

    /// From its name.
    pub fn from_name(name: &str) -> Option<Unmarked> {
        match name {
            "excluded" => Some(Unmarked::Excluded),
            "eligible" => Some(Unmarked::Eligible),
            _ => None,
        }
    }
}

/// Why a step is not read for training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Exclusion {
    /// `training_eligible` is false: the policy or the end user's consent says no.
    NotEligible,
    /// `training_eligible` is null and unmarked steps are excluded.
    Unmarked,
    /// `retention_until` has passed.
    RetentionExpired,
}

impl Exclusion {
    /// The name counted in training manifests: `not_eligible`, `unmarked`,
    /// `retention_expired`.
    pub fn name(self) -> &'static str {
        match self {
            Exclusion::NotEligible => "not_eligible",
            Exclusion::Unmarked => "unmarked",
            Exclusion::RetentionExpired => "retention_expired",
        }
    }
}

impl Step {
    /// Why this step may not be trained on at `now` (µs since epoch, UTC), or `None` when it
    /// may. A step has one reason, the first of: not eligible, unmarked (when `unmarked`
    /// excludes), retention passed (`retention_until <= now`).
    pub fn training_exclusion(&self, now: i64, unmarked: Unmarked) -> Option<Exclusion> {
        match self.training_eligible {
            Some(false) => return Some(Exclusion::NotEligible),
            None if unmarked == Unmarked::Excluded => return Some(Exclusion::Unmarked),
            _ => {}
        }
        self.retention_until
            .is_some_and(|until| until <= now)
            .then_some(Exclusion::RetentionExpired)
    }
}

/// Splits `steps` into those that may be trained on at `now` and the count of the others by
/// [`Exclusion::name`] (the rule every training reader applies: trainer, reward functions,
/// `atdp.lake`).
pub fn trainable_steps(
    steps: Vec<Step>,
    now: i64,
    unmarked: Unmarked,
) -> (Vec<Step>, BTreeMap<String, usize>) {
    let mut excluded = BTreeMap::new();
    let kept = steps
        .into_iter()
        .filter(|step| match step.training_exclusion(now, unmarked) {
            Some(reason) => {
                *excluded.entry(reason.name().to_owned()).or_insert(0) += 1;
                false
            }
            None => true,
        })
        .collect();
    (kept, excluded)
}

/// Row of the `rewards` table.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reward {
    /// UUIDv7 of this reward.
    pub reward_id: String,
    /// The trajectory rewarded.
    pub trajectory_id: String,
    /// The step rewarded; `None` for a reward on the whole trajectory.
    pub step_id: Option<String>,
    /// Tenant that owns the trajectory.
    pub tenant_id: String,
    /// Reward name (`task_success`, `user_rating`, …).
    pub name: String,
    /// The raw value, as it arrived.
    pub value: f64,
    /// Who produced it: `api`, `sql:<fn>`, `program:<fn>`, `env:<name>`.
    pub source: String,
    /// Checksum of the reward function's definition and settings, for computed rewards.
    pub reward_fn_version: Option<String>,
    /// Whether this reward ends the episode.
    pub terminal: bool,
    /// When the reward was received (µs since epoch, UTC).
    pub created_at: i64,
    /// Free-form labels.
    pub tags: BTreeMap<String, String>,
}

/// Row of the `audit` table: one security-relevant event, linked into its writer's hash chain.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AuditEvent {
    /// UUIDv7 of this event.
    pub event_id: String,
    /// Tenant concerned (`_system` for events of no tenant).
    pub tenant_id: String,
    /// The chain this event belongs to: the id of the writer instance that wrote it.
    pub chain_id: String,
    /// Position in the chain, from 1, without gaps.
    pub chain_seq: i64,
    /// When it happened (µs since epoch, UTC).
    pub occurred_at: i64,
    /// `request_allowed`, `request_denied`, `reward_written`, `query`, `reveal`, `erase`,
    /// `key_rotation`, `policy_reload`, …
    pub kind: String,
    /// Who acted: an API key id, an auditor identity, a service.
    pub actor: String,
    /// What was acted on: a step, trajectory, vault token or policy id.
    pub subject: Option<String>,
    /// The decision, where there is one: `allow` or `deny`.
    pub decision: Option<String>,
    /// The policy (or policy set version) that decided.
    pub policy_id: Option<String>,
    /// The reason given by a person (reveal, erase).
    pub reason: Option<String>,
    /// Further details as a JSON object (never prompt text or PII values).
    pub detail_json: Option<String>,
    /// `hash` of the previous event in this chain; 64 zeros for the first.
    pub prev_hash: String,
    /// SHA-256 (hex) over `prev_hash` and this event's content; see `docs/atdp-v1.md`.
    pub hash: String,
}

impl AuditEvent {
    /// A new event of `kind` by `actor` about `tenant`, with a fresh id and the time now; the
    /// chain fields are set when a writer links it. The one constructor every component uses.
    pub fn new(kind: &str, actor: &str, tenant: &str) -> AuditEvent {
        AuditEvent {
            event_id: new_id(),
            tenant_id: tenant.to_owned(),
            occurred_at: now_micros(),
            kind: kind.to_owned(),
            actor: actor.to_owned(),
            ..AuditEvent::default()
        }
    }
}

/// Row of the `pii_vault` table: the encrypted original of one tokenized value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VaultEntry {
    /// Tenant whose key encrypted it.
    pub tenant_id: String,
    /// The placeholder that stands for the value in stored text (`<EMAIL_ADDRESS_7f3a9c>`).
    pub token: String,
    /// Entity type of the value.
    pub entity: String,
    /// Id of the key that encrypted it (keys rotate; old ids stay readable).
    pub key_id: String,
    /// AEAD nonce.
    pub nonce: Vec<u8>,
    /// AEAD ciphertext with its tag; tenant and entity are bound as associated data.
    pub ciphertext: Vec<u8>,
    /// When the entry was first written (µs since epoch, UTC).
    pub created_at: i64,
}

/// One record of any table, as appended to the write-ahead log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A `steps` row.
    Step(Box<Step>),
    /// A `rewards` row.
    Reward(Reward),
    /// An `audit` row.
    Audit(AuditEvent),
    /// A `pii_vault` row.
    Vault(VaultEntry),
}

impl Record {
    /// The table this record belongs to.
    pub fn table(&self) -> Table {
        match self {
            Record::Step(_) => Table::Steps,
            Record::Reward(_) => Table::Rewards,
            Record::Audit(_) => Table::Audit,
            Record::Vault(_) => Table::PiiVault,
        }
    }

    /// The record's event time, from which its `date` partition is derived.
    pub fn time_micros(&self) -> i64 {
        match self {
            Record::Step(s) => s.started_at,
            Record::Reward(r) => r.created_at,
            Record::Audit(a) => a.occurred_at,
            Record::Vault(v) => v.created_at,
        }
    }

    /// The record's tenant.
    pub fn tenant_id(&self) -> &str {
        match self {
            Record::Step(s) => &s.tenant_id,
            Record::Reward(r) => &r.tenant_id,
            Record::Audit(a) => &a.tenant_id,
            Record::Vault(v) => &v.tenant_id,
        }
    }
}

impl From<Step> for Record {
    fn from(step: Step) -> Self {
        Record::Step(Box::new(step))
    }
}

impl From<Reward> for Record {
    fn from(reward: Reward) -> Self {
        Record::Reward(reward)
    }
}

impl From<AuditEvent> for Record {
    fn from(event: AuditEvent) -> Self {
        Record::Audit(event)
    }
}

impl From<VaultEntry> for Record {
    fn from(entry: VaultEntry) -> Self {
        Record::Vault(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(date_of_micros(0), 0);
        assert_eq!(date_of_micros(86_400_000_000 - 1), 0);
        assert_eq!(date_of_micros(86_400_000_000), 1);
        assert_eq!(date_of_micros(-1), -1);
        // 2026-11-29T00:00:00Z
        assert_eq!(date_of_micros(1_795_910_400_000_000), 20_786);
    }

    #[test]
    fn training_exclusion_has_one_reason_per_step() {
        let step = |eligible, until| Step {
            training_eligible: eligible,
            retention_until: until,
            ..Step::default()
        };
        let now = 1_000;
        let steps = vec![
            step(Some(true), None),
            step(Some(true), Some(now + 1)),
            step(Some(true), Some(now)),
            step(Some(false), Some(now - 1)),
            step(None, None),
            step(None, Some(now - 1)),
        ];
        let reasons: Vec<Option<&str>> = steps
            .iter()
            .map(|s| {
                s.training_exclusion(now, Unmarked::Excluded)
                    .map(Exclusion::name)
            })
            .collect();
        assert_eq!(
            reasons,
            [
                None,
                None,
                Some("retention_expired"),
                Some("not_eligible"),
                Some("unmarked"),
                Some("unmarked"),
            ]
        );
        let (kept, excluded) = trainable_steps(steps.clone(), now, Unmarked::Eligible);
        assert_eq!(kept.len(), 3);
        assert_eq!(
            excluded,
            BTreeMap::from([
                ("not_eligible".to_owned(), 1),
                ("retention_expired".to_owned(), 2),
            ])
        );
        assert_eq!(Unmarked::from_name("eligible"), Some(Unmarked::Eligible));
        assert_eq!(Unmarked::from_name("yes"), None);
    }

    #[test]
    fn ids_are_uuid_v7() {
        let id = new_id();
        let parsed = uuid::Uuid::parse_str(&id).map(|u| u.get_version_num());
        assert_eq!(parsed.ok(), Some(7));
        assert_eq!(id, id.to_lowercase());
    }
}
