//! The official SDKs through the proxy: plain, streaming and tool calls on all three APIs.

use serde_json::Value;

use crate::harness::*;

/// The text the SDK reports for a scenario.
fn reply(out: &Value) -> String {
    out["text"].as_str().unwrap_or_default().to_owned()
}

fn tool_query(out: &Value) -> String {
    let call = &out["tool_calls"][0];
    match call.get("input") {
        Some(input) => input["query"].as_str().unwrap().to_owned(),
        None => {
            serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap()["query"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    }
}

#[test]
fn sdks_get_the_upstreams_reply_with_pii_restored_and_the_lake_holds_it_masked() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let email = "jane.doe@example.com";
    // A name, an organisation and an address too: found without a shape of their own.
    let shapeless = ["Jane Doe", "Acme GmbH", "Hauptstraße 12, 10115 Berlin"];
    let text = format!(
        "please mail {email} about the renewal for {} at {}, {}",
        shapeless[0], shapeless[1], shapeless[2]
    );
    let plain = [
        "openai-chat",
        "openai-chat-stream",
        "openai-responses",
        "openai-responses-stream",
        "anthropic-messages",
        "anthropic-messages-stream",
    ];
    let mut steps = Vec::new();
    for scenario in plain {
        let out = sdk(&proxy.base_url(), DEMO_KEY, scenario, &text, &["--strict"]);
        assert_eq!(reply(&out), format!("Echo: {text}"), "{scenario}: {out}");
        let step = out["headers"]["x-atdp-step-id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(step.len(), 36, "{scenario}: step id header: {out}");
        steps.push(step);
    }
    let tools = [
        "openai-chat-tools",
        "openai-chat-tools-stream",
        "openai-responses-tools-stream",
        "anthropic-tools",
        "anthropic-tools-stream",
    ];
    let tool_text = format!("[[tool]] find {email}");
    for scenario in tools {
        let out = sdk(
            &proxy.base_url(),
            DEMO_KEY,
            scenario,
            &tool_text,
            &["--strict"],
        );
        assert_eq!(
            tool_query(&out),
            format!("find {email}"),
            "{scenario}: {out}"
        );
    }

    // The upstream saw placeholders, never the address, and never the agent's key.
    let seen = upstream.requests();
    assert_eq!(seen.len(), plain.len() + tools.len());
    for request in &seen {
        let body = request["body"].to_string();
        assert!(!body.contains(email), "upstream saw the address: {body}");
        assert!(body.contains("<EMAIL_ADDRESS_"), "{body}");
        if !body.contains("[[tool]]") {
            for value in shapeless {
                assert!(!body.contains(value), "upstream saw {value}: {body}");
            }
            for entity in ["<PERSON_", "<ORGANIZATION_", "<LOCATION_"] {
                assert!(body.contains(entity), "{entity} missing: {body}");
            }
        }
        let headers = request["headers"].to_string();
        assert!(
            !headers.contains(DEMO_KEY),
            "upstream saw the agent's key: {headers}"
        );
    }

    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), plain.len() + tools.len());
    for step in &lake.steps {
        let stored = serde_json::to_string(step).unwrap();
        assert!(!stored.contains(email), "plaintext in the lake: {stored}");
        for value in shapeless {
            assert!(!stored.contains(value), "{value} in the lake: {stored}");
        }
        assert_eq!(
            (step.status.as_str(), step.tenant_id.as_str()),
            ("ok", "demo"),
            "{stored}"
        );
        assert!(
            step.pii.iter().any(|p| p.entity == "EMAIL_ADDRESS"),
            "{stored}"
        );
        let response = step.response_message.as_ref().expect("a reply");
        let replied = format!(
            "{} {}",
            response.content.clone().unwrap_or_default(),
            response
                .tool_calls
                .iter()
                .map(|c| c.arguments.clone())
                .collect::<String>()
        );
        assert!(
            replied.contains("<EMAIL_ADDRESS_"),
            "the reply is stored masked: {stored}"
        );
    }
    for step in &steps {
        assert!(
            lake.steps.iter().any(|s| &s.step_id == step),
            "step {step} not in the lake"
        );
    }
    let apis: std::collections::BTreeSet<&str> =
        lake.steps.iter().map(|s| s.api.as_str()).collect();
    assert_eq!(apis.len(), 3, "{apis:?}");
    assert!(lake.vault.iter().all(|v| v.tenant_id == "demo"
        && ["EMAIL_ADDRESS", "PERSON", "ORGANIZATION", "LOCATION"].contains(&v.entity.as_str())));
    for entity in ["PERSON", "ORGANIZATION", "LOCATION"] {
        assert!(
            lake.vault.iter().any(|v| v.entity == entity),
            "no {entity} in the vault"
        );
    }
    assert!(!lake.vault.is_empty());
    let allowed = lake
        .audit
        .iter()
        .filter(|a| a.kind == "request_allowed")
        .count();
    assert_eq!(allowed, lake.steps.len());
}

#[test]
fn a_conversation_is_one_trajectory_with_linked_steps() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let first = serde_json::json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]});
    let a = http(
        proxy.port,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {DEMO_KEY}")),
            ("content-type", "application/json"),
        ],
        first.to_string().as_bytes(),
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let second = serde_json::json!({"model": "gpt-4.1-mini", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Echo: hi"},
        {"role": "user", "content": "more"}
    ]});
    let b = http(
        proxy.port,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {DEMO_KEY}")),
            ("content-type", "application/json"),
        ],
        second.to_string().as_bytes(),
    );
    assert_eq!(b.status, 200);
    assert_eq!(
        a.header("x-atdp-trajectory-id"),
        b.header("x-atdp-trajectory-id")
    );
    // A retry of the first turn is a new trajectory, not a continuation.
    let c = http(
        proxy.port,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {DEMO_KEY}")),
            ("content-type", "application/json"),
            ("x-atdp-session-id", "s-1"),
        ],
        first.to_string().as_bytes(),
    );
    assert_ne!(
        a.header("x-atdp-trajectory-id"),
        c.header("x-atdp-trajectory-id")
    );
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let step = |id: &str| lake.steps.iter().find(|s| s.step_id == id).unwrap();
    let (sa, sb) = (
        step(a.header("x-atdp-step-id").unwrap()),
        step(b.header("x-atdp-step-id").unwrap()),
    );
    assert_eq!(sb.parent_step_id.as_deref(), Some(sa.step_id.as_str()));
    assert_eq!((sa.turn_index, sb.turn_index), (0, 1));
    let sc = step(c.header("x-atdp-step-id").unwrap());
    assert_eq!(sc.tags.get("session").map(String::as_str), Some("s-1"));
}

#[test]
fn the_upstreams_own_key_is_injected_and_the_agents_never_forwarded() {
    let upstream = Upstream::start();
    let proxy = Proxy::start_with_env(
        upstream.port,
        &["--upstream-key-env", "BENCH_PROVIDER_KEY"],
        tempfile::tempdir().unwrap(),
        &[("BENCH_PROVIDER_KEY", "provider-secret-1")],
    );
    let out = sdk(&proxy.base_url(), DEMO_KEY, "anthropic-messages", "hi", &[]);
    assert_eq!(out["text"], "Echo: hi");
    let out = sdk(&proxy.base_url(), DEMO_KEY, "openai-chat", "hi", &[]);
    assert_eq!(out["text"], "Echo: hi");
    let seen = upstream.requests();
    assert_eq!(
        seen[0]["headers"]["x-api-key"], "provider-secret-1",
        "Anthropic's header"
    );
    assert_eq!(
        seen[1]["headers"]["authorization"],
        "Bearer provider-secret-1"
    );
    for request in &seen {
        assert!(!request["headers"].to_string().contains(DEMO_KEY));
    }
    let _ = proxy.stop();
}

#[test]
fn behaviour_logprobs_are_recorded_and_stripped_unless_the_client_asked() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(
        upstream.port,
        &[
            "--upstream-logprobs",
            "true",
            "--upstream-token-ids",
            "true",
        ],
    );
    let auth = format!("Bearer {DEMO_KEY}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let ask = |stream: bool, logprobs: bool| {
        let mut body = serde_json::json!({"model": "gpt-4.1-mini", "stream": stream,
            "messages": [{"role": "user", "content": "count the tokens"}]});
        if logprobs {
            body["logprobs"] = Value::Bool(true);
        }
        http(
            proxy.port,
            "POST",
            "/v1/chat/completions",
            &headers,
            body.to_string().as_bytes(),
        )
    };
    for stream in [false, true] {
        let plain = ask(stream, false);
        assert_eq!(plain.status, 200);
        let text = String::from_utf8_lossy(&plain.body).into_owned();
        assert!(
            !text.contains("\"logprob\"") && !text.contains("token_ids"),
            "stripped (stream={stream}): {text}"
        );
        assert!(text.contains("Echo"), "{text}");
        let asked = ask(stream, true);
        let text = String::from_utf8_lossy(&asked.body).into_owned();
        assert!(
            text.contains("\"logprob\""),
            "the client asked, so it gets them: {text}"
        );
    }
    // The upstream was asked for both on every call.
    for request in upstream.requests() {
        assert_eq!(request["body"]["logprobs"], true);
        assert_eq!(request["body"]["return_token_ids"], true);
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 4);
    for step in &lake.steps {
        let logprobs = step
            .completion_logprobs
            .as_ref()
            .expect("behaviour logprobs recorded");
        let ids = step
            .completion_token_ids
            .as_ref()
            .expect("token ids recorded");
        assert!(!logprobs.is_empty() && logprobs.iter().all(|l| (*l + 0.25).abs() < 1e-6));
        assert_eq!(ids.len(), logprobs.len(), "{step:?}");
    }
}

#[test]
fn https_upstreams_are_reached_over_tls_with_a_configured_ca() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_certificates(dir.path());
    let mut fake = std::process::Command::new(python())
        .arg(root().join("tests/python/fake_upstream.py"))
        .args(["--port", "0", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(fake.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = serde_json::from_str::<Value>(&line).unwrap()["port"]
        .as_u64()
        .unwrap();
    // Killed however the test ends.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _fake = Reap(fake);
    let data = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!("[[upstream]]\nname = \"tls\"\nurl = \"https://127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    // The harness's --upstream would replace the file's upstream: start without it.
    let proxy = Proxy::launch_raw(
        &["--config", config.to_str().unwrap(), "--ca-file", &ca],
        data,
    );
    let out = sdk(
        &proxy.base_url(),
        DEMO_KEY,
        "openai-chat-stream",
        "over tls",
        &[],
    );
    assert_eq!(out["text"], "Echo: over tls");
    let out = sdk(
        &proxy.base_url(),
        DEMO_KEY,
        "anthropic-messages",
        "again",
        &[],
    );
    assert_eq!(out["text"], "Echo: again");
    let _ = proxy.stop();
}

#[test]
fn http2_upstreams_get_the_calls_in_http2_form() {
    // nginx (a real HTTP/2 server) terminates TLS with HTTP/2 offered by ALPN and passes the
    // calls to the fake provider over HTTP/1.1; its access log says which protocol the proxy
    // spoke to it.
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_certificates(dir.path());
    let upstream = Upstream::start();
    let front = Nginx::start_h2(dir.path(), &cert, &key, upstream.port);
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"h2\"\nurl = \"https://127.0.0.1:{}\"\n",
            front.port
        ),
    )
    .unwrap();
    let proxy = Proxy::launch_raw(
        &["--config", config.to_str().unwrap(), "--ca-file", &ca],
        tempfile::tempdir().unwrap(),
    );
    for (scenario, text) in [
        ("openai-chat", "plain over h2"),
        ("openai-chat-stream", "streamed over h2"),
        ("anthropic-messages-stream", "anthropic over h2"),
    ] {
        let out = sdk(&proxy.base_url(), DEMO_KEY, scenario, text, &[]);
        assert_eq!(out["text"], format!("Echo: {text}"), "{scenario}");
    }
    let data = proxy.stop();
    let log = front.access_log();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "HTTP/2.0 POST /v1/chat/completions 200 127.0.0.1",
            "HTTP/2.0 POST /v1/chat/completions 200 127.0.0.1",
            "HTTP/2.0 POST /v1/messages 200 127.0.0.1",
        ],
        "protocol, method, path, status and :authority as nginx saw them"
    );
    // The agent's key did not go upstream.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert!(
            !request["headers"].to_string().contains(DEMO_KEY),
            "{request}"
        );
    }
    let lake = read_lake(data.path());
    let statuses: Vec<&str> = lake.steps.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, ["ok", "ok", "ok"], "{statuses:?}");
}
