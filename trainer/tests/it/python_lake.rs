//! The Python package's `atdp.lake` (`python/src/atdp/lake.py`) and this trainer read the
//! same lake into the same returns: trees with retries and abandoned branches, step and
//! trajectory rewards, duplicates resolved to the latest, unknown names, a step reward naming
//! another trajectory's step, a second tenant using the same trajectory ids, and steps that
//! may not be trained on (marked ineligible, unmarked, past their retention, or in a
//! trajectory an erasure reached), which neither reads and both count alike. And the Python reader exits cleanly after reading, however late
//! the machine runs its threads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use atdp_schema::{AuditEvent, Message, PiiSpan, Record, Reward, Step};
use atdp_trainer::{RewardSpec, Rng, Selection, read_lake, step_returns};
use serde_json::{Value, json};

use crate::learning::write_lake;

const BASE: i64 = 1_795_910_400_000_000; // 2026-11-29

/// The token of a subject whose erasure reaches trajectories 20 and 21 of both tenants.
const ERASED: &str = "<EMAIL_ADDRESS_0000e1>";

/// The masked spans of step `i` of trajectory `t`: the erased subject in the first step of
/// trajectories 20 and 21, a subject never erased in trajectory 22.
fn subject(t: usize, i: usize) -> Vec<PiiSpan> {
    let token = match (t, i) {
        (20 | 21, 0) => ERASED,
        (22, _) => "<EMAIL_ADDRESS_0000aa>",
        _ => return Vec::new(),
    };
    vec![PiiSpan {
        field: "request_messages[0].content".into(),
        entity: "EMAIL_ADDRESS".into(),
        token: token.into(),
        action: "tokenize".into(),
    }]
}

/// A seeded lake: for each tenant the same trajectory ids, different trees and rewards.
fn records() -> Vec<Record> {
    let mut records = Vec::new();
    let mut clock = BASE;
    for tenant in ["acme", "globex"] {
        let mut rng = Rng::stream(11, tenant);
        // The training marks come from a stream of their own.
        let mut marks = Rng::stream(12, tenant);
        for t in 0..24 {
            let trajectory = format!("traj-{t}");
            let n = 1 + (rng.next_u64() % 6) as usize;
            let mut ids: Vec<String> = Vec::new();
            for i in 0..n {
                clock += 1_000 + (rng.next_u64() % 1_000) as i64;
                let parent = (i > 0).then(|| ids[(rng.next_u64() % i as u64) as usize].clone());
                let id = format!("{trajectory}-s{i}");
                let ok = rng.uniform() < 0.85;
                let logprobs = (rng.uniform() < 0.5).then(|| vec![-0.25_f32, -1.5, -0.125]);
                let (training_eligible, retention_until) = match marks.uniform() {
                    u if u < 0.08 => (Some(false), None),
                    u if u < 0.14 => (None, None),
                    u if u < 0.20 => (Some(true), Some(BASE)), // long past
                    _ => (Some(true), Some(i64::MAX)),
                };
                records.push(Record::Step(Box::new(Step {
                    step_id: id.clone(),
                    trajectory_id: trajectory.clone(),
                    parent_step_id: parent,
                    turn_index: i as i32,
                    tenant_id: tenant.into(),
                    agent_id: "support".into(),
                    started_at: clock,
                    api: "openai.chat".into(),
                    upstream: "local".into(),
                    model_requested: "m".into(),
                    request_messages: vec![Message {
                        role: "user".into(),
                        content: Some(format!("question {}", t % 5)),
                        ..Message::default()
                    }],
                    response_message: ok.then(|| Message {
                        role: "assistant".into(),
                        content: Some(format!("answer {t}.{i}")),
                        ..Message::default()
                    }),
                    status: if ok { "ok" } else { "upstream_error" }.into(),
                    completion_logprobs: logprobs,
                    training_eligible,
                    retention_until,
                    pii: subject(t, i),
                    ..Step::default()
                })));
                ids.push(id);
            }
            // Rewards: on the trajectory, on its steps, duplicates, unknown names, and a step
            // reward naming a step of another trajectory.
            let mut reward = |step: Option<String>, name: &str, value: f64| {
                clock += 10;
                records.push(Record::Reward(Reward {
                    reward_id: format!("r-{tenant}-{clock}"),
                    trajectory_id: trajectory.clone(),
                    step_id: step,
                    tenant_id: tenant.into(),
                    name: name.into(),
                    value,
                    source: "api".into(),
                    created_at: clock,
                    ..Reward::default()
                }));
            };
            let value = |rng: &mut Rng| (rng.uniform() * 4.0 - 2.0 * rng.uniform()).round() / 4.0;
            if rng.uniform() < 0.8 {
                let v = value(&mut rng);
                reward(None, "task_success", v);
            }
            if rng.uniform() < 0.3 {
                let v = value(&mut rng);
                reward(None, "task_success", v); // a later duplicate: replaces the first
            }
            for id in &ids {
                if rng.uniform() < 0.4 {
                    let v = value(&mut rng);
                    reward(Some(id.clone()), "rating", v);
                }
            }
            if rng.uniform() < 0.3 {
                reward(None, "not_weighted", 5.0);
            }
            if t > 0 && rng.uniform() < 0.2 {
                reward(Some(format!("traj-{}-s0", t - 1)), "rating", 1.0);
            }
        }
    }
    // An erasure of each tenant: acme's reaches traj-20 and traj-21 (every step of both),
    // globex's another token; a refused one reaches nothing.
    for (tenant, decision, token) in [
        ("acme", "allow", ERASED),
        ("globex", "allow", "<EMAIL_ADDRESS_0000ff>"),
        ("acme", "deny", "<EMAIL_ADDRESS_0000aa>"),
    ] {
        let mut event = AuditEvent::new("erase", "auditor:dpo", tenant);
        event.decision = Some(decision.into());
        event.detail_json = Some(json!({"scope": "subject", "tokens": [token]}).to_string());
        records.push(Record::Audit(event));
    }
    // Two duplicates at the same time: the greater reward_id wins on both sides, whatever the
    // order the rows are read in.
    for (id, value) in [("r-tie-b", -1.0), ("r-tie-a", 1.0)] {
        records.push(Record::Reward(Reward {
            reward_id: id.into(),
            trajectory_id: "traj-0".into(),
            tenant_id: "acme".into(),
            name: "task_success".into(),
            value,
            source: "api".into(),
            created_at: clock + 1,
            ..Reward::default()
        }));
    }
    records
}

#[test]
fn python_and_rust_read_the_same_returns_from_the_same_lake() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    write_lake(&lake, records());
    compare(&lake, None);
    // A time window: steps started from a point on (µs since the epoch on both sides).
    compare(&lake, Some(BASE + 40_000));
}

fn compare(lake: &Path, since: Option<i64>) {
    let weights = BTreeMap::from([("task_success".to_owned(), 1.0), ("rating".to_owned(), 0.5)]);
    let spec = RewardSpec {
        weights: weights.clone(),
        gamma: 0.9,
    };
    let selection = Selection {
        tenants: BTreeSet::from(["acme".to_owned()]),
        reward_names: weights.keys().cloned().collect(),
        since,
        ..Selection::default()
    };
    let data = read_lake(&lake.display().to_string(), Default::default(), &selection).unwrap();
    let rust = step_returns(&data.steps, &data.rewards, &spec).unwrap();
    assert!(rust.by_step.len() > 20, "too few rewarded steps to compare");
    assert!(
        rust.unmatched_step_rewards > 0,
        "no unmatched step reward in the lake"
    );

    let mut command = reader(lake, &weights);
    if let Some(since) = since {
        command.args(["--since", &since.to_string()]);
    }
    let python = finished(command.output().unwrap());

    let mut expected: Vec<(String, String, f64)> = rust
        .by_step
        .iter()
        .map(|(k, v)| (k.trajectory_id.clone(), k.step_id.clone(), *v))
        .collect();
    expected.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let got: Vec<(String, String, f64)> = python["returns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                r[1].as_str().unwrap().to_owned(),
                r[2].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "different rewarded steps (since {since:?})"
    );
    for ((t, s, want), (pt, ps, value)) in expected.iter().zip(&got) {
        assert_eq!((t, s), (pt, ps));
        assert!(
            (want - value).abs() <= 1e-12 * want.abs().max(1.0),
            "{t}/{s}: {want} vs {value}"
        );
    }
    assert_eq!(
        python["unmatched"].as_u64(),
        Some(rust.unmatched_step_rewards as u64)
    );

    // Examples: the steps the trainer learns from (ok, with a reply, rewarded), with their
    // returns and the recorded log-probs; the versions read are in the table's metadata.
    let mut trainable: Vec<(String, f64, usize)> = data
        .steps
        .iter()
        .filter(|s| s.status == "ok" && s.response_message.is_some())
        .filter_map(|s| {
            let key = atdp_trainer::StepKey::of(s);
            rust.of(&key).map(|r| {
                let n = s.completion_logprobs.as_ref().map_or(0, Vec::len);
                (s.step_id.clone(), r, n)
            })
        })
        .collect();
    trainable.sort_by(|a, b| a.0.cmp(&b.0));
    let examples: Vec<(String, f64, usize)> = python["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e[0].as_str().unwrap().to_owned(),
                e[1].as_f64().unwrap(),
                e[2].as_u64().unwrap() as usize,
            )
        })
        .collect();
    assert_eq!(examples.len(), trainable.len());
    for (a, b) in trainable.iter().zip(&examples) {
        assert_eq!((&a.0, a.2), (&b.0, b.2));
        assert!((a.1 - b.1).abs() <= 1e-12 * a.1.abs().max(1.0));
    }
    // Steps that may not be trained on: neither side reads them, both count them alike.
    let excluded = &data.reads[0].excluded;
    for reason in ["not_eligible", "unmarked", "retention_expired", "erased"] {
        assert!(
            excluded.get(reason).is_some_and(|&n| n > 0),
            "{reason}: {excluded:?}"
        );
    }
    assert_eq!(python["excluded"], json!(excluded));
    assert!(
        data.steps
            .iter()
            .all(|s| s.training_eligible == Some(true) && s.retention_until == Some(i64::MAX)),
        "a step that may not be trained on was read"
    );
    assert!(
        data.steps
            .iter()
            .all(|s| !["traj-20", "traj-21"].contains(&s.trajectory_id.as_str())),
        "a trajectory an erasure reached was read"
    );
    let in_metadata: Value =
        serde_json::from_str(python["metadata"]["atdp.excluded"].as_str().unwrap()).unwrap();
    assert_eq!(in_metadata, json!(excluded));
    let versions = &python["versions"];
    assert_eq!(versions["steps"].as_u64(), data.reads[0].version);
    assert_eq!(versions["rewards"].as_u64(), data.reads[1].version);
    assert_eq!(python["metadata"]["atdp.tenant"], "acme");
    assert_eq!(
        python["metadata"]["atdp.steps_version"],
        versions["steps"].to_string()
    );
    assert!(
        !python["groups"].as_array().unwrap().is_empty(),
        "no GRPO group"
    );
    assert_eq!(python["sft_last_roles"], json!(["assistant"]));
}

/// `tests/python/lake_returns.py` reading tenant `acme` of `lake` with `weights`, γ = 0.9.
fn reader(lake: &Path, weights: &BTreeMap<String, f64>) -> Command {
    let mut command = Command::new(atdp_testkit::python());
    command
        .arg(atdp_testkit::repo_root().join("tests/python/lake_returns.py"))
        .args([
            "--lake",
            lake.to_str().unwrap(),
            "--tenant",
            "acme",
            "--gamma",
            "0.9",
        ])
        .args(["--weights", &json!(weights).to_string()])
        .env("PYTHONPATH", atdp_testkit::repo_root().join("python/src"));
    command
}

/// The JSON object a run of the reader printed, once it has exited with status 0.
fn finished(output: Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "lake_returns.py exited with {}: {}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("lake_returns.py printed no complete JSON object ({e}): {stdout}")
    })
}

/// A reader that has printed its result exits 0: reading leaves no native thread behind that
/// still has to take the interpreter's lock, which at interpreter exit aborts the process
/// ("terminate called without an active exception", status 134) and fails a scheduler's job.
/// Checked deterministically, with the release of read blocks on threads other than the main
/// one slowed down (a worker that runs late), and as it happens, with many readers at once on
/// a machine whose cores are all kept busy.
#[test]
fn the_python_reader_exits_cleanly_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    write_lake(&lake, records());
    let weights = BTreeMap::from([("task_success".to_owned(), 1.0), ("rating".to_owned(), 0.5)]);
    let expected = finished(reader(&lake, &weights).output().unwrap());
    assert!(
        expected["returns"].as_array().unwrap().len() > 20,
        "too few returns to show a complete output"
    );

    for _ in 0..3 {
        let output = reader(&lake, &weights)
            .args(["--slow-foreign-release", "0.3"])
            .output()
            .unwrap();
        assert_eq!(finished(output), expected);
    }

    // Waves of readers side by side while busy loops keep every core occupied.
    let _busy = Busy::on_every_core();
    for _ in 0..3 {
        let children: Vec<_> = (0..8)
            .map(|_| {
                reader(&lake, &weights)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            assert_eq!(finished(child.wait_with_output().unwrap()), expected);
        }
    }
}

/// Threads that spin until dropped, one per core.
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn on_every_core() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let threads = (0..cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 0_u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
