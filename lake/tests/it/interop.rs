//! Other engines read the lake: DuckDB (Delta extension) and the `deltalake` Python package
//! see the tables, their partitions, and join steps with rewards; also after compaction.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::*;
use atdp_schema::*;

use crate::common::*;

fn check_lake(root: &std::path::Path, args: &[String]) -> serde_json::Value {
    let script = repo_root().join("tests/python/check_lake.py");
    let output = Command::new(python())
        .arg(&script)
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "check_lake.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duckdb_and_deltalake_read_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let lake_dir = dir.path().join("lake");
    let mut config = test_config(lake_dir.to_str().unwrap(), &dir.path().join("wal"));
    config.segment_max_bytes = 512 << 10;
    let writer = LakeWriter::open(config).await.unwrap();
    let summary = generate(
        &SynthConfig {
            steps: 400,
            ..SynthConfig::default()
        },
        |record| writer.append(record).map(|_| ()),
    )
    .unwrap();
    writer.flush().await.unwrap();

    // What the engines must find, computed from our own reader.
    let reader = LakeReader::new(writer.lake().clone());
    let steps = reader.steps(&Filter::default()).await.unwrap().rows;
    let rewards = reader.rewards(&Filter::default()).await.unwrap().rows;
    assert_eq!(steps.len(), summary.steps);
    let mut steps_per_trajectory: HashMap<&str, u64> = HashMap::new();
    for step in &steps {
        *steps_per_trajectory
            .entry(step.trajectory_id.as_str())
            .or_default() += 1;
    }
    let join_rows: u64 = rewards
        .iter()
        .map(|r| {
            steps_per_trajectory
                .get(r.trajectory_id.as_str())
                .copied()
                .unwrap_or(0)
        })
        .sum();
    let rewarded: BTreeSet<&str> = rewards
        .iter()
        .map(|r| r.trajectory_id.as_str())
        .filter(|t| steps_per_trajectory.contains_key(t))
        .collect();
    let tenants: BTreeSet<&str> = steps.iter().map(|s| s.tenant_id.as_str()).collect();
    let args = vec![
        "--expect-steps".to_owned(),
        summary.steps.to_string(),
        "--expect-rewards".to_owned(),
        summary.rewards.to_string(),
        "--expect-tenants".to_owned(),
        tenants.iter().copied().collect::<Vec<_>>().join(","),
    ];

    let check = |report: &serde_json::Value| {
        assert_eq!(report["join_rows"].as_u64(), Some(join_rows), "{report}");
        assert_eq!(
            report["trajectories_with_rewards"].as_u64(),
            Some(rewarded.len() as u64),
            "{report}"
        );
    };
    let before = check_lake(&lake_dir, &args);
    check(&before);

    for table in Table::ALL {
        maintenance::optimize(writer.lake(), table, 128 << 20)
            .await
            .unwrap();
    }
    let after = check_lake(&lake_dir, &args);
    check(&after);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}
