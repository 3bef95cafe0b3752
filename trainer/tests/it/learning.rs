//! Training from a synthetic lake: GRPO makes a rewarded reply more likely and a punished
//! one less likely; helpers that write lakes and run configurations for the other tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use atdp_lake::{LakeWriter, WriterConfig};

use atdp_model_files::{Arch, ChatFormat};
use atdp_schema::{Message, Record, Reward, Step, new_id};
use atdp_trainer::{
    Adapter, InitSpec, LoadOptions, Lora, Model, RawRunConfig, RunConfig, TrainOptions,
    build_examples, init_model, load_adapter,
};
use candle_core::Tensor;
use tempfile::TempDir;

pub const GOOD: &str = "Yes, gladly.";
pub const BAD: &str = "No.";

/// A model directory, a lake and an output directory under one temporary directory.
pub struct Setup {
    pub root: TempDir,
}

impl Setup {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        // init_std 0.2 (not 0.02): logits far from uniform, so that LoRA on the
        // projections can move them within a few steps (the head itself is not adapted).
        let mut spec = InitSpec::tiny(Arch::Qwen2);
        spec.init_std = 0.2;
        init_model(root.path().join("model"), &spec).unwrap();
        Setup { root }
    }
    pub fn model(&self) -> PathBuf {
        self.root.path().join("model")
    }
    pub fn lake(&self) -> PathBuf {
        self.root.path().join("lake")
    }
    pub fn out(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// A run config over this setup's model and lake, `extra` TOML appended.
    pub fn config(&self, out: &str, extra: &str) -> RunConfig {
        let text = format!(
            "model = {:?}\nlake = {:?}\nout = {:?}\n{extra}",
            self.model(),
            self.lake().display().to_string(),
            self.out(out)
        );
        let path = Path::new("train.toml");
        RawRunConfig::from_toml_str(&text, path)
            .unwrap()
            .validate(path)
            .unwrap()
    }
}

pub fn prompt() -> Vec<Message> {
    let msg = |role: &str, content: &str| Message {
        role: role.into(),
        content: Some(content.into()),
        ..Message::default()
    };
    vec![msg("system", "Hi."), msg("user", "Ok?")]
}

fn reply(text: &str) -> Message {
    Message {
        role: "assistant".into(),
        content: Some(text.into()),
        ..Message::default()
    }
}

/// One single-step trajectory answering [`prompt`] with `text`, and its terminal
/// trajectory reward `value` named `ok` (version `version`); the step is marked eligible for
/// training.
pub fn episode(text: &str, value: f64, version: Option<&str>, at: i64) -> (Step, Reward) {
    let trajectory_id = new_id();
    let step = Step {
        step_id: new_id(),
        trajectory_id: trajectory_id.clone(),
        turn_index: 0,
        tenant_id: "acme".into(),
        agent_id: "support".into(),
        started_at: at,
        ended_at: Some(at + 1000),
        api: "openai.chat".into(),
        upstream: "mock".into(),
        model_requested: "tiny".into(),
        request_messages: prompt(),
        response_message: Some(reply(text)),
        finish_reason: Some("stop".into()),
        status: "ok".into(),
        // As the proxy marks a step under its default training policy.
        training_eligible: Some(true),
        consent_source: Some("policy:default".into()),
        ..Step::default()
    };
    let reward = Reward {
        reward_id: new_id(),
        trajectory_id,
        step_id: None,
        tenant_id: "acme".into(),
        name: "ok".into(),
        value,
        source: "api".into(),
        reward_fn_version: version.map(Into::into),
        terminal: true,
        created_at: at + 5000,
        ..Reward::default()
    };
    (step, reward)
}

/// `n` episodes answering [`GOOD`] (+1) and `n` answering [`BAD`] (−1).
pub fn good_and_bad(n: usize) -> Vec<Record> {
    rewarded_pairs(n, &reply(GOOD), &reply(BAD))
}

/// `n` episodes answering [`prompt`] with `good` (+1) and `n` with `bad` (−1), alternating.
fn rewarded_pairs(n: usize, good: &Message, bad: &Message) -> Vec<Record> {
    let base = 1_795_910_400_000_000; // 2026-11-29
    let mut records = Vec::new();
    for i in 0..n {
        for (j, (message, value)) in [(good, 1.0), (bad, -1.0)].into_iter().enumerate() {
            let (mut s, r) = episode("", value, Some("v1"), base + (2 * i + j) as i64 * 1_000_000);
            s.response_message = Some(message.clone());
            records.push(s.into());
            records.push(r.into());
        }
    }
    records
}

/// The settings of a ten-step GRPO run on the `ok` reward, `objective` added to its
/// `[objective]`.
fn ten_grpo_steps(objective: &str) -> String {
    format!(
        r#"
        [select]
        tenant = "acme"
        [rewards]
        weights = {{ ok = 1.0 }}
        [objective]
        kind = "grpo"
        {objective}
        [train]
        steps = 10
        lr = 0.05
        min_lr_ratio = 1.0
        batch_size = 4
        seed = 3
        [lora]
        r = 4
        alpha = 8
        "#
    )
}

/// Writes `records` to the lake at `lake` (small segments, flushed and shut down).
pub fn write_lake(lake: &Path, records: Vec<Record>) {
    let wal = lake.with_extension("wal");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut config = WriterConfig::new(lake.display().to_string(), &wal);
        config.segment_max_bytes = 1 << 16;
        config.fsync = false;
        let writer = LakeWriter::open(config).await.unwrap();
        for r in records {
            writer.append_record(&r).unwrap();
        }
        writer.flush().await.unwrap();
        assert!(writer.shutdown(Duration::from_secs(30)).await.unwrap());
    });
}

/// Mean log-prob per completion token of replying `text` to [`prompt`].
pub fn reply_log_prob(model: &Model, chat: &ChatFormat, adapter: Adapter<'_>, text: &str) -> f64 {
    message_log_prob(model, chat, adapter, reply(text))
}

/// Mean log-prob per completion token of answering [`prompt`] with `message`.
fn message_log_prob(
    model: &Model,
    chat: &ChatFormat,
    adapter: Adapter<'_>,
    message: Message,
) -> f64 {
    let (mut s, _) = episode("", 0.0, None, 0);
    s.response_message = Some(message);
    let (examples, _) = build_examples(&[s], chat, 300, 512).unwrap();
    let e = &examples[0];
    let input = Tensor::new(e.tokens.as_slice(), model.device())
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let lp = model.next_token_log_probs(&input, adapter).unwrap();
    let n = e.completion_len();
    let lp = lp.get(0).unwrap().narrow(0, e.prompt_len - 1, n).unwrap();
    lp.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64 / n as f64
}

#[test]
fn grpo_raises_the_rewarded_reply_and_lowers_the_punished_one() {
    let setup = Setup::new();
    write_lake(&setup.lake(), good_and_bad(2));
    let config = setup.config("run", &ten_grpo_steps(""));
    let mut lines = Vec::new();
    let report = atdp_trainer::run(&config, &TrainOptions::default(), &mut |m| {
        lines.push(m.clone())
    })
    .unwrap();
    assert_eq!(report.steps_done, 10);
    assert_eq!(report.rewarded_examples, 4);
    assert_eq!(lines.len(), 10);
    // One group of 4 with returns ±1: advantages ±1, mean 0.
    assert!(lines.iter().all(|m| m.advantage_mean.abs() < 1e-6));
    assert!((lines[0].advantage_max - 1.0).abs() < 1e-3);

    let model = Model::load(setup.model(), &LoadOptions::default()).unwrap();
    let chat = ChatFormat::load(setup.model()).unwrap();
    let trained: Lora = load_adapter(setup.out("run"), &model).unwrap();
    let before_good = reply_log_prob(&model, &chat, Adapter::Off, GOOD);
    let before_bad = reply_log_prob(&model, &chat, Adapter::Off, BAD);
    let after_good = reply_log_prob(&model, &chat, Adapter::On(&trained), GOOD);
    let after_bad = reply_log_prob(&model, &chat, Adapter::On(&trained), BAD);
    eprintln!("good {before_good:.3} → {after_good:.3}, bad {before_bad:.3} → {after_bad:.3}");
    assert!(
        after_good > before_good + 1.0,
        "rewarded reply: {before_good} → {after_good}"
    );
    assert!(
        after_bad < before_bad - 1.0,
        "punished reply: {before_bad} → {after_bad}"
    );

    // The manifest records what was read and the reward versions.
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("run").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["rewards"]["ok"]["reward_fn_versions"][0], "v1");
    assert_eq!(manifest["rewards"]["ok"]["rows"], 4);
    assert_eq!(manifest["tables"][0]["table"], "steps");
    assert_eq!(manifest["tables"][0]["rows_read"], 4);
    assert!(manifest["tables"][0]["version"].as_u64().is_some());
    assert_eq!(manifest["base_model"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(manifest["steps"], 10);
    let metrics = std::fs::read_to_string(setup.out("run").join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 10);
    assert!(setup.out("run").join("report.html").exists());
}

/// A reply calling `name` (the same arguments every time).
fn call(name: &str) -> Message {
    Message {
        role: "assistant".into(),
        tool_calls: vec![atdp_schema::ToolCall {
            id: "call_1".into(),
            name: name.into(),
            arguments: r#"{"order": "8812"}"#.into(),
        }],
        ..Message::default()
    }
}

#[test]
fn crediting_only_a_calls_choices_still_learns_which_tool_to_call() {
    let setup = Setup::new();
    write_lake(
        &setup.lake(),
        rewarded_pairs(2, &call("refund"), &call("search")),
    );
    let config = setup.config(
        "run",
        &ten_grpo_steps("tool_call_credit = \"tool_choices\""),
    );
    let mut lines = Vec::new();
    atdp_trainer::run(&config, &TrainOptions::default(), &mut |m| {
        lines.push(m.clone())
    })
    .unwrap();
    assert!(lines.iter().all(|m| m.loss.is_finite()));

    let model = Model::load(setup.model(), &LoadOptions::default()).unwrap();
    let chat = ChatFormat::load(setup.model()).unwrap();
    let trained: Lora = load_adapter(setup.out("run"), &model).unwrap();
    let lp = |adapter, name| message_log_prob(&model, &chat, adapter, call(name));
    let good = lp(Adapter::On(&trained), "refund") - lp(Adapter::Off, "refund");
    let bad = lp(Adapter::On(&trained), "search") - lp(Adapter::Off, "search");
    eprintln!("rewarded call {good:+.3}, punished call {bad:+.3} nats per token");
    assert!(good > bad + 0.2, "rewarded {good}, punished {bad}");

    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("run").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["hyper_parameters"]["tool_call_credit"],
        "tool_choices"
    );
}
