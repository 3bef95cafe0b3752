//! Helpers shared by the integration tests.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atdp_schema::{Filter, Lake, LakeReader, LakeWriter, Reward, WriterConfig, new_id, now_micros};

/// Logs to the test's captured output (shown when a test fails); `RUST_LOG` filters.
fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("atdp_schema=info")),
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

/// The Python interpreter of the test venv (set by scripts/test).
pub fn python() -> PathBuf {
    let path = std::env::var_os("ATDP_PYTHON").expect(
        "ATDP_PYTHON is not set: run the tests through scripts/test, which creates the Python venv",
    );
    PathBuf::from(path)
}

/// This crate's directory, read when the tests run (cargo sets it then too). The value fixed at
/// compile time can name another checkout: cargo keeps a test binary built there as fresh when
/// the sources here are older and the target directory is shared.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    manifest_dir().join("..")
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// A moto S3 server on loopback, killed on drop.
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    /// Starts moto's S3 server through `tests/python/moto_server.py` (which makes its
    /// conditional writes atomic, as S3's are) with the test venv's Python, and waits until it
    /// answers.
    pub fn start() -> Moto {
        let launcher = repo_root().join("tests/python/moto_server.py");
        let port = free_port();
        let child = Command::new(python())
            .arg(launcher)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let moto = Moto { child, port };
        let start = Instant::now();
        while http(port, "GET", "/", "").is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "moto_server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    /// Creates a bucket.
    pub fn create_bucket(&self, bucket: &str) {
        let status = http(self.port, "PUT", &format!("/{bucket}"), "").unwrap_or_default();
        assert!(
            status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200"),
            "create bucket: {status}"
        );
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The id on an `ACK <id>` line of a child process. The test harness may print its own
/// `test … ` prefix on the same line as the child's first output.
pub fn acked_id(line: &str) -> Option<&str> {
    line.find("ACK ").map(|at| line[at + 4..].trim())
}

/// Sends one plain HTTP request to loopback; returns the status line.
pub fn http(port: u16, method: &str, path: &str, body: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.lines().next().map(str::to_owned)
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
