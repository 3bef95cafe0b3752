use serde_json::{Value, json};

use super::fixtures::{
    EMAIL, Vault, anthropic_text_delta, arguments_of, chat_chunk, sse, text_of, text_stream,
    tool_stream,
};
use crate::{ApiKind, SseParser, WireError};

/// The JSON data of every event of a stream.
fn events(stream: &[u8]) -> Vec<(Option<String>, Value)> {
    let mut parser = SseParser::new();
    let mut events = parser.push(stream);
    events.extend(parser.finish());
    events
        .into_iter()
        .filter(|e| !e.is_done())
        // A cut-off event's data is not JSON: skipped, as a client would.
        .filter_map(|e| Some((e.event, serde_json::from_str(&e.data).ok()?)))
        .collect()
}

/// The text a client reads from a stream's deltas (not from its final events).
fn delta_text(api: ApiKind, stream: &[u8]) -> String {
    deltas(api, stream, false)
}

/// The tool-call arguments a client reads from a stream's deltas.
fn delta_arguments(api: ApiKind, stream: &[u8]) -> String {
    deltas(api, stream, true)
}

fn deltas(api: ApiKind, stream: &[u8], arguments: bool) -> String {
    let pointer = match (api, arguments) {
        (ApiKind::OpenAiChat, false) => "/choices/0/delta/content",
        (ApiKind::OpenAiChat, true) => "/choices/0/delta/tool_calls/0/function/arguments",
        (ApiKind::OpenAiResponses, _) => "/delta",
        (ApiKind::AnthropicMessages, false) => "/delta/text",
        (ApiKind::AnthropicMessages, true) => "/delta/partial_json",
    };
    let wanted_type = match (api, arguments) {
        (ApiKind::OpenAiResponses, false) => Some("response.output_text.delta"),
        (ApiKind::OpenAiResponses, true) => Some("response.function_call_arguments.delta"),
        _ => None,
    };
    events(stream)
        .iter()
        .filter(|(_, data)| wanted_type.is_none_or(|t| data["type"] == t))
        .filter_map(|(_, data)| {
            data.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The byte range of the event of `stream` that contains `needle`.
fn event_around(stream: &str, needle: &str) -> (usize, usize) {
    let at = stream.find(needle).unwrap();
    let start = stream[..at].rfind("\n\n").map_or(0, |p| p + 2);
    let end = at + stream[at..].find("\n\n").unwrap() + 2;
    (start, end)
}

#[test]
fn byte_cuts_anywhere_restore_the_same() {
    let (vault, token) = Vault::email();
    for api in ApiKind::ALL {
        let masked_delta = format!("{token} now");
        let stream = text_stream(api, &["Mail ", &masked_delta, "."]);
        let whole = vault.restore(api, stream.as_bytes(), &[]);
        let expected = format!("Mail {EMAIL} now.");
        assert_eq!(delta_text(api, &whole), expected, "{api}");
        assert_eq!(text_of(api, &whole), expected, "{api}");
        assert!(!contains(&whole, "<EMAIL"), "{api}");
        // Every pair of cuts in and around the placeholder, and every single cut.
        let at = stream.find(token.as_str()).unwrap();
        let (start, end) = (at - 8, at + token.len() + 8);
        for i in start..=end {
            for j in i..=end {
                let cut = vault.restore(api, stream.as_bytes(), &[i, j]);
                assert!(cut == whole, "{api}: cut at {i} and {j}");
            }
        }
        for i in 0..=stream.len() {
            let cut = vault.restore(api, stream.as_bytes(), &[i]);
            assert!(cut == whole, "{api}: cut at {i}");
        }
    }
}

#[test]
fn placeholders_cut_between_deltas() {
    let (vault, token) = Vault::email();
    for api in ApiKind::ALL {
        for k in 1..token.len() {
            let first = format!("Mail {}", &token[..k]);
            let second = format!("{} now", &token[k..]);
            let stream = text_stream(api, &[&first, &second]);
            let out = vault.restore(api, stream.as_bytes(), &[]);
            assert_eq!(
                delta_text(api, &out),
                format!("Mail {EMAIL} now"),
                "{api} {k}"
            );
            assert_eq!(text_of(api, &out), format!("Mail {EMAIL} now"), "{api} {k}");
            assert!(!contains(&out, &token[..k.max(2)]), "{api} {k}");
        }
        // In three pieces, the middle one all held.
        for k in 1..token.len() - 1 {
            for l in k + 1..token.len() {
                let stream = text_stream(api, &[&token[..k], &token[k..l], &token[l..]]);
                let out = vault.restore(api, stream.as_bytes(), &[]);
                assert_eq!(delta_text(api, &out), EMAIL, "{api} {k} {l}");
            }
        }
    }
}

#[test]
fn tool_arguments_get_json_escaped_originals() {
    let original = "Jo \"JJ\" Doe \\ 1\n";
    let (vault, tokens) = Vault::of(&[("PERSON", original)]);
    let token = &tokens[0];
    for api in ApiKind::ALL {
        for k in 1..token.len() {
            let head = format!("{{\"to\":\"{}", &token[..k]);
            let tail = format!("{}\",\"n\":1}}", &token[k..]);
            let stream = tool_stream(api, &[&head, &tail]);
            let out = vault.restore(api, stream.as_bytes(), &[]);
            for arguments in [delta_arguments(api, &out), arguments_of(api, &out)] {
                let parsed: Value = serde_json::from_str(&arguments)
                    .unwrap_or_else(|e| panic!("{api} {k}: {e}: {arguments}"));
                assert_eq!(parsed, json!({"to": original, "n": 1}), "{api} {k}");
            }
        }
    }
}

#[test]
fn streams_without_placeholders_pass_byte_for_byte() {
    let (vault, _) = Vault::email();
    for api in ApiKind::ALL {
        let plain = [
            text_stream(api, &["a < b", " <div>", "x<y", " <EMAIL>", " ok"]),
            tool_stream(api, &["{\"html\":\"<p>", "</p>\"}"]),
        ];
        for stream in plain {
            let crlf = stream.replace('\n', "\r\n");
            for stream in [stream, crlf] {
                let bytes = stream.as_bytes();
                assert!(vault.restore(api, bytes, &[]) == bytes, "{api}");
                for i in (0..bytes.len()).step_by(7) {
                    assert!(vault.restore(api, bytes, &[i, i + 1]) == bytes, "{api} {i}");
                }
            }
        }
    }
}

#[test]
fn false_alarms_are_released_unchanged() {
    let (vault, token) = Vault::email();
    for api in ApiKind::ALL {
        let prefix = &token[..10];
        let stream = text_stream(api, &["a <", &prefix[1..], "zz> b <", "<E", "MAIL>"]);
        let out = vault.restore(api, stream.as_bytes(), &[]);
        let expected = format!("a {prefix}zz> b <<EMAIL>");
        assert_eq!(delta_text(api, &out), expected, "{api}");
    }
}

#[test]
fn held_text_is_flushed_before_the_field_ends() {
    let (vault, token) = Vault::email();
    let prefix = &token[..15];
    for api in ApiKind::ALL {
        let stream = text_stream(api, &["Mail ", prefix]);
        let out = vault.restore(api, stream.as_bytes(), &[]);
        assert_eq!(delta_text(api, &out), format!("Mail {prefix}"), "{api}");
        // The held text comes out before the event that ends the field.
        let out = String::from_utf8(out).unwrap();
        let end_marker = match api {
            ApiKind::OpenAiChat => "\"finish_reason\":\"stop\"",
            ApiKind::OpenAiResponses => "response.output_text.done",
            ApiKind::AnthropicMessages => "content_block_stop",
        };
        let flushed = out.rfind(&format!("\"{prefix}\"")).unwrap();
        assert!(flushed < out.find(end_marker).unwrap(), "{api}");
    }
    // OpenAI chat: an extra chunk modelled on the finishing one.
    let stream = text_stream(ApiKind::OpenAiChat, &["Mail ", prefix]);
    let out = vault.restore(ApiKind::OpenAiChat, stream.as_bytes(), &[]);
    let chunks = events(&out);
    let (_, extra) = &chunks[chunks.len() - 2];
    assert_eq!(
        *extra,
        json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,
               "model":"gpt-4.1-mini","system_fingerprint":"fp_1",
               "choices":[{"index":0,"delta":{"content":prefix},"logprobs":null,"finish_reason":null}]})
    );
}

#[test]
fn held_text_joins_a_finishing_chunk_that_carries_text() {
    let (vault, token) = Vault::email();
    let mut stream = chat_chunk(json!({"content": format!("Mail {}", &token[..9])}), None);
    stream += &chat_chunk(json!({"content": &token[9..]}), Some("stop"));
    stream += "data: [DONE]\n\n";
    let out = vault.restore(ApiKind::OpenAiChat, stream.as_bytes(), &[]);
    let chunks = events(&out);
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].1["choices"][0]["delta"]["content"], "Mail ");
    assert_eq!(chunks[1].1["choices"][0]["delta"]["content"], EMAIL);
    assert_eq!(chunks[1].1["choices"][0]["finish_reason"], "stop");
}

#[test]
fn held_tool_arguments_are_flushed_at_the_finish_chunk() {
    let (vault, token) = Vault::email();
    let head = format!("{{\"to\":\"{}", &token[..12]);
    let stream = tool_stream(ApiKind::OpenAiChat, &[&head]);
    let out = vault.restore(ApiKind::OpenAiChat, stream.as_bytes(), &[]);
    let chunks = events(&out);
    let (_, extra) = &chunks[chunks.len() - 2];
    assert_eq!(
        extra["choices"][0]["delta"],
        json!({"tool_calls":[{"index":0,"function":{"arguments":&token[..12]}}]})
    );
    assert_eq!(arguments_of(ApiKind::OpenAiChat, &out), head);
}

#[test]
fn cut_off_streams_flush_at_finish() {
    let (vault, token) = Vault::email();
    let prefix = &token[..15];
    for api in ApiKind::ALL {
        let stream = text_stream(api, &["Mail ", prefix, "more"]);
        let (_, end) = event_around(&stream, prefix);
        // Cut right after the event that leaves text held, and in the middle of the next.
        for cut in [end, end + 20] {
            let mut restorer = vault.restorer(api);
            let mut out = restorer.push(&stream.as_bytes()[..cut]).unwrap().to_vec();
            assert!(!contains(&out, prefix), "{api}");
            out.extend_from_slice(&restorer.finish().unwrap());
            assert_eq!(
                delta_text(api, &out),
                format!("Mail {prefix}"),
                "{api} {cut}"
            );
        }
    }
}

#[test]
fn written_events_keep_the_stream_line_ends_and_fields() {
    let (vault, token) = Vault::email();
    let api = ApiKind::AnthropicMessages;
    let stream = text_stream(api, &["Mail ", &token[..6]]).replace('\n', "\r\n");
    let out = String::from_utf8(vault.restore(api, stream.as_bytes(), &[])).unwrap();
    assert!(!out.replace("\r\n", "").contains('\n'), "{out}");
    assert_eq!(
        delta_text(api, out.as_bytes()),
        format!("Mail {}", &token[..6])
    );
    // Lines other than data are kept, in place.
    let data = json!({"type":"content_block_delta","index":0,
                      "delta":{"type":"text_delta","text":&token}});
    let stream = format!("id: 5\nevent: content_block_delta\n: note\ndata: {data}\n\n");
    let out = String::from_utf8(vault.restore(api, stream.as_bytes(), &[])).unwrap();
    let restored = json!({"type":"content_block_delta","index":0,
                          "delta":{"type":"text_delta","text":EMAIL}});
    assert_eq!(
        out,
        format!("id: 5\nevent: content_block_delta\n: note\ndata: {restored}\n\n")
    );
}

#[test]
fn escaped_angle_brackets_are_found() {
    let (vault, token) = Vault::email();
    let stream = chat_chunk(json!({"content": token}), None)
        .replace('<', "\\u003c")
        .replace('>', "\\u003e");
    let out = vault.restore(ApiKind::OpenAiChat, stream.as_bytes(), &[]);
    assert_eq!(delta_text(ApiKind::OpenAiChat, &out), EMAIL);
}

#[test]
fn anthropic_thinking_is_left_alone() {
    let (vault, token) = Vault::email();
    let thinking = sse(
        Some("content_block_delta"),
        &json!({"type":"content_block_delta","index":0,
                "delta":{"type":"thinking_delta","thinking":token}}),
    );
    let text = anthropic_text_delta(1, &token);
    let stream = thinking.clone() + &text;
    let out = vault.restore(ApiKind::AnthropicMessages, stream.as_bytes(), &[]);
    assert!(out.starts_with(thinking.as_bytes()));
    assert_eq!(delta_text(ApiKind::AnthropicMessages, &out), EMAIL);
}

#[test]
fn responses_final_texts_are_restored() {
    let (vault, token) = Vault::email();
    let api = ApiKind::OpenAiResponses;
    let stream = text_stream(api, &["Mail ", &token]);
    let out = vault.restore(api, stream.as_bytes(), &[]);
    let texts: Vec<Value> = events(&out)
        .into_iter()
        .filter(|(_, d)| d["type"] == "response.output_text.done")
        .map(|(_, d)| d["text"].clone())
        .collect();
    assert_eq!(texts, [json!(format!("Mail {EMAIL}"))]);
    assert!(!contains(&out, "<EMAIL"));
}

#[test]
fn empty_vaults_pass_everything() {
    let (vault, token) = Vault::of(&[]);
    let stream = text_stream(ApiKind::OpenAiChat, &["<EMAIL_ADDRESS_", "0123456789ab>"]);
    let out = vault.restore(ApiKind::OpenAiChat, stream.as_bytes(), &[5]);
    assert!(out == stream.as_bytes());
    assert!(token.is_empty());
}

#[test]
fn originals_that_do_not_open_fail_the_stream() {
    let (vault, tokens) = Vault::of(&[("EMAIL_ADDRESS", EMAIL)]);
    let (other, _) = Vault::of(&[]);
    let mut restorer = crate::SseRestorer::new(
        ApiKind::OpenAiChat,
        "t".to_owned(),
        vault.vault.clone(),
        other.keys.clone(),
    );
    let stream = chat_chunk(json!({"content": tokens[0]}), None);
    let error = restorer.push(stream.as_bytes()).unwrap_err();
    assert!(matches!(error, WireError::Unmask(_)), "{error}");
    assert!(!error.to_string().contains(EMAIL));
}

mod properties {
    use proptest::prelude::*;

    use super::super::fixtures::{TENANT, Vault, text_stream, tool_stream};
    use super::delta_text;
    use crate::ApiKind;

    fn api() -> impl Strategy<Value = ApiKind> {
        prop_oneof![
            Just(ApiKind::OpenAiChat),
            Just(ApiKind::OpenAiResponses),
            Just(ApiKind::AnthropicMessages),
        ]
    }

    /// Cut offsets, clamped to `len` and sorted.
    fn clamp(mut cuts: Vec<usize>, len: usize) -> Vec<usize> {
        cuts.iter_mut().for_each(|c| *c = (*c).min(len));
        cuts.sort_unstable();
        cuts
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the text, its pieces and the byte cuts, a client reads what unmasking
        /// the whole text at once gives.
        #[test]
        fn streams_read_as_the_whole_text_unmasked(
            api in api(),
            segments in proptest::collection::vec(
                prop_oneof![Just(None), "[a-z <>é]{0,6}".prop_map(Some)], 1..8),
            splits in proptest::collection::vec(0usize..200, 0..6),
            cuts in proptest::collection::vec(0usize..3000, 0..6),
        ) {
            let (vault, tokens) = Vault::of(&[("EMAIL_ADDRESS", "a@b.co"), ("PERSON", "Jo")]);
            let mut masked = String::new();
            for (i, segment) in segments.iter().enumerate() {
                masked += segment.as_deref().unwrap_or(&tokens[i % 2]);
            }
            let mut splits: Vec<usize> = clamp(splits, masked.len())
                .into_iter()
                .filter(|&s| masked.is_char_boundary(s))
                .collect();
            splits.dedup();
            let mut deltas = Vec::new();
            let mut at = 0;
            for split in splits.into_iter().chain([masked.len()]) {
                deltas.push(&masked[at..split]);
                at = split;
            }
            let stream = text_stream(api, &deltas);
            let out = vault.restore(api, stream.as_bytes(), &clamp(cuts, stream.len()));
            let expected = atdp_policies::unmask(&masked, TENANT, &vault.vault, &vault.keys).unwrap();
            prop_assert_eq!(delta_text(api, &out), expected);
        }

        /// Any bytes, in any pieces, in any API: no panic, and the same output whatever
        /// the pieces.
        #[test]
        fn any_bytes_any_cuts(
            api in api(),
            noise in proptest::collection::vec(any::<u8>(), 0..300),
            cuts in proptest::collection::vec(0usize..1000, 0..6),
        ) {
            let (vault, tokens) = Vault::of(&[("EMAIL_ADDRESS", "a@b.co")]);
            let mut stream = tool_stream(api, &["{\"a\":\"", &tokens[0][..9]]).into_bytes();
            let middle = stream.len() / 2;
            stream.splice(middle..middle, noise);
            let whole = vault.restore(api, &stream, &[]);
            prop_assert_eq!(vault.restore(api, &stream, &clamp(cuts, stream.len())), whole);
        }
    }
}

#[test]
fn held_text_of_many_choices_is_flushed_choice_by_choice() {
    let (vault, token) = Vault::email();
    let prefix = &token[..15];
    let head = json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,
                      "model":"gpt-4.1-mini"});
    let chunk = |choices: Vec<Value>| {
        let mut chunk = head.clone();
        chunk["choices"] = Value::Array(choices);
        sse(None, &chunk)
    };
    let opening: Vec<Value> = (0..1000)
        .map(|i| {
            let mut delta = json!({"content": format!("c{i} {prefix}")});
            if i == 1 {
                delta["tool_calls"] =
                    json!([{"index": 0, "function": {"arguments": format!("{{\"to\":\"{prefix}")}}]);
            }
            json!({"index": i, "delta": delta, "finish_reason": null})
        })
        .collect();
    let mut stream = chunk(opening);
    // Choices 2 and 0 end in one chunk that carries no text; the rest at `[DONE]`.
    stream += &chunk(vec![
        json!({"index": 2, "delta": {}, "finish_reason": "stop"}),
        json!({"index": 0, "delta": {}, "finish_reason": "stop"}),
    ]);
    stream += "data: [DONE]\n\n";
    let out = vault.restore(ApiKind::OpenAiChat, stream.as_bytes(), &[]);
    let chunks: Vec<Value> = events(&out).into_iter().map(|(_, data)| data).collect();
    // The opening chunk, the held text of choices 2 and 0 before the chunk ending them, that
    // chunk, then one chunk for each of the 998 other choices.
    assert_eq!(chunks.len(), 1 + 2 + 1 + 998);
    let only_choice = |chunk: &Value| {
        let choices = chunk["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 1, "{chunk}");
        assert_eq!(chunk["model"], "gpt-4.1-mini");
        choices[0].clone()
    };
    assert_eq!(only_choice(&chunks[1])["index"], 2);
    assert_eq!(only_choice(&chunks[2])["index"], 0);
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "stop");
    let mut content = vec![String::new(); 1000];
    let mut arguments = String::new();
    for chunk in &chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            if let Some(text) = choice["delta"]["content"].as_str() {
                content[i] += text;
            }
            if let Some(text) = choice.pointer("/delta/tool_calls/0/function/arguments") {
                arguments += text.as_str().unwrap();
            }
        }
    }
    for (i, text) in content.iter().enumerate() {
        assert_eq!(*text, format!("c{i} {prefix}"));
    }
    assert_eq!(arguments, format!("{{\"to\":\"{prefix}"));
    // Choice 1's content and arguments come out in one chunk, at `[DONE]`.
    let of_one = chunks[4..]
        .iter()
        .find(|c| c["choices"][0]["index"] == 1)
        .unwrap();
    assert_eq!(of_one["choices"][0]["delta"]["content"], prefix);
    assert!(of_one["choices"][0]["delta"]["tool_calls"].is_array());
}
