//! Strict audit: the proxy killed (SIGKILL) under concurrent load and restarted on the same
//! data directory; every request the upstream received has its decision event in the lake,
//! carrying the request as stored, exactly once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

#[test]
fn in_strict_mode_every_call_the_upstream_received_is_audited_exactly_once_across_a_kill() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &["--audit", "strict"]);
    let port = proxy.port;
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..6)
        .map(|worker| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let auth = format!("Bearer {DEMO_KEY}");
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let body = json!({"model": "gpt-4.1-mini", "messages": [
                        {"role": "user", "content": format!("marker-{worker}-{n} for jane@example.com")}]});
                    let _ = try_http(
                        port,
                        "POST",
                        "/v1/chat/completions",
                        &[("authorization", &auth), ("content-type", "application/json")],
                        body.to_string().as_bytes(),
                    );
                    n += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let data = proxy.kill();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().unwrap();
    }
    // What left for the upstream, by marker.
    let received: Vec<String> = upstream
        .requests()
        .iter()
        .filter_map(|r| {
            let content = r["body"]["messages"][0]["content"].as_str()?;
            Some(content.split_whitespace().next()?.to_owned())
        })
        .collect();
    assert!(received.len() > 20, "too little load: {}", received.len());

    // Restart on the same data directory (the log is replayed into the lake), then stop.
    let restarted = Proxy::start_in(upstream.port, &["--audit", "strict"], data);
    let data = restarted.stop();
    let lake = read_lake(data.path());
    let mut audited: HashMap<String, usize> = HashMap::new();
    for event in lake.audit.iter().filter(|e| e.kind == "request_allowed") {
        let detail: Value = serde_json::from_str(event.detail_json.as_deref().unwrap()).unwrap();
        let request = &detail["request"];
        let content = request["request_messages"][0]["content"].as_str().unwrap();
        // The request as stored: masked for storage.
        assert!(!content.contains("jane@example.com"), "{content}");
        let marker = content.split_whitespace().next().unwrap().to_owned();
        *audited.entry(marker).or_default() += 1;
    }
    for marker in &received {
        assert_eq!(
            audited.get(marker).copied(),
            Some(1),
            "{marker} left for the upstream; its audit event count is wrong"
        );
    }
    // The vault entries its placeholders need are there too.
    assert!(lake.vault.iter().any(|v| v.entity == "EMAIL_ADDRESS"));
}
