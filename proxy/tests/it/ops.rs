//! The deployment files of `ops/`, checked offline: the Kubernetes manifests against the
//! Kubernetes schemas (and the rules a schema cannot state: non-root, read-only root file
//! system, probes on the admin port, a grace period long enough to drain), the settings their
//! ConfigMaps hold loaded by `atdp-proxy --check-config`, and the systemd unit by
//! `systemd-analyze verify`. The container recipe is not built here (no container runtime).

use std::process::Command;

use crate::harness::*;

fn check_ops(args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(root().join("tests/python/check_ops.py"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "check_ops.py {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_kubernetes_manifests_are_valid_and_their_proxy_settings_load() {
    let ops = root().join("ops");
    let report = check_ops(&["kubernetes", ops.to_str().unwrap()]);
    for kind in [
        "StatefulSet",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(report.contains(kind), "{kind} not checked: {report}");
    }

    // The settings of each ConfigMap, with the cluster's paths replaced by local ones.
    let dir = tempfile::tempdir().unwrap();
    check_ops(&[
        "proxy-configs",
        ops.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    let (_, cert, key) = tls_certificates(dir.path());
    for (name, tls) in [("sidecar", false), ("gateway", true)] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_atdp-proxy"));
        command
            .arg("--config")
            .arg(dir.path().join(format!("{name}.toml")))
            .arg("--policy")
            .arg(quickstart())
            .arg("--keys")
            .arg(dir.path().join("keys.json"))
            .arg("--wal")
            .arg(dir.path().join("wal"));
        if tls {
            command.args(["--tls-cert", &cert, "--tls-key", &key]);
        }
        let out = command
            .arg("--check-config")
            .env("OPENAI_API_KEY", "sk-test")
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("configuration is valid"),
            "{name}: {stdout}"
        );
        assert!(stdout.contains("s3://"), "{name} records to object storage");
        let scheme = if tls { "(https" } else { "(plain http)" };
        assert!(stdout.contains(scheme), "{name}: {stdout}");
    }
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root().join("ops/systemd/atdp-proxy.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/atdp-proxy "));
    // systemd-analyze checks that the command exists: the binary under test stands in.
    let unit = unit.replace(
        "/usr/local/bin/atdp-proxy",
        env!("CARGO_BIN_EXE_atdp-proxy"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("atdp-proxy.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package; .ci/run installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // What it says of other units (the machine's own targets) is not the unit's.
    let about_the_unit: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("atdp-proxy.service"))
        .collect();
    assert!(out.status.success() && about_the_unit.is_empty(), "{said}");
}
