//! A small lake of realistic, really masked trajectories in tenants `demo` and `other`, and a
//! copy of the quickstart policy directory with one more auditor (an analyst of `demo`, who may
//! read but not reveal).

use std::path::{Path, PathBuf};
use std::time::Duration;

use atdp_audit::{Auditor, Catalog, Trail};
use atdp_lake::{Lake, LakeWriter, WriterConfig};
use atdp_policies::{Destination, KeyRing, Policy, hash_api_key};
use atdp_schema::{
    AuditEvent, Message, PiiSpan, Reward, Step, ToolCall, VaultEntry, new_id, now_micros,
};

pub const DEMO_AUDITOR: &str = "sk-atdp-demo-auditor";
pub const DEMO_ANALYST: &str = "sk-test-demo-analyst";
/// The bearer token of the test console's `/metrics`.
pub const METRICS_TOKEN: &str = "prometheus-scrape-token-0123456789abcdef";
pub const EMAIL: &str = "jane.doe@example.com";
pub const CARD: &str = "4111 1111 1111 1111";
pub const OTHER_EMAIL: &str = "bob.stone@example.org";

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub lake_url: String,
    pub lake: Lake,
    pub keys: PathBuf,
    pub policy_dir: PathBuf,
    pub policy: Policy,
    /// demo: two steps (a tool call, then the answer), rewards, PII.
    pub demo_trajectory: String,
    pub demo_steps: Vec<String>,
    /// other: one step.
    pub other_trajectory: String,
}

impl Fixture {
    pub async fn catalog(&self) -> Catalog {
        Catalog::open(&self.lake, &Default::default())
            .await
            .unwrap()
    }

    pub fn auditor(&self, key: &str) -> Auditor {
        Auditor::from_key(&self.policy.access, key).unwrap()
    }

    pub async fn trail(&self, name: &str) -> Trail {
        Trail::open(WriterConfig::new(
            self.lake_url.clone(),
            self.dir.path().join(format!("wal-{name}")),
        ))
        .await
        .unwrap()
    }

    /// The token `value` got in the demo trajectory.
    pub async fn token_of(&self, entity: &str, value: &str) -> String {
        KeyRing::load(&self.keys)
            .unwrap()
            .token("demo", entity, value)
            .unwrap()
    }

    pub fn audit_file_paths(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let root = self.lake_root().join("atdp/v1/audit");
        collect_parquet(&root, &mut files);
        files.sort();
        files
    }

    pub fn lake_root(&self) -> PathBuf {
        PathBuf::from(&self.lake_url)
    }
}

fn collect_parquet(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !path.ends_with("_delta_log") {
                collect_parquet(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "parquet") {
            out.push(path);
        }
    }
}

/// Copies the quickstart policy and adds an analyst auditor of `demo`.
fn policy_dir(into: &Path) -> PathBuf {
    let quickstart = atdp_testkit::repo_root().join("policies/examples/quickstart");
    let dir = into.join("policy");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&quickstart).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let path = dir.join("entities.json");
    let mut entities: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    entities.as_array_mut().unwrap().push(serde_json::json!({
        "uid": {"type": "Atdp::Auditor", "id": hash_api_key(DEMO_ANALYST)},
        "attrs": {"role": "analyst", "tenants": [{"__entity": {"type": "Atdp::Tenant", "id": "demo"}}]},
        "parents": []
    }));
    std::fs::write(&path, serde_json::to_string_pretty(&entities).unwrap()).unwrap();
    dir
}

/// Masks `text` for storage in `tenant` as the proxy does, noting spans and vault entries.
struct Masker<'a> {
    policy: &'a Policy,
    keys: &'a KeyRing,
    tenant: &'a str,
    spans: Vec<PiiSpan>,
    vault: Vec<VaultEntry>,
}

impl Masker<'_> {
    fn mask(&mut self, field: &str, text: &str) -> String {
        let spans = self.policy.scanner.scan(text);
        let masked = atdp_policies::mask(
            text,
            &spans,
            self.policy.masking.policy(Destination::Storage),
            self.tenant,
            self.keys,
        )
        .unwrap();
        for span in &masked.spans {
            self.spans.push(PiiSpan {
                field: field.to_owned(),
                entity: span.entity.clone(),
                token: span.token.clone(),
                action: span.action.name().to_owned(),
            });
        }
        for item in masked.vault {
            if !self.vault.iter().any(|v| v.token == item.token) {
                self.vault.push(VaultEntry {
                    tenant_id: self.tenant.to_owned(),
                    token: item.token,
                    entity: item.entity,
                    key_id: item.sealed.key_id,
                    nonce: item.sealed.nonce,
                    ciphertext: item.sealed.ciphertext,
                    created_at: now_micros(),
                });
            }
        }
        masked.text
    }

    fn message(&mut self, field: &str, role: &str, text: &str) -> Message {
        Message {
            role: role.into(),
            content: Some(self.mask(field, text)),
            ..Message::default()
        }
    }
}

pub fn step(tenant: &str, agent: &str, trajectory: &str, parent: Option<&str>, turn: i32) -> Step {
    Step {
        step_id: new_id(),
        trajectory_id: trajectory.to_owned(),
        parent_step_id: parent.map(str::to_owned),
        turn_index: turn,
        tenant_id: tenant.to_owned(),
        agent_id: agent.to_owned(),
        started_at: now_micros(),
        ended_at: Some(now_micros() + 900_000),
        api: "openai.chat".into(),
        upstream: "default".into(),
        model_requested: "gpt-4o-mini".into(),
        model_served: Some("gpt-4o-mini-2024-07-18".into()),
        status: "ok".into(),
        finish_reason: Some("stop".into()),
        prompt_tokens: Some(120),
        completion_tokens: Some(40),
        ..Step::default()
    }
}

pub async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let lake_url = dir.path().join("lake").to_string_lossy().into_owned();
    let policy_dir = policy_dir(dir.path());
    let policy = Policy::load(&policy_dir).unwrap();
    let mut ring = KeyRing::default();
    ring.generate("demo");
    ring.generate("other");
    let keys = dir.path().join("keys.json");
    std::fs::write(&keys, ring.to_json().unwrap()).unwrap();

    let mut config = WriterConfig::new(lake_url.clone(), dir.path().join("wal-proxy"));
    config.segment_max_age = Duration::from_millis(200);
    let writer = LakeWriter::open(config).await.unwrap();

    // demo: the agent looks the customer up with a tool, then answers.
    let demo_trajectory = new_id();
    let mut m = Masker {
        policy: &policy,
        keys: &ring,
        tenant: "demo",
        spans: Vec::new(),
        vault: Vec::new(),
    };
    let system = m.message(
        "request_messages[0].content",
        "system",
        "You are the support agent of Demo Corp. Be brief.",
    );
    let user = m.message(
        "request_messages[1].content",
        "user",
        &format!(
            "Hi, I am Jane. My e-mail is {EMAIL}, I paid with card {CARD}. Where is my refund?"
        ),
    );
    let call_arguments = m.mask(
        "response_message.tool_calls[0].arguments",
        &format!("{{\"email\":\"{EMAIL}\"}}"),
    );
    let mut first = step("demo", "demo-agent", &demo_trajectory, None, 0);
    first.request_messages = vec![system.clone(), user.clone()];
    first.response_message = Some(Message {
        role: "assistant".into(),
        tool_calls: vec![ToolCall {
            id: "call_7a1".into(),
            name: "lookup_customer".into(),
            arguments: call_arguments.clone(),
        }],
        ..Message::default()
    });
    first.finish_reason = Some("tool_calls".into());
    first.pii = std::mem::take(&mut m.spans);

    let tool_result = m.message(
        "request_messages[3].content",
        "tool",
        &format!(
            "{{\"customer\":\"Jane Doe\",\"email\":\"{EMAIL}\",\"refund\":\"sent 2026-11-27\"}}"
        ),
    );
    let answer = m.message(
        "response_message.content",
        "assistant",
        &format!("Your refund was sent on 27 November; the receipt went to {EMAIL}."),
    );
    let mut second = step(
        "demo",
        "demo-agent",
        &demo_trajectory,
        Some(&first.step_id),
        1,
    );
    second.started_at = first.started_at + 1_500_000;
    let mut history = first.request_messages.clone();
    history.push(first.response_message.clone().unwrap());
    history.push(Message {
        tool_call_id: Some("call_7a1".into()),
        ..tool_result
    });
    second.request_messages = history;
    second.response_message = Some(answer);
    // The second step's spans: everything its stored text holds.
    second.pii = first.pii.clone();
    second.pii.append(&mut m.spans);

    let demo_steps = vec![first.step_id.clone(), second.step_id.clone()];
    let demo_vault = std::mem::take(&mut m.vault);

    // other: one step with its own customer.
    let other_trajectory = new_id();
    let mut o = Masker {
        policy: &policy,
        keys: &ring,
        tenant: "other",
        spans: Vec::new(),
        vault: Vec::new(),
    };
    let mut third = step("other", "other-agent", &other_trajectory, None, 0);
    third.request_messages = vec![o.message(
        "request_messages[0].content",
        "user",
        &format!("Please update my address, I am {OTHER_EMAIL}. Where is my refund?"),
    )];
    third.response_message = Some(o.message("response_message.content", "assistant", "Done."));
    third.pii = std::mem::take(&mut o.spans);

    for s in [first, second, third] {
        writer.append(s).unwrap();
    }
    for v in demo_vault.into_iter().chain(o.vault) {
        writer.append(v).unwrap();
    }
    writer
        .append(Reward {
            reward_id: new_id(),
            trajectory_id: demo_trajectory.clone(),
            step_id: None,
            tenant_id: "demo".into(),
            name: "task_success".into(),
            value: 1.0,
            source: "api".into(),
            terminal: true,
            created_at: now_micros(),
            ..Reward::default()
        })
        .unwrap();
    writer
        .append(Reward {
            reward_id: new_id(),
            trajectory_id: demo_trajectory.clone(),
            step_id: Some(demo_steps[0].clone()),
            tenant_id: "demo".into(),
            name: "tool_ok".into(),
            value: 0.5,
            source: "api".into(),
            created_at: now_micros(),
            ..Reward::default()
        })
        .unwrap();
    for (tenant, subject) in [("demo", &demo_steps[0]), ("demo", &demo_steps[1])] {
        writer
            .append(AuditEvent {
                event_id: new_id(),
                tenant_id: tenant.into(),
                occurred_at: now_micros(),
                kind: "request_allowed".into(),
                actor: "key:demo-agent".into(),
                subject: Some(subject.clone()),
                decision: Some("allow".into()),
                policy_id: Some("active-keys-invoke".into()),
                ..AuditEvent::default()
            })
            .unwrap();
    }
    writer.flush().await.unwrap();
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());

    let lake = Lake::new(&lake_url, Default::default()).unwrap();
    Fixture {
        dir,
        lake_url,
        lake,
        keys,
        policy_dir,
        policy,
        demo_trajectory,
        demo_steps,
        other_trajectory,
    }
}

impl Fixture {
    /// `text` masked for storage in `tenant` as the proxy does it: the stored text, its
    /// spans (for `field`) and its vault entries.
    pub fn mask(
        &self,
        tenant: &str,
        field: &str,
        text: &str,
    ) -> (String, Vec<PiiSpan>, Vec<VaultEntry>) {
        let keys = KeyRing::load(&self.keys).unwrap();
        let mut m = Masker {
            policy: &self.policy,
            keys: &keys,
            tenant,
            spans: Vec::new(),
            vault: Vec::new(),
        };
        let masked = m.mask(field, text);
        (masked, m.spans, m.vault)
    }

    /// Writes more steps, vault entries and rewards into the lake, through the writer (with
    /// its own write-ahead log `wal`), and waits until they are committed.
    pub async fn append(
        &self,
        wal: &str,
        steps: Vec<Step>,
        vault: Vec<VaultEntry>,
        rewards: Vec<Reward>,
    ) {
        let mut config = WriterConfig::new(self.lake_url.clone(), self.dir.path().join(wal));
        config.segment_max_age = Duration::from_millis(200);
        let writer = LakeWriter::open(config).await.unwrap();
        for s in steps {
            writer.append(s).unwrap();
        }
        for v in vault {
            writer.append(v).unwrap();
        }
        for r in rewards {
            writer.append(r).unwrap();
        }
        writer.flush().await.unwrap();
        assert!(writer.shutdown(Duration::from_secs(30)).await.unwrap());
    }

    /// The values of text column `column` of the `audit` rows matching `filter`, in chain
    /// order.
    pub async fn audit_column(&self, column: &str, filter: &str) -> Vec<String> {
        let batches = self
            .catalog()
            .await
            .sql(&format!(
                "SELECT {column} FROM audit WHERE {filter} ORDER BY occurred_at, chain_seq"
            ))
            .await
            .unwrap();
        let mut out = Vec::new();
        for batch in &batches {
            let column =
                arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
            let strings = arrow::array::cast::as_string_array(&column);
            out.extend(strings.iter().map(|v| v.unwrap_or_default().to_owned()));
        }
        out
    }

    /// The console on a free loopback port, over this lake and policy.
    pub async fn console(&self) -> atdp_audit::Server {
        self.console_with(false).await
    }

    /// The console, configured as behind a TLS-terminating proxy when `tls`.
    pub async fn console_with(&self, tls: bool) -> atdp_audit::Server {
        atdp_audit::serve(
            self.lake.clone(),
            self.trail(if tls { "console-tls" } else { "console" })
                .await,
            atdp_audit::ConsoleConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                policy_dir: self.policy_dir.clone(),
                keys: self.keys.clone(),
                secure_cookie: tls,
                page_size: 20,
                tls: None,
                metrics_token: Some(METRICS_TOKEN.to_owned()),
            },
        )
        .await
        .unwrap()
    }

    /// The number of rows of the `audit` table matching `filter` (SQL), as the lake holds
    /// them now.
    pub async fn audit_rows(&self, filter: &str) -> u64 {
        let batches = self
            .catalog()
            .await
            .sql(&format!("SELECT count(*) AS n FROM audit WHERE {filter}"))
            .await
            .unwrap();
        let column = batches[0].column(0);
        arrow::array::cast::as_primitive_array::<arrow::datatypes::Int64Type>(column).value(0)
            as u64
    }

    /// The `detail_json` of the `audit` rows matching `filter`, parsed.
    pub async fn audit_details(&self, filter: &str) -> Vec<serde_json::Value> {
        let batches = self
            .catalog()
            .await
            .sql(&format!("SELECT detail_json FROM audit WHERE {filter}"))
            .await
            .unwrap();
        let mut out = Vec::new();
        for batch in &batches {
            let column =
                arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
            let strings = arrow::array::cast::as_string_array(&column);
            for value in strings.iter().flatten() {
                out.push(serde_json::from_str(value).unwrap());
            }
        }
        out
    }

    /// A SQL query's result over the lake as it is now, as a printed table.
    pub async fn sql_table(&self, sql: &str) -> String {
        let batches = self.catalog().await.sql(sql).await.unwrap();
        arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
    }

    /// `atdp-audit` on this lake, policy and key file, with its own write-ahead log `wal`.
    pub fn command(&self, wal: &str) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_atdp-audit"));
        command
            .args(["--lake", &self.lake_url, "--policy"])
            .arg(&self.policy_dir)
            .arg("--keys")
            .arg(&self.keys)
            .arg("--wal")
            .arg(self.dir.path().join(wal));
        command
    }
}
