//! Bad input, denials, limits and cut streams: each answered in the API's own error format,
//! nothing forwarded that should not be, and the lake saying what happened.

use serde_json::json;

use crate::harness::*;

fn post(port: u16, path: &str, key: Option<&str>, content_type: &str, body: &[u8]) -> Response {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("content-type", content_type)];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    http(port, "POST", path, &headers, body)
}

fn chat(text: &str, stream: bool) -> Vec<u8> {
    json!({"model": "gpt-4.1-mini", "stream": stream, "messages": [{"role": "user", "content": text}]})
        .to_string()
        .into_bytes()
}

#[test]
fn bad_requests_get_errors_in_the_apis_own_format() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &["--max-body-bytes", "65536"]);
    let p = proxy.port;

    let none = post(
        p,
        "/v1/chat/completions",
        None,
        "application/json",
        &chat("hi", false),
    );
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["error"]["type"], "authentication_error");
    let wrong = post(
        p,
        "/v1/messages",
        Some("sk-nope"),
        "application/json",
        b"{}",
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(
        wrong.json()["type"],
        "error",
        "Anthropic's format on /v1/messages"
    );
    assert_eq!(wrong.json()["error"]["type"], "authentication_error");

    let unknown = http(p, "GET", "/v1/fine_tuning/jobs", &[], b"");
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown path")
    );
    let method = http(p, "GET", "/v1/chat/completions", &[], b"");
    assert_eq!(method.status, 405);

    let bad_json = post(
        p,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        b"{\"model\": ",
    );
    assert_eq!(bad_json.status, 400);
    assert_eq!(bad_json.json()["error"]["type"], "invalid_request_error");
    let no_model = post(
        p,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        b"{\"messages\": []}",
    );
    assert_eq!(no_model.status, 400);
    assert!(
        no_model.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("model")
    );
    let text = post(
        p,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "text/plain",
        b"hello",
    );
    assert_eq!(text.status, 415);
    let big = post(
        p,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat(&"x".repeat(100_000), false),
    );
    assert_eq!(big.status, 413);
    assert_eq!(big.json()["error"]["code"], "request_too_large");

    // None of these reached the upstream.
    assert!(upstream.requests().is_empty());
    let _ = proxy.stop();
}

#[test]
fn policy_denials_are_403_with_the_deciding_policy_and_forward_nothing() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let denied = post(
        proxy.port,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat("my SSN is 536-22-1234", false),
    );
    assert_eq!(
        denied.status,
        403,
        "{}",
        String::from_utf8_lossy(&denied.body)
    );
    let message = denied.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("no-ssn-or-secrets-external"), "{message}");
    assert!(!message.contains("536-22-1234"));
    assert!(
        upstream.requests().is_empty(),
        "a denied call must not be forwarded"
    );
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 1);
    assert_eq!(lake.steps[0].status, "denied");
    assert!(
        !serde_json::to_string(&lake.steps[0])
            .unwrap()
            .contains("536-22-1234")
    );
    assert!(lake.audit.iter().any(|a| a.kind == "request_denied"
        && a.policy_id.as_deref() == Some("no-ssn-or-secrets-external")));
}

#[test]
fn values_spelled_with_unicode_characters_are_decided_like_their_ascii_spelling() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let spellings = [
        "536\u{2013}22\u{2013}1234",
        "\u{FF15}\u{FF13}\u{FF16}-\u{FF12}\u{FF12}-\u{FF11}\u{FF12}\u{FF13}\u{FF14}",
        "536\u{A0}22\u{A0}1234",
        "536-2\u{200B}2-1234",
    ];
    // Secrets spelled with a Cyrillic `о` and a Greek `Α` drawn as Latin letters.
    let secrets = [
        "sk-pr\u{43E}j-abcdefghijklmnopqrstuvwxyz012345",
        "\u{391}KIAABCDEFGHIJKLMNOP",
    ];
    let messages = spellings
        .iter()
        .map(|ssn| format!("my SSN is {ssn}"))
        .chain(
            secrets
                .iter()
                .map(|key| format!("use the key {key} for it")),
        );
    for message in messages {
        let denied = post(
            proxy.port,
            "/v1/chat/completions",
            Some(DEMO_KEY),
            "application/json",
            &chat(&message, false),
        );
        assert_eq!(denied.status, 403, "{message:?}");
        let message = denied.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains("no-ssn-or-secrets-external"), "{message}");
    }
    assert!(upstream.requests().is_empty());
    let data = proxy.stop();
    let stored = serde_json::to_string(&read_lake(data.path()).steps).unwrap();
    for value in spellings.iter().chain(&secrets) {
        assert!(!stored.contains(value), "{value:?} is stored");
    }
}

#[test]
fn large_bodies_and_cut_streams() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    // 2 MiB prompts go through, streamed and not.
    let prompt = "lorem ipsum ".repeat((2 << 20) / 12 + 1);
    let prompt = &prompt[..2 << 20];
    for stream in [false, true] {
        let response = post(
            proxy.port,
            "/v1/chat/completions",
            Some(DEMO_KEY),
            "application/json",
            &chat(prompt, stream),
        );
        assert_eq!(response.status, 200, "stream={stream}");
        assert!(response.complete, "stream={stream}");
        assert!(
            response.body.len() > 2 << 20,
            "the echo came back whole (stream={stream})"
        );
    }
    // A stream the upstream cuts: the client gets what was sent, the lake says interrupted.
    let cut = post(
        proxy.port,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat("[[cut]] bye", true),
    );
    assert_eq!(cut.status, 200);
    assert!(!String::from_utf8_lossy(&cut.body).contains("[DONE]"));
    assert!(
        String::from_utf8_lossy(&cut.body).contains("data: {"),
        "the events sent before the cut arrived"
    );
    assert!(
        !cut.complete,
        "the client sees the cut: its connection closes before the last chunk"
    );
    // An upstream error is passed on with the upstream's status.
    let failed = post(
        proxy.port,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat("[[error500]]", false),
    );
    assert_eq!(failed.status, 500);
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let statuses: Vec<&str> = lake.steps.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(
        statuses,
        ["ok", "ok", "interrupted", "upstream_error"],
        "{statuses:?}"
    );
}

#[test]
fn rate_limits_answer_429_with_retry_after() {
    let upstream = Upstream::start();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[limits]\nkey_requests_per_minute = 2\n").unwrap();
    let proxy = Proxy::start(
        upstream.port,
        &["--config", config.path().to_str().unwrap()],
    );
    let statuses: Vec<u16> = (0..3)
        .map(|_| {
            post(
                proxy.port,
                "/v1/chat/completions",
                Some(DEMO_KEY),
                "application/json",
                &chat("hi", false),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
    let limited = post(
        proxy.port,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat("hi", false),
    );
    assert!(limited.header("retry-after").is_some());
    assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
    // Another key has its own bucket.
    let other = post(
        proxy.port,
        "/v1/chat/completions",
        Some(OTHER_KEY),
        "application/json",
        &chat("hi", false),
    );
    assert_eq!(other.status, 200);
    // The admin port counts them.
    let metrics = String::from_utf8(http(proxy.admin, "GET", "/metrics", &[], b"").body).unwrap();
    assert!(
        metrics.contains("atdp_requests_total{api=\"openai.chat\",status=\"200\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("atdp_requests_total{api=\"openai.chat\",status=\"429\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("atdp_added_latency_seconds_count 3"),
        "{metrics}"
    );
    assert_eq!(http(proxy.admin, "GET", "/readyz", &[], b"").status, 200);
    let _ = proxy.stop();
}

#[test]
fn token_limits_per_key_and_per_tenant_refuse_once_the_reported_tokens_run_out() {
    let upstream = Upstream::start();
    let call = |port: u16, key: &str| {
        post(
            port,
            "/v1/chat/completions",
            Some(key),
            "application/json",
            &chat("hi", false),
        )
    };
    // The fake upstream reports some tokens for each call; a budget of 1 a minute is spent
    // by the first call, which is served: tokens are only known once the upstream answers.
    for setting in ["key_tokens_per_minute = 1", "tenant_tokens_per_minute = 1"] {
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), format!("[limits]\n{setting}\n")).unwrap();
        let proxy = Proxy::start(
            upstream.port,
            &["--config", config.path().to_str().unwrap()],
        );
        let first = call(proxy.port, DEMO_KEY);
        assert_eq!(first.status, 200, "{setting}");
        assert!(first.json()["usage"]["total_tokens"].as_u64().unwrap() > 1);
        let limited = call(proxy.port, DEMO_KEY);
        assert_eq!(limited.status, 429, "{setting}");
        assert!(limited.header("retry-after").is_some(), "{setting}");
        assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
        // Another key, of another tenant, has its own buckets.
        assert_eq!(call(proxy.port, OTHER_KEY).status, 200, "{setting}");
        let _ = proxy.stop();
    }
    // The same from the flags.
    let proxy = Proxy::start(upstream.port, &["--key-tpm", "1"]);
    assert_eq!(call(proxy.port, DEMO_KEY).status, 200);
    assert_eq!(call(proxy.port, DEMO_KEY).status, 429);
    let _ = proxy.stop();
}

/// Sends a streaming chat request on a raw connection and returns it, for tests that cut or
/// outlive it.
fn open_stream(port: u16, text: &str) -> std::net::TcpStream {
    use std::io::Write;
    let body = chat(text, true);
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {DEMO_KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    stream
}

#[test]
fn a_client_that_leaves_mid_stream_is_recorded_as_interrupted() {
    use std::io::Read;
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let mut stream = open_stream(proxy.port, "[[slow]] a long answer");
    let mut first = [0u8; 256];
    let n = stream.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    drop(stream);
    // Let the proxy notice on its next write to the closed connection.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 1);
    assert_eq!(
        lake.steps[0].status, "interrupted",
        "{:?}",
        lake.steps[0].error
    );
}

#[test]
fn a_graceful_shutdown_finishes_the_streams_in_flight() {
    use std::io::Read;
    let upstream = Upstream::start();
    let mut proxy = Proxy::start(upstream.port, &[]);
    let mut stream = open_stream(proxy.port, "[[slow]] finish me");
    let mut first = [0u8; 64];
    stream.read_exact(&mut first).unwrap();
    proxy.terminate();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    let text = String::from_utf8_lossy(&rest).into_owned();
    assert!(
        text.contains("data: [DONE]"),
        "the stream was cut by the shutdown: {text}"
    );
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 1);
    assert_eq!(lake.steps[0].status, "ok");
}

#[test]
fn an_unreachable_upstream_is_a_502_in_the_apis_format_and_recorded() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = Proxy::start(closed, &[]);
    for (path, body) in [
        ("/v1/chat/completions", chat("hi", false)),
        ("/v1/messages", json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}).to_string().into_bytes()),
    ] {
        let response = post(proxy.port, path, Some(DEMO_KEY), "application/json", &body);
        assert_eq!(response.status, 502, "{path}: {}", String::from_utf8_lossy(&response.body));
        let error = response.json();
        assert_eq!(error["error"]["type"], "api_error", "{error}");
        // Each API's own envelope.
        if path == "/v1/messages" {
            assert_eq!(error["type"], "error", "{error}");
        } else {
            assert_eq!(error["error"]["code"], "upstream_failed", "{error}");
        }
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let statuses: Vec<&str> = lake.steps.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, ["upstream_error", "upstream_error"]);
}

#[test]
fn a_masking_failure_refuses_the_call_and_forwards_nothing() {
    // A key whose tenant is not declared as an entity: the proxy has no vault keys for it,
    // so tokenizing fails. Nothing may go upstream unmasked.
    let upstream = Upstream::start();
    let policy = tempfile::tempdir().unwrap();
    for name in ["schema.cedarschema", "policies.cedar", "masking.toml"] {
        std::fs::copy(quickstart().join(name), policy.path().join(name)).unwrap();
    }
    let mut entities: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(quickstart().join("entities.json")).unwrap())
            .unwrap();
    let hash = atdp_policies::hash_api_key("sk-ghost-agent");
    entities.push(
        json!({"uid": {"type": "Atdp::Agent", "id": "ghost-agent"}, "attrs": {},
        "parents": [{"type": "Atdp::Tenant", "id": "ghost"}]}),
    );
    entities.push(
        json!({"uid": {"type": "Atdp::ApiKey", "id": hash}, "attrs": {"active": true},
        "parents": [{"type": "Atdp::Agent", "id": "ghost-agent"}]}),
    );
    std::fs::write(
        policy.path().join("entities.json"),
        serde_json::to_string(&entities).unwrap(),
    )
    .unwrap();
    let proxy = Proxy::launch(
        upstream.port,
        policy.path(),
        &[],
        tempfile::tempdir().unwrap(),
        &[],
    );
    let refused = post(
        proxy.port,
        "/v1/chat/completions",
        Some("sk-ghost-agent"),
        "application/json",
        &chat("mail jane.doe@example.com", false),
    );
    assert_eq!(
        refused.status,
        500,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.json()["error"]["code"], "masking_failed");
    assert!(!String::from_utf8_lossy(&refused.body).contains("jane.doe"));
    assert!(
        upstream.requests().is_empty(),
        "nothing is forwarded when masking fails"
    );
    let _ = proxy.stop();
}

#[test]
fn a_request_the_upstream_read_whole_is_sent_once_even_on_a_pooled_connection() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    // Ordinary calls, one after another and several at once, leave pooled keep-alive
    // connections behind for the next call to reuse.
    for n in 0..2 {
        chat_ok(proxy.port, n);
    }
    let streams: Vec<_> = (0..5)
        .map(|n| {
            let port = proxy.port;
            std::thread::spawn(move || {
                post(
                    port,
                    "/v1/chat/completions",
                    Some(DEMO_KEY),
                    "application/json",
                    &chat(&format!("stream {n}"), true),
                )
            })
        })
        .collect();
    for stream in streams {
        let response = stream.join().unwrap();
        assert_eq!(response.status, 200);
        assert!(response.complete);
    }
    // Give the pool time to take the connections back, so the next call reuses one.
    std::thread::sleep(std::time::Duration::from_millis(100));

    // The upstream reads this request whole, then closes the connection without answering.
    let cut = post(
        proxy.port,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat("[[cut]] once", false),
    );
    assert_eq!(cut.status, 502, "{}", String::from_utf8_lossy(&cut.body));
    assert_eq!(cut.json()["error"]["code"], "upstream_failed");
    let received = upstream
        .requests()
        .iter()
        .filter(|r| r["raw"].as_str().unwrap_or_default().contains("[[cut]]"))
        .count();
    assert_eq!(
        received, 1,
        "a model call is not idempotent: the upstream had the whole request, so it is not sent again"
    );

    let data = proxy.stop();
    let lake = read_lake(data.path());
    let statuses: Vec<&str> = lake.steps.iter().map(|s| s.status.as_str()).collect();
    let mut expected = vec!["ok"; 7];
    expected.push("upstream_error");
    assert_eq!(statuses, expected, "{statuses:?}");
}

/// An upstream written here for framing and connection cases the Python one does not make:
/// on each connection it answers one chat request and then closes the connection. With
/// `framed` the reply has a `Content-Length` and nothing says the connection will close, so
/// the proxy keeps it for reuse and the upstream closes it while it is idle, as an upstream
/// does at the end of its keep-alive time; without, the reply's body ends by the closing.
struct RawUpstream {
    port: u16,
    /// Requests read whole.
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

const RAW_REPLY: &str = r#"{"id":"chatcmpl-raw","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"raw reply"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;

impl RawUpstream {
    fn start(framed: bool) -> RawUpstream {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(mut connection) = connection else {
                    return;
                };
                let counter = counter.clone();
                std::thread::spawn(move || {
                    use std::io::Write;
                    if !atdp_testkit::read_request(&mut connection) {
                        return;
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let head = if framed {
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            RAW_REPLY.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                            .to_owned()
                    };
                    connection.write_all(head.as_bytes()).unwrap();
                    connection.write_all(RAW_REPLY.as_bytes()).unwrap();
                });
            }
        });
        RawUpstream { port, requests }
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Call `n` of a test: a plain chat completion, answered 200.
fn chat_ok(port: u16, n: usize) -> Response {
    let response = post(
        port,
        "/v1/chat/completions",
        Some(DEMO_KEY),
        "application/json",
        &chat(&format!("call {n}"), false),
    );
    assert_eq!(
        response.status,
        200,
        "call {n}: {}",
        String::from_utf8_lossy(&response.body)
    );
    response
}

#[test]
fn a_pooled_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let upstream = RawUpstream::start(true);
    let proxy = Proxy::start(upstream.port, &[]);
    let calls = 6;
    for n in 0..calls {
        let response = chat_ok(proxy.port, n);
        assert_eq!(
            response.json()["choices"][0]["message"]["content"],
            "raw reply"
        );
        // Give the upstream's close time to reach the proxy while the connection is idle in
        // its pool.
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Every call reached the upstream once, each on a fresh connection: one written to a
    // connection the upstream had closed would have failed, since a request written whole is
    // not sent again.
    assert_eq!(upstream.requests(), calls);
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let statuses: Vec<&str> = lake.steps.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, vec!["ok"; calls], "{statuses:?}");
}

#[test]
fn a_reply_ended_by_closing_the_connection_reaches_the_client_chunked_and_whole() {
    let upstream = RawUpstream::start(false);
    let proxy = Proxy::start(upstream.port, &[]);
    for n in 0..2 {
        let response = chat_ok(proxy.port, n);
        assert_eq!(response.header("transfer-encoding"), Some("chunked"));
        assert!(response.complete, "the body ends with its last chunk");
        assert_eq!(response.body, RAW_REPLY.as_bytes());
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let statuses: Vec<&str> = lake.steps.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, ["ok", "ok"], "{statuses:?}");
    assert_eq!(lake.steps[0].completion_tokens, Some(2));
}
