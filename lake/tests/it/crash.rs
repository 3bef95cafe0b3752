//! kill -9 at a random moment: every record the child reported durable is in the lake
//! exactly once after restart, and nothing is written twice.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use atdp_lake::*;
use atdp_schema::*;
use rand::{Rng, SeedableRng};

use crate::common::*;

const CHILD_ENV: &str = "ATDP_CRASH_CHILD_DIR";

/// The child: appends rewards (and steps) in a loop against a local lake, with small
/// segments so that commits are constantly in flight, and prints `ACK <id>` for every
/// record once it is durable. Started by the parent test only.
#[tokio::test]
#[ignore = "the child process of sigkill_loses_nothing_and_duplicates_nothing"]
async fn child_process() {
    let dir = std::env::var_os(CHILD_ENV)
        .expect("started by sigkill_loses_nothing_and_duplicates_nothing");
    let dir = Path::new(&dir);
    let mut config = test_config(dir.join("lake").to_str().unwrap(), &dir.join("wal"));
    config.segment_max_bytes = 8 << 10;
    config.segment_max_age = Duration::from_millis(20);
    let writer = LakeWriter::open(config).await.unwrap();
    loop {
        let mut batch = Vec::new();
        let mut last = None;
        for i in 0..20 {
            let id = new_id();
            last = Some(writer.append(reward("acme", id.clone(), i as f64)).unwrap());
            batch.push(id);
        }
        writer.durable(last.unwrap()).await.unwrap();
        let mut out = std::io::stdout().lock();
        for id in batch {
            use std::io::Write;
            writeln!(out, "ACK {id}").unwrap();
        }
        use std::io::Write;
        out.flush().unwrap();
    }
}

/// Runs the child until a random moment, kills it with SIGKILL, and returns the ids it
/// acknowledged.
fn run_and_kill(dir: &Path, rng: &mut impl Rng) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash::child_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = acked_id(&line) {
                let _ = tx.send(id.to_owned());
            }
        }
    });
    // Wait for the first acknowledgement, then a random while longer.
    let first = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the child acknowledged nothing");
    let run_for = Duration::from_millis(rng.random_range(200..1500));
    let start = Instant::now();
    while start.elapsed() < run_for {
        std::thread::sleep(Duration::from_millis(10));
    }
    // SIGKILL: no destructor, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    let mut acked = vec![first];
    acked.extend(rx.try_iter());
    acked
}

#[tokio::test]
async fn sigkill_loses_nothing_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut acked = Vec::new();
    // Three crashes in a row: each restart replays what the last one left.
    for _ in 0..3 {
        let dir = dir.path().to_owned();
        let seed: u64 = rng.random();
        let ids = tokio::task::spawn_blocking(move || {
            run_and_kill(&dir, &mut rand::rngs::StdRng::seed_from_u64(seed))
        })
        .await
        .unwrap();
        assert!(!ids.is_empty());
        acked.extend(ids);
    }
    let writer = LakeWriter::open(test_config(
        dir.path().join("lake").to_str().unwrap(),
        &dir.path().join("wal"),
    ))
    .await
    .unwrap();
    writer.flush().await.unwrap();
    let found = reward_ids(writer.lake()).await;
    assert_exactly_once(&found, &acked);
    // Records appended but not yet acknowledged when the child died may be there too
    // (they reached the disk), but never twice; everything acknowledged is there.
    assert!(found.len() >= acked.len());
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}
