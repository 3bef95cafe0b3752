//! Settings checked before anything starts: `--check-config`, refused settings and policy
//! directories (exit status 2 and a message naming the problem), and the durability settings
//! of the write-ahead log in a running proxy, and the process settings it makes for itself.

use std::process::{Command, Output};
use std::time::Duration;

use crate::harness::*;

/// Runs `atdp-proxy` with `args` in the data directory `data` until it exits.
fn run(data: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_atdp-proxy"))
        .arg("--data")
        .arg(data)
        .args(["--upstream", "http://127.0.0.1:9"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_config_prints_the_settings_and_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let policy = quickstart();
    let output = run(
        data.path(),
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--durability",
            "buffered",
            "--commit-interval-ms",
            "50",
            "--key-tpm",
            "7",
            "--generate-keys",
            "--check-config",
        ],
    );
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(stdout.contains("configuration is valid"), "{stdout}");
    assert!(
        stdout.contains("(durability buffered, commits at most every 50 ms)"),
        "{stdout}"
    );
    assert!(stdout.contains("key_tokens_per_minute: 7"), "{stdout}");
    assert!(
        stdout.contains("(tenants: acme, demo, globex, other)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("absent; it would be created at start"),
        "{stdout}"
    );
    // Neither the key file nor the lake nor the log was created.
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0);

    // The defaults: no keys are generated unless asked.
    let output = run(
        data.path(),
        &["--policy", policy.to_str().unwrap(), "--check-config"],
    );
    assert!(
        text(&output.stdout).contains("absent: the start would be refused"),
        "{}",
        text(&output.stdout)
    );
    assert!(
        text(&output.stdout).contains("(durability fsync, commits at most every 10 ms)"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn refused_settings_and_policies_exit_2_naming_the_problem() {
    let data = tempfile::tempdir().unwrap();
    let policy = quickstart();
    let policy = policy.to_str().unwrap();
    for (args, expected) in [
        (
            vec!["--policy", policy, "--durability", "never"],
            "--durability \"never\": use fsync or buffered",
        ),
        (
            vec!["--policy", policy, "--commit-interval-ms", "5000"],
            "`commit_interval_ms` must be at most 1000",
        ),
        (
            vec!["--policy", policy, "--record", "true", "--mask", "false"],
            "`mask = false` needs `record = false`",
        ),
        (vec!["--listen", "nowhere"], "no policy directory"),
    ] {
        // With and without --check-config: the same check, before anything starts.
        for check in [true, false] {
            let mut args = args.clone();
            if check {
                args.push("--check-config");
            }
            let output = run(data.path(), &args);
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(expected), "{args:?}: {stderr}");
        }
    }

    // A policy directory with a Cedar syntax error is refused, and the error names the file.
    let broken = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(quickstart()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), broken.path().join(entry.file_name())).unwrap();
    }
    let cedar = broken.path().join("policies.cedar");
    let mut source = std::fs::read_to_string(&cedar).unwrap();
    source.push_str("\npermit(principal, action, resource) when { principal.");
    std::fs::write(&cedar, source).unwrap();
    for check in [true, false] {
        let mut args = vec!["--policy", broken.path().to_str().unwrap()];
        if check {
            args.push("--check-config");
        }
        let output = run(data.path(), &args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("policies.cedar"), "{stderr}");
    }
}

#[test]
fn buffered_durability_records_every_call() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(
        upstream.port,
        &["--durability", "buffered", "--commit-interval-ms", "0"],
    );
    for _ in 0..3 {
        let reply = http(
            proxy.port,
            "POST",
            "/v1/chat/completions",
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {DEMO_KEY}")),
            ],
            br#"{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(reply.status, 200);
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 3);
    assert!(lake.steps.iter().all(|s| s.status == "ok"));
}

/// The proxy turns transparent huge pages off for itself at start (docs/proxy.md §9): the
/// kernel zeroed every fresh 2 MiB page of the lake writer's bursts.
#[cfg(target_os = "linux")]
#[test]
fn transparent_huge_pages_are_off_in_the_proxy() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", proxy.pid())).unwrap();
    // `THP_enabled` is in /proc/<pid>/status since Linux 6.0.
    let line = status
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .expect("THP_enabled in /proc/<pid>/status");
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    proxy.stop();
}

#[test]
fn a_tenant_without_vault_keys_stops_the_start_unless_keys_are_generated() {
    let data = tempfile::tempdir().unwrap();
    let policy = quickstart();
    let output = run(data.path(), &["--policy", policy.to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"demo\"") && stderr.contains("atdp-policy keygen"),
        "{stderr}"
    );
    assert!(
        !data.path().join("keys.json").exists(),
        "no key file is created without --generate-keys"
    );
}

#[test]
fn reloading_over_the_admin_port_needs_the_admin_token() {
    let upstream = Upstream::start();
    // No token configured: the endpoint is off.
    let proxy = Proxy::start(upstream.port, &[]);
    let response = http(proxy.admin, "POST", "/reload", &[], b"");
    assert_eq!(
        response.status,
        403,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    drop(proxy);
    // A token configured: a wrong one is refused, the right one reloads.
    let token = "t0ken-for-the-admin-port";
    let data = tempfile::tempdir().unwrap();
    let proxy = Proxy::start_with_env(upstream.port, &[], data, &[("ATDP_ADMIN_TOKEN", token)]);
    let wrong = http(
        proxy.admin,
        "POST",
        "/reload",
        &[("authorization", "Bearer not-the-token-at-all")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let bearer = format!("Bearer {token}");
    let right = http(
        proxy.admin,
        "POST",
        "/reload",
        &[("authorization", &bearer)],
        b"",
    );
    assert_eq!(
        right.status,
        200,
        "{}",
        String::from_utf8_lossy(&right.body)
    );
    // Reading stays open.
    assert_eq!(http(proxy.admin, "GET", "/healthz", &[], b"").status, 200);
}

/// `examples/proxy.toml` (with its policy directory) passes `--check-config` as written, run
/// from the repository root as its comment says; without the upstreams' key variables it is
/// refused, naming the variable.
#[test]
fn the_example_configuration_checks() {
    let root = root();
    let check = |with_keys: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_atdp-proxy"));
        command
            .current_dir(&root)
            .args(["--config", "examples/proxy.toml", "--check-config"])
            .env("RUST_LOG", "warn")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY");
        if with_keys {
            command
                .env("OPENAI_API_KEY", "sk-example")
                .env("ANTHROPIC_API_KEY", "sk-ant-example");
        }
        command.output().unwrap()
    };
    let output = check(true);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    for line in [
        "configuration is valid",
        "examples/policy (tenants: research, support)",
        "vllm → http://10.0.12.7:8000 (internal",
        "local/* → vllm as *",
    ] {
        assert!(stdout.contains(line), "{line:?} not in {stdout}");
    }
    let output = check(false);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("OPENAI_API_KEY"));
}

/// A key added with `atdp_policies::principals` (what `atdp-policy key add` runs) is refused
/// until a reload and served after it; revoked, it is refused again after the next. Each
/// reload's audit event lists the key by id, and the key itself is stored nowhere.
#[test]
fn keys_added_and_revoked_take_effect_at_a_reload_and_are_audited_by_id() {
    use atdp_policies::principals;
    use atdp_testkit::wait_until;
    let upstream = Upstream::start();
    let policy = quickstart_with("", &[]);
    let data = tempfile::tempdir().unwrap();
    let proxy = Proxy::launch(upstream.port, policy.path(), &[], data, &[]);
    let body = serde_json::json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]})
        .to_string();
    let call = |key: &str| {
        let auth = format!("Bearer {key}");
        http(
            proxy.port,
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        )
        .status
    };
    let hangup = |pid: u32| {
        let status = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let added = principals::add_api_key(policy.path(), "demo", "demo-agent", false).unwrap();
    assert!(added.key.starts_with("sk-atdp-") && added.key.len() == 48);
    assert_eq!(
        call(&added.key),
        401,
        "a key is not in force before a reload"
    );
    hangup(proxy.pid());
    wait_until(Duration::from_secs(30), "the added key works", || {
        (call(&added.key) == 200).then_some(())
    });

    let revoked = principals::revoke(policy.path(), &added.principal.id[..12]).unwrap();
    assert!(!revoked.active);
    hangup(proxy.pid());
    wait_until(
        Duration::from_secs(30),
        "the revoked key is refused",
        || (call(&added.key) == 401).then_some(()),
    );
    assert_eq!(call(DEMO_KEY), 200, "other keys are untouched");

    let data = proxy.stop();
    let lake = read_lake(data.path());
    let reloads: Vec<serde_json::Value> = lake
        .audit
        .iter()
        .filter(|e| e.kind == "policy_reload" && e.decision.as_deref() == Some("allow"))
        .map(|e| serde_json::from_str(e.detail_json.as_deref().unwrap()).unwrap())
        .collect();
    let entry = serde_json::json!({"kind": "api_key", "id": added.principal.id});
    assert_eq!(reloads.len(), 2, "{reloads:?}");
    assert_eq!(
        reloads[0]["principals"]["added"],
        serde_json::json!([entry])
    );
    assert_eq!(
        reloads[1]["principals"]["revoked"],
        serde_json::json!([entry])
    );
    assert_eq!(reloads[1]["principals"]["added"], serde_json::json!([]));
    let stored = serde_json::to_string(&lake.audit).unwrap()
        + &std::fs::read_to_string(policy.path().join("entities.json")).unwrap();
    assert!(!stored.contains(&added.key), "the key itself was stored");
}
