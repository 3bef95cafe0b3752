use serde_json::{Value, json};

use crate::{ApiFamily, ApiKind, error_body, error_type};

#[test]
fn paths_name_their_api() {
    assert_eq!(
        ApiKind::from_path("/v1/chat/completions"),
        Some(ApiKind::OpenAiChat)
    );
    assert_eq!(
        ApiKind::from_path("/v1/responses?x=1"),
        Some(ApiKind::OpenAiResponses)
    );
    assert_eq!(
        ApiKind::from_path("/v1/messages?beta=true"),
        Some(ApiKind::AnthropicMessages)
    );
    for path in [
        "/v1/messages/count_tokens",
        "/v1/chat/completions/",
        "/v1/models",
        "",
        "?",
    ] {
        assert_eq!(ApiKind::from_path(path), None, "{path}");
    }
    let names: Vec<&str> = ApiKind::ALL.iter().map(|a| a.name()).collect();
    assert_eq!(
        names,
        ["openai.chat", "openai.responses", "anthropic.messages"]
    );
    assert!(ApiKind::AnthropicMessages.is_anthropic());
    assert!(!ApiKind::OpenAiResponses.is_anthropic());
    assert_eq!(ApiKind::OpenAiChat.family(), ApiFamily::OpenAi);
}

#[test]
fn families_follow_the_path() {
    assert_eq!(
        ApiFamily::from_path("/v1/messages/count_tokens"),
        ApiFamily::Anthropic
    );
    assert_eq!(
        ApiFamily::from_path("/v1/messages?beta=true"),
        ApiFamily::Anthropic
    );
    assert_eq!(ApiFamily::from_path("/v1/models"), ApiFamily::OpenAi);
    assert_eq!(ApiFamily::from_path("/nowhere"), ApiFamily::OpenAi);
}

#[test]
fn error_bodies_use_each_api_format() {
    let openai: Value = serde_json::from_slice(&error_body(
        ApiFamily::OpenAi,
        403,
        "policy_denied",
        "Denied.",
    ))
    .unwrap();
    assert_eq!(
        openai,
        json!({"error":{"message":"Denied.","type":"permission_error","param":null,"code":"policy_denied"}})
    );
    let no_code: Value =
        serde_json::from_slice(&error_body(ApiFamily::OpenAi, 400, "", "Bad.")).unwrap();
    assert_eq!(no_code["error"]["code"], Value::Null);
    let anthropic: Value =
        serde_json::from_slice(&error_body(ApiFamily::Anthropic, 529, "busy", "Try later."))
            .unwrap();
    assert_eq!(
        anthropic,
        json!({"type":"error","error":{"type":"overloaded_error","message":"Try later."}})
    );
    // A message with quotes and newlines stays valid JSON.
    let tricky: Value =
        serde_json::from_slice(&error_body(ApiFamily::Anthropic, 400, "x", "a \"b\"\n")).unwrap();
    assert_eq!(tricky["error"]["message"], "a \"b\"\n");
}

#[test]
fn error_types_per_status() {
    use ApiFamily::{Anthropic, OpenAi};
    let cases = [
        (400, "invalid_request_error", "invalid_request_error"),
        (401, "authentication_error", "authentication_error"),
        (403, "permission_error", "permission_error"),
        (404, "not_found_error", "not_found_error"),
        (413, "request_too_large", "request_too_large"),
        (422, "invalid_request_error", "invalid_request_error"),
        (429, "rate_limit_error", "rate_limit_error"),
        (500, "api_error", "api_error"),
        (502, "api_error", "api_error"),
        (503, "api_error", "overloaded_error"),
        (504, "api_error", "timeout_error"),
        (529, "api_error", "overloaded_error"),
    ];
    for (status, openai, anthropic) in cases {
        assert_eq!(error_type(OpenAi, status), openai, "{status}");
        assert_eq!(error_type(Anthropic, status), anthropic, "{status}");
    }
}
