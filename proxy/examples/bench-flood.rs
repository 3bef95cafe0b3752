//! A hostile key's flood, for the benchmark of another key's latency under it: slow bodies
//! (declared at 4 MiB, sent a byte every 100 ms, reopened as soon as the proxy answers) and
//! large bodies (7 MiB, sent back to back), all with one key, for a fixed time.
//!
//! `cargo run --release -p atdp-proxy --example bench-flood -- --port 8080 --key KEY
//!  --slow 64 --large 4 --duration 20`
//!
//! Prints one JSON line: how many answers of each status the flood got.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Counts = Arc<Mutex<BTreeMap<u16, u64>>>;

fn count(counts: &Counts, status: u16) {
    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
    *counts.entry(status).or_default() += 1;
}

/// The status of a response head in `raw`, 0 when there is none.
fn status(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn slow_body(port: u16, key: &str, stop: &AtomicBool) -> u16 {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        4 << 20
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return 0;
    }
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                break;
            }
            Err(_) => {}
        }
        if stream.write_all(b" ").is_err() {
            break;
        }
    }
    status(&raw)
}

fn large_body(port: u16, key: &str, body: &[u8]) -> u16 {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    status(&raw)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    };
    let port: u16 = flag("--port", "8080").parse()?;
    let key = flag("--key", "sk-atdp-demo-agent");
    let slow: usize = flag("--slow", "64").parse()?;
    let large: usize = flag("--large", "4").parse()?;
    let duration = Duration::from_secs_f64(flag("--duration", "20").parse()?);
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Counts = Arc::default();
    let body = Arc::new(
        format!(
            r#"{{"model":"gpt-4.1-mini","messages":[{{"role":"user","content":"{}"}}]}}"#,
            "x".repeat(7 << 20)
        )
        .into_bytes(),
    );
    let mut threads = Vec::new();
    for i in 0..slow + large {
        let (stop, counts, key, body) = (stop.clone(), counts.clone(), key.clone(), body.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let status = if i < slow {
                    slow_body(port, &key, &stop)
                } else {
                    large_body(port, &key, &body)
                };
                if !stop.load(Ordering::Relaxed) {
                    count(&counts, status);
                }
            }
        }));
    }
    let started = Instant::now();
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let counts = counts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let fields: Vec<String> = counts
        .iter()
        .map(|(status, n)| format!("\"{status}\": {n}"))
        .collect();
    println!(
        "{{\"slow\": {slow}, \"large\": {large}, \"answers\": {{{}}}}}",
        fields.join(", ")
    );
    Ok(())
}
