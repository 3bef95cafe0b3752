//! The `atdp-lake` maintenance command on a synthetic lake.

use std::process::Command;

use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::*;

use crate::common::*;

fn atdp_lake(lake: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_atdp-lake"))
        .arg("--lake")
        .arg(lake)
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_optimize_and_vacuum_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let mut config = test_config(lake.to_str().unwrap(), &dir.path().join("wal"));
    config.segment_max_bytes = 256 << 10;
    let writer = LakeWriter::open(config).await.unwrap();
    let summary = generate(
        &SynthConfig {
            steps: 200,
            ..SynthConfig::default()
        },
        |record| writer.append(record).map(|_| ()),
    )
    .unwrap();
    assert!(
        writer
            .shutdown(std::time::Duration::from_secs(10))
            .await
            .unwrap()
    );

    let stats = atdp_lake(&lake, &["stats"]);
    assert!(
        stats.status.success(),
        "{}",
        String::from_utf8_lossy(&stats.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let steps = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "steps")
        .unwrap();
    assert_eq!(steps["rows"].as_u64(), Some(summary.steps as u64));
    let files_before = steps["files"].as_u64().unwrap();
    let partitions = steps["partitions"].as_u64().unwrap();
    assert!(files_before > partitions);

    let optimize = atdp_lake(&lake, &["optimize", "--table", "steps"]);
    assert!(
        optimize.status.success(),
        "{}",
        String::from_utf8_lossy(&optimize.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&optimize.stdout).unwrap();
    // A partition that already holds one file is left alone (delta-rs does not rewrite a
    // bin of one), so the report accounts for the change rather than naming every file.
    let removed = report["files_removed"].as_u64().unwrap();
    let added = report["files_added"].as_u64().unwrap();
    assert!(removed > added, "{report}");
    let after: serde_json::Value =
        serde_json::from_slice(&atdp_lake(&lake, &["stats"]).stdout).unwrap();
    let steps_after = after
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "steps")
        .unwrap();
    assert_eq!(steps_after["files"].as_u64(), Some(partitions));
    assert_eq!(files_before - removed + added, partitions);
    assert_eq!(steps_after["rows"].as_u64(), Some(summary.steps as u64));

    // The replaced files are younger than any allowed retention: a dry run lists nothing.
    let vacuum = atdp_lake(
        &lake,
        &["vacuum", "--dry-run", "--retention-hours", "1", "--force"],
    );
    assert!(
        vacuum.status.success(),
        "{}",
        String::from_utf8_lossy(&vacuum.stderr)
    );
    let first: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&vacuum.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["files"].as_array().map(Vec::len), Some(0));

    // Bad input: one clear line naming the command, exit status 2.
    let zero = atdp_lake(&lake, &["vacuum", "--retention-hours", "0", "--force"]);
    assert_eq!(zero.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(
        stderr.starts_with("atdp-lake: ") && stderr.contains("at least 1"),
        "{stderr}"
    );
    let unknown = atdp_lake(&lake, &["optimize", "--table", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown table"));
    // A malformed object-store option, from the flag or the environment.
    let option = atdp_lake(&lake, &["--lake-option", "no-equals-sign", "stats"]);
    assert_eq!(option.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&option.stderr).contains("not KEY=VALUE"));
    let from_env = Command::new(env!("CARGO_BIN_EXE_atdp-lake"))
        .args(["--lake", lake.to_str().unwrap(), "stats"])
        .env("ATDP_LAKE_OPTIONS", "broken")
        .output()
        .unwrap();
    assert_eq!(from_env.status.code(), Some(2));
}
