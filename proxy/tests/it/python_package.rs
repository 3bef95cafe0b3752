//! The `atdp` Python package (`python/`) through the proxy: `tests/python/atdp_package.py`
//! drives it with the official SDKs and asserts on what it returns; these tests check what
//! reached the lake.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

/// Runs one scenario of `atdp_package.py` with the package from `python/src`; returns its
/// JSON line.
fn package_script(base_url: &str, scenario: &str) -> Value {
    let output = Command::new(python())
        .arg(root().join("tests/python/atdp_package.py"))
        .args(["--base-url", base_url, "--api-key", DEMO_KEY, scenario])
        .env("PYTHONPATH", root().join("python/src"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "atdp_package.py {scenario} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

fn reward(port: u16) -> Response {
    let auth = format!("Bearer {DEMO_KEY}");
    let body = json!({"trajectory_id": "t-log", "name": "probe", "value": 1});
    http(
        port,
        "POST",
        "/v1/atdp/rewards",
        &[("authorization", &auth)],
        body.to_string().as_bytes(),
    )
}

/// Makes the write-ahead log in `data/wal` fail when it next rolls a segment (by age, within
/// about 10 s once the segment holds a record): a directory stands where the next segment
/// file would be created.
fn fail_the_log_at_its_next_roll(data: &Path) {
    let wal = data.join("wal");
    loop {
        let newest = std::fs::read_dir(&wal)
            .unwrap()
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".seg")?.parse::<u64>().ok()
            })
            .max()
            .unwrap();
        match std::fs::create_dir(wal.join(format!("{:020}.seg", newest + 1))) {
            Ok(()) => return,
            // The log rolled meanwhile: block the segment after that one.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => panic!("{error}"),
        }
    }
}

#[test]
fn the_python_package_places_sdk_calls_in_trajectories_and_records_their_rewards() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let out = package_script(&proxy.base_url(), "calls");
    let lake = read_lake(proxy.stop().path());

    // Each trajectory the package reported holds exactly the steps its `step_ids` listed.
    let trajectories = out["trajectories"].as_object().unwrap();
    assert_eq!(trajectories.len(), 4, "{out}");
    for (trajectory, steps) in trajectories {
        let mut reported: Vec<&str> = steps
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let mut stored: Vec<&str> = lake
            .steps
            .iter()
            .filter(|s| &s.trajectory_id == trajectory)
            .map(|s| s.step_id.as_str())
            .collect();
        reported.sort_unstable();
        stored.sort_unstable();
        assert_eq!(stored, reported, "trajectory {trajectory}");
        assert_eq!(stored.len(), 2);
    }

    // Every reward sent once is stored once, under the demo tenant, from the API.
    let mut rows: BTreeMap<&str, Vec<&atdp_schema::Reward>> = BTreeMap::new();
    for row in &lake.rewards {
        rows.entry(row.reward_id.as_str()).or_default().push(row);
    }
    let sent: Vec<&str> = out["reward_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    assert_eq!(sent.len(), 6, "{out}");
    for id in &sent {
        let stored = rows.get(id).map_or(0, Vec::len);
        assert_eq!(stored, 1, "reward {id}");
    }
    assert!(
        lake.rewards
            .iter()
            .all(|r| r.tenant_id == "demo" && r.source == "api")
    );
    let terminal = rows[sent[0]][0];
    assert!(terminal.terminal && terminal.step_id.is_none());
    assert_eq!(terminal.tags.get("by").map(String::as_str), Some("test"));
    let step = rows[sent[1]][0];
    assert_eq!(
        (step.name.as_str(), step.value, step.step_id.is_some()),
        ("helpful", 0.5, true)
    );

    // The reward whose answer was lost was sent again with its id: whatever the proxy stored
    // of the two attempts is one reward, identical row for row, so de-duplicating by
    // reward_id leaves it once.
    let retried = rows[out["retried_reward_id"].as_str().unwrap()].clone();
    assert!(!retried.is_empty());
    let same = |r: &atdp_schema::Reward| {
        (
            r.trajectory_id.clone(),
            r.step_id.clone(),
            r.name.clone(),
            r.value,
            r.terminal,
        )
    };
    assert!(retried.iter().all(|r| same(r) == same(retried[0])));
    assert_eq!(retried[0].name, "retried");
}

#[test]
fn the_python_package_and_the_pytorch_example_type_check() {
    let cache = tempfile::tempdir().unwrap();
    // The package ships `py.typed`, so it is checked strictly; the example against the
    // annotations of torch, transformers and peft. pyarrow and deltalake have none.
    for (strict, path) in [
        (true, "python/src/atdp"),
        (false, "examples/pytorch/train_lora.py"),
    ] {
        let mut command = Command::new(python());
        command
            .args(["-m", "mypy", "--ignore-missing-imports", "--cache-dir"])
            .arg(cache.path())
            .env("MYPYPATH", root().join("python/src"))
            .current_dir(root());
        if strict {
            command.arg("--strict");
        }
        let output = command.arg(path).output().unwrap();
        assert!(
            output.status.success(),
            "mypy {path}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn a_gymnasium_style_environment_s_episodes_are_trajectories_with_their_rewards() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let out = package_script(&proxy.base_url(), "episodes");
    let lake = read_lake(proxy.stop().path());
    let episodes = out["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 2, "{out}");
    // Per episode: how it ended, its return, its model calls, and the step rewards by the
    // index of the call they sit on. The first action took two calls (its reward on the
    // second); the second episode's last action took none (no step reward).
    let expected = [
        (true, 3.0, 4, vec![(1, 1.0), (2, 1.0), (3, 1.0)]),
        (false, 0.0, 1, vec![(0, 1.0)]),
    ];
    for (episode, (terminated, env_return, calls, step_rewards)) in episodes.iter().zip(expected) {
        let trajectory = episode["trajectory_id"].as_str().unwrap();
        let step_ids: Vec<&str> = episode["step_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        // One model call per environment step, each a step of the episode's trajectory.
        let mut stored: Vec<&atdp_schema::Step> = lake
            .steps
            .iter()
            .filter(|s| s.trajectory_id == trajectory)
            .collect();
        stored.sort_by_key(|s| s.started_at);
        let stored_ids: Vec<&str> = stored.iter().map(|s| s.step_id.as_str()).collect();
        assert_eq!(stored_ids, step_ids, "episode {episode}");
        assert_eq!(step_ids.len(), calls);

        let rewards: Vec<&atdp_schema::Reward> = lake
            .rewards
            .iter()
            .filter(|r| r.trajectory_id == trajectory)
            .collect();
        let sent: Vec<&str> = episode["reward_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let mut ids: Vec<&str> = rewards.iter().map(|r| r.reward_id.as_str()).collect();
        ids.sort_unstable();
        let mut want = sent.clone();
        want.sort_unstable();
        assert_eq!(ids, want, "each reward stored once");
        assert_eq!(ids.len(), 1 + step_rewards.len());
        // The return on the trajectory, terminal only when the environment ended it.
        let whole: Vec<_> = rewards.iter().filter(|r| r.step_id.is_none()).collect();
        assert_eq!(whole.len(), 1);
        assert_eq!(
            (whole[0].name.as_str(), whole[0].value, whole[0].terminal),
            ("countdown", env_return, terminated)
        );
        let tag = |name: &str| whole[0].tags.get(name).map(String::as_str);
        assert_eq!(tag("env"), Some("Countdown"));
        assert_eq!(tag("suite"), Some("test"));
        assert_eq!(
            tag("ended"),
            Some(if terminated {
                "terminated"
            } else {
                "truncated"
            })
        );
        assert_eq!(
            tag("seed").map(str::to_owned),
            Some(episode["seed"].to_string())
        );
        // Each environment step's reward on the call that chose its action.
        for (index, step_id) in step_ids.iter().enumerate() {
            let on_step: Vec<_> = rewards
                .iter()
                .filter(|r| r.step_id.as_deref() == Some(*step_id))
                .map(|r| (r.name.as_str(), r.value, r.terminal))
                .collect();
            let want: Vec<_> = step_rewards
                .iter()
                .filter(|(at, _)| *at == index)
                .map(|(_, value)| ("countdown_step", *value, false))
                .collect();
            assert_eq!(on_step, want, "step {index} of episode {episode}");
        }
    }
}

#[test]
fn the_python_package_retries_rewards_the_proxy_cannot_record_then_raises_unavailable() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    assert_eq!(reward(proxy.port).status, 200);
    fail_the_log_at_its_next_roll(proxy.data.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = reward(proxy.port);
        if answer.status == 503 {
            assert_eq!(answer.json()["error"]["code"], "recording_unavailable");
            assert_eq!(answer.header("retry-after"), Some("5"));
            break;
        }
        assert_eq!(answer.status, 200);
        assert!(
            Instant::now() < deadline,
            "the write-ahead log did not fail"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let out = package_script(&proxy.base_url(), "unavailable");
    for variant in ["sync", "async"] {
        assert_eq!(out[variant]["attempts"], 3, "{variant}: {out}");
    }
}
