use serde_json::{Value, json};

use super::fixtures::{assemble, chat_chunk, sse, text_stream, tool_stream};
use crate::{ApiKind, parse_response};

#[test]
fn openai_chat_stream() {
    let mut stream = chat_chunk(json!({"role": "assistant", "content": ""}), None);
    stream += &chat_chunk(json!({"content": "Hel"}), None);
    stream += &chat_chunk(json!({"content": "lo"}), None);
    stream += &chat_chunk(
        json!({"tool_calls": [
            {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "first", "arguments": ""}},
            {"index": 1, "id": "call_b", "type": "function",
             "function": {"name": "second", "arguments": "{\"x\""}}]}),
        None,
    );
    stream += &chat_chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        None,
    );
    stream += &chat_chunk(
        json!({"tool_calls": [{"index": 1, "function": {"arguments": ":1}"}}]}),
        None,
    );
    stream += &chat_chunk(json!({}), Some("tool_calls"));
    stream += &sse(
        None,
        &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-4.1-mini", "choices": [],
                "usage": {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17}}),
    );
    let view = assemble(ApiKind::OpenAiChat, stream.as_bytes());
    assert!(!view.complete, "no [DONE] yet");
    stream += "data: [DONE]\n\n";
    let view = assemble(ApiKind::OpenAiChat, stream.as_bytes());
    assert!(view.complete);
    let message = view.message.unwrap();
    assert_eq!(message.content.as_deref(), Some("Hello"));
    let calls: Vec<(&str, &str, &str)> = message
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [("call_a", "first", "{}"), ("call_b", "second", "{\"x\":1}")]
    );
    assert_eq!(view.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(view.model.as_deref(), Some("gpt-4.1-mini"));
    assert_eq!(
        (view.prompt_tokens, view.completion_tokens),
        (Some(11), Some(6))
    );
}

#[test]
fn openai_chat_stream_logprobs() {
    let chunk = |content: &str, logprob: f64| {
        sse(
            None,
            &json!({"object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0,
                "delta": {"content": content},
                "logprobs": {"content": [{"token": content, "logprob": logprob}]},
                "finish_reason": null}]}),
        )
    };
    let stream = chunk("a", -0.5) + &chunk("b", -2.0) + "data: [DONE]\n\n";
    let view = assemble(ApiKind::OpenAiChat, stream.as_bytes());
    assert_eq!(view.logprobs, Some(vec![-0.5, -2.0]));
    assert_eq!(view.token_ids, None);
}

/// A stream assembles to what the same reply parses to unstreamed.
#[test]
fn streams_match_their_documents() {
    for api in ApiKind::ALL {
        let view = assemble(api, text_stream(api, &["Hel", "lo ", "there"]).as_bytes());
        assert!(view.complete, "{api}");
        assert_eq!(
            view.message.as_ref().and_then(|m| m.content.as_deref()),
            Some("Hello there"),
            "{api}"
        );
        assert!(view.model.is_some(), "{api}");
        let tool = assemble(api, tool_stream(api, &["{\"to\":", " \"x\"}"]).as_bytes());
        let call = &tool.message.as_ref().unwrap().tool_calls[0];
        assert_eq!(call.name, "send", "{api}");
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(arguments, json!({"to": "x"}), "{api}");
        let expected_reason = match api {
            ApiKind::OpenAiChat | ApiKind::OpenAiResponses => "tool_calls",
            ApiKind::AnthropicMessages => "tool_use",
        };
        assert_eq!(
            tool.finish_reason.as_deref(),
            Some(expected_reason),
            "{api}"
        );
    }
}

#[test]
fn anthropic_stream_matches_the_document() {
    let stream = tool_stream(
        ApiKind::AnthropicMessages,
        &["{\"to\": ", "\"x\", \"n\": 2}"],
    );
    let streamed = assemble(ApiKind::AnthropicMessages, stream.as_bytes());
    let document = parse_response(
        ApiKind::AnthropicMessages,
        &json!({"id": "msg_1", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "send",
                             "input": {"to": "x", "n": 2}}],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 25, "output_tokens": 15}}),
    );
    assert_eq!(streamed, document);
    assert_eq!(streamed.prompt_tokens, Some(25));
    assert_eq!(streamed.completion_tokens, Some(15));
}

#[test]
fn anthropic_tool_without_deltas_keeps_its_start_input() {
    let stream = tool_stream(ApiKind::AnthropicMessages, &[]);
    let view = assemble(ApiKind::AnthropicMessages, stream.as_bytes());
    assert_eq!(view.message.unwrap().tool_calls[0].arguments, "{}");
}

#[test]
fn interrupted_streams_are_not_complete() {
    for api in ApiKind::ALL {
        let stream = text_stream(api, &["Hel", "lo"]);
        // Cut just after the second delta's event.
        let end = stream.find("lo\"").unwrap();
        let cut = end + stream[end..].find("\n\n").unwrap() + 2;
        let view = assemble(api, &stream.as_bytes()[..cut]);
        assert!(!view.complete, "{api}");
        assert_eq!(
            view.message.unwrap().content.as_deref(),
            Some("Hello"),
            "{api}"
        );
        assert_eq!(view.finish_reason, None, "{api}");
    }
}

#[test]
fn error_events_are_reported() {
    let anthropic = sse(
        Some("error"),
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let view = assemble(ApiKind::AnthropicMessages, anthropic.as_bytes());
    assert_eq!(view.error_type.as_deref(), Some("overloaded_error"));
    assert!(!view.complete);
    let responses = sse(
        Some("error"),
        &json!({"type": "error", "code": "server_error", "message": "x", "param": null}),
    );
    let view = assemble(ApiKind::OpenAiResponses, responses.as_bytes());
    assert_eq!(view.error_type.as_deref(), Some("server_error"));
    let chat = sse(
        None,
        &json!({"error": {"message": "x", "type": "server_error"}}),
    );
    let view = assemble(ApiKind::OpenAiChat, chat.as_bytes());
    assert_eq!(view.error_type.as_deref(), Some("server_error"));
    // Not JSON, or JSON of another shape: skipped.
    let junk = "data: {not json\n\ndata: [1,2]\n\ndata: \"s\"\n\n";
    for api in ApiKind::ALL {
        assert_eq!(assemble(api, junk.as_bytes()).message, None, "{api}");
    }
}
