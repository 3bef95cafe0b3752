//! `atdp-serve`'s tool calls and completion token ids on the tiny random Qwen2. A random
//! model does not choose tools by itself: forced choices (`required`, a named function) and
//! grammars make every reply here deterministic in shape. What the server returns is read
//! with the proxy's own parsers (`atdp-wire`), checked against the trainer's rendering of the
//! same conversation (`ChatFormat`), and, in the last test, taken by the official `openai`
//! and OpenAI Agents SDKs.

use std::net::SocketAddr;
use std::process::Command;

use atdp_deploy::Registry;
use atdp_model_files::ChatFormat;
use atdp_schema::{Message, Tool, ToolCall};
use atdp_trainer::added_token_id;
use atdp_wire::{ApiKind, ResponseView, SseParser, StreamAssembler, parse_response};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::util::{
    DEMO_KEY, Server, post, post_stream, recorded_steps, start, start_proxy, tiny_base,
    tiny_base_with_merges,
};

struct Fixture {
    server: Server,
    chat: ChatFormat,
    client: reqwest::Client,
    _dirs: (TempDir, TempDir),
}

impl Fixture {
    fn addr(&self) -> SocketAddr {
        self.server.addr
    }
}

async fn fixture() -> Fixture {
    fixture_with(|dir| tiny_base(dir, None)).await
}

/// A server on a base model that `make` writes.
async fn fixture_with(make: impl FnOnce(&std::path::Path)) -> Fixture {
    let base = tempfile::tempdir().unwrap();
    make(base.path());
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let server = start(registry, base.path()).await;
    let chat = ChatFormat::load(base.path()).unwrap();
    Fixture {
        server,
        chat,
        client: reqwest::Client::new(),
        _dirs: (base, lake),
    }
}

const CITIES: [&str; 3] = ["Paris", "Oslo", "Lima"];

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "enum": CITIES},
                "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {
                "order_id": {"type": "string", "enum": ["A1", "B2"]}},
                "required": ["order_id"], "additionalProperties": false}}},
    ])
}

fn messages() -> Value {
    json!([
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is the weather in Oslo?"},
    ])
}

/// The conversation of a request body as the proxy records it.
fn recorded(body: &Value) -> (Vec<Message>, Vec<Tool>) {
    let messages = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message {
            role: m["role"].as_str().unwrap().into(),
            content: m["content"].as_str().map(str::to_owned),
            ..Message::default()
        })
        .collect();
    let tools = tools()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Tool {
            kind: "function".into(),
            name: t["function"]["name"].as_str().unwrap().into(),
            description: t["function"]["description"].as_str().map(str::to_owned),
            parameters: Some(t["function"]["parameters"].to_string()),
        })
        .collect();
    (messages, tools)
}

/// The prompt's length and the completion text the trainer renders for the request `body`
/// and a reply with `content` and `calls` (name, arguments).
fn trainer_view(
    chat: &ChatFormat,
    body: &Value,
    content: Option<&str>,
    calls: &[(&str, &str)],
) -> (usize, String) {
    let (messages, tools) = recorded(body);
    let reply = Message {
        role: "assistant".into(),
        content: content.map(str::to_owned),
        tool_calls: calls
            .iter()
            .map(|(name, arguments)| ToolCall {
                id: "call_x".into(),
                name: (*name).into(),
                arguments: (*arguments).into(),
            })
            .collect(),
        ..Message::default()
    };
    let (prompt, completion) = chat
        .prompt_and_completion(&messages, &tools, &reply)
        .unwrap();
    (chat.encode(&prompt).unwrap().len(), completion)
}

/// Arguments of a forced call: an object with exactly the schema's properties, in order,
/// each one of its values.
fn check_arguments(name: &str, arguments: &str) {
    let value: Value = serde_json::from_str(arguments).unwrap();
    let object = value.as_object().unwrap();
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    match name {
        "get_weather" => {
            assert_eq!(keys, ["city", "unit"], "{arguments}");
            assert!(
                CITIES.contains(&object["city"].as_str().unwrap()),
                "{arguments}"
            );
            assert!(
                ["c", "f"].contains(&object["unit"].as_str().unwrap()),
                "{arguments}"
            );
        }
        "lookup_order" => {
            assert_eq!(keys, ["order_id"], "{arguments}");
            assert!(["A1", "B2"].contains(&object["order_id"].as_str().unwrap()));
        }
        other => panic!("unexpected function {other}"),
    }
}

fn ids_of(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("no token_ids: {value}"))
        .iter()
        .map(|v| u32::try_from(v.as_u64().unwrap()).unwrap())
        .collect()
}

fn as_i32(ids: &[u32]) -> Vec<i32> {
    ids.iter().map(|&i| i as i32).collect()
}

/// A streamed reply put back together: content, calls (id, name, arguments), finish reason,
/// token ids, and what the proxy's assembler makes of the same bytes.
#[derive(Debug)]
struct Streamed {
    content: String,
    calls: Vec<(String, String, String)>,
    finish: String,
    ids: Option<Vec<u32>>,
    usage: Value,
    proxy: ResponseView,
}

fn reassemble(bytes: &[u8], chunks: &[Value]) -> Streamed {
    let mut content = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = String::new();
    let mut ids = None;
    let mut usage = Value::Null;
    for chunk in chunks {
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        if let Some(text) = choice["delta"]["content"].as_str() {
            content.push_str(text);
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = call["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                // The first delta of a call names it, with empty arguments.
                assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
                assert_eq!(call["type"], "function", "{call}");
                assert_eq!(call["function"]["arguments"], "", "{call}");
                calls.push((
                    call["id"].as_str().unwrap().into(),
                    call["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            } else {
                assert_eq!(index + 1, calls.len(), "{call}");
                assert!(call.get("id").is_none() && call["function"].get("name").is_none());
                calls[index]
                    .2
                    .push_str(call["function"]["arguments"].as_str().unwrap());
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = reason.into();
            ids = choice.get("token_ids").map(ids_of);
        } else {
            assert!(
                choice.get("token_ids").is_none(),
                "ids before the end: {chunk}"
            );
        }
    }
    let mut parser = SseParser::new();
    let mut assembler = StreamAssembler::new(ApiKind::OpenAiChat);
    for event in parser.push(bytes) {
        assembler.push_event(&event);
    }
    Streamed {
        content,
        calls,
        finish,
        ids,
        usage,
        proxy: assembler.finish(),
    }
}

fn forced_body(choice: Value, stream: bool, seed: usize) -> Value {
    let mut messages = messages();
    messages[1]["content"] = json!(format!("What is the weather in Oslo? ({seed})"));
    json!({
        "model": "agent",
        "messages": messages,
        "tools": tools(),
        "tool_choice": choice,
        "parallel_tool_calls": false,
        "temperature": 1.0,
        "max_tokens": 96,
        "logprobs": true,
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
    })
}

/// `required` and a named function force one call, whole and streamed; its arguments follow
/// the function's schema; the ids decode to exactly what the trainer renders for that call,
/// and the proxy's parsers record the ids, log-probabilities and call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_calls_follow_the_schema_and_the_trainers_rendering() {
    forced_calls(&fixture().await, 0..4).await;
}

/// The same with a tokenizer that learned merges from the tools and calls (the quickstart's
/// tool-calling environments have one): the grammar, the ids and the rendering still agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_calls_agree_with_a_tokenizer_that_learned_merges() {
    let corpus: Vec<String> = (0..40)
        .map(|i| {
            let city = CITIES[i % CITIES.len()];
            format!(
                "{}\n{}\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\"}}}}\n</tool_call>",
                tools(),
                messages()
            )
        })
        .collect();
    let f = fixture_with(|dir| tiny_base_with_merges(dir, &corpus)).await;
    let ids = f.chat.encode(r#"{"name": "get_weather""#).unwrap();
    assert!(ids.iter().any(|&id| id >= 300), "{ids:?}");
    forced_calls(&f, 0..2).await;
}

async fn forced_calls(f: &Fixture, seeds: std::ops::Range<usize>) {
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let mut names_seen = std::collections::BTreeSet::new();
    for seed in seeds {
        for choice in [named.clone(), json!("required")] {
            // Whole.
            let body = forced_body(choice.clone(), false, seed);
            let (status, reply) = post(&f.client, f.addr(), &body).await;
            assert_eq!(status, 200, "{reply}");
            let c = &reply["choices"][0];
            assert_eq!(c["finish_reason"], "tool_calls", "{reply}");
            assert_eq!(c["message"]["content"], Value::Null, "{reply}");
            let calls = c["message"]["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{reply}");
            let call = &calls[0];
            assert!(call["id"].as_str().unwrap().starts_with("call_"));
            assert_eq!(call["type"], "function");
            let name = call["function"]["name"].as_str().unwrap();
            let arguments = call["function"]["arguments"].as_str().unwrap();
            if choice == named {
                assert_eq!(name, "get_weather");
            }
            names_seen.insert(name.to_owned());
            check_arguments(name, arguments);
            let ids = ids_of(&c["token_ids"]);
            let (prompt_len, completion) = trainer_view(&f.chat, &body, None, &[(name, arguments)]);
            assert_eq!(f.chat.tokenizer().decode(&ids, false).unwrap(), completion);
            assert!(
                completion.ends_with("</tool_call><|im_end|>"),
                "{completion}"
            );
            assert_eq!(reply["usage"]["prompt_tokens"], prompt_len);
            assert_eq!(reply["usage"]["completion_tokens"], ids.len());
            assert_eq!(
                c["logprobs"]["content"].as_array().unwrap().len(),
                ids.len()
            );
            let recorded = parse_response(ApiKind::OpenAiChat, &reply);
            assert_eq!(recorded.token_ids, Some(as_i32(&ids)));
            assert_eq!(recorded.logprobs.map(|l| l.len()), Some(ids.len()));
            let message = recorded.message.unwrap();
            assert_eq!(message.tool_calls[0].name, name);
            assert_eq!(message.tool_calls[0].arguments, arguments);

            // Streamed.
            let body = forced_body(choice.clone(), true, seed);
            let (bytes, chunks) = post_stream(&f.client, f.addr(), &body).await;
            let s = reassemble(&bytes, &chunks);
            assert_eq!(
                (s.finish.as_str(), s.content.as_str()),
                ("tool_calls", ""),
                "{s:?}"
            );
            assert_eq!(s.calls.len(), 1, "{s:?}");
            let (_, name, arguments) = &s.calls[0];
            check_arguments(name, arguments);
            let ids = s.ids.clone().unwrap();
            let (_, completion) = trainer_view(&f.chat, &body, None, &[(name, arguments)]);
            assert_eq!(f.chat.tokenizer().decode(&ids, false).unwrap(), completion);
            assert_eq!(s.usage["completion_tokens"], ids.len());
            assert_eq!(s.proxy.token_ids, Some(as_i32(&ids)));
            assert_eq!(s.proxy.finish_reason.as_deref(), Some("tool_calls"));
            assert!(s.proxy.complete);
            let message = s.proxy.message.unwrap();
            assert_eq!(
                (
                    message.tool_calls[0].name.as_str(),
                    message.tool_calls[0].arguments.as_str()
                ),
                (name.as_str(), arguments.as_str())
            );
        }
    }
    assert!(!names_seen.is_empty());
}

/// A Lark grammar (mistral.rs's `grammar` extension) whose only sentence is `text`, written
/// as the model writes it: `<tool_call>` and `</tool_call>` as their own tokens.
fn exactly(text: &str) -> String {
    let token = |t: &str| format!("<[{}]>", added_token_id(t).unwrap());
    let mut items = Vec::new();
    for (i, part) in text.split("<tool_call>").enumerate() {
        if i > 0 {
            items.push(token("<tool_call>"));
        }
        for (j, piece) in part.split("</tool_call>").enumerate() {
            if j > 0 {
                items.push(token("</tool_call>"));
            }
            if !piece.is_empty() {
                items.push(Value::from(piece).to_string());
            }
        }
    }
    format!("start: {}\n", items.join(" "))
}

/// A reply text, whether parallel calls are on, the content and the calls (name, arguments)
/// expected.
type Case<'a> = (String, bool, Option<String>, Vec<(&'a str, &'a str)>);

const WEATHER: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>";
const ORDER: &str = "<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"order_id\": \"A1\"}}\n</tool_call>";

/// Calls wherever they are in the reply (here forced by a grammar under `auto`): text before
/// them is content, several are parallel calls, and a block that is not a call of an offered
/// function stays in the content as written, whole and streamed alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_the_reply_are_split_from_text_and_malformed_ones_stay_text() {
    let f = fixture().await;
    let unknown = "<tool_call>\n{\"name\": \"delete_everything\", \"arguments\": {}}\n</tool_call>";
    let bad_json =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
    let two = format!("Checking.\n{WEATHER}\n{ORDER}");
    let weather_args = "{\"city\": \"Oslo\", \"unit\": \"c\"}";
    let order_args = "{\"order_id\": \"A1\"}";
    // (reply text, parallel calls, expected content, expected calls)
    let cases: Vec<Case<'_>> = vec![
        (
            two.clone(),
            true,
            Some("Checking.".into()),
            vec![("get_weather", weather_args), ("lookup_order", order_args)],
        ),
        (
            two.clone(),
            false,
            Some(format!("Checking.\n{ORDER}")),
            vec![("get_weather", weather_args)],
        ),
        (
            format!("Sure.\n{unknown}"),
            true,
            Some(format!("Sure.\n{unknown}")),
            vec![],
        ),
        (bad_json.into(), true, Some(bad_json.into()), vec![]),
    ];
    for (text, parallel, content, calls) in cases {
        let body = |stream: bool| {
            json!({
                "model": "agent",
                "messages": messages(),
                "tools": tools(),
                "parallel_tool_calls": parallel,
                "temperature": 1.0,
                "max_tokens": 400,
                "grammar": {"type": "lark", "value": exactly(&text)},
                "stream": stream,
            })
        };
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let (status, reply) = post(&f.client, f.addr(), &body(false)).await;
        assert_eq!(status, 200, "{reply}");
        let c = &reply["choices"][0];
        assert_eq!(c["finish_reason"], finish, "{reply}");
        assert_eq!(
            c["message"]["content"].as_str(),
            content.as_deref(),
            "{reply}"
        );
        let got: Vec<(&str, &str)> = c["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    t["function"]["name"].as_str().unwrap(),
                    t["function"]["arguments"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, calls, "{reply}");
        // The ids are the reply text, then the end of the turn.
        let ids = ids_of(&c["token_ids"]);
        let (last, rest) = ids.split_last().unwrap();
        assert_eq!(f.chat.tokenizer().decode(rest, false).unwrap(), text);
        let ends = [
            added_token_id("<|im_end|>"),
            added_token_id("<|endoftext|>"),
        ];
        assert!(ends.contains(&Some(*last)), "{ids:?}");

        let (bytes, chunks) = post_stream(&f.client, f.addr(), &body(true)).await;
        let s = reassemble(&bytes, &chunks);
        assert_eq!(s.finish, finish, "{s:?}");
        assert_eq!(s.content, content.clone().unwrap_or_default(), "{s:?}");
        let streamed: Vec<(&str, &str)> = s
            .calls
            .iter()
            .map(|(_, n, a)| (n.as_str(), a.as_str()))
            .collect();
        assert_eq!(streamed, calls, "{s:?}");
        // The grammar admits several tokenizations of the text: the streamed ids are the
        // same text and end of turn, not necessarily the same ids.
        let streamed_ids = s.ids.unwrap();
        let (streamed_last, streamed_rest) = streamed_ids.split_last().unwrap();
        assert_eq!(
            f.chat.tokenizer().decode(streamed_rest, false).unwrap(),
            text
        );
        let ends = [
            added_token_id("<|im_end|>"),
            added_token_id("<|endoftext|>"),
        ];
        assert!(ends.contains(&Some(*streamed_last)), "{streamed_ids:?}");
    }
}

/// Under `auto`, a `strict` function's arguments are held to its schema while the model
/// decides between text and calls: every call the random model starts is a call of an offered
/// function whose arguments follow the schema (unconstrained, its arguments are noise and the
/// block comes back as text), and the reply text never carries a call block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_functions_keep_calls_inside_their_schema_under_auto() {
    let f = fixture().await;
    let mut strict = tools();
    for tool in strict.as_array_mut().unwrap() {
        tool["function"]["strict"] = json!(true);
    }
    let mut calls_seen = 0;
    for seed in 0..24 {
        let mut body = forced_body(Value::Null, seed % 2 == 1, seed);
        body["tools"] = strict.clone();
        body["tool_choice"] = json!("auto");
        body["parallel_tool_calls"] = json!(true);
        let (content, calls, finish) = if seed % 2 == 1 {
            let (bytes, chunks) = post_stream(&f.client, f.addr(), &body).await;
            let s = reassemble(&bytes, &chunks);
            let calls: Vec<(String, String)> =
                s.calls.into_iter().map(|(_, n, a)| (n, a)).collect();
            (s.content, calls, s.finish)
        } else {
            let (status, reply) = post(&f.client, f.addr(), &body).await;
            assert_eq!(status, 200, "{reply}");
            let c = &reply["choices"][0];
            let calls: Vec<(String, String)> = c["message"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    (
                        t["function"]["name"].as_str().unwrap().to_owned(),
                        t["function"]["arguments"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let content = c["message"]["content"].as_str().unwrap_or("").to_owned();
            (
                content,
                calls,
                c["finish_reason"].as_str().unwrap().to_owned(),
            )
        };
        assert!(!content.contains("<tool_call>"), "seed {seed}: {content:?}");
        for (name, arguments) in &calls {
            check_arguments(name, arguments);
        }
        if calls.is_empty() {
            assert!(["stop", "length"].contains(&finish.as_str()), "{finish}");
        } else {
            assert_eq!(finish, "tool_calls");
        }
        calls_seen += calls.len();
    }
    assert!(calls_seen > 0, "the model started no call in 24 replies");
}

/// `tool_choice: none` offers the tools in the prompt (as the trainer renders the recorded
/// step) but the reply is text: the `<tool_call>` token is never sampled, and the text is the
/// ids decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_choice_none_replies_with_text() {
    let f = fixture().await;
    let open = added_token_id("<tool_call>").unwrap();
    for seed in 0..6 {
        let mut body = forced_body(json!("none"), false, seed);
        body["max_tokens"] = json!(24);
        let (status, reply) = post(&f.client, f.addr(), &body).await;
        assert_eq!(status, 200, "{reply}");
        let c = &reply["choices"][0];
        assert!(c["message"].get("tool_calls").is_none(), "{reply}");
        let content = c["message"]["content"].as_str().unwrap();
        let ids = ids_of(&c["token_ids"]);
        assert!(!ids.contains(&open), "{ids:?}");
        let text_ids = match c["finish_reason"].as_str().unwrap() {
            "length" => {
                assert_eq!(ids.len(), 24);
                &ids[..]
            }
            "stop" => &ids[..ids.len() - 1],
            other => panic!("finish reason {other}"),
        };
        assert_eq!(f.chat.tokenizer().decode(text_ids, false).unwrap(), content);
        let (prompt_len, _) = trainer_view(&f.chat, &body, Some("x"), &[]);
        assert_eq!(reply["usage"]["prompt_tokens"], prompt_len);
    }
}

/// Token ids without tools: a reply cut at `max_tokens` carries exactly that many ids, they
/// decode to the text, and the streamed reply carries the same ids and text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_token_ids_decode_to_the_reply_whole_and_streamed() {
    let f = fixture().await;
    for (max_tokens, grammar) in [
        (12, Value::Null),
        (
            40,
            json!({"type": "regex", "value": "[a-z]{3,8}( [a-z]{2,6}){1,3}"}),
        ),
    ] {
        let body = |stream: bool| {
            json!({
                "model": "agent",
                "messages": [{"role": "user", "content": "Say something."}],
                "max_tokens": max_tokens,
                "temperature": 0,
                "logprobs": true,
                "grammar": grammar,
                "stream": stream,
            })
        };
        let (status, reply) = post(&f.client, f.addr(), &body(false)).await;
        assert_eq!(status, 200, "{reply}");
        let c = &reply["choices"][0];
        let content = c["message"]["content"].as_str().unwrap();
        let ids = ids_of(&c["token_ids"]);
        let text_ids = if c["finish_reason"] == "length" {
            assert_eq!(ids.len(), max_tokens, "{reply}");
            &ids[..]
        } else {
            &ids[..ids.len() - 1]
        };
        assert_eq!(f.chat.tokenizer().decode(text_ids, false).unwrap(), content);
        let logprobs = c["logprobs"]["content"].as_array().unwrap();
        assert_eq!(logprobs.len(), ids.len());
        for (id, entry) in ids.iter().zip(logprobs) {
            assert_eq!(
                entry["token"].as_str().unwrap(),
                f.chat.tokenizer().decode(&[*id], false).unwrap()
            );
        }
        let (bytes, chunks) = post_stream(&f.client, f.addr(), &body(true)).await;
        let s = reassemble(&bytes, &chunks);
        assert_eq!(s.ids.as_ref(), Some(&ids), "{s:?}");
        assert_eq!(s.content, content);
        assert_eq!(s.proxy.token_ids, Some(as_i32(&ids)));
        assert_eq!(s.finish, c["finish_reason"].as_str().unwrap());
    }
    // Without `logprobs` the ids are still returned, the log-probabilities not.
    let body =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0});
    let (_, reply) = post(&f.client, f.addr(), &body).await;
    assert_eq!(reply["choices"][0]["logprobs"], Value::Null);
    assert!(
        reply["choices"][0]["token_ids"]
            .as_array()
            .is_some_and(|i| !i.is_empty())
    );
}

/// Runs `tests/python/serve_tools.py` against `base_url` with `api_key`; returns its report.
async fn run_sdks(base_url: String, api_key: &str) -> Value {
    let script = atdp_testkit::repo_root().join("tests/python/serve_tools.py");
    let api_key = api_key.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(atdp_testkit::python())
            .arg(script)
            .args(["--base-url", &base_url, "--api-key", &api_key])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "serve_tools.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// The SDK modes that report the call and token ids.
const SDK_MODES: [&str; 3] = ["create", "create_stream", "stream_helper"];

/// What every SDK run must have got: one parsed `get_weather` call with arguments inside the
/// schema, and token ids; the agents ran their tool on the call's arguments.
fn check_sdk_report(report: &Value) {
    for mode in SDK_MODES {
        let r = &report[mode];
        assert_eq!(r["finish_reason"], "tool_calls", "{mode}: {r}");
        let calls = r["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{mode}: {r}");
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["name"], "get_weather");
        check_arguments("get_weather", calls[0]["arguments"].as_str().unwrap());
        assert!(
            r["token_ids"].as_array().is_some_and(|i| !i.is_empty()),
            "{mode}: {r}"
        );
    }
    for mode in ["agent", "agent_streamed"] {
        let r = &report[mode];
        let calls = r["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{mode}: {r}");
        let (city, unit) = (
            calls[0]["city"].as_str().unwrap(),
            calls[0]["unit"].as_str().unwrap(),
        );
        assert!(CITIES.contains(&city) && ["c", "f"].contains(&unit), "{r}");
        assert_eq!(
            r["final_output"],
            format!("{city}: 12 degrees {unit}"),
            "{mode}: {r}"
        );
    }
}

/// The official `openai` SDK (strict response validation) gets `tool_calls` objects from
/// `atdp-serve`, whole, streamed and through its `stream()` helper; an OpenAI Agents SDK
/// agent on `OpenAIChatCompletionsModel` with `tool_choice="required"` calls its function
/// tool in one turn, run whole and streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdks_get_tool_calls_from_atdp_serve() {
    let f = fixture().await;
    let report = run_sdks(format!("http://{}", f.addr()), "unused").await;
    check_sdk_report(&report);
}

/// An agent on the official `openai` SDK and an OpenAI Agents SDK agent, through the proxy to
/// `atdp-serve`, get parsed tool calls whole and streamed; the proxy records each step with
/// the call, the version that answered and exactly the token ids the client received, and
/// those ids decode to the completion the trainer renders from the recorded step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_tool_calls_are_recorded_with_their_exact_token_ids() {
    let f = fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(dir.path(), f.addr()).await;
    let report = run_sdks(format!("http://{proxy}"), DEMO_KEY).await;
    check_sdk_report(&report);
    let steps = recorded_steps(dir.path().join("lake"), 5).await;
    assert_eq!(steps.len(), 5);
    for step in &steps {
        assert_eq!(step.status, "ok", "{:?}", step.error);
        assert_eq!(step.policy_version.as_deref(), Some("agent@base"));
        let names: Vec<&str> = step.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["get_weather"]);
        let reply = step.response_message.as_ref().unwrap();
        assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
        let call = &reply.tool_calls[0];
        assert_eq!(call.name, "get_weather");
        check_arguments(&call.name, &call.arguments);
        let ids: Vec<u32> = step
            .completion_token_ids
            .as_ref()
            .expect("the step's token ids")
            .iter()
            .map(|&i| u32::try_from(i).unwrap())
            .collect();
        let (_, completion) = f
            .chat
            .prompt_and_completion(&step.request_messages, &step.tools, reply)
            .unwrap();
        assert_eq!(f.chat.tokenizer().decode(&ids, false).unwrap(), completion);
    }
    // The first three steps are the `openai` SDK's, in order: the ids it received are the ids
    // recorded, and so are its calls.
    for (mode, step) in SDK_MODES.iter().zip(&steps) {
        let r = &report[*mode];
        let sent: Vec<i32> = r["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| i32::try_from(v.as_i64().unwrap()).unwrap())
            .collect();
        assert_eq!(step.completion_token_ids.as_ref(), Some(&sent), "{mode}");
        let call = &step.response_message.as_ref().unwrap().tool_calls[0];
        assert_eq!(call.arguments, r["tool_calls"][0]["arguments"], "{mode}");
    }
}
