//! The live view of training: runs published beside the lake's tables as the trainer
//! publishes them (`atdp_lake::runs::RunLog`), watched in headless Chromium while one of them
//! goes on (`tests/python/training_browser.py`), each auditor seeing only the runs of its own
//! tenants; the registry's events of the versions a run produced, with the gate's numbers;
//! and the same figures for Prometheus on `/metrics`, behind its bearer token.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::time::Duration;

use atdp_lake::runs::{Distribution, RunInfo, RunLog, RunState};

use crate::common::*;

fn run(id: &str, tenants: &[&str], started_at: &str, rewards: &[f64]) -> RunInfo {
    RunInfo {
        run_id: id.into(),
        tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        agent_id: Some("demo-agent".into()),
        started_at: started_at.into(),
        updated_at: started_at.into(),
        state: RunState::Running,
        total_steps: 16,
        steps_done: 0,
        examples: rewards.len(),
        rewards: BTreeMap::from([(
            "task_success".to_owned(),
            Distribution::of(rewards).unwrap(),
        )]),
        error: None,
    }
}

fn step(n: u64) -> serde_json::Value {
    serde_json::json!({
        "step": n, "total_steps": 16, "loss": 1.0 / n as f64, "reward_mean": 0.1 * n as f64,
        "kl": 0.01 * n as f64, "entropy": 2.0 - 0.05 * n as f64, "grad_norm": 0.5,
        "tokens_per_s": 120.0,
    })
}

/// Publishes a whole run of `steps` steps, finished.
async fn finished(f: &Fixture, info: RunInfo, steps: u64) {
    let mut log = RunLog::start(&f.lake, info).await.unwrap();
    for n in 1..=steps {
        log.step(n, &step(n)).await.unwrap();
    }
    log.finish(RunState::Finished, None).await.unwrap();
}

/// Writes version `version` of policy `support` as made by run `made_by` from `tenants`.
fn manifest(f: &Fixture, version: u32, made_by: &str, tenants: &[&str]) {
    let dir = std::path::Path::new(&f.lake_url).join(format!("adapters/support/v{version}"));
    std::fs::create_dir_all(&dir).unwrap();
    let lineage: serde_json::Map<String, serde_json::Value> = tenants
        .iter()
        .map(|t| ((*t).to_owned(), serde_json::json!(["a-trajectory"])))
        .collect();
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::json!({
            "format": "atdp-trainer/manifest-v1",
            "run_id": made_by,
            "lineage": { "trajectories": lineage },
        })
        .to_string(),
    )
    .unwrap();
}

/// Writes entry `seq` of policy `support`'s log.
fn log_entry(f: &Fixture, seq: u64, action: &str, version: u32, previous: Option<u32>) {
    let dir = std::path::Path::new(&f.lake_url).join("adapters/support/log");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{seq:020}.json")),
        serde_json::json!({
            "seq": seq, "action": action, "version": version, "previous": previous,
            "at": "2026-12-06T22:00:00Z", "by": "atdp-train",
            "reason": format!("gate passed: held-out reward 0.81 vs 0.62 (entry {seq})"),
            "report": { "candidate": 0.81, "served": 0.62, "seq": seq }
        })
        .to_string(),
    )
    .unwrap();
}

/// The registry of policy `support`: v1 made by run `made_by`, gated and promoted.
fn registry(f: &Fixture, made_by: &str) {
    manifest(f, 1, made_by, &["demo"]);
    log_entry(f, 1, "promote", 1, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_training_is_watched_live_and_each_auditor_sees_its_own_tenants() {
    let f = fixture().await;
    // Before: a finished run of the same tenant and agent, whose version was promoted; its
    // reward spread narrowly around 0.5.
    let spread: Vec<f64> = (0..40).map(|i| 0.4 + 0.05 * f64::from(i % 5)).collect();
    finished(
        &f,
        run("before", &["demo"], "2026-12-06T21:00:00.000Z", &spread),
        4,
    )
    .await;
    registry(&f, "before");
    // Runs over another tenant, alone or with this one: not for the demo analyst.
    finished(
        &f,
        run(
            "both",
            &["demo", "other"],
            "2026-12-06T21:30:00.000Z",
            &spread,
        ),
        2,
    )
    .await;
    finished(
        &f,
        run(
            "other-only",
            &["other"],
            "2026-12-06T21:40:00.000Z",
            &spread,
        ),
        2,
    )
    .await;
    // Now: a run whose reward piles at its maximum, far above the run before.
    let mut piled = vec![1.0; 38];
    piled.extend([0.0, 0.5]);
    let mut live = RunLog::start(
        &f.lake,
        run("now", &["demo"], "2026-12-06T22:30:00.000Z", &piled),
    )
    .await
    .unwrap();

    let server = f.console().await;
    let python = std::env::var("ATDP_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = atdp_testkit::repo_root().join("tests/python/training_browser.py");
    let mut browser = std::process::Command::new(python);
    browser
        .arg(script)
        .args(["--base", &format!("http://{}", server.addr)])
        .args(["--key", DEMO_ANALYST, "--run", "now"]);
    // With ATDP_SCREENSHOT_DIR set, the finished page is kept there (that is how
    // `docs/console-training.png` is made).
    if let Some(dir) = std::env::var_os("ATDP_SCREENSHOT_DIR") {
        browser
            .arg("--screenshot")
            .arg(std::path::PathBuf::from(dir).join("console-training.png"));
    }
    let mut browser = browser
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = browser.stdout.take().unwrap();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::task::spawn_blocking(move || {
        let mut ready = Some(ready_tx);
        let mut last = String::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line == "ready" {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            } else {
                last = line;
            }
        }
        last
    });
    // The run goes on once the browser shows it.
    if tokio::time::timeout(Duration::from_secs(120), ready_rx)
        .await
        .is_ok()
    {
        for n in 1..=16 {
            live.step(n, &step(n)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        live.finish(RunState::Finished, None).await.unwrap();
    }
    let last = reader.await.unwrap();
    let output = tokio::task::spawn_blocking(move || browser.wait_with_output().unwrap())
        .await
        .unwrap();
    let seen: serde_json::Value = serde_json::from_str(&last).unwrap_or_else(|_| {
        panic!(
            "browser run failed: {last}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(output.status.success(), "{seen}");
    assert_eq!(seen["first"], serde_json::json!(["running", 0]), "{seen}");
    assert_eq!(seen["reloads_itself_at_first"], true, "{seen}");
    // The page reloaded itself and showed the run going on, then finished.
    let observed = seen["observed"].as_array().unwrap();
    let during: Vec<u64> = observed
        .iter()
        .filter(|o| o[0] == "running")
        .map(|o| o[1].as_u64().unwrap())
        .filter(|n| (1..16).contains(n))
        .collect();
    assert!(
        during.len() >= 2
            && during.windows(2).all(|w| w[0] <= w[1])
            && during[0] < *during.last().unwrap(),
        "the page did not follow the run: {seen}"
    );
    assert_eq!(
        observed.last().unwrap(),
        &serde_json::json!(["finished", 16]),
        "{seen}"
    );
    assert_eq!(seen["reloads_itself_at_end"], false, "{seen}");
    assert_eq!(seen["reloaded_after_the_end"], false, "{seen}");
    // Only the runs of the analyst's tenant.
    assert_eq!(seen["runs"], serde_json::json!(["now", "before"]), "{seen}");
    assert_eq!(seen["charts"], 5, "{seen}");
    assert_eq!(
        seen["chart_titles"],
        serde_json::json!([
            "Reward per batch 1.6000",
            "Loss 0.0625",
            "KL to the reference 0.1600",
            "Entropy 1.2000",
            "Gradient norm 0.5000",
            "task_success: n 40, mean 0.9625, sd 0.1728, 0.0000 … 1.0000"
        ]),
        "{seen}"
    );
    assert_eq!(seen["reward_histograms"], 1, "{seen}");
    let alerts = seen["alerts"]["now"].as_array().unwrap();
    assert!(
        alerts.iter().any(|a| a
            .as_str()
            .unwrap()
            .starts_with("piled_at_max · reward task_success")),
        "{seen}"
    );
    assert!(
        alerts
            .iter()
            .any(|a| a.as_str().unwrap().starts_with("jumped")),
        "{seen}"
    );
    assert_eq!(seen["alerts"]["before"], serde_json::json!([]), "{seen}");
    assert_eq!(
        seen["events"]["before"],
        serde_json::json!(["promote"]),
        "{seen}"
    );
    assert_eq!(
        seen["versions"]["before"],
        serde_json::json!(["support v1"]),
        "{seen}"
    );
    assert_eq!(seen["events"]["now"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["csp_violations"], serde_json::json!([]), "{seen}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn prometheus_reads_every_runs_figures_with_its_token_only() {
    let f = fixture().await;
    let spread: Vec<f64> = (0..40).map(|i| f64::from(i % 5) / 4.0).collect();
    finished(
        &f,
        run("before", &["demo"], "2026-12-06T21:00:00.000Z", &spread),
        4,
    )
    .await;
    registry(&f, "before");
    let mut other = run(
        "other-\"run",
        &["other"],
        "2026-12-06T21:40:00.000Z",
        &[0.7; 30],
    );
    other.run_id = "other-run".into();
    other.agent_id = Some("agent \"x\"\nnext".into());
    finished(&f, other, 2).await;
    let server = f.console().await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/metrics", server.addr);
    for auth in [None, Some("Bearer wrong-token"), Some(METRICS_TOKEN)] {
        let mut request = client.get(&url);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{auth:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let response = client
        .get(&url)
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let body = response.text().await.unwrap();
    let labels = r#"run="before",tenants="demo",agent="demo-agent""#;
    for line in [
        format!("atdp_training_steps_done{{{labels}}} 4"),
        format!("atdp_training_running{{{labels}}} 0"),
        format!("atdp_training_loss{{{labels}}} 0.25"),
        format!(r#"atdp_training_reward{{{labels},reward="task_success",stat="count"}} 40"#),
        format!(
            r#"atdp_training_registry_event{{{labels},policy="support",seq="1",version="1",action="promote"}} 1"#
        ),
        // Every tenant's runs, names escaped.
        r#"atdp_training_steps_done{run="other-run",tenants="other",agent="agent \"x\"\nnext"} 2"#
            .to_owned(),
        r#"atdp_training_reward_alert{run="other-run",tenants="other",agent="agent \"x\"\nnext",reward="task_success",kind="variance_collapsed"} 1"#
            .to_owned(),
    ] {
        assert!(body.lines().any(|l| l == line), "{line} not in\n{body}");
    }
    // Every sample line is a declared family's.
    for sample in body.lines().filter(|l| !l.starts_with('#')) {
        let name = sample.split('{').next().unwrap();
        assert!(body.contains(&format!("# TYPE {name} gauge")), "{sample}");
    }
    server.stop().await.unwrap();
    check_training_alerts(&body);
}

/// The shipped training alerts (`ops/prometheus/atdp-training-alerts.yml`): `promtool` checks
/// them and passes their unit tests, and every metric and label they ask for is in the
/// console's `scrape`.
fn check_training_alerts(scrape: &str) {
    let root = atdp_testkit::repo_root();
    let rules = root.join("ops/prometheus/atdp-training-alerts.yml");
    let promtool = |args: &[&str]| {
        let out = std::process::Command::new("promtool")
            .args(args)
            .output()
            .expect("promtool (Debian's prometheus package; .ci/run installs it)");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {args:?}: {said}");
        said
    };
    let text = std::fs::read_to_string(&rules).unwrap();
    let alerts = text.matches("- alert: ").count();
    let checked = promtool(&["check", "rules", rules.to_str().unwrap()]);
    assert!(
        checked.contains(&format!("SUCCESS: {alerts} rules found")),
        "{checked}"
    );
    let tests = root.join("ops/prometheus/atdp-training-alerts.test.yml");
    assert!(promtool(&["test", "rules", tests.to_str().unwrap()]).contains("SUCCESS"));
    let words = |prefix: &str| -> std::collections::BTreeSet<String> {
        text.split(prefix)
            .skip(1)
            .map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                rest[..end].to_owned()
            })
            .collect()
    };
    let metrics = words("atdp_training_");
    assert!(metrics.len() >= 4, "{metrics:?}");
    for metric in &metrics {
        let family = format!("# TYPE atdp_training_{metric} gauge");
        assert!(scrape.contains(&family), "{family} not in the scrape");
    }
    for label in words("$labels.") {
        if label == "job" || label == "instance" {
            continue;
        }
        assert!(
            scrape.contains(&format!(",{label}=\"")) || scrape.contains(&format!("{{{label}=\"")),
            "no series of the scrape has the label {label}"
        );
    }
}

#[tokio::test]
async fn registry_events_and_runs_stay_with_the_tenants_they_concern() {
    use atdp_audit::runs::{Files, RunView, runs_where};
    let f = fixture().await;
    let spread: Vec<f64> = (0..40).map(|i| 0.4 + 0.05 * f64::from(i % 5)).collect();
    finished(
        &f,
        run("mine", &["demo"], "2026-12-06T21:00:00.000Z", &spread),
        2,
    )
    .await;
    finished(
        &f,
        run("theirs", &["other"], "2026-12-06T21:10:00.000Z", &spread),
        2,
    )
    .await;
    // Its run file says demo, but the version it made learned from other too; its reward
    // sits far above the others'.
    let high: Vec<f64> = spread.iter().map(|v| v + 4.6).collect();
    finished(
        &f,
        run("mixed", &["demo"], "2026-12-06T21:20:00.000Z", &high),
        2,
    )
    .await;
    // The newest demo run: compared with the run before it that the reader sees.
    finished(
        &f,
        run("latest", &["demo"], "2026-12-06T21:30:00.000Z", &spread),
        2,
    )
    .await;
    manifest(&f, 1, "mine", &["demo"]);
    manifest(&f, 2, "theirs", &["other"]);
    manifest(&f, 3, "mixed", &["demo", "other"]);
    log_entry(&f, 1, "promote", 1, None);
    log_entry(&f, 2, "promote", 2, Some(1));
    // Rolls v2 (other's) back to v1 (demo's): an event about v2, with v2's live figures.
    log_entry(&f, 3, "rollback", 1, Some(2));
    // v1 promoted again over v2: about v1, but its numbers compare with v2.
    log_entry(&f, 4, "promote", 1, Some(2));
    let files = Files::default();
    let shown = |views: &[RunView]| -> Vec<(String, Vec<(u64, bool)>)> {
        views
            .iter()
            .map(|v| {
                let events = v
                    .events
                    .iter()
                    .map(|e| (e.seq, e.report.is_some()))
                    .collect();
                (v.info.run_id.clone(), events)
            })
            .collect()
    };
    let demo = runs_where(&f.lake, &files, |t| t == "demo").await.unwrap();
    assert_eq!(
        shown(&demo),
        [
            ("latest".to_owned(), vec![]),
            ("mine".to_owned(), vec![(1, true), (4, false)])
        ]
    );
    // Its numbers, in the report and in the reason, compare with other's v2.
    assert!(demo[1].events[1].withheld);
    assert_eq!(demo[1].events[1].reason, "");
    assert!(demo[1].events[0].reason.contains("0.81"));
    // Compared with "mine" (alike), never with "mixed", which the demo reader may not see.
    assert!(demo[0].alerts.is_empty(), "{:?}", demo[0].alerts);
    let other = runs_where(&f.lake, &files, |t| t == "other").await.unwrap();
    assert_eq!(
        shown(&other),
        [("theirs".to_owned(), vec![(2, false), (3, false)])]
    );
    let everyone = runs_where(&f.lake, &files, |_| true).await.unwrap();
    assert_eq!(
        shown(&everyone),
        [
            ("latest".to_owned(), vec![]),
            ("mixed".to_owned(), vec![]),
            ("theirs".to_owned(), vec![(2, true), (3, true)]),
            ("mine".to_owned(), vec![(1, true), (4, true)]),
        ]
    );
    let kinds: Vec<&str> = everyone[0].alerts.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, ["jumped"]);
    // Read a second time from what was kept: the same.
    let again = runs_where(&f.lake, &files, |_| true).await.unwrap();
    assert_eq!(shown(&again), shown(&everyone));
}
