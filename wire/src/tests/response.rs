use atdp_schema::ToolCall;
use serde_json::json;

use crate::{ApiKind, parse_response};

#[test]
fn openai_chat_completion() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "gpt-4.1-mini-2025-04-14",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there",
            "refusal": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "send", "arguments": "{\"to\":\"a\"}"}}]},
            "logprobs": {"content": [
                {"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []},
                {"token": " there", "logprob": -1.5, "bytes": [], "top_logprobs": []}]},
            "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    });
    let view = parse_response(ApiKind::OpenAiChat, &body);
    let message = view.message.unwrap();
    assert_eq!(message.role, "assistant");
    assert_eq!(message.content.as_deref(), Some("Hi there"));
    assert_eq!(
        message.tool_calls,
        [ToolCall {
            id: "call_1".to_owned(),
            name: "send".to_owned(),
            arguments: "{\"to\":\"a\"}".to_owned()
        }]
    );
    assert_eq!(view.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(view.model.as_deref(), Some("gpt-4.1-mini-2025-04-14"));
    assert_eq!(
        (view.prompt_tokens, view.completion_tokens),
        (Some(9), Some(3))
    );
    assert_eq!(view.logprobs, Some(vec![-0.25, -1.5]));
    assert_eq!(view.token_ids, None);
    assert!(view.complete);
}

#[test]
fn vllm_token_ids() {
    let body = json!({"model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "ab"}, "finish_reason": "length",
        "token_ids": [64, 65],
        "logprobs": {"content": [{"token": "token_id:64", "logprob": -0.5},
                                 {"token": "token_id:65", "logprob": -0.75}]}}]});
    let view = parse_response(ApiKind::OpenAiChat, &body);
    assert_eq!(view.token_ids, Some(vec![64, 65]));
    assert_eq!(view.logprobs, Some(vec![-0.5, -0.75]));
    // Token ids carried only in the logprobs' tokens.
    let body = json!({"model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "ab"}, "finish_reason": "stop",
        "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.5}]}}]});
    assert_eq!(
        parse_response(ApiKind::OpenAiChat, &body).token_ids,
        Some(vec![7])
    );
}

#[test]
fn token_ids_that_cover_text_the_record_does_not_hold_are_not_kept() {
    // vLLM's reasoning parser moves the reasoning out of `content`; its ids stay in
    // `token_ids`, which would carry it into the lake unread by masking.
    let body = json!({"model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "Done.",
            "reasoning_content": "The user's email is jane@example.com", "tool_calls": []},
        "finish_reason": "stop", "token_ids": [84, 104, 101],
        "logprobs": {"content": [{"token": "token_id:84", "logprob": -0.5}]}}]});
    let view = parse_response(ApiKind::OpenAiChat, &body);
    assert_eq!(view.message.unwrap().content.as_deref(), Some("Done."));
    assert_eq!((view.token_ids, view.logprobs), (None, None));
    let chunk = |delta: serde_json::Value| {
        let chunk = json!({"object": "chat.completion.chunk", "model": "m", "choices": [{
            "index": 0, "delta": delta, "token_ids": [1], "finish_reason": null}]});
        format!("data: {chunk}\n\n")
    };
    let stream = chunk(json!({"role": "assistant", "reasoning_content": "jane@example.com"}))
        + &chunk(json!({"content": "Done.", "reasoning_content": null}))
        + "data: [DONE]\n\n";
    let view = super::fixtures::assemble(ApiKind::OpenAiChat, stream.as_bytes());
    assert_eq!(view.token_ids, None);
    // A refusal beside content: the record holds the content only.
    let both = json!({"model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "ok", "refusal": "jane@example.com"},
        "finish_reason": "stop", "token_ids": [1, 2]}]});
    assert_eq!(parse_response(ApiKind::OpenAiChat, &both).token_ids, None);
    // Members that hold nothing do not count.
    let plain = chunk(json!({"role": "assistant", "content": "ok", "reasoning_content": null}))
        + "data: [DONE]\n\n";
    let view = super::fixtures::assemble(ApiKind::OpenAiChat, plain.as_bytes());
    assert_eq!(view.token_ids, Some(vec![1]));
}

#[test]
fn openai_responses_document() {
    let body = json!({
        "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-4.1",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Sure.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
             "arguments": "{\"city\":\"Paris\"}", "status": "completed"}
        ],
        "usage": {"input_tokens": 30, "output_tokens": 8, "total_tokens": 38}
    });
    let view = parse_response(ApiKind::OpenAiResponses, &body);
    let message = view.message.unwrap();
    assert_eq!(message.content.as_deref(), Some("Sure."));
    assert_eq!(message.tool_calls[0].id, "call_1");
    assert_eq!(view.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        (view.prompt_tokens, view.completion_tokens),
        (Some(30), Some(8))
    );

    let statuses = [
        (json!({"status": "completed", "output": []}), "stop"),
        (
            json!({"status": "incomplete", "output": [],
                   "incomplete_details": {"reason": "max_output_tokens"}}),
            "length",
        ),
        (
            json!({"status": "incomplete", "output": [],
                   "incomplete_details": {"reason": "content_filter"}}),
            "content_filter",
        ),
        (json!({"status": "failed", "output": []}), "failed"),
    ];
    for (body, reason) in statuses {
        let view = parse_response(ApiKind::OpenAiResponses, &body);
        assert_eq!(view.finish_reason.as_deref(), Some(reason));
        assert_eq!(view.message.unwrap().content, None);
    }
}

#[test]
fn anthropic_message() {
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Checking"},
            {"type": "text", "text": " now."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 20, "cache_creation_input_tokens": 100,
                  "cache_read_input_tokens": 5, "output_tokens": 12}
    });
    let view = parse_response(ApiKind::AnthropicMessages, &body);
    let message = view.message.unwrap();
    // Blocks are joined with a newline, as a request's blocks are.
    assert_eq!(message.content.as_deref(), Some("Checking\n now."));
    assert_eq!(message.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
    assert_eq!(view.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        (view.prompt_tokens, view.completion_tokens),
        (Some(125), Some(12))
    );
    assert!(view.complete);
}

#[test]
fn error_bodies_have_no_message() {
    let openai = json!({"error": {"message": "Rate limit reached", "type": "rate_limit_error",
                                  "param": null, "code": "rate_limit_exceeded"}});
    let anthropic = json!({"type": "error", "error": {"type": "overloaded_error",
                                                      "message": "Overloaded"}});
    for (api, body, kind) in [
        (ApiKind::OpenAiChat, &openai, "rate_limit_error"),
        (ApiKind::OpenAiResponses, &openai, "rate_limit_error"),
        (ApiKind::AnthropicMessages, &anthropic, "overloaded_error"),
    ] {
        let view = parse_response(api, body);
        assert_eq!(view.message, None);
        assert_eq!(view.error_type.as_deref(), Some(kind));
        assert!(!view.complete);
    }
    // Anything else: an empty view, no panic.
    for body in [
        json!(null),
        json!([1, 2]),
        json!({"choices": "x"}),
        json!("text"),
    ] {
        for api in ApiKind::ALL {
            assert_eq!(parse_response(api, &body).message, None);
        }
    }
}
