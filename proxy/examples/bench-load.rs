//! An open-loop load generator for the proxy benchmark: requests are scheduled at a fixed
//! rate, and each latency is measured from the request's *scheduled* time, so a slow server
//! cannot hide its queueing (no coordinated omission). Keep-alive connections, HTTP/1.1.
//!
//! `cargo run --release -p atdp-proxy --example bench-load -- --port 8080 --rate 2000
//!  --duration 20 [--stream] [--realistic] [--key sk-atdp-demo-agent] [--connections 64]
//!  [--slow MS]`
//!
//! `--realistic` sends a support conversation carrying personal data (an e-mail address, a
//! phone number, a card number, in the user's message and in a tool result holding JSON) and
//! a tool, instead of a short request without any: the path masking and restoring work on.
//! Each request's user message and tool result carry a case reference of their own (six
//! letters from the request's number), so that no two requests are the same text, as in
//! real traffic; the system prompt and the tool are the same in every request.
//! `--print-body` prints the body and exits (for other load generators), with `@@@@@@` where
//! each request's case reference goes.
//!
//! `--slow MS` also prints to stderr, by 100 ms window of scheduled time, how many requests
//! took MS or longer (to find stalls).
//!
//! Prints one JSON line: rate asked, throughput achieved, errors, latency percentiles (ms).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Plan {
    port: u16,
    request: Vec<u8>,
    start: Instant,
    interval: Duration,
    total: u64,
    next: AtomicU64,
    /// Where in `request` each request writes its case reference.
    stamps: Vec<usize>,
}

/// The placeholder of the case reference in a realistic body.
const STAMP: &str = "@@@@@@";

/// The case reference of request `ticket`: six lower-case letters.
fn reference(mut ticket: u64) -> [u8; 6] {
    let mut out = [b'a'; 6];
    for byte in out.iter_mut().rev() {
        *byte = b'a' + (ticket % 26) as u8;
        ticket /= 26;
    }
    out
}

/// Reads one response; returns false on a non-200 status.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 16 << 10];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let ok = head.starts_with("http/1.1 200");
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    buf.drain(..head_end);
    match length {
        Some(length) => {
            while buf.len() < length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..length);
        }
        None => loop {
            // Chunked: size line, data, CRLF; a zero size ends it.
            let line_end = loop {
                if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            };
            let size = usize::from_str_radix(String::from_utf8_lossy(&buf[..line_end]).trim(), 16)
                .map_err(|_| std::io::Error::other("bad chunk size"))?;
            let need = line_end + 2 + size + 2;
            while buf.len() < need {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..need);
            if size == 0 {
                break;
            }
        },
    }
    Ok(ok)
}

async fn worker(plan: Arc<Plan>) -> (Vec<(Duration, Duration)>, u64) {
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut connection: Option<TcpStream> = None;
    let mut buf = Vec::new();
    let mut request = plan.request.clone();
    loop {
        let ticket = plan.next.fetch_add(1, Ordering::Relaxed);
        if ticket >= plan.total {
            break;
        }
        let due = plan.start + plan.interval.mul_f64(ticket as f64);
        tokio::time::sleep_until(due.into()).await;
        if connection.is_none() {
            match TcpStream::connect(("127.0.0.1", plan.port)).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    connection = Some(stream);
                    buf.clear();
                }
                Err(_) => {
                    errors += 1;
                    continue;
                }
            }
        }
        let Some(stream) = connection.as_mut() else {
            continue;
        };
        let stamp = reference(ticket);
        for at in &plan.stamps {
            request[*at..*at + stamp.len()].copy_from_slice(&stamp);
        }
        let outcome = async {
            stream.write_all(&request).await?;
            read_response(stream, &mut buf).await
        }
        .await;
        match outcome {
            Ok(true) => latencies.push((due.elapsed(), due - plan.start)),
            Ok(false) => errors += 1,
            Err(_) => {
                errors += 1;
                connection = None;
            }
        }
    }
    (latencies, errors)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1e3
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let port: u16 = flag("--port").unwrap_or_else(|| "8080".into()).parse()?;
    let rate: f64 = flag("--rate").unwrap_or_else(|| "1000".into()).parse()?;
    let duration: f64 = flag("--duration").unwrap_or_else(|| "10".into()).parse()?;
    let connections: usize = flag("--connections")
        .unwrap_or_else(|| "64".into())
        .parse()?;
    let key = flag("--key").unwrap_or_else(|| "sk-atdp-demo-agent".into());
    let stream = args.iter().any(|a| a == "--stream");
    let slow_ms: Option<f64> = flag("--slow").map(|v| v.parse()).transpose()?;
    let realistic = args.iter().any(|a| a == "--realistic");
    let body = if realistic {
        format!(
            r#"{{"model":"gpt-4.1-mini","stream":{stream},"messages":[{{"role":"system","content":"You are a support agent for an online shop. Answer briefly. Use lookup_order for order questions."}},{{"role":"user","content":"Hi, I am Jane, case {STAMP}. Where is my order? It was placed last week and the tracking page shows nothing since Monday. You can mail me at jane.doe@example.com or call +44 20 7946 0958. I paid with 4111 1111 1111 1111."}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_1","type":"function","function":{{"name":"lookup_order","arguments":"{{\"email\":\"jane.doe@example.com\"}}"}}}}]}},{{"role":"tool","tool_call_id":"call_1","content":"{{\"order\":\"A-1042\",\"status\":\"shipped\",\"case\":\"{STAMP}\",\"carrier\":\"DHL\",\"customer\":{{\"email\":\"jane.doe@example.com\",\"phone\":\"+44 20 7946 0958\"}}}}"}}],"tools":[{{"type":"function","function":{{"name":"lookup_order","description":"Looks up an order by the customer's e-mail.","parameters":{{"type":"object","properties":{{"email":{{"type":"string"}}}},"required":["email"]}}}}}}]}}"#
        )
    } else {
        format!(
            r#"{{"model":"gpt-4.1-mini","stream":{stream},"messages":[{{"role":"system","content":"You are a support agent for an online shop. Answer briefly."}},{{"role":"user","content":"Where is my order? It was placed last week and the tracking page shows nothing since Monday."}}]}}"#
        )
    };
    if args.iter().any(|a| a == "--print-body") {
        println!("{body}");
        return Ok(());
    }
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let stamps: Vec<usize> = request
        .windows(STAMP.len())
        .enumerate()
        .filter(|(_, window)| *window == STAMP.as_bytes())
        .map(|(at, _)| at)
        .collect();
    let total = (rate * duration) as u64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (latencies, errors, elapsed) = runtime.block_on(async move {
        let plan = Arc::new(Plan {
            port,
            request,
            start: Instant::now() + Duration::from_millis(100),
            interval: Duration::from_secs_f64(1.0 / rate),
            total,
            next: AtomicU64::new(0),
            stamps,
        });
        let started = plan.start;
        let handles: Vec<_> = (0..connections)
            .map(|_| tokio::spawn(worker(plan.clone())))
            .collect();
        let mut latencies = Vec::new();
        let mut errors = 0;
        for handle in handles {
            if let Ok((l, e)) = handle.await {
                latencies.extend(l);
                errors += e;
            }
        }
        (latencies, errors, started.elapsed())
    });
    if let Some(slow) = slow_ms {
        // Where the slow requests were scheduled, by 100 ms window (to find stalls).
        let mut windows = std::collections::BTreeMap::<u128, (usize, f64)>::new();
        for (latency, at) in &latencies {
            let ms = latency.as_secs_f64() * 1e3;
            if ms >= slow {
                let window = windows.entry(at.as_millis() / 100).or_default();
                window.0 += 1;
                window.1 = window.1.max(ms);
            }
        }
        for (window, (count, max)) in windows {
            eprintln!(
                "slow at {:>6} ms: {count:>4} requests, max {max:.1} ms",
                window * 100
            );
        }
    }
    let mut latencies: Vec<Duration> = latencies.into_iter().map(|(l, _)| l).collect();
    latencies.sort();
    println!(
        "{{\"rate\": {rate}, \"stream\": {stream}, \"sent\": {total}, \"ok\": {}, \"errors\": {errors}, \"throughput\": {:.0}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"p999_ms\": {:.3}, \"max_ms\": {:.3}}}",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999),
        percentile(&latencies, 1.0),
    );
    Ok(())
}
