//! Training runs: exact resume from a checkpoint, and bad input (empty selection, NaN
//! rewards, missing model files, a changed reward function) giving a clear error and no
//! adapter; `atdp-train run` on the command line; steps that may not be trained on never
//! read, and counted in the manifest.

use std::path::Path;
use std::process::Command;

use atdp_lake::runs::{self, RunInfo, RunState};
use atdp_trainer::{Error, TrainOptions};
use candle_core::Device;

use crate::learning::{GOOD, Setup, episode, good_and_bad, write_lake};

const SMALL: &str = r#"
[select]
tenant = "acme"
[rewards]
weights = { ok = 1.0 }
[train]
steps = 4
lr = 0.01
batch_size = 2
grad_accumulation = 2
token_budget = 128
max_len = 64
warmup_steps = 2
checkpoint_every = 2
seed = 5
[lora]
r = 2
dropout = 0.1
targets = ["q_proj", "v_proj", "down_proj"]
"#;

fn no_progress() -> impl FnMut(&atdp_trainer::StepMetrics) {
    |_| {}
}

fn adapter_written(out: &Path) -> bool {
    out.join("adapter_model.safetensors").exists() || out.join("adapter_config.json").exists()
}

#[test]
fn a_resumed_run_ends_where_an_uninterrupted_one_does() {
    let setup = Setup::new();
    write_lake(&setup.lake(), good_and_bad(3));
    // REINFORCE with a running baseline: its state must survive the checkpoint too.
    let extra =
        format!("{SMALL}\n[objective]\nkind = \"reinforce\"\nbaseline = \"running_mean\"\n");
    let straight = setup.config("straight", &extra);
    let report =
        atdp_trainer::run(&straight, &TrainOptions::default(), &mut no_progress()).unwrap();
    assert_eq!(report.steps_done, 4);

    let resumed = setup.config("resumed", &extra);
    let stop = TrainOptions {
        stop_after: Some(3),
        ..TrainOptions::default()
    };
    let first = atdp_trainer::run(&resumed, &stop, &mut no_progress()).unwrap();
    assert_eq!((first.steps_done, first.adapter.is_none()), (3, true));
    assert!(!adapter_written(&setup.out("resumed")));
    let second = atdp_trainer::run(&resumed, &TrainOptions::default(), &mut no_progress()).unwrap();
    assert_eq!((second.resumed_from, second.steps_done), (2, 4));

    let load = |dir: &str| {
        candle_core::safetensors::load(
            setup.out(dir).join("adapter_model.safetensors"),
            &Device::Cpu,
        )
        .unwrap()
    };
    let (a, b) = (load("straight"), load("resumed"));
    assert_eq!(a.len(), 3 * 2 * 2);
    let mut moved = false;
    for (name, ta) in &a {
        let va = ta.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let vb = b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let diff = va
            .iter()
            .zip(&vb)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(diff <= 1e-6, "{name}: {diff}");
        moved |= name.contains("lora_B") && va.iter().any(|v| *v != 0.0);
    }
    assert!(moved, "training changed B");
    // The metrics of the interrupted step 3 were replaced, not duplicated.
    let metrics = std::fs::read_to_string(setup.out("resumed").join("metrics.jsonl")).unwrap();
    let steps: Vec<u64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, [1, 2, 3, 4]);

    // Each invocation published its run beside the lake's tables, as the console reads them.
    let published = published_runs(&setup.lake());
    let states: Vec<(RunState, u64, usize)> = published
        .iter()
        .map(|(info, metrics)| (info.state, info.steps_done, metrics.len()))
        .collect();
    assert_eq!(
        states,
        [
            (RunState::Finished, 4, 4),
            (RunState::Stopped, 3, 3),
            (RunState::Finished, 4, 2)
        ]
    );
    let (straight_run, metrics) = &published[0];
    assert_eq!(straight_run.run_id, report.run_id.clone().unwrap());
    assert_eq!(straight_run.tenants, ["acme"]);
    assert_eq!(metrics[3]["step"], 4);
    assert_eq!(
        metrics[3]["loss"].as_f64().unwrap(),
        report.final_metrics.as_ref().unwrap().loss
    );
    // The reward's distribution over the trajectories trained on: good ones 1, bad ones -1.
    let ok = &straight_run.rewards["ok"];
    assert_eq!(
        (ok.min, ok.max, ok.histogram.iter().sum::<u64>()),
        (-1.0, 1.0, ok.count as u64)
    );
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(setup.out("straight").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["run_id"], straight_run.run_id.as_str());
}

/// The runs published under `lake`, in the order they started, with their metrics.
fn published_runs(lake: &Path) -> Vec<(RunInfo, Vec<serde_json::Value>)> {
    let lake = atdp_lake::Lake::new(lake.to_str().unwrap(), Default::default()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut found = Vec::new();
        for info in runs::runs(&lake).await.unwrap().into_iter().rev() {
            let metrics = runs::run_metrics(&lake, &info.run_id).await.unwrap();
            found.push((info, metrics));
        }
        found
    })
}

#[test]
fn bad_input_gives_a_clear_error_and_no_adapter() {
    let setup = Setup::new();
    let mut records = good_and_bad(1);
    let (s, mut r) = episode(GOOD, 0.0, Some("v1"), 1_795_910_500_000_000);
    r.value = f64::NAN;
    r.name = "nan_reward".into();
    records.push(s.into());
    records.push(r.into());
    write_lake(&setup.lake(), records);

    // Empty selection: another tenant.
    let config = setup.config("empty", &SMALL.replace("\"acme\"", "\"nobody\""));
    let err = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap_err();
    assert!(matches!(err, Error::EmptySelection(_)), "{err}");
    assert!(err.to_string().contains("no adapter was written"), "{err}");
    assert!(!adapter_written(&setup.out("empty")));
    // Empty selection: a reward name nobody posted.
    let config = setup.config("empty2", &SMALL.replace("ok = 1.0", "rating = 1.0"));
    let err = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap_err();
    assert!(err.to_string().contains("rating"), "{err}");

    // A NaN reward among the selected names.
    let config = setup.config(
        "nan",
        &SMALL.replace("ok = 1.0", "ok = 1.0, nan_reward = 1.0"),
    );
    let err = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap_err();
    assert!(matches!(err, Error::Reward { .. }), "{err}");
    assert!(err.to_string().contains("NaN"), "{err}");
    assert!(!adapter_written(&setup.out("nan")));

    // Missing model files.
    for file in [
        "tokenizer.json",
        "model.safetensors",
        "tokenizer_config.json",
    ] {
        let broken = setup.out(&format!("model-without-{file}"));
        std::fs::create_dir_all(&broken).unwrap();
        for entry in std::fs::read_dir(setup.model()).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != file {
                std::fs::copy(entry.path(), broken.join(entry.file_name())).unwrap();
            }
        }
        let mut config = setup.config("missing", SMALL);
        config.model_dir = broken;
        let err = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress())
            .unwrap_err()
            .to_string();
        assert!(err.contains(file), "{file}: {err}");
        assert!(!adapter_written(&setup.out("missing")));
    }
}

#[test]
fn a_changed_reward_function_is_refused_unless_accepted() {
    let setup = Setup::new();
    write_lake(&setup.lake(), good_and_bad(2));
    let one_step = SMALL.replace("steps = 4", "steps = 1");
    let config = setup.config("run", &one_step);
    atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap();
    // Pretend the previous run saw another version of `ok`.
    let path = setup.out("run").join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"v1\"", "\"v0\"");
    std::fs::write(&path, text).unwrap();
    std::fs::remove_dir_all(setup.out("run").join("checkpoint")).unwrap();
    let err = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap_err();
    assert!(matches!(err, Error::RewardChanged { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("v0")
            && message.contains("v1")
            && message.contains("--accept-reward-change"),
        "{message}"
    );
    let mut accepted = config.clone();
    accepted.accept_reward_change = true;
    atdp_trainer::run(&accepted, &TrainOptions::default(), &mut no_progress()).unwrap();
}

#[test]
fn atdp_train_run_prints_progress_and_writes_the_adapter() {
    let setup = Setup::new();
    write_lake(&setup.lake(), good_and_bad(2));
    let toml = setup.root.path().join("train.toml");
    std::fs::write(
        &toml,
        format!(
            "model = \"ignored\"\nlake = \"ignored\"\nout = \"ignored\"\n{SMALL}\n[objective]\nkl_coef = 0.1\n"
        ),
    )
    .unwrap();
    let out = setup.out("cli");
    let output = Command::new(env!("CARGO_BIN_EXE_atdp-train"))
        .args([
            "run",
            "--config",
            toml.to_str().unwrap(),
            "--steps",
            "2",
            "--seed",
            "1",
        ])
        .args(["--model", setup.model().to_str().unwrap()])
        .args(["--lake", setup.lake().to_str().unwrap()])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("step 1/2") && stdout.contains("step 2/2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reward") && stdout.contains("tok/s"),
        "{stdout}"
    );
    for file in [
        "adapter_model.safetensors",
        "adapter_config.json",
        "manifest.json",
        "metrics.jsonl",
        "report.html",
    ] {
        assert!(out.join(file).exists(), "{file}");
    }
    // The KL term to the base model is 0 before the first update and positive after.
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let kl: Vec<f64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["kl"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert!(kl[0].abs() < 1e-9 && kl[1] > 0.0, "{kl:?}");
    // A bad config is one line on stderr and exit status 2.
    std::fs::write(&toml, "model = 1").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_atdp-train"))
        .args(["run", "--config", toml.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn lake_selection_and_tree_aware_returns_through_the_lake() {
    use std::collections::BTreeSet;

    use atdp_trainer::{RewardSpec, Selection, StepKey, read_lake, step_returns};

    let setup = Setup::new();
    let at = 1_795_910_400_000_000;
    // A → {B (a failed retry), C → D}, one trajectory reward; plus another agent's episode.
    let (a, reward) = episode(GOOD, 1.0, Some("v1"), at);
    let child = |parent: &atdp_schema::Step, turn: i32, offset: i64, status: &str| {
        let mut s = a.clone();
        s.step_id = atdp_schema::new_id();
        s.parent_step_id = Some(parent.step_id.clone());
        s.turn_index = turn;
        s.started_at = at + offset;
        s.status = status.into();
        s
    };
    let b = child(&a, 1, 10, "upstream_error");
    let c = child(&a, 1, 20, "ok");
    let d = child(&c, 2, 30, "ok");
    let (mut other, other_reward) = episode(GOOD, 1.0, Some("v1"), at + 40);
    other.agent_id = "billing".into();
    let records = vec![
        a.clone().into(),
        b.clone().into(),
        c.clone().into(),
        d.clone().into(),
        reward.into(),
        other.into(),
        other_reward.into(),
    ];
    write_lake(&setup.lake(), records);

    let selection = Selection {
        tenants: BTreeSet::from(["acme".to_owned()]),
        agent_id: Some("support".into()),
        since: Some(at),
        until: Some(at + 35),
        reward_names: BTreeSet::from(["ok".to_owned()]),
        ..Selection::default()
    };
    let data = read_lake(
        &setup.lake().display().to_string(),
        Default::default(),
        &selection,
    )
    .unwrap();
    assert_eq!(data.steps.len(), 4);
    assert_eq!(
        data.rewards.len(),
        1,
        "the other agent's reward is not on a selected trajectory"
    );
    assert_eq!(data.reads[0].table, "steps");
    assert!(data.reads.iter().all(|r| r.version.is_some()));
    assert_eq!((data.reads[1].rows_read, data.reads[1].rows_kept), (2, 1));
    let spec = RewardSpec {
        weights: [("ok".to_owned(), 2.0)].into(),
        gamma: 0.5,
    };
    let returns = step_returns(&data.steps, &data.rewards, &spec).unwrap();
    let of = |s: &atdp_schema::Step| returns.of(&StepKey::of(s));
    assert_eq!(of(&d), Some(2.0));
    assert_eq!(of(&c), Some(1.0));
    assert_eq!(of(&a), Some(0.5));
    assert_eq!(of(&b), None, "the failed retry gets nothing");
}

#[test]
fn mixed_reward_versions_are_refused_unless_pinned_or_allowed() {
    let setup = Setup::new();
    let mut records = good_and_bad(2);
    // The same reward name, labelled again by a changed function (v2) on later episodes.
    for i in 0..2 {
        let (s, r) = episode(GOOD, 1.0, Some("v2"), 1_795_910_600_000_000 + i * 1_000_000);
        records.push(s.into());
        records.push(r.into());
    }
    write_lake(&setup.lake(), records);
    let one_step = SMALL.replace("steps = 4", "steps = 1");

    let mixed = setup.config("mixed", &one_step);
    let err = atdp_trainer::run(&mixed, &TrainOptions::default(), &mut no_progress()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("v1") && message.contains("v2") && message.contains("rewards.versions.ok"),
        "{message}"
    );
    assert!(!adapter_written(&setup.out("mixed")));

    // Pinned to one version: only its rows are read.
    let pinned = setup.config(
        "pinned",
        &one_step.replace("[rewards]", "[rewards]\nversions = { ok = \"v2\" }"),
    );
    atdp_trainer::run(&pinned, &TrainOptions::default(), &mut no_progress()).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("pinned").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["rewards"]["ok"]["reward_fn_versions"],
        serde_json::json!(["v2"])
    );

    // Or mixing allowed explicitly.
    let mut allowed = mixed.clone();
    allowed.allow_mixed_reward_versions = true;
    atdp_trainer::run(&allowed, &TrainOptions::default(), &mut no_progress()).unwrap();
    assert!(adapter_written(&setup.out("mixed")));
}

#[test]
fn steps_that_may_not_be_trained_on_are_never_read_and_the_manifest_counts_them() {
    use std::collections::{BTreeMap, BTreeSet};

    use atdp_trainer::{Selection, read_lake};

    let setup = Setup::new();
    let mut records = good_and_bad(2);
    let at = 1_795_910_400_000_000 + 100_000_000;
    // Rewarded episodes the selection matches, each of them not to be trained on.
    let mut excluded_ids = BTreeSet::new();
    let mut excluded_trajectories = BTreeSet::new();
    let mut add = |i: i64, edit: &dyn Fn(&mut atdp_schema::Step)| {
        let (mut step, reward) = episode(GOOD, 1.0, Some("v1"), at + i * 1_000_000);
        edit(&mut step);
        excluded_ids.insert(step.step_id.clone());
        excluded_trajectories.insert(step.trajectory_id.clone());
        records.push(step.into());
        records.push(reward.into());
    };
    for i in 0..3 {
        add(i, &|s| {
            s.training_eligible = Some(false);
            s.consent_source = Some("header".into());
        });
    }
    for i in 3..5 {
        // Retention ended a day after the call, long ago.
        add(i, &|s| {
            s.retention_until = Some(s.started_at + 86_400_000_000)
        });
    }
    add(5, &|s| {
        s.training_eligible = None;
        s.consent_source = None;
    });
    write_lake(&setup.lake(), records);

    let config = setup.config("governed", SMALL);
    let report = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap();
    assert_eq!(report.steps_done, 4);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("governed").join("manifest.json")).unwrap(),
    )
    .unwrap();
    let steps = &manifest["tables"][0];
    assert_eq!(steps["table"], "steps");
    // Only the four eligible steps were read, and became the examples.
    assert_eq!(
        (steps["rows_read"].as_u64(), steps["rows_kept"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(manifest["examples"]["steps"], 4);
    assert_eq!(
        steps["excluded"],
        serde_json::json!({"not_eligible": 3, "retention_expired": 2, "unmarked": 1})
    );
    assert_eq!(manifest["tables"][1]["excluded"], serde_json::json!({}));
    assert_eq!(
        manifest["hyper_parameters"]["selection"]["unmarked"],
        "excluded"
    );
    // The rewards of the trajectories not read are not read either: 4 of 10.
    assert_eq!(manifest["tables"][1]["rows_kept"], 4);
    // The lineage names the four trajectories trained on, none of the excluded ones.
    let lineage: BTreeSet<String> =
        serde_json::from_value(manifest["lineage"]["trajectories"]["acme"].clone()).unwrap();
    assert_eq!(lineage.len(), 4, "{}", manifest["lineage"]);
    assert!(lineage.is_disjoint(&excluded_trajectories));
    assert_eq!(
        manifest["lineage"]["trajectories"]
            .as_object()
            .map(|o| o.len()),
        Some(1)
    );

    // The same selection read directly: no excluded step among the rows; unmarked steps only
    // when the operator says they may be trained on.
    let mut selection = Selection {
        tenants: BTreeSet::from(["acme".to_owned()]),
        reward_names: BTreeSet::from(["ok".to_owned()]),
        ..Selection::default()
    };
    let location = setup.lake().display().to_string();
    let data = read_lake(&location, Default::default(), &selection).unwrap();
    assert_eq!(data.steps.len(), 4);
    assert!(
        data.steps
            .iter()
            .all(|s| !excluded_ids.contains(&s.step_id))
    );
    selection.unmarked = atdp_schema::Unmarked::Eligible;
    let data = read_lake(&location, Default::default(), &selection).unwrap();
    assert_eq!(data.steps.len(), 5);
    assert_eq!(
        data.reads[0].excluded,
        BTreeMap::from([
            ("not_eligible".to_owned(), 3),
            ("retention_expired".to_owned(), 2)
        ])
    );
}

#[test]
fn trajectories_an_erasure_reached_are_never_read_and_the_manifest_counts_them() {
    use std::collections::{BTreeMap, BTreeSet};

    use atdp_schema::{AuditEvent, PiiSpan, Record};
    use atdp_trainer::{Selection, read_lake};

    let setup = Setup::new();
    let at = 1_795_910_400_000_000 + 100_000_000;
    let token = |n: usize| format!("<EMAIL_ADDRESS_{n:06x}>");
    let mut records: Vec<Record> = Vec::new();
    let mut trajectories = Vec::new();
    // Six rewarded episodes; episode i mentions subject i. Episode 0 has a second step
    // without the subject: the whole trajectory goes with it.
    for i in 0..6 {
        let (mut step, reward) = episode(GOOD, 1.0, Some("v1"), at + i as i64 * 1_000_000);
        step.pii.push(PiiSpan {
            field: "request_messages[0].content".into(),
            entity: "EMAIL_ADDRESS".into(),
            token: token(i),
            action: "tokenize".into(),
        });
        trajectories.push(step.trajectory_id.clone());
        if i == 0 {
            let mut next = step.clone();
            next.step_id = atdp_schema::new_id();
            next.turn_index = 1;
            next.pii.clear();
            next.started_at += 500_000;
            records.push(next.into());
        }
        records.push(step.into());
        records.push(reward.into());
    }
    let erase = |tenant: &str, decision: &str, detail: serde_json::Value| {
        let mut e = AuditEvent::new("erase", "auditor:dpo", tenant);
        e.decision = Some(decision.into());
        e.subject = Some(format!("tenant:{tenant}"));
        e.detail_json = Some(detail.to_string());
        e
    };
    // Subject 0 erased; the erasure of subject 1 was refused; subject 2 was erased in another
    // tenant.
    for (tenant, decision, subject) in [
        ("acme", "allow", 0),
        ("acme", "deny", 1),
        ("globex", "allow", 2),
    ] {
        let tokens = serde_json::json!([token(subject), "<PERSON_0000aa>"]);
        records.push(
            erase(
                tenant,
                decision,
                serde_json::json!({"scope": "subject", "tokens": tokens}),
            )
            .into(),
        );
    }
    write_lake(&setup.lake(), records);

    let selection = Selection {
        tenants: BTreeSet::from(["acme".to_owned()]),
        reward_names: BTreeSet::from(["ok".to_owned()]),
        ..Selection::default()
    };
    let location = setup.lake().display().to_string();
    let data = read_lake(&location, Default::default(), &selection).unwrap();
    let read: BTreeSet<&str> = data
        .steps
        .iter()
        .map(|s| s.trajectory_id.as_str())
        .collect();
    assert_eq!(data.steps.len(), 5);
    assert!(!read.contains(trajectories[0].as_str()));
    assert_eq!(
        data.reads[0].excluded,
        BTreeMap::from([("erased".to_owned(), 2)])
    );
    assert!(
        data.rewards
            .iter()
            .all(|r| r.trajectory_id != trajectories[0])
    );

    // The training run reads the same and its manifest says why two steps were left out.
    let config = setup.config("erased", SMALL);
    atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("erased").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["tables"][0]["excluded"],
        serde_json::json!({"erased": 2})
    );
    let lineage: BTreeSet<String> =
        serde_json::from_value(manifest["lineage"]["trajectories"]["acme"].clone()).unwrap();
    assert!(!lineage.contains(&trajectories[0]));

    // A tenant erasure leaves out every step from before it; steps after it are read.
    write_lake(
        &setup.lake(),
        vec![Record::from(AuditEvent {
            occurred_at: at + 3_000_000,
            ..erase(
                "acme",
                "allow",
                serde_json::json!({"scope": "tenant", "tokens": []}),
            )
        })],
    );
    let data = read_lake(&location, Default::default(), &selection).unwrap();
    assert_eq!(
        data.steps
            .iter()
            .map(|s| s.trajectory_id.as_str())
            .collect::<Vec<_>>(),
        [trajectories[3].as_str(), &trajectories[4], &trajectories[5]]
    );
    assert_eq!(
        data.reads[0].excluded,
        BTreeMap::from([("erased".to_owned(), 4)])
    );
}

#[test]
fn a_checkpoint_of_other_data_is_not_resumed() {
    let setup = Setup::new();
    write_lake(&setup.lake(), good_and_bad(3));
    let config = setup.config("swapped", SMALL);
    let stop = TrainOptions {
        stop_after: Some(2),
        ..TrainOptions::default()
    };
    atdp_trainer::run(&config, &stop, &mut no_progress()).unwrap();
    // The lake now holds as many examples, of other text: the weights so far learned from
    // trajectories this run would not name in its lineage.
    let mut other = good_and_bad(3);
    for record in &mut other {
        if let atdp_schema::Record::Step(step) = record
            && let Some(message) = step.response_message.as_mut()
        {
            message.content = Some("Something else entirely.".into());
        }
    }
    std::fs::remove_dir_all(setup.lake()).unwrap();
    write_lake(&setup.lake(), other);
    let err = atdp_trainer::run(&config, &TrainOptions::default(), &mut no_progress()).unwrap_err();
    assert!(err.to_string().contains("other examples"), "{err}");
    assert!(!adapter_written(&setup.out("swapped")));
}
