//! Processes under test: the fake upstream (Python, the real wire formats), `atdp-proxy` as a
//! child process, the official SDKs through `sdk_client.py`, a raw HTTP/1.1 client, and
//! readers of the lake.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atdp_lake::{Filter, Lake, LakeReader};

use atdp_schema::{AuditEvent, Reward, Step, VaultEntry};
use serde_json::Value;

pub use atdp_testkit::{FakeUpstream as Upstream, python, repo_root as root};

pub fn quickstart() -> PathBuf {
    root().join("policies/examples/quickstart")
}

pub const DEMO_KEY: &str = "sk-atdp-demo-agent";
pub const OTHER_KEY: &str = "sk-atdp-other-agent";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `atdp-proxy` as a child process, with its own data directory.
pub struct Proxy {
    child: Option<Child>,
    terminated: bool,
    pub port: u16,
    pub admin: u16,
    pub data: tempfile::TempDir,
}

impl Proxy {
    pub fn start(upstream: u16, extra: &[&str]) -> Proxy {
        let data = tempfile::tempdir().unwrap();
        Proxy::start_in(upstream, extra, data)
    }

    pub fn start_in(upstream: u16, extra: &[&str], data: tempfile::TempDir) -> Proxy {
        Proxy::start_with_env(upstream, extra, data, &[])
    }

    pub fn start_with_env(
        upstream: u16,
        extra: &[&str],
        data: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Proxy {
        Proxy::launch(upstream, &quickstart(), extra, data, env)
    }

    pub fn launch(
        upstream: u16,
        policy: &Path,
        extra: &[&str],
        data: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Proxy {
        let upstream = format!("http://127.0.0.1:{upstream}");
        let mut args = vec!["--upstream", upstream.as_str()];
        args.extend_from_slice(extra);
        Proxy::spawn(policy, &args, data, env)
    }

    /// Without `--upstream` (the upstreams come from a `--config` file in `extra`).
    pub fn launch_raw(extra: &[&str], data: tempfile::TempDir) -> Proxy {
        Proxy::spawn(&quickstart(), extra, data, &[])
    }

    fn spawn(
        policy: &Path,
        extra: &[&str],
        data: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Proxy {
        let mut child = Command::new(env!("CARGO_BIN_EXE_atdp-proxy"))
            .envs(env.iter().copied())
            .arg("--policy")
            .arg(policy)
            .arg("--data")
            .arg(data.path())
            .args(["--listen", "127.0.0.1:0"])
            .args(["--admin-listen", "127.0.0.1:0"])
            .arg("--generate-keys")
            .args(extra)
            .env("RUST_LOG", "warn,buoyant_kernel=off")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // The line on stdout that names the ports the proxy took; the rest is drained.
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut bound = None;
        let mut line = String::new();
        while bound.is_none() && stdout.read_line(&mut line).unwrap_or(0) > 0 {
            bound = serde_json::from_str::<Value>(&line)
                .ok()
                .filter(|v| v["listen"].is_string());
            line.clear();
        }
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let Some(bound) = bound else {
            let status = child.wait().unwrap();
            panic!("atdp-proxy exited at start ({status}) without announcing its addresses");
        };
        let port_of = |key: &str| -> u16 {
            let address: std::net::SocketAddr = bound[key].as_str().unwrap().parse().unwrap();
            address.port()
        };
        let (port, admin) = (port_of("listen"), port_of("admin"));
        let mut proxy = Proxy {
            child: Some(child),
            terminated: false,
            port,
            admin,
            data,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok()
                && try_http(admin, "GET", "/healthz", &[], b"").is_some_and(|r| r.status == 200)
            {
                break;
            }
            if let Some(status) = proxy.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("atdp-proxy exited at start: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "atdp-proxy did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process id of the running proxy.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends SIGTERM (a graceful shutdown starts).
    pub fn terminate(&mut self) {
        if std::mem::replace(&mut self.terminated, true) {
            return;
        }
        let child = self.child.as_ref().unwrap();
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
    }

    /// SIGTERM, then waits for the graceful exit (which flushes the lake); returns the data
    /// directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        self.terminate();
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "atdp-proxy exited with {status}");
                break;
            }
            assert!(Instant::now() < deadline, "atdp-proxy did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
        let data = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.data, data)
    }
}

impl Proxy {
    /// SIGKILL (no drain, no flush); returns the data directory for a restart.
    pub fn kill(mut self) -> tempfile::TempDir {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.data, data)
    }
}

/// A copy of the quickstart policy directory with `extra` Cedar policies added and `files`
/// (name, text) written into it.
pub fn quickstart_with(extra: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(quickstart()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let policies = dir.path().join("policies.cedar");
    let mut text = std::fs::read_to_string(&policies).unwrap();
    text.push_str(extra);
    std::fs::write(&policies, text).unwrap();
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content).unwrap();
    }
    dir
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A throw-away certificate authority and a server certificate for 127.0.0.1 that it signs,
/// made with the `openssl` command in `dir`: (the authority's PEM path, the certificate's,
/// its key's). The proxy trusts the authority through `--ca-file`.
pub fn tls_certificates(dir: &Path) -> (String, String, String) {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    std::fs::write(
        path("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let steps: [Vec<String>; 3] = [
        [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=atdp-test-ca",
            "-keyout",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([path("ca.key"), "-out".into(), path("ca.pem")])
        .collect(),
        [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([path("key.pem"), "-out".into(), path("leaf.csr")])
        .collect(),
        ["x509", "-req", "-days", "1", "-CAcreateserial", "-in"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                path("leaf.csr"),
                "-CA".into(),
                path("ca.pem"),
                "-CAkey".into(),
                path("ca.key"),
                "-extfile".into(),
                path("leaf.ext"),
                "-out".into(),
                path("cert.pem"),
            ])
            .collect(),
    ];
    for step in steps {
        let made = std::process::Command::new("openssl")
            .args(&step)
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    (path("ca.pem"), path("cert.pem"), path("key.pem"))
}

/// nginx (Debian's) as an HTTPS front offering HTTP/2 by ALPN, passing every request to a
/// local HTTP/1.1 server; its access log has one line per request: protocol, method, path,
/// status, host (`:authority` on HTTP/2).
pub struct Nginx {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Nginx {
    pub fn start_h2(dir: &Path, cert: &str, key: &str, backend: u16) -> Nginx {
        let port = free_port();
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("tmp")).unwrap();
        let log = prefix.join("access.log");
        let p = |name: &str| prefix.join(name).to_str().unwrap().to_owned();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {pid};\n\
             error_log {errors} warn;\nevents {{ worker_connections 64; }}\n\
             http {{\n\
               log_format proto '$server_protocol $request_method $request_uri $status $host';\n\
               access_log {log} proto;\n\
               client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};\n\
               uwsgi_temp_path {tmp}; scgi_temp_path {tmp};\n\
               server {{\n\
                 listen 127.0.0.1:{port} ssl http2;\n\
                 ssl_certificate {cert}; ssl_certificate_key {key};\n\
                 location / {{\n\
                   proxy_pass http://127.0.0.1:{backend};\n\
                   proxy_http_version 1.1; proxy_set_header Connection \"\";\n\
                   proxy_buffering off;\n\
                 }}\n\
               }}\n\
             }}\n",
            pid = p("nginx.pid"),
            errors = p("error.log"),
            log = log.display(),
            tmp = p("tmp"),
        );
        std::fs::write(prefix.join("nginx.conf"), conf).unwrap();
        let nginx = ["/usr/sbin/nginx", "nginx"]
            .into_iter()
            .find(|n| Command::new(n).arg("-v").output().is_ok())
            .expect("nginx is not installed: .ci/run installs nginx-light");
        let child = Command::new(nginx)
            .args(["-p", &p(""), "-c", &p("nginx.conf"), "-e", &p("error.log")])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut front = Nginx { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = front.child.try_wait() {
                panic!(
                    "nginx exited ({status}): {}",
                    std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "nginx did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        front
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one `sdk_client.py` scenario; returns its JSON line.
pub fn sdk(base_url: &str, key: &str, scenario: &str, text: &str, extra: &[&str]) -> Value {
    let output = Command::new(python())
        .arg(root().join("tests/python/sdk_client.py"))
        .args(["--base-url", base_url, "--api-key", key, "--text", text])
        .args(extra)
        .arg(scenario)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{scenario} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

/// A raw HTTP/1.1 response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the body ended as its framing says (the last chunk, or `Content-Length`
    /// bytes); false when the connection closed before.
    pub complete: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    try_http(port, method, path, headers, body).expect("HTTP request failed")
}

/// One request on a fresh connection (`Connection: close`); `None` when the connection fails.
pub fn try_http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .ok()?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    // The server may answer (413) before taking the whole body: ignore a reset here.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let complete = if chunked {
        let (whole, ended) = dechunk(&body);
        body = whole;
        ended
    } else {
        length.is_none_or(|n| n == body.len())
    };
    Some(Response {
        status,
        headers,
        body,
        complete,
    })
}

/// The body of a chunked message, and whether its last (empty) chunk arrived.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let Ok(size) = usize::from_str_radix(String::from_utf8_lossy(&raw[..end]).trim(), 16)
        else {
            return (out, false);
        };
        let start = end + 2;
        if size == 0 {
            return (out, raw[start..].starts_with(b"\r\n"));
        }
        if start + size + 2 > raw.len() {
            out.extend_from_slice(&raw[start.min(raw.len())..]);
            return (out, false);
        }
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
    (out, false)
}

/// Everything in the lake under `data/lake`.
pub struct LakeRows {
    pub steps: Vec<Step>,
    pub rewards: Vec<Reward>,
    pub vault: Vec<VaultEntry>,
    pub audit: Vec<AuditEvent>,
}

pub fn read_lake(data: &Path) -> LakeRows {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let lake = Lake::new(data.join("lake").to_str().unwrap(), Default::default()).unwrap();
        let reader = LakeReader::new(lake);
        let all = Filter::default();
        LakeRows {
            steps: reader.steps(&all).await.unwrap().rows,
            rewards: reader.rewards(&all).await.unwrap().rows,
            vault: reader.vault(&all).await.unwrap().rows,
            audit: reader.audit(&all).await.unwrap().rows,
        }
    })
}
