//! What message content can carry besides text: tools added mid-conversation (Anthropic's
//! `tool_addition` blocks, in any role's message or in a `compaction` block's `tool_changes`),
//! content types the proxy does not know, and parts no detector reads (images, audio, files,
//! documents). Tools are decided by Cedar wherever they sit and listed in the audit event;
//! unknown types do not reach an external provider; unscannable parts are in Cedar's context.

use serde_json::{Value, json};

use crate::harness::*;
use crate::hostile::{ACME_KEY, path_of, post, request, text};

/// The betas that switch on tools inside content.
const TOOL_BETAS: (&str, &str) = (
    "anthropic-beta",
    "mid-conversation-tool-changes-2026-07-01,inline-tools-2026-09-15,compact-2026-09-04,mcp-client-2026-09-15",
);

fn messages(content: Value) -> Vec<u8> {
    request("messages", json!({"messages": [content]}))
}

fn detail(event: &atdp_schema::AuditEvent) -> Value {
    serde_json::from_str(event.detail_json.as_deref().unwrap_or("null")).unwrap()
}

#[test]
fn tools_added_inside_content_are_decided_by_cedar_and_audited() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let definition =
        |definition: Value| json!({"type": "tool_definition", "definition": definition});
    // The acme router may offer `search` and `refund` only.
    let denied = [
        (
            json!({"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "tool_addition", "tool": definition(json!({"name": "wire_money", "input_schema": {"type": "object"}}))}
            ]}),
            "tool wire_money",
        ),
        (
            json!({"role": "system", "content": [
                {"type": "tool_addition", "tool": definition(json!({"type": "web_fetch_20250910", "name": "web_fetch"}))}
            ]}),
            "tool anthropic:web_fetch",
        ),
        (
            json!({"role": "user", "content": [
                {"type": "compaction", "content": "earlier turns", "tool_changes": [
                    {"type": "tool_addition", "tool": definition(json!({"type": "code_execution_20250825", "name": "code_execution"}))}
                ]},
                {"type": "text", "text": "hi"}
            ]}),
            "tool anthropic:code_execution",
        ),
        (
            json!({"role": "user", "content": [
                {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "shell"}},
                {"type": "text", "text": "hi"}
            ]}),
            "tool shell",
        ),
    ];
    for (message, what) in denied {
        let response = post(
            proxy.port,
            "/v1/messages",
            ACME_KEY,
            &[TOOL_BETAS],
            &messages(message.clone()),
        );
        assert_eq!(response.status, 403, "{message}: {}", text(&response));
        assert!(
            text(&response).contains(what),
            "{what}: {}",
            text(&response)
        );
    }
    assert!(upstream.requests().is_empty(), "nothing was forwarded");
    // A permitted tool added mid-conversation goes through.
    let allowed = messages(json!({"role": "user", "content": [
        {"type": "tool_addition", "tool": definition(json!({"name": "search", "input_schema": {"type": "object"}}))},
        {"type": "text", "text": "hi"}
    ]}));
    let response = post(
        proxy.port,
        "/v1/messages",
        ACME_KEY,
        &[TOOL_BETAS],
        &allowed,
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    // Every decision event lists the tools offered inside content.
    let data = proxy.stop();
    let lake = read_lake(data.path());
    let mut listed: Vec<Value> = lake
        .audit
        .iter()
        .filter(|e| e.kind == "request_denied" || e.kind == "request_allowed")
        .map(|e| detail(e)["tools"].clone())
        .collect();
    listed.sort_by_key(Value::to_string);
    let mut expected = vec![
        json!(["anthropic:code_execution"]),
        json!(["anthropic:web_fetch"]),
        json!(["search"]),
        json!(["shell"]),
        json!(["wire_money"]),
    ];
    expected.sort_by_key(Value::to_string);
    assert_eq!(listed, expected);
    let step = lake
        .steps
        .iter()
        .find(|s| s.status == "ok")
        .expect("the allowed call's step");
    let tools: Vec<&str> = step.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["search"], "a tool added in content is recorded");
}

#[test]
fn content_types_the_proxy_does_not_know_do_not_reach_an_external_provider() {
    let upstream = Upstream::start();
    let forwarding = "content = { \"anthropic.messages\" = [\"citations_marker\"] }\n";
    let policy = quickstart_with("", &[("forwarding.toml", forwarding)]);
    let proxy = Proxy::launch(
        upstream.port,
        policy.path(),
        &[],
        tempfile::tempdir().unwrap(),
        &[],
    );
    let unknown = [
        (
            "messages",
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "hidden_tools_2027", "tools": [{"name": "wire_money"}]}
            ]}]}),
            "messages[0].content[1]",
        ),
        (
            "messages",
            json!({"messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "jane@example.com"}]}
            ]}]}),
            "messages[0].content[0].content[0]",
        ),
        (
            "responses",
            json!({"input": [{"type": "tool_definitions", "tools": []}, {"role": "user", "content": "hi"}]}),
            "input[0]",
        ),
        (
            "chat",
            json!({"messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
            "messages[0].content[0]",
        ),
    ];
    for (api, extra, field) in unknown {
        let response = post(
            proxy.port,
            path_of(api),
            DEMO_KEY,
            &[],
            &request(api, extra.clone()),
        );
        assert_eq!(response.status, 400, "{extra}: {}", text(&response));
        assert!(
            text(&response).contains("content type"),
            "{}",
            text(&response)
        );
        assert!(
            text(&response).contains(field),
            "{field}: {}",
            text(&response)
        );
        assert!(
            !text(&response).contains("jane@example.com"),
            "a type that is not a plain name is not quoted"
        );
    }
    assert!(upstream.requests().is_empty(), "nothing was forwarded");
    // A type the policy directory allows by name goes through.
    let allowed = messages(json!({"role": "user", "content": [
        {"type": "text", "text": "hi"},
        {"type": "citations_marker", "id": "c1"}
    ]}));
    let response = post(proxy.port, "/v1/messages", DEMO_KEY, &[], &allowed);
    assert_eq!(response.status, 200, "{}", text(&response));
}

#[test]
fn parts_no_detector_reads_are_decided_by_cedar() {
    let upstream = Upstream::start();
    // The quickstart forbids anything unscannable towards external providers; this policy
    // allows photos but no PDF.
    let photos = "\n@id(\"photos-only\")\nforbid (principal, action == Atdp::Action::\"invoke_model\", resource)\nwhen { context.unscannable.contains(\"application/pdf\") };\n";
    let quickstart = Proxy::start(upstream.port, &[]);
    let parts = [
        (
            "chat",
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
            ]}]}),
        ),
        (
            "responses",
            json!({"input": [{"role": "user", "content": [
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}
            ]}]}),
        ),
        (
            "messages",
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "read this"},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
            ]}]}),
        ),
    ];
    for (api, extra) in &parts {
        let response = post(
            quickstart.port,
            path_of(api),
            DEMO_KEY,
            &[],
            &request(api, extra.clone()),
        );
        assert_eq!(response.status, 403, "{api}: {}", text(&response));
        assert!(
            text(&response).contains("no-unscannable-external"),
            "{}",
            text(&response)
        );
    }
    // A document whose source is plain text is read by the detectors: it goes out masked.
    let plain = request(
        "messages",
        json!({"messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "mail jane@example.com"}}
        ]}]}),
    );
    let response = post(quickstart.port, "/v1/messages", DEMO_KEY, &[], &plain);
    assert_eq!(response.status, 200, "{}", text(&response));
    let forwarded = upstream.requests();
    assert_eq!(forwarded.len(), 1);
    assert!(
        !forwarded[0]["raw"]
            .as_str()
            .unwrap()
            .contains("jane@example.com")
    );
    let data = quickstart.stop();
    let lake = read_lake(data.path());
    let audited: Vec<Value> = lake
        .audit
        .iter()
        .filter(|e| e.kind == "request_denied")
        .map(|e| detail(e)["unscannable"].clone())
        .collect();
    assert!(
        audited.contains(&json!([
            "application/pdf",
            "document",
            "document:application/pdf"
        ])),
        "{audited:?}"
    );

    // Without the quickstart's rule, a policy can tell a photo from a PDF.
    let policy = quickstart_with(photos, &[]);
    let cedar = policy.path().join("policies.cedar");
    let text_of_policy = std::fs::read_to_string(&cedar).unwrap();
    let start = text_of_policy
        .find("@id(\"no-unscannable-external\")")
        .unwrap();
    let end = start + text_of_policy[start..].find("};").unwrap() + 2;
    std::fs::write(
        &cedar,
        format!("{}{}", &text_of_policy[..start], &text_of_policy[end..]),
    )
    .unwrap();
    let proxy = Proxy::launch(
        upstream.port,
        policy.path(),
        &[],
        tempfile::tempdir().unwrap(),
        &[],
    );
    let (api, photo) = &parts[0];
    let response = post(
        proxy.port,
        path_of(api),
        DEMO_KEY,
        &[],
        &request(api, photo.clone()),
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    for (api, pdf) in &parts[1..] {
        let response = post(
            proxy.port,
            path_of(api),
            DEMO_KEY,
            &[],
            &request(api, pdf.clone()),
        );
        assert_eq!(response.status, 403, "{api}: {}", text(&response));
        assert!(
            text(&response).contains("photos-only"),
            "{}",
            text(&response)
        );
    }
}

#[test]
fn a_value_the_model_repeats_out_of_context_is_stored_masked() {
    let upstream = Upstream::start();
    // `CUST-004211` is a customer id only near "customer" (the quickstart's masking.toml); the
    // reply repeats it alone.
    for trust in ["external", "internal"] {
        let proxy = Proxy::start(upstream.port, &["--upstream-trust", trust]);
        for stream in [false, true] {
            let body = json!({"model": "gpt-4.1-mini", "stream": stream, "messages": [
                {"role": "user", "content": "Please look up customer CUST-004211 [[last]]"}
            ]});
            let response = post(
                proxy.port,
                "/v1/chat/completions",
                DEMO_KEY,
                &[],
                body.to_string().as_bytes(),
            );
            assert_eq!(response.status, 200, "{}", text(&response));
            let read: String = if stream {
                text(&response)
                    .lines()
                    .filter_map(|line| line.strip_prefix("data: "))
                    .filter_map(|data| serde_json::from_str::<Value>(data).ok())
                    .filter_map(|chunk| {
                        chunk["choices"][0]["delta"]["content"]
                            .as_str()
                            .map(str::to_owned)
                    })
                    .collect()
            } else {
                response.json()["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            };
            assert_eq!(read, "Noted: CUST-004211", "the client reads the value");
        }
        let data = proxy.stop();
        let lake = read_lake(data.path());
        assert_eq!(lake.steps.len(), 2, "{trust}");
        for step in &lake.steps {
            let stored = serde_json::to_string(step).unwrap();
            assert!(!stored.contains("CUST-004211"), "{trust}: {stored}");
            let reply = step.response_message.as_ref().unwrap();
            assert!(
                reply
                    .content
                    .as_deref()
                    .is_some_and(|c| c.starts_with("Noted: <CUSTOMER_ID_")),
                "{trust}: {reply:?}"
            );
        }
    }
}

#[test]
fn a_reply_too_deep_to_mask_is_recorded_without_its_text() {
    // The model's tool call nests its arguments deeper than masking checks (the reply holds
    // the request's text two levels further down): the call is recorded, with none of its
    // text, and never trained on.
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let depth = 156;
    let nested = format!(
        "{}\"jane@example.com\"{}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let body = json!({"model": "gpt-4.1-mini", "messages": [
            {"role": "user", "content": format!("[[tool]] {nested}")}],
        "tools": [{"type": "function", "function": {"name": "lookup",
            "parameters": {"type": "object"}}}]});
    let response = post(
        proxy.port,
        "/v1/chat/completions",
        DEMO_KEY,
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    let arguments =
        response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    assert!(
        arguments.contains("jane@example.com"),
        "the client reads its reply"
    );
    let data = proxy.stop();
    let lake = read_lake(data.path());
    assert_eq!(lake.steps.len(), 1);
    let step = &lake.steps[0];
    assert_eq!(step.tags.get("text").map(String::as_str), Some("dropped"));
    assert!(step.request_messages.is_empty() && step.response_message.is_none());
    assert_eq!(step.training_eligible, Some(false));
    let stored = format!(
        "{}{}",
        serde_json::to_string(&lake.steps).unwrap(),
        serde_json::to_string(&lake.audit).unwrap()
    );
    assert!(!stored.contains("jane@"), "{stored}");
}

#[test]
fn a_value_found_by_its_context_is_masked_where_another_message_repeats_it_alone() {
    let upstream = Upstream::start();
    // `CUST-004211` is a customer id only near "customer"; the last message repeats it alone.
    // Towards the external upstream it leaves as a placeholder in both messages; towards the
    // internal one (which reads values in the clear) it is stored masked in both.
    for trust in ["external", "internal"] {
        let proxy = Proxy::start(upstream.port, &["--upstream-trust", trust]);
        let before = upstream.requests().len();
        let body = json!({"model": "gpt-4.1-mini", "messages": [
            {"role": "user", "content": "Please look up customer CUST-004211, my mobile: 415-555-0172"},
            {"role": "assistant", "content": "Found it."},
            {"role": "user", "content": "Now cancel CUST-004211 today, tracking 415-555-0172 please"}
        ]});
        let response = post(
            proxy.port,
            "/v1/chat/completions",
            DEMO_KEY,
            &[],
            body.to_string().as_bytes(),
        );
        assert_eq!(response.status, 200, "{}", text(&response));
        let forwarded = upstream.requests();
        assert_eq!(forwarded.len(), before + 1);
        let sent = forwarded[before]["raw"].as_str().unwrap();
        if trust == "external" {
            assert!(!sent.contains("CUST-004211"), "{sent}");
            assert_eq!(sent.matches("<CUSTOMER_ID_").count(), 2, "{sent}");
            // Beside "tracking", which lowers a phone number's score, the number is still the
            // one found after "mobile".
            assert!(!sent.contains("415-555-0172"), "{sent}");
            assert_eq!(sent.matches("<PHONE_NUMBER_").count(), 2, "{sent}");
        }
        let data = proxy.stop();
        let lake = read_lake(data.path());
        assert_eq!(lake.steps.len(), 1, "{trust}");
        let stored = serde_json::to_string(&lake.steps[0]).unwrap();
        assert!(!stored.contains("CUST-004211"), "{trust}: {stored}");
        assert!(!stored.contains("415-555-0172"), "{trust}: {stored}");
    }
}
