//! The `atdp-reward` binary: run twice, preview, diff, a bad spec.

use std::process::Command;

use crate::common::{Fixture, STEPS};

fn reward(f: &Fixture, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_atdp-reward"))
        .args(["--lake", &f.lake_url])
        .args(args)
        .env("ATDP_REWARD_WAL", f.dir.path().join("wal-cli"))
        .env_remove("ATDP_LAKE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn run_twice_preview_and_diff() {
    let f = Fixture::new().await;
    let spec = f.dir.path().join("stop_ok.toml");
    std::fs::copy(
        atdp_testkit::repo_root().join("rewards/examples/stop_ok.toml"),
        &spec,
    )
    .unwrap();
    let spec = spec.display().to_string();

    let before = f.rewards_version().await;
    let (ok, out, err) = reward(&f, &["preview", "--fn", &spec, "--sample", "40"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("on a sample of 40 units") && out.contains("examples for"),
        "{out}"
    );
    assert!(err.contains("reward_fn_version sha256:"), "{err}");
    assert_eq!(f.rewards_version().await, before, "preview writes nothing");

    let (ok, out, err) = reward(&f, &["run", "--fn", &spec]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("{STEPS} rewards written")), "{out}");
    assert!(
        err.contains(&format!("labelled {STEPS}/{STEPS} steps")),
        "{err}"
    );
    let (ok, out, err) = reward(&f, &["run", "--fn", &spec]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("0 steps pending, 0 rewards written"),
        "{out}"
    );

    let (ok, out, err) = reward(
        &f,
        &["diff", "--fn", &spec, "--fn", &spec, "--sample", "30"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("agreement: 100.0%"), "{out}");

    let bad = f.file(
        "bad.toml",
        "name = \"x\"\nkind = \"sql\"\nexpresion = \"1\"\n",
    );
    let (ok, _, err) = reward(&f, &["preview", "--fn", &bad.display().to_string()]);
    assert!(!ok);
    assert!(err.contains("unknown field `expresion`"), "{err}");
}
