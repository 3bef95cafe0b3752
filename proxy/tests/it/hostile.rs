//! What a hostile client tries against the compliance guarantees: a body two readers read
//! differently, tools in forms a proxy might not read, fields and beta features it cannot
//! judge, headers and query strings that ride past it, personal data where a masker might
//! not look, and recorded token ids that decode to the unmasked reply. Each is refused, or
//! decided, or masked, and nothing that should not leaves for the upstream.

use serde_json::{Value, json};

use crate::harness::*;

pub const ACME_KEY: &str = "atdp-acme-router-key";

pub fn post(port: u16, path: &str, key: &str, extra: &[(&str, &str)], body: &[u8]) -> Response {
    let auth = format!("Bearer {key}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    http(port, "POST", path, &headers, body)
}

pub fn path_of(api: &str) -> &'static str {
    match api {
        "chat" => "/v1/chat/completions",
        "responses" => "/v1/responses",
        _ => "/v1/messages",
    }
}

/// A minimal request of `api` with `extra` merged in.
pub fn request(api: &str, extra: Value) -> Vec<u8> {
    let mut body = match api {
        "chat" => json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}),
        "responses" => json!({"model": "gpt-4.1-mini", "input": "hi"}),
        _ => json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
                    "messages": [{"role": "user", "content": "hi"}]}),
    };
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body.to_string().into_bytes()
}

pub fn text(response: &Response) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

#[test]
fn a_body_two_json_readers_read_differently_is_refused_and_nothing_leaves() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    // serde_json keeps the last copy, other readers the first: the proxy would decide and
    // mask one and forward the other.
    let chat = br#"{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi","content":"mail jane@example.com"}]}"#;
    let response = post(proxy.port, "/v1/chat/completions", DEMO_KEY, &[], chat);
    assert_eq!(response.status, 400, "{}", text(&response));
    assert_eq!(response.json()["error"]["code"], "invalid_json");
    let nested = br#"{"model":"claude-sonnet-4-5","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"a","user_id":"jane@example.com"}}"#;
    let response = post(proxy.port, "/v1/messages", DEMO_KEY, &[], nested);
    assert_eq!(response.status, 400);
    assert_eq!(response.json()["type"], "error", "Anthropic's format");
    let surrogate = br#"{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"\ud800"}]}"#;
    let response = post(proxy.port, "/v1/chat/completions", DEMO_KEY, &[], surrogate);
    assert_eq!(response.status, 400);
    assert!(upstream.requests().is_empty(), "nothing was forwarded");

    // What is forwarded is the proxy's own serialisation of what it read: escapes decoded,
    // spacing gone, an integer beyond 64 bits as the float it was read as.
    let spaced = br#"{ "model" : "gpt-4.1-mini", "messages" : [ {"role":"user","content":"caf\u00e9"} ], "seed": 123456789012345678901234567890 }"#;
    let response = post(proxy.port, "/v1/chat/completions", DEMO_KEY, &[], spaced);
    assert_eq!(response.status, 200, "{}", text(&response));
    let received = upstream.requests();
    assert_eq!(
        received[0]["raw"],
        r#"{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"café"}],"seed":1.2345678901234568e+29}"#
    );
}

#[test]
fn every_form_of_tool_is_decided_by_cedar() {
    let upstream = Upstream::start();
    let policy = quickstart_with(
        "\n@id(\"no-expensive-model\")\nforbid (principal, action == Atdp::Action::\"invoke_model\", resource == Atdp::Model::\"claude-expensive\");\n",
        &[],
    );
    let proxy = Proxy::launch(
        upstream.port,
        policy.path(),
        &[],
        tempfile::tempdir().unwrap(),
        &[],
    );
    // The acme router may use the tools `search` and `refund` only.
    let denied = [
        (
            "chat",
            json!({"functions": [{"name": "wire_money", "parameters": {}}]}),
            "tool wire_money",
        ),
        (
            "chat",
            json!({"tools": [{"type": "custom", "custom": {"name": "shell"}}]}),
            "tool shell",
        ),
        (
            "chat",
            json!({"web_search_options": {}}),
            "tool openai:web_search",
        ),
        (
            "responses",
            json!({"tools": [{"type": "mcp", "server_label": "crm", "server_url": "https://mcp.example.com/sse"}]}),
            "tool mcp:https://mcp.example.com/sse",
        ),
        (
            "responses",
            json!({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}),
            "tool openai:code_interpreter",
        ),
        (
            "responses",
            json!({"prompt": {"id": "pmpt_123"}}),
            "tool prompt:pmpt_123",
        ),
        (
            "responses",
            json!({"input": [
                {"type": "additional_tools", "role": "developer", "tools": [
                    {"type": "mcp", "server_label": "x", "server_url": "HTTPS://EVIL.example.com:443/sse"}]},
                {"role": "user", "content": "hi"}]}),
            "tool mcp:https://evil.example.com/sse",
        ),
        (
            "responses",
            json!({"tools": [{"type": "namespace", "name": "crm", "tools": [
                {"type": "function", "name": "wire_money"}]}]}),
            "tool openai:namespace",
        ),
        (
            "messages",
            json!({"mcp_servers": [{"type": "url", "name": "crm", "url": "https://mcp.example.com/crm"}]}),
            "tool mcp:https://mcp.example.com/crm",
        ),
        (
            "messages",
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "tool anthropic:web_search",
        ),
        (
            "messages",
            json!({"container": {"skills": [{"type": "anthropic", "skill_id": "xlsx"}]}}),
            "tool skill:xlsx",
        ),
    ];
    for (api, extra, what) in denied {
        let response = post(
            proxy.port,
            path_of(api),
            ACME_KEY,
            &[],
            &request(api, extra.clone()),
        );
        assert_eq!(response.status, 403, "{api} {extra}: {}", text(&response));
        assert!(text(&response).contains(what), "{api}: {}", text(&response));
    }
    // A fallback model is decided like the requested one.
    let fallback = request(
        "messages",
        json!({"fallbacks": [{"model": "claude-expensive"}]}),
    );
    let response = post(proxy.port, "/v1/messages", DEMO_KEY, &[], &fallback);
    assert_eq!(response.status, 403, "{}", text(&response));
    assert!(text(&response).contains("model claude-expensive"));
    assert!(upstream.requests().is_empty(), "nothing was forwarded");
    // A permitted tool, in either form, goes through.
    for (api, extra) in [
        (
            "chat",
            json!({"tools": [{"type": "function", "function": {"name": "search"}}]}),
        ),
        ("chat", json!({"functions": [{"name": "refund"}]})),
        (
            "messages",
            json!({"tools": [{"name": "search", "input_schema": {"type": "object"}}]}),
        ),
    ] {
        let response = post(
            proxy.port,
            path_of(api),
            ACME_KEY,
            &[],
            &request(api, extra),
        );
        assert_eq!(response.status, 200, "{}", text(&response));
    }
    // The decision event names every offer.
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let denied = lake
        .audit
        .iter()
        .filter(|e| e.kind == "request_denied")
        .count();
    assert_eq!(denied, 12);
}

#[test]
fn fields_betas_headers_and_queries_the_proxy_cannot_judge_do_not_reach_an_external_provider() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let unknown = request("chat", json!({"x_side_channel": "jane@example.com"}));
    let response = post(proxy.port, "/v1/chat/completions", DEMO_KEY, &[], &unknown);
    assert_eq!(response.status, 400, "{}", text(&response));
    assert_eq!(response.json()["error"]["code"], "unknown_field");
    let beta = [(
        "anthropic-beta",
        "mcp-client-2025-04-04,hidden-tools-2027-01-01",
    )];
    let response = post(
        proxy.port,
        "/v1/messages",
        DEMO_KEY,
        &beta,
        &request("messages", json!({})),
    );
    assert_eq!(response.status, 400);
    assert!(
        text(&response).contains("hidden-tools-2027-01-01"),
        "{}",
        text(&response)
    );
    let response = post(
        proxy.port,
        "/v1/chat/completions?api-version=2024-01-01",
        DEMO_KEY,
        &[],
        &request("chat", json!({})),
    );
    assert_eq!(response.status, 400);
    assert_eq!(response.json()["error"]["code"], "query_not_accepted");
    let gzip = [("content-encoding", "gzip")];
    let response = post(
        proxy.port,
        "/v1/chat/completions",
        DEMO_KEY,
        &gzip,
        &request("chat", json!({})),
    );
    assert_eq!(response.status, 415);
    assert!(upstream.requests().is_empty(), "nothing was forwarded");

    // Headers: only the allow-list goes upstream.
    let headers = [
        ("anthropic-version", "2023-06-01"),
        ("x-side-channel", "jane@example.com"),
        ("cookie", "session=secret"),
        ("user-agent", "agent/1.0 jane@example.com"),
        ("x-stainless-os", "Linux"),
        ("x-atdp-session-id", "s-1"),
    ];
    let response = post(
        proxy.port,
        "/v1/messages",
        DEMO_KEY,
        &headers,
        &request("messages", json!({})),
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    let received = &upstream.requests()[0]["headers"];
    assert_eq!(received["anthropic-version"], "2023-06-01");
    for name in [
        "x-side-channel",
        "cookie",
        "user-agent",
        "x-stainless-os",
        "x-atdp-session-id",
        "authorization",
        "x-api-key",
    ] {
        assert!(
            received.get(name).is_none(),
            "{name} was forwarded: {received}"
        );
    }
    drop(proxy);

    // An internal upstream gets what the proxy does not know; an external one gets what the
    // policy directory allows by name.
    let internal = Proxy::start(upstream.port, &["--upstream-trust", "internal"]);
    let response = post(
        internal.port,
        "/v1/chat/completions",
        DEMO_KEY,
        &[],
        &unknown,
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    drop(internal);
    let policy = quickstart_with(
        "",
        &[(
            "forwarding.toml",
            "fields = { \"openai.chat\" = [\"x_side_channel\"] }\nbetas = [\"hidden-tools-2027-01-01\"]\nheaders = [\"x-request-source\"]\n",
        )],
    );
    let allowed = Proxy::launch(
        upstream.port,
        policy.path(),
        &[],
        tempfile::tempdir().unwrap(),
        &[],
    );
    let source = [("x-request-source", "batch-7")];
    let response = post(
        allowed.port,
        "/v1/chat/completions",
        DEMO_KEY,
        &source,
        &unknown,
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    let response = post(
        allowed.port,
        "/v1/messages",
        DEMO_KEY,
        &beta,
        &request("messages", json!({})),
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    let requests = upstream.requests();
    let last_chat = requests
        .iter()
        .rev()
        .find(|r| r["path"] == "/v1/chat/completions")
        .unwrap();
    assert_eq!(last_chat["headers"]["x-request-source"], "batch-7");
    // Masked like everything else on its way out.
    assert!(
        !last_chat["raw"]
            .as_str()
            .unwrap()
            .contains("jane@example.com")
    );
}

#[test]
fn personal_data_is_masked_in_keys_numbers_and_json_inside_strings() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    // The second body is large enough to be parsed and masked off the worker threads.
    let padding = ["", &"lorem ipsum ".repeat(8_000)];
    for pad in padding {
        let body = json!({
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": pad},
                {"role": "user", "content": "look her up", "name": "jane"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "lookup", "arguments": "{\"jane@example.com\": true}"}}]},
                {"role": "tool", "tool_call_id": "c1",
                 "content": "{\"card\": 4111111111111111, \"owner\": {\"bob@example.com\": \"active\"}}"}
            ],
            "metadata": {"ops@example.com": "escalation"}
        });
        let response = post(
            proxy.port,
            "/v1/chat/completions",
            DEMO_KEY,
            &[],
            body.to_string().as_bytes(),
        );
        assert_eq!(response.status, 200, "{}", text(&response));
    }
    let requests = upstream.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1]["raw"].as_str().unwrap().len() > 64 << 10);
    for request in &requests {
        let raw = request["raw"].as_str().unwrap();
        for value in [
            "jane@example.com",
            "bob@example.com",
            "ops@example.com",
            "4111111111111111",
        ] {
            assert!(!raw.contains(value), "{value} left for the upstream");
        }
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 2);
    let stored = serde_json::to_string(&lake.steps).unwrap();
    for value in [
        "jane@example.com",
        "bob@example.com",
        "ops@example.com",
        "4111111111111111",
    ] {
        assert!(!stored.contains(value), "{value} stored in the lake");
    }
}

#[test]
fn a_masked_replys_token_ids_are_not_stored() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(
        upstream.port,
        &[
            "--upstream-trust",
            "internal",
            "--upstream-token-ids",
            "true",
        ],
    );
    for text in ["mail jane@example.com", "all good"] {
        let response = post(
            proxy.port,
            "/v1/chat/completions",
            DEMO_KEY,
            &[],
            &json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}]})
                .to_string()
                .into_bytes(),
        );
        assert_eq!(response.status, 200);
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let by_reply = |needle: &str| {
        lake.steps
            .iter()
            .find(|s| {
                s.response_message
                    .as_ref()
                    .and_then(|m| m.content.as_deref())
                    .is_some_and(|c| c.contains(needle))
            })
            .unwrap()
    };
    // The echo of the e-mail is masked in the stored reply, so its token ids are not kept.
    let masked = by_reply("<EMAIL_ADDRESS_");
    assert_eq!(masked.completion_token_ids, None);
    assert_eq!(
        masked.tags.get("token_ids").map(String::as_str),
        Some("dropped")
    );
    let clean = by_reply("all good");
    assert!(
        clean
            .completion_token_ids
            .as_ref()
            .is_some_and(|ids| !ids.is_empty())
    );
    assert!(!clean.tags.contains_key("token_ids"));
}

#[test]
fn every_parameter_of_the_official_sdks_passes_to_an_external_provider() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    for api in [
        "openai-chat",
        "openai-responses",
        "openai-responses-beta",
        "anthropic-messages",
        "anthropic-messages-beta",
    ] {
        let output = std::process::Command::new(python())
            .arg(root().join("tests/python/sdk_all_params.py"))
            .args(["--base-url", &proxy.base_url(), "--api-key", DEMO_KEY, api])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let out: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(
            out["missing"],
            json!([]),
            "{api}: SDK parameters not covered"
        );
        assert_eq!(out["status"], 200, "{api}: {out}");
        let received = upstream.requests();
        if api == "openai-responses-beta" {
            // The SDK's beta surface is told apart by its one query pair, passed on.
            assert_eq!(received.last().unwrap()["path"], "/v1/responses?beta=true");
        }
        let body = &received.last().unwrap()["body"];
        for key in out["sent"].as_array().unwrap() {
            assert!(
                body.get(key.as_str().unwrap()).is_some(),
                "{api}: {key} did not arrive"
            );
        }
    }
}

/// The field a refusal must name, the body, and the extra headers.
type Case = (&'static str, Vec<u8>, Vec<(&'static str, &'static str)>);

#[test]
fn names_ids_and_headers_that_carry_personal_data_are_refused_and_nothing_is_stored() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let chat = |extra: Value| request("chat", extra);
    let refused: Vec<Case> = vec![
        (
            "model",
            chat(json!({"model": "gpt-4.1-mini jane@example.com"})),
            vec![],
        ),
        (
            "tools[0]",
            chat(
                json!({"tools": [{"type": "function", "function": {"name": "mail_jane@example.com"}}]}),
            ),
            vec![],
        ),
        (
            "header x-atdp-trajectory-id",
            chat(json!({})),
            vec![("x-atdp-trajectory-id", "jane@example.com")],
        ),
        (
            "header x-atdp-session-id",
            chat(json!({})),
            vec![("x-atdp-session-id", "4111111111111111")],
        ),
        // Spelled with JSON escapes, as a reader that decodes them would see the value.
        (
            "header x-atdp-trajectory-id",
            chat(json!({})),
            vec![("x-atdp-trajectory-id", "jane\\u0040example.com")],
        ),
        (
            "header openai-project",
            chat(json!({})),
            vec![("openai-project", "4111\\u002d1111\\u002d1111\\u002d1111")],
        ),
        (
            "header openai-project",
            chat(json!({})),
            vec![("openai-project", "4111-1111-1111-1111")],
        ),
        (
            "header accept",
            chat(json!({})),
            vec![("accept", "application/json; x=jane.doe@example.com")],
        ),
        (
            "a fallback model",
            request(
                "messages",
                json!({"fallbacks": [{"model": "claude-jane@example.com"}]}),
            ),
            vec![],
        ),
        // A value the detectors find only with the words around it, which a name repeats
        // alone: read alone the name shows nothing.
        (
            "model",
            chat(json!({"model": "gpt-4155550172",
                "messages": [{"role": "user", "content": "my mobile: 4155550172"}]})),
            vec![],
        ),
        (
            "header x-atdp-trajectory-id",
            chat(json!({"messages": [{"role": "user", "content": "my mobile: (415) 555-0172"}]})),
            vec![("x-atdp-trajectory-id", "t-4155550172")],
        ),
        (
            "header x-atdp-session-id",
            chat(json!({"messages": [{"role": "user", "content": "my mobile: 415-555-0172"}]})),
            vec![("x-atdp-session-id", "user415-555-0172x")],
        ),
        (
            "tools[0]",
            chat(json!({
                "messages": [{"role": "user", "content": "call me, mobile: 4155550172"}],
                "tools": [{"type": "function", "function": {"name": "dial-4155550172"}}]})),
            vec![],
        ),
    ];
    for (field, body, headers) in refused {
        let path = if field == "a fallback model" {
            "/v1/messages"
        } else {
            "/v1/chat/completions"
        };
        let response = post(proxy.port, path, DEMO_KEY, &headers, &body);
        assert_eq!(response.status, 400, "{field}: {}", text(&response));
        let message = text(&response);
        assert!(message.contains(field), "{field}: {message}");
        for value in ["jane", "4111", "0172"] {
            assert!(
                !message.contains(value),
                "the refusal quotes the value: {message}"
            );
        }
    }
    assert!(upstream.requests().is_empty(), "nothing was forwarded");

    // A reward's ids, name and tags are stored as given.
    for reward in [
        json!({"trajectory_id": "t-jane@example.com", "name": "ok", "value": 1.0}),
        json!({"trajectory_id": "t-1", "name": "ok", "value": 1.0, "reward_id": "4111111111111111"}),
        json!({"trajectory_id": "t-1", "name": "ok", "value": 1.0, "tags": {"who": "dave@example.com"}}),
        json!({"trajectory_id": "t-1", "name": "ok", "value": 1.0, "tags": {"dave@example.com": "x"}}),
        json!({"trajectory_id": "t-1", "name": "ok", "value": 1.0, "tags": {"who": "dave\\u0040example.com"}}),
    ] {
        let response = post(
            proxy.port,
            "/v1/atdp/rewards",
            DEMO_KEY,
            &[],
            reward.to_string().as_bytes(),
        );
        assert_eq!(response.status, 400, "{reward}: {}", text(&response));
        assert!(!text(&response).contains("example.com"));
    }
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let stored = format!(
        "{}{}{}",
        serde_json::to_string(&lake.steps).unwrap(),
        serde_json::to_string(&lake.audit).unwrap(),
        serde_json::to_string(&lake.rewards).unwrap()
    );
    for value in ["jane", "4111", "dave", "0172"] {
        assert!(!stored.contains(value), "{value} stored in the lake");
    }
}
