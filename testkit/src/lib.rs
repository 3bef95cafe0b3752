//! What the tests of the atdp crates share (a dev-dependency only):
//!
//! - [`repo_root`] and [`python`]: where the repository is, and the test venv's interpreter
//!   (`ATDP_PYTHON`, set by `scripts/test`);
//! - [`wait_until`]: polling with a deadline instead of sleeping a guessed time;
//! - [`http`] and [`read_request`]: one plain request to loopback, and one request read by a
//!   hand-written upstream;
//! - [`Service`]: a helper process that binds loopback port 0 and announces its port on
//!   stdout (`{"port": N}`), so no test guesses a free port: [`FakeUpstream::start`] (the one
//!   fake, an LLM provider speaking the real wire formats) and [`Moto::start`] (moto's S3
//!   server);
//! - [`shape`]: which modules of a crate import which, and the cycles among them (a test
//!   here keeps every crate of the workspace free of them).

pub mod shape;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository root. Read from the running test's `CARGO_MANIFEST_DIR` (every crate is
/// one folder below the root), not the value fixed at compile time, which can name another
/// checkout when a shared target directory keeps a test binary built there.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("..")
}

/// The test venv's Python (`ATDP_PYTHON`), with the packages the tests use (DuckDB,
/// `deltalake`, moto, the official SDKs).
///
/// # Panics
/// When `ATDP_PYTHON` is not set: run the tests through `scripts/test`, which prepares the
/// venv and sets it.
pub fn python() -> String {
    std::env::var("ATDP_PYTHON").unwrap_or_else(|_| {
        panic!(
            "ATDP_PYTHON is not set: run the tests through scripts/test, which prepares the venv"
        )
    })
}

/// Calls `probe` every 50 ms until it returns `Some`, for at most `timeout`.
///
/// # Panics
/// When the time is up, naming `what`.
pub fn wait_until<T>(timeout: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A helper process on loopback, killed on drop.
#[derive(Debug)]
pub struct Service {
    child: Child,
    /// The port it announced.
    pub port: u16,
}

impl Service {
    /// Starts `tests/python/<script>` with `args` under [`python`] and reads the
    /// `{"port": N}` line it prints once it listens.
    ///
    /// # Panics
    /// When it cannot start or exits without announcing a port.
    pub fn start_python(script: &str, args: &[&str]) -> Service {
        let mut child = Command::new(python())
            .arg(repo_root().join("tests/python").join(script))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        let port = stdout
            .read_line(&mut line)
            .ok()
            .and_then(|_| serde_json::from_str::<Value>(&line).ok())
            .and_then(|v| v["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        // Whatever it prints later must not fill the pipe and block it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let Some(port) = port else {
            let _ = child.kill();
            let status = child.wait();
            panic!("{script} did not announce its port ({status:?}): {line:?}");
        };
        Service { child, port }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One plain HTTP/1.1 request to loopback (`Connection: close`); the status code and body,
/// or `None` when nothing answers within 5 s.
pub fn http(port: u16, method: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let status = std::str::from_utf8(&response[..split])
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()?;
    Some((status, response[split + 4..].to_vec()))
}

/// Reads one HTTP/1.1 request with a `Content-Length` body (or none) from `connection`, as
/// a hand-written upstream does; false when the connection closes before the request is
/// whole.
pub fn read_request(connection: &mut std::net::TcpStream) -> bool {
    let mut raw = Vec::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if raw.len() >= split + 4 + length {
                return true;
            }
        }
        match connection.read(&mut buffer) {
            Ok(0) | Err(_) => return false,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
        }
    }
}

/// The fake LLM provider (`tests/python/fake_upstream.py`): OpenAI chat and responses and
/// Anthropic messages, JSON and SSE, byte for byte as the providers send them.
#[derive(Debug)]
pub struct FakeUpstream {
    service: Service,
    /// Its port.
    pub port: u16,
}

impl FakeUpstream {
    /// Starts it on a free port.
    pub fn start() -> FakeUpstream {
        let service = Service::start_python("fake_upstream.py", &["--port", "0"]);
        FakeUpstream {
            port: service.port,
            service,
        }
    }

    /// Every request it has received: `{method, path, headers, body}`.
    ///
    /// # Panics
    /// When it does not answer.
    pub fn requests(&self) -> Vec<Value> {
        let (status, body) =
            http(self.service.port, "GET", "/_requests", b"").expect("the fake upstream answers");
        assert_eq!(status, 200, "GET /_requests");
        serde_json::from_slice(&body).expect("/_requests is JSON")
    }
}

/// moto's S3 server (`tests/python/moto_server.py`, with S3's atomic conditional writes).
#[derive(Debug)]
pub struct Moto {
    service: Service,
    /// Its port.
    pub port: u16,
}

impl Moto {
    /// Starts it on a free port and waits until it answers.
    pub fn start() -> Moto {
        let service = Service::start_python("moto_server.py", &["--port", "0"]);
        let port = service.port;
        wait_until(Duration::from_secs(30), "moto answers", || {
            http(port, "GET", "/", b"")
        });
        Moto { service, port }
    }

    /// Creates a bucket.
    ///
    /// # Panics
    /// When moto refuses.
    pub fn create_bucket(&self, bucket: &str) {
        let answer = http(self.service.port, "PUT", &format!("/{bucket}"), b"");
        assert_eq!(
            answer.map(|(status, _)| status),
            Some(200),
            "create bucket {bucket}"
        );
    }
}
