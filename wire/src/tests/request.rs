use atdp_schema::{Message, Tool, ToolCall};
use serde_json::{Value, json};

use crate::{ApiKind, WireError, parse_json_body, parse_request};

fn message(role: &str, content: Option<&str>) -> Message {
    Message {
        role: role.to_owned(),
        content: content.map(str::to_owned),
        ..Message::default()
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

fn entities(view: &crate::RequestView) -> Vec<&str> {
    view.offers.iter().map(|o| o.entity.as_str()).collect()
}

/// The recorded tools, as (kind, name).
fn tool_kinds_and_names(view: &crate::RequestView) -> Vec<(&str, &str)> {
    view.tools
        .iter()
        .map(|t| (t.kind.as_str(), t.name.as_str()))
        .collect()
}

fn object(text: Option<&str>) -> Value {
    serde_json::from_str(text.unwrap()).unwrap()
}

#[test]
fn openai_chat() {
    let body = json!({
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "this picture?"}
            ], "name": "jane"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "look", "arguments": "{\"zoom\":2}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "A cat."}
        ],
        "tools": [{"type": "function", "function": {
            "name": "look", "description": "Looks closer.",
            "parameters": {"type": "object", "properties": {"zoom": {"type": "integer"}}}}}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0.2,
        "max_completion_tokens": 100,
        "tool_choice": "auto",
        "user": "u-1",
        "metadata": {"k": "v"}
    });
    let view = parse_request(ApiKind::OpenAiChat, &body).unwrap();
    assert_eq!(view.model, "gpt-4.1-mini");
    assert!(view.stream && view.include_usage);
    let mut user = message("user", Some("What is in\nthis picture?"));
    user.name = Some("jane".to_owned());
    let mut assistant = message("assistant", None);
    assistant.tool_calls = vec![call("call_1", "look", "{\"zoom\":2}")];
    let mut tool = message("tool", Some("A cat."));
    tool.tool_call_id = Some("call_1".to_owned());
    assert_eq!(
        view.messages,
        [
            message("developer", Some("Be brief.")),
            user,
            assistant,
            tool
        ]
    );
    assert_eq!(
        view.tools,
        [Tool {
            kind: "function".to_owned(),
            name: "look".to_owned(),
            description: Some("Looks closer.".to_owned()),
            parameters: Some(
                r#"{"type":"object","properties":{"zoom":{"type":"integer"}}}"#.to_owned()
            ),
        }]
    );
    assert_eq!(entities(&view), ["look"]);
    assert!(view.unknown_fields.is_empty(), "{:?}", view.unknown_fields);
    assert_eq!(
        object(view.params.as_deref()),
        json!({"temperature": 0.2, "max_completion_tokens": 100, "tool_choice": "auto"})
    );
    assert_eq!(
        object(view.extra.as_deref()),
        json!({"user": "u-1", "metadata": {"k": "v"}, "non_text_parts": {"image_url": 1}})
    );
}

#[test]
fn openai_chat_minimal() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let view = parse_request(ApiKind::OpenAiChat, &body).unwrap();
    assert!(!view.stream && !view.include_usage);
    assert_eq!(view.messages, [message("user", Some("Hi"))]);
    assert_eq!((view.params, view.extra), (None, None));
    assert!(view.tools.is_empty());
}

#[test]
fn openai_responses() {
    let body = json!({
        "model": "gpt-4.1",
        "instructions": "You are terse.",
        "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "Weather in Paris?"},
                {"type": "input_image", "image_url": "https://example.com/a.png"}
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1",
             "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
        ],
        "tools": [
            {"type": "function", "name": "weather", "description": "Forecast.",
             "parameters": {"type": "object"}, "strict": true},
            {"type": "web_search_preview"}
        ],
        "reasoning": {"effort": "low"},
        "max_output_tokens": 50,
        "store": false
    });
    let view = parse_request(ApiKind::OpenAiResponses, &body).unwrap();
    let mut assistant = message("assistant", Some("Checking."));
    assistant.tool_calls = vec![call("call_1", "weather", "{\"city\":\"Paris\"}")];
    let mut tool = message("tool", Some("18C"));
    tool.tool_call_id = Some("call_1".to_owned());
    assert_eq!(
        view.messages,
        [
            message("system", Some("You are terse.")),
            message("user", Some("Weather in Paris?")),
            assistant,
            tool
        ]
    );
    assert_eq!(entities(&view), ["weather", "openai:web_search_preview"]);
    assert!(view.unknown_fields.is_empty(), "{:?}", view.unknown_fields);
    assert_eq!(view.tools[1].kind, "web_search_preview");
    assert_eq!(
        view.tools[0].parameters.as_deref(),
        Some(r#"{"type":"object"}"#)
    );
    assert_eq!(
        object(view.params.as_deref()),
        json!({"reasoning": {"effort": "low"}, "max_output_tokens": 50})
    );
    assert_eq!(
        object(view.extra.as_deref()),
        json!({"store": false, "non_text_parts": {"input_image": 1, "reasoning": 1}})
    );
}

#[test]
fn openai_responses_string_input() {
    let body = json!({"model": "m", "input": "Hello", "stream": true});
    let view = parse_request(ApiKind::OpenAiResponses, &body).unwrap();
    assert_eq!(view.messages, [message("user", Some("Hello"))]);
    assert!(view.stream);
    // A function call with no assistant message before it opens one of its own.
    let body = json!({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]});
    let view = parse_request(ApiKind::OpenAiResponses, &body).unwrap();
    assert_eq!(view.messages[0].role, "assistant");
    assert_eq!(view.messages[0].tool_calls, [call("c", "f", "{}")]);
}

#[test]
fn anthropic_messages() {
    let body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "...", "signature": "sig"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather",
                 "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "18C"}]},
                {"type": "text", "text": "And tomorrow?"}
            ]}
        ],
        "tools": [
            {"name": "weather", "description": "Forecast.",
             "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
        ],
        "stop_sequences": ["END"],
        "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "stream": true
    });
    let view = parse_request(ApiKind::AnthropicMessages, &body).unwrap();
    let mut assistant = message("assistant", Some("Let me check."));
    assistant.tool_calls = vec![call("toolu_1", "weather", r#"{"city":"Paris"}"#)];
    let mut tool = message("tool", Some("18C"));
    tool.tool_call_id = Some("toolu_1".to_owned());
    assert_eq!(
        view.messages,
        [
            message("system", Some("You help.")),
            message("user", Some("Weather in Paris?")),
            assistant,
            tool,
            message("user", Some("And tomorrow?")),
        ]
    );
    assert_eq!(entities(&view), ["weather", "anthropic:web_search"]);
    assert!(view.unknown_fields.is_empty(), "{:?}", view.unknown_fields);
    assert_eq!(view.tools[0].kind, "function");
    assert_eq!(view.tools[1].kind, "web_search_20250305");
    assert_eq!(
        object(view.params.as_deref()),
        json!({"max_tokens": 1024, "stop_sequences": ["END"], "top_k": 5})
    );
    assert_eq!(
        object(view.extra.as_deref()),
        json!({"thinking": {"type": "enabled", "budget_tokens": 2000},
               "non_text_parts": {"thinking": 1}})
    );
}

#[test]
fn anthropic_tool_results_alone_make_no_user_message() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "one"},
        {"type": "tool_result", "tool_use_id": "b", "is_error": true}
    ]}]});
    let view = parse_request(ApiKind::AnthropicMessages, &body).unwrap();
    let roles: Vec<&str> = view.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["tool", "tool"]);
    assert_eq!(view.messages[1].content, None);
}

/// Errors name the field and never quote the content.
#[test]
fn malformed_requests_name_the_field() {
    let secret = "jane.doe@example.com";
    let cases = [
        (
            ApiKind::OpenAiChat,
            json!({"messages": []}),
            "`model` is required",
        ),
        (
            ApiKind::OpenAiChat,
            json!({"model": 4, "messages": []}),
            "`model` must be a string",
        ),
        (
            ApiKind::OpenAiChat,
            json!({"model": "m"}),
            "`messages` is required",
        ),
        (
            ApiKind::OpenAiChat,
            json!({"model": "m", "messages": secret}),
            "`messages` must be an array",
        ),
        (
            ApiKind::OpenAiChat,
            json!({"model": "m", "messages": [{"role": "user", "content": 7}], "x": secret}),
            "`messages[0].content` must be",
        ),
        (
            ApiKind::OpenAiChat,
            json!({"model": "m", "messages": [{"content": secret}]}),
            "`messages[0].role` is required",
        ),
        (
            ApiKind::OpenAiChat,
            json!({"model": "m", "messages": [], "stream": "yes"}),
            "`stream` must be a boolean",
        ),
        (
            ApiKind::OpenAiResponses,
            json!({"model": "m"}),
            "`input` is required",
        ),
        (
            ApiKind::OpenAiResponses,
            json!({"model": "m", "input": [{"type": "function_call_output", "output": secret}]}),
            "`input[0].call_id` is required",
        ),
        (
            ApiKind::AnthropicMessages,
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            "`messages[0].content[0].text` is required",
        ),
        (
            ApiKind::AnthropicMessages,
            json!({"model": "m", "system": 3, "messages": []}),
            "`system` must be",
        ),
        (
            ApiKind::AnthropicMessages,
            json!({"model": "m", "messages": [], "tools": [{"description": secret}]}),
            "`tools[0].name` is required",
        ),
        (
            ApiKind::AnthropicMessages,
            json!([secret]),
            "`(body)` must be an object",
        ),
    ];
    for (api, body, expected) in cases {
        let error = parse_request(api, &body).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(expected), "{text} (wanted {expected})");
        assert!(!text.contains(secret), "{text}");
        assert_eq!(error.status(), 400);
    }
}

#[test]
fn bodies_that_are_not_json() {
    let error = parse_json_body(b"{\"model\": \"jane.doe@example.com").unwrap_err();
    assert!(
        matches!(error, WireError::NotJson("unexpected end")),
        "{error}"
    );
    assert!(!error.to_string().contains("jane"));
    assert!(parse_json_body(b"{}").is_ok());
}

#[test]
fn adjacent_text_parts_are_recorded_as_the_provider_reads_them() {
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "write to ja"},
        {"type": "text", "text": "ne@example.com"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "thanks"}
    ]}]});
    let view = parse_request(ApiKind::OpenAiChat, &chat).unwrap();
    assert_eq!(
        view.messages[0].content.as_deref(),
        Some("write to jane@example.com\nthanks")
    );
    let anthropic = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "call +44 20 "},
        {"type": "text", "text": "7946 0958"},
        {"type": "tool_result", "tool_use_id": "t", "content": "ok"},
        {"type": "text", "text": "bye"}
    ]}]});
    let view = parse_request(ApiKind::AnthropicMessages, &anthropic).unwrap();
    let user = view.messages.iter().find(|m| m.role == "user").unwrap();
    assert_eq!(user.content.as_deref(), Some("call +44 20 7946 0958\nbye"));
}

#[test]
fn a_tool_defined_in_the_top_level_system_is_recorded_before_those_of_the_messages() {
    let body = json!({"model": "m", "max_tokens": 1,
    "system": [
        {"type": "text", "text": "s"},
        {"type": "tool_addition", "tool": {"type": "tool_definition",
            "definition": {"type": "bash_20250124", "name": "bash"}}}
    ],
    "messages": [{"role": "user", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition",
            "definition": {"name": "wire_money", "input_schema": {"type": "object"}}}}
    ]}]});
    let view = parse_request(ApiKind::AnthropicMessages, &body).unwrap();
    let names = tool_kinds_and_names(&view);
    assert_eq!(
        names,
        [("bash_20250124", "bash"), ("function", "wire_money")]
    );
    assert_eq!(entities(&view), ["anthropic:bash", "wire_money"]);
}

#[test]
fn tools_defined_in_anthropic_content_are_recorded_with_the_requests_tools() {
    let body = json!({"model": "m", "max_tokens": 1,
    "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
    "system": [{"type": "tool_addition", "tool": {"type": "tool_definition",
        "definition": {"name": "audit_log", "input_schema": {"type": "object"}}}}],
    "messages": [{"role": "user", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition",
            "definition": {"name": "wire_money", "description": "Moves money.", "input_schema": {"type": "object"}}}},
        {"type": "compaction", "content": "s", "tool_changes": [
            {"type": "tool_addition", "tool": {"type": "tool_definition",
                "definition": {"type": "web_fetch_20250910", "name": "web_fetch"}}}
        ]},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "tool_addition", "tool": {"type": "tool_definition",
                "definition": {"name": "refund", "description": "Refunds.", "input_schema": {"type": "object"}}}}
        ]},
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "lookup"}},
        {"type": "text", "text": "go"}
    ]}]});
    let view = parse_request(ApiKind::AnthropicMessages, &body).unwrap();
    let names = tool_kinds_and_names(&view);
    assert_eq!(
        names,
        [
            ("function", "lookup"),
            ("function", "audit_log"),
            ("function", "wire_money"),
            ("web_fetch_20250910", "web_fetch"),
            ("function", "refund")
        ]
    );
    assert_eq!(view.tools[4].description.as_deref(), Some("Refunds."));
    assert_eq!(
        entities(&view),
        [
            "lookup",
            "audit_log",
            "wire_money",
            "anthropic:web_fetch",
            "refund",
            "lookup"
        ]
    );
}

#[test]
fn every_tool_definition_an_openai_request_hands_the_model_is_recorded() {
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "go"}],
        "tools": [
            {"type": "function", "function": {"name": "lookup", "description": "Finds.",
                "parameters": {"type": "object"}}},
            {"type": "custom", "custom": {"name": "sql", "description": "Runs SQL."}}
        ],
        "functions": [{"name": "legacy_refund", "parameters": {"type": "object"}}],
        "chat_template_kwargs": {"tools": [
            {"name": "template_only", "description": "Given to the template.",
                "parameters": {"type": "object"}},
            {"type": "function", "function": {"name": "wrapped"}}
        ]}
    });
    let view = parse_request(ApiKind::OpenAiChat, &chat).unwrap();
    assert_eq!(
        tool_kinds_and_names(&view),
        [
            ("function", "lookup"),
            ("custom", "sql"),
            ("function", "template_only"),
            ("function", "wrapped"),
            ("function", "legacy_refund")
        ]
    );
    assert_eq!(
        view.tools[2].parameters.as_deref(),
        Some(r#"{"type":"object"}"#)
    );
    let responses = json!({"model": "m", "input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "additional_tools", "tools": [{"type": "function", "name": "late",
                "parameters": {"type": "object"}}]}
        ],
        "tools": [
            {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]},
            {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com"},
            {"type": "web_search"}
        ]
    });
    let view = parse_request(ApiKind::OpenAiResponses, &responses).unwrap();
    assert_eq!(
        tool_kinds_and_names(&view),
        [
            ("namespace", "crm"),
            ("function", "find"),
            ("mcp", "docs"),
            ("web_search", "web_search"),
            ("function", "late")
        ]
    );
}
