//! Helpers shared by the integration tests.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use atdp_lake::{Filter, Lake, LakeReader, LakeWriter, WriterConfig};

use atdp_schema::{Reward, new_id, now_micros};

/// Logs to the test's captured output (shown when a test fails); `RUST_LOG` filters.
fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("atdp_lake=info")),
            )
            .with_ansi(false)
            .with_test_writer()
            .try_init();
    });
}

/// A writer config for tests: small segments that roll quickly, fast retries.
pub fn test_config(lake: &str, wal: &Path) -> WriterConfig {
    init_tracing();
    let mut config = WriterConfig::new(lake, wal);
    config.segment_max_bytes = 64 << 10;
    config.segment_max_age = Duration::from_millis(100);
    config.retry_initial = Duration::from_millis(50);
    config.retry_max = Duration::from_millis(500);
    config
}

/// A reward whose id is `id`.
pub fn reward(tenant: &str, id: String, value: f64) -> Reward {
    Reward {
        reward_id: id,
        trajectory_id: new_id(),
        step_id: None,
        tenant_id: tenant.into(),
        name: "task_success".into(),
        value,
        source: "test".into(),
        reward_fn_version: None,
        terminal: true,
        created_at: now_micros(),
        tags: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
    }
}

/// Polls `check` until it holds or the deadline passes.
pub async fn eventually(what: &str, deadline: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Appends `n` rewards and waits until they are durable; returns their ids.
pub async fn append_rewards(writer: &LakeWriter, tenant: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    let mut last = None;
    for i in 0..n {
        let id = new_id();
        last = Some(writer.append(reward(tenant, id.clone(), i as f64)).unwrap());
        ids.push(id);
    }
    if let Some(last) = last {
        writer.durable(last).await.unwrap();
    }
    ids
}

/// Every reward id in the lake, in event-time order.
pub async fn reward_ids(lake: &Lake) -> Vec<String> {
    LakeReader::new(lake.clone())
        .rewards(&Filter::default())
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|r| r.reward_id)
        .collect()
}

/// Asserts that `found` holds every id of `expected` exactly once, and nothing else.
pub fn assert_exactly_once(found: &[String], expected: &[String]) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in found {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let duplicates: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "duplicated rows: {duplicates:?}");
    let missing: Vec<_> = expected
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing, e.g. {:?}",
        missing.len(),
        missing.first()
    );
}

pub use atdp_testkit::{Moto, python, repo_root};

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// The id on an `ACK <id>` line of a child process. The test harness may print its own
/// `test … ` prefix on the same line as the child's first output.
pub fn acked_id(line: &str) -> Option<&str> {
    line.find("ACK ").map(|at| line[at + 4..].trim())
}

/// Storage options for an S3 endpoint on loopback.
pub fn s3_options(port: u16) -> HashMap<String, String> {
    HashMap::from([
        ("aws_endpoint".into(), format!("http://127.0.0.1:{port}")),
        ("aws_region".into(), "us-east-1".into()),
        ("aws_access_key_id".into(), "testing".into()),
        ("aws_secret_access_key".into(), "testing".into()),
        ("aws_allow_http".into(), "true".into()),
        ("timeout".into(), "5s".into()),
        ("connect_timeout".into(), "2s".into()),
        ("max_retries".into(), "1".into()),
        ("retry_timeout".into(), "3s".into()),
    ])
}
