//! The agents' listener over TLS: the official SDKs over HTTPS, HTTP/2 by ALPN, and a
//! certificate reloaded on SIGHUP while a connection made with the old one stays open.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

const CHAT: &str =
    r#"{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"mail jane@example.com"}]}"#;

/// SHA-256 of a PEM certificate's DER, in lower-case hex.
fn fingerprint_of_file(pem: &str) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in", pem])
        .output()
        .unwrap();
    normalise(&String::from_utf8_lossy(&out.stdout))
}

/// SHA-256 of the certificate a new TLS handshake with `port` gets.
fn fingerprint_served(port: u16) -> String {
    let script = format!(
        "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    normalise(&String::from_utf8_lossy(&out.stdout))
}

fn normalise(line: &str) -> String {
    line.trim()
        .rsplit('=')
        .next()
        .unwrap_or("")
        .replace(':', "")
        .to_ascii_lowercase()
}

#[test]
fn agents_reach_the_proxy_over_tls_and_http2_and_a_reloaded_certificate_drops_nothing() {
    let upstream = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_certificates(dir.path());
    let proxy = Proxy::start(upstream.port, &["--tls-cert", &cert, "--tls-key", &key]);
    let base = format!("https://127.0.0.1:{}", proxy.port);

    // The official SDKs, over HTTPS, plain and streamed.
    let out = Command::new(python())
        .arg(root().join("tests/python/tls_client.py"))
        .args(["sdk", &base, &ca])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    for api in ["openai", "openai_stream", "anthropic"] {
        let text = replies[api].as_str().unwrap();
        assert!(text.contains("jane@example.com"), "{api}: {text}");
    }
    for request in upstream.requests() {
        let raw = request["raw"].as_str().unwrap();
        assert!(!raw.contains("jane@example.com"), "masked over TLS too");
    }

    // HTTP/2, chosen by ALPN.
    let auth = format!("authorization: Bearer {DEMO_KEY}");
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let out = Command::new("curl")
            .args(["-s", flag, "--cacert", &ca, "-o", "/dev/null"])
            .args(["-w", "%{http_version} %{http_code}"])
            .args(["-H", &auth, "-H", "content-type: application/json"])
            .args(["-d", CHAT])
            .arg(format!("{base}/v1/chat/completions"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{version} 200")
        );
    }

    // A connection made with the first certificate...
    let mut held = Command::new(python())
        .arg(root().join("tests/python/tls_client.py"))
        .args(["hold", &base, &ca])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(held.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let first = fingerprint_of_file(&cert);
    assert_eq!(fingerprint_served(proxy.port), first);

    // ...outlives a reload that serves new handshakes another one.
    let other = tempfile::tempdir().unwrap();
    let (_, new_cert, new_key) = tls_certificates(other.path());
    std::fs::copy(&new_key, &key).unwrap();
    std::fs::copy(&new_cert, &cert).unwrap();
    let second = fingerprint_of_file(&cert);
    assert_ne!(first, second);
    Command::new("kill")
        .args(["-HUP", &proxy.pid().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fingerprint_served(proxy.port) != second {
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    held.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let result: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(held.wait().unwrap().success());
    assert_eq!(result["before"]["status"], 200, "{result}");
    assert_eq!(result["after"]["status"], 200, "{result}");
    assert_eq!(result["before"]["cert"], first.as_str());
    assert_eq!(
        result["after"]["cert"],
        first.as_str(),
        "the same connection"
    );

    // A key that does not fit its certificate is refused and the one in force stays.
    std::fs::copy(dir.path().join("ca.key"), &key).unwrap();
    Command::new("kill")
        .args(["-HUP", &proxy.pid().to_string()])
        .status()
        .unwrap();
    // Nothing outside the proxy shows a refused reload but its log; a reload takes
    // milliseconds, so after two seconds the certificate served is the one it kept.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(fingerprint_served(proxy.port), second);

    let lake = read_lake(proxy.stop().path());
    assert_eq!(lake.steps.len(), 7, "every call over TLS was recorded");
}

#[test]
fn a_certificate_without_its_key_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, _) = tls_certificates(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_atdp-proxy"))
        .args(["--policy", quickstart().to_str().unwrap()])
        .args(["--upstream", "http://127.0.0.1:9", "--tls-cert", &cert])
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tls_key"));
}
