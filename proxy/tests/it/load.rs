//! Hostile load: one key floods the proxy with slow and large bodies while another key's
//! calls keep succeeding. The flooding key is held to its calls in flight (429), a body that
//! does not arrive in time is answered 408, and nobody else waits on either.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

/// Opens a call whose body (declared as `declared` bytes) arrives one byte every 100 ms;
/// returns the status the proxy answered with, or 0 when it answered nothing.
fn trickle(port: u16, key: &str, declared: usize, stop: Arc<AtomicBool>) -> u16 {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return 0;
    }
    let mut reader = stream.try_clone().unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let answered = Arc::new(AtomicBool::new(false));
    let read = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            let mut raw = Vec::new();
            let mut buf = [0u8; 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&buf[..n]);
                if raw.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            answered.store(true, Ordering::SeqCst);
            String::from_utf8_lossy(&raw)
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        })
    };
    while !answered.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
        if stream.write_all(b" ").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = read.join().unwrap();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    status
}

#[test]
fn one_key_flooding_slow_and_large_bodies_does_not_stop_another_keys_calls() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(
        upstream.port,
        &["--key-max-in-flight", "6", "--client-body-timeout-s", "3"],
    );
    let port = proxy.port;
    let stop = Arc::new(AtomicBool::new(false));
    // Twelve slow bodies of the flooding key: six take its slots, six are refused at once.
    let slow: Vec<_> = (0..12)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || trickle(port, DEMO_KEY, 4 << 20, stop))
        })
        .collect();
    // And large bodies, as fast as it can send them.
    let large: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let body = json!({"model": "gpt-4.1-mini", "messages": [
                    {"role": "user", "content": "x".repeat(7 << 20)}]})
                .to_string();
                let auth = format!("Bearer {DEMO_KEY}");
                let mut statuses = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let headers = [
                        ("authorization", auth.as_str()),
                        ("content-type", "application/json"),
                    ];
                    if let Some(r) = try_http(
                        port,
                        "POST",
                        "/v1/chat/completions",
                        &headers,
                        body.as_bytes(),
                    ) {
                        statuses.push(r.status);
                    }
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // Meanwhile the other key's calls succeed, every one.
    let auth = format!("Bearer {OTHER_KEY}");
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..30 {
        let body = json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": format!("call {i}")}]});
        let began = Instant::now();
        let response = http(
            port,
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        );
        slowest = slowest.max(began.elapsed());
        assert_eq!(
            response.status,
            200,
            "call {i}: {}",
            String::from_utf8_lossy(&response.body)
        );
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let statuses: Vec<u16> = slow.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    let large: Vec<u16> = large.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let count = |code: u16| statuses.iter().filter(|s| **s == code).count();
    // The slow bodies that got a slot ran out of time; the rest were refused for the key's
    // limit, at once.
    assert_eq!(count(408) + count(429), 12, "{statuses:?}");
    assert!(count(408) >= 1 && count(429) >= 1, "{statuses:?}");
    // A large body is served, or refused for the key's limit, or (on a machine this loaded)
    // runs out of its time: never anything else.
    assert!(
        large.iter().all(|s| [200, 408, 429].contains(s)),
        "{large:?}"
    );
    eprintln!("slowest call of the other key while flooded: {slowest:?}");
}
