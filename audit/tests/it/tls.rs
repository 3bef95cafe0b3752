//! The console serving HTTPS itself (`ConsoleConfig::tls`, `atdp-audit serve --tls-cert
//! --tls-key`): a client that trusts the certificate gets the pages with `Secure` cookies;
//! plain HTTP and clients that do not trust it get nothing; a client that connects and never
//! shakes hands holds up nobody; a bad certificate stops the start.

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::fixture;

/// A self-signed certificate for 127.0.0.1 and localhost, made by openssl.
fn certificate(dir: &Path, name: &str) -> atdp_audit::ConsoleTls {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    atdp_audit::ConsoleTls { cert, key }
}

fn https_get(ca: &Path, url: &str) -> Value {
    let output = Command::new(atdp_testkit::python())
        .arg(atdp_testkit::repo_root().join("tests/python/https_get.py"))
        .arg("--ca")
        .arg(ca)
        .arg(url)
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_serves_https_with_secure_cookies() {
    let f = fixture().await;
    let files = certificate(f.dir.path(), "console");
    let other = certificate(f.dir.path(), "other");
    let server = atdp_audit::serve(
        f.lake.clone(),
        f.trail("console-https").await,
        atdp_audit::ConsoleConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            policy_dir: f.policy_dir.clone(),
            keys: f.keys.clone(),
            secure_cookie: false,
            page_size: 20,
            tls: Some(files.clone()),
            metrics_token: None,
        },
    )
    .await
    .unwrap();
    let port = server.addr.port();

    // A client that opens a connection and never starts the handshake.
    let idle = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();

    let url = format!("https://127.0.0.1:{port}/login");
    let (ca, url2) = (files.cert.clone(), url.clone());
    let page = tokio::task::spawn_blocking(move || https_get(&ca, &url2))
        .await
        .unwrap();
    assert_eq!(page["status"], 200, "{page}");
    assert_eq!(page["alpn"], "http/1.1", "{page}");
    let cookies: Vec<&str> = page["set_cookie"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!cookies.is_empty(), "{page}");
    assert!(
        cookies
            .iter()
            .all(|c| c.contains("Secure") && c.starts_with("__Host-")),
        "{cookies:?}"
    );

    // A client that trusts another certificate refuses the console's.
    let (ca, url2) = (other.cert.clone(), url.clone());
    let refused = tokio::task::spawn_blocking(move || https_get(&ca, &url2))
        .await
        .unwrap();
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or("")
            .contains("CERTIFICATE"),
        "{refused}"
    );

    // Plain HTTP gets no HTTP answer.
    let plain = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
            .write_all(b"GET /login HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        answer
    })
    .await
    .unwrap();
    assert!(!plain.starts_with(b"HTTP/"), "plain HTTP was answered");
    drop(idle);
    server.stop().await.unwrap();

    // A key that is not the certificate's stops the start, naming the file.
    let mismatched = atdp_audit::ConsoleTls {
        cert: files.cert.clone(),
        key: other.key.clone(),
    };
    let error = atdp_audit::serve(
        f.lake.clone(),
        f.trail("console-bad-tls").await,
        atdp_audit::ConsoleConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            policy_dir: f.policy_dir.clone(),
            keys: f.keys.clone(),
            secure_cookie: false,
            page_size: 20,
            tls: Some(mismatched),
            metrics_token: None,
        },
    )
    .await
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(error.contains("other.key"), "{error}");
}
