//! A synthetic lake: realistic multi-turn trajectories for benchmarks, demos and other
//! components' tests. Several tenants and agents over several days; system prompts, user
//! turns, tool calls and tool results; masked spans with their vault entries; rewards on
//! steps and trajectories; audit events. Deterministic for a given seed.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::Result;
use atdp_schema::{AuditEvent, Message, PiiSpan, Record, Reward, Step, Tool, ToolCall, VaultEntry};

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Steps (model calls) to generate; trajectories have 1 to 6 steps.
    pub steps: usize,
    /// Tenants (`tenant-00`, …).
    pub tenants: usize,
    /// Agents per tenant.
    pub agents_per_tenant: usize,
    /// Days the traffic spreads over, ending at `end_micros`.
    pub days: u32,
    /// End of the period (µs since epoch, UTC).
    pub end_micros: i64,
    /// Random seed.
    pub seed: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            steps: 1_000,
            tenants: 3,
            agents_per_tenant: 3,
            days: 3,
            end_micros: 1_795_910_400_000_000, // 2026-11-29T00:00:00Z
            seed: 7,
        }
    }
}

/// Counts of what was generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SynthSummary {
    /// Steps.
    pub steps: usize,
    /// Trajectories.
    pub trajectories: usize,
    /// Rewards.
    pub rewards: usize,
    /// Audit events.
    pub audit_events: usize,
    /// Vault entries.
    pub vault_entries: usize,
}

const AGENTS: [&str; 4] = ["onboarding", "extraction", "reports", "support"];
const MODELS: [&str; 3] = ["gpt-4.1-mini", "claude-sonnet-4-5", "local/qwen2.5-7b-lora"];
const WORDS: [&str; 48] = [
    "account",
    "invoice",
    "customer",
    "shipment",
    "policy",
    "renewal",
    "contract",
    "order",
    "ledger",
    "balance",
    "report",
    "quarter",
    "region",
    "summary",
    "request",
    "approval",
    "the",
    "a",
    "of",
    "for",
    "with",
    "and",
    "to",
    "in",
    "please",
    "check",
    "update",
    "confirm",
    "latest",
    "pending",
    "overdue",
    "status",
    "team",
    "escalate",
    "priority",
    "reference",
    "number",
    "address",
    "delivery",
    "refund",
    "credit",
    "limit",
    "review",
    "document",
    "attached",
    "signed",
    "missing",
    "field",
];
const ENTITIES: [&str; 4] = ["EMAIL_ADDRESS", "PHONE_NUMBER", "PERSON", "IBAN_CODE"];

fn sentence(rng: &mut StdRng, words: usize) -> String {
    let mut out = String::with_capacity(words * 8);
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        if rng.random_bool(0.05) {
            out.push_str(&format!(" #{}", rng.random_range(1000..99_999)));
        }
    }
    out.push('.');
    out
}

fn paragraph(rng: &mut StdRng, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 64);
    while out.len() < bytes {
        let words = rng.random_range(6..18);
        out.push_str(&sentence(rng, words));
        out.push(' ');
    }
    out
}

fn tools() -> Vec<Tool> {
    let tool = |name: &str, description: &str, parameters: &str| Tool {
        kind: "function".into(),
        name: name.into(),
        description: Some(description.into()),
        parameters: Some(parameters.into()),
    };
    vec![
        tool(
            "lookup_order",
            "Look up an order by its reference number.",
            r#"{"type":"object","properties":{"order_ref":{"type":"string"}},"required":["order_ref"]}"#,
        ),
        tool(
            "route_ticket",
            "Route a ticket to a team.",
            r#"{"type":"object","properties":{"team":{"type":"string","enum":["billing","logistics","legal"]},"priority":{"type":"integer"}},"required":["team"]}"#,
        ),
    ]
}

/// Generates the lake's records and hands each to `sink` in the order a proxy would append
/// them (a step's vault entries and audit event with it, rewards after the step they follow).
pub fn generate(
    config: &SynthConfig,
    mut sink: impl FnMut(Record) -> Result<()>,
) -> Result<SynthSummary> {
    const DAY: i64 = 86_400_000_000;
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut summary = SynthSummary::default();
    let start = config.end_micros - i64::from(config.days.max(1)) * DAY;
    let span = (config.end_micros - start).max(1);
    let tools = tools();
    while summary.steps < config.steps {
        let tenant = format!("tenant-{:02}", rng.random_range(0..config.tenants.max(1)));
        let agent = AGENTS[rng.random_range(0..config.agents_per_tenant.clamp(1, AGENTS.len()))];
        let model = MODELS[rng.random_range(0..MODELS.len())];
        let trajectory_id = atdp_schema::new_id();
        let turns = rng.random_range(1..=6).min(config.steps - summary.steps);
        let mut at = start + rng.random_range(0..span - 60_000_000);
        let system_bytes = rng.random_range(1_000..4_000);
        let mut history = vec![Message {
            role: "system".into(),
            content: Some(format!(
                "You are the {agent} agent of {tenant}. {}",
                paragraph(&mut rng, system_bytes)
            )),
            ..Message::default()
        }];
        let mut parent: Option<String> = None;
        summary.trajectories += 1;
        for turn in 0..turns {
            let step_id = atdp_schema::new_id();
            let mut pii = Vec::new();
            let user_bytes = rng.random_range(400..3_000);
            let mut user_text = paragraph(&mut rng, user_bytes);
            if rng.random_bool(0.4) {
                let entity = ENTITIES[rng.random_range(0..ENTITIES.len())];
                let token = format!("<{entity}_{:06x}>", rng.random_range(0..0xff_ffffu32));
                user_text.push_str(&format!(" Contact: {token}."));
                pii.push(PiiSpan {
                    field: format!("request_messages[{}].content", history.len()),
                    entity: entity.into(),
                    token: token.clone(),
                    action: "tokenize".into(),
                });
                let mut nonce = vec![0u8; 12];
                rng.fill(&mut nonce[..]);
                let mut ciphertext = vec![0u8; rng.random_range(24..64)];
                rng.fill(&mut ciphertext[..]);
                sink(Record::Vault(VaultEntry {
                    tenant_id: tenant.clone(),
                    token,
                    entity: entity.into(),
                    key_id: "k1".into(),
                    nonce,
                    ciphertext,
                    created_at: at,
                }))?;
                summary.vault_entries += 1;
            }
            history.push(Message {
                role: "user".into(),
                content: Some(user_text),
                ..Message::default()
            });
            let calls_tool = rng.random_bool(0.35);
            let response = if calls_tool {
                Message {
                    role: "assistant".into(),
                    tool_calls: vec![ToolCall {
                        id: format!("call_{:08x}", rng.random::<u32>()),
                        name: "lookup_order".into(),
                        arguments: format!(
                            r#"{{"order_ref":"SO-{}"}}"#,
                            rng.random_range(10_000..99_999)
                        ),
                    }],
                    ..Message::default()
                }
            } else {
                let reply_bytes = rng.random_range(200..2_000);
                Message {
                    role: "assistant".into(),
                    content: Some(paragraph(&mut rng, reply_bytes)),
                    ..Message::default()
                }
            };
            let latency = rng.random_range(300_000..6_000_000);
            let status = if rng.random_bool(0.02) {
                "upstream_error"
            } else {
                "ok"
            };
            let completion_tokens = response.content.as_ref().map_or(24, |c| c.len() as i64 / 4);
            let step = Step {
                step_id: step_id.clone(),
                trajectory_id: trajectory_id.clone(),
                parent_step_id: parent.clone(),
                turn_index: turn as i32,
                tenant_id: tenant.clone(),
                agent_id: agent.into(),
                started_at: at,
                ended_at: Some(at + latency),
                api: if model.starts_with("claude") {
                    "anthropic.messages"
                } else {
                    "openai.chat"
                }
                .into(),
                upstream: if model.starts_with("claude") {
                    "anthropic"
                } else if model.starts_with("local/") {
                    "local"
                } else {
                    "openai"
                }
                .into(),
                model_requested: model.into(),
                model_served: Some(model.into()),
                policy_version: model.starts_with("local/").then(|| "v3".into()),
                request_messages: history.clone(),
                tools: tools.clone(),
                params: Some(r#"{"temperature":0.2,"max_tokens":1024}"#.into()),
                response_message: (status == "ok").then(|| response.clone()),
                finish_reason: (status == "ok")
                    .then(|| if calls_tool { "tool_calls" } else { "stop" }.into()),
                status: status.into(),
                error: (status != "ok").then(|| "upstream returned 503".into()),
                prompt_tokens: Some(
                    history
                        .iter()
                        .map(|m| m.content.as_ref().map_or(0, |c| c.len() as i64 / 4))
                        .sum(),
                ),
                completion_tokens: Some(completion_tokens),
                completion_token_ids: model.starts_with("local/").then(|| {
                    (0..completion_tokens.min(256))
                        .map(|_| rng.random_range(0..150_000))
                        .collect()
                }),
                completion_logprobs: model.starts_with("local/").then(|| {
                    (0..completion_tokens.min(256))
                        .map(|_| -rng.random::<f32>() * 3.0)
                        .collect()
                }),
                pii,
                tags: BTreeMap::from([("env".to_owned(), "prod".to_owned())]),
                extra_json: Some(r#"{"seed":null,"user":"svc-agent"}"#.into()),
                // As the proxy records a step under its default training policy.
                training_eligible: Some(true),
                legal_basis: None,
                retention_until: None,
                consent_source: Some("policy:default".into()),
            };
            sink(Record::Audit(AuditEvent {
                event_id: atdp_schema::new_id(),
                tenant_id: tenant.clone(),
                occurred_at: at,
                kind: "request_allowed".into(),
                actor: format!("key:{tenant}-{agent}"),
                subject: Some(step_id.clone()),
                decision: Some("allow".into()),
                policy_id: Some("quickstart".into()),
                ..AuditEvent::default()
            }))?;
            summary.audit_events += 1;
            sink(Record::from(step))?;
            summary.steps += 1;
            if rng.random_bool(0.2) {
                sink(Record::Reward(Reward {
                    reward_id: atdp_schema::new_id(),
                    trajectory_id: trajectory_id.clone(),
                    step_id: Some(step_id.clone()),
                    tenant_id: tenant.clone(),
                    name: "user_rating".into(),
                    value: f64::from(rng.random_range(1..=5)),
                    source: "api".into(),
                    created_at: at + latency + 1_000_000,
                    ..Reward::default()
                }))?;
                summary.rewards += 1;
            }
            history.push(response.clone());
            if calls_tool {
                let result_bytes = rng.random_range(200..1_500);
                history.push(Message {
                    role: "tool".into(),
                    content: Some(paragraph(&mut rng, result_bytes)),
                    tool_call_id: response.tool_calls.first().map(|c| c.id.clone()),
                    ..Message::default()
                });
            }
            parent = Some(step_id);
            at += latency + rng.random_range(1_000_000..30_000_000);
        }
        sink(Record::Reward(Reward {
            reward_id: atdp_schema::new_id(),
            trajectory_id: trajectory_id.clone(),
            step_id: None,
            tenant_id: tenant.clone(),
            name: "task_success".into(),
            value: if rng.random_bool(0.6) { 1.0 } else { 0.0 },
            source: "sql:ticket_closed_by_routed_team".into(),
            reward_fn_version: Some("sha256:5f1c0e".into()),
            terminal: true,
            created_at: at,
            tags: BTreeMap::new(),
        }))?;
        summary.rewards += 1;
    }
    Ok(summary)
}
