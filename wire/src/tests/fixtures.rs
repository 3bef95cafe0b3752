//! Streams and keys for the tests, in the exact form the upstreams send.

use std::collections::HashMap;
use std::sync::Arc;

use atdp_detect::Scanner;

use atdp_policies::{Action, KeyRing, MaskPolicy, VaultItem};
use serde_json::{Value, json};

use crate::{ApiKind, ResponseView, SseParser, SseRestorer, StreamAssembler};

pub const TENANT: &str = "t";

/// A tenant's keys and vault, and the placeholders of the values put in it.
pub struct Vault {
    pub keys: Arc<KeyRing>,
    pub vault: Arc<HashMap<String, VaultItem>>,
}

impl Vault {
    /// A vault holding `values` (entity, original); returns it with their tokens.
    pub fn of(values: &[(&str, &str)]) -> (Vault, Vec<String>) {
        let mut keys = KeyRing::default();
        keys.generate(TENANT);
        let mut vault = HashMap::new();
        let mut tokens = Vec::new();
        for (entity, value) in values {
            let token = keys.token(TENANT, entity, value).unwrap();
            let sealed = keys.seal(TENANT, entity, value).unwrap();
            let item = VaultItem {
                token: token.clone(),
                entity: (*entity).to_owned(),
                sealed,
            };
            vault.insert(token.clone(), item);
            tokens.push(token);
        }
        let vault = Vault {
            keys: Arc::new(keys),
            vault: Arc::new(vault),
        };
        (vault, tokens)
    }

    /// The email of the brief, masked the way the proxy masks it: scanned, then tokenized.
    pub fn email() -> (Vault, String) {
        let mut keys = KeyRing::default();
        keys.generate(TENANT);
        let scanner = Scanner::new(None).unwrap();
        let text = EMAIL;
        let policy = MaskPolicy::all(Action::Tokenize);
        let masked =
            atdp_policies::mask(text, &scanner.scan(text), &policy, TENANT, &keys).unwrap();
        assert_eq!(masked.vault.len(), 1);
        let token = masked.vault[0].token.clone();
        assert_eq!(masked.text, token);
        let vault = masked
            .vault
            .into_iter()
            .map(|v| (v.token.clone(), v))
            .collect();
        let vault = Vault {
            keys: Arc::new(keys),
            vault: Arc::new(vault),
        };
        (vault, token)
    }

    pub fn restorer(&self, api: ApiKind) -> SseRestorer {
        SseRestorer::new(
            api,
            TENANT.to_owned(),
            Arc::clone(&self.vault),
            Arc::clone(&self.keys),
        )
    }

    /// `stream` restored, fed in pieces cut at `cuts` (ascending byte offsets).
    pub fn restore(&self, api: ApiKind, stream: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut restorer = self.restorer(api);
        let mut out = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain([stream.len()].iter()) {
            out.extend_from_slice(&restorer.push(&stream[at..cut]).unwrap());
            at = cut;
        }
        out.extend_from_slice(&restorer.finish().unwrap());
        out
    }
}

pub const EMAIL: &str = "jane.doe@example.com";

/// The reply a stream assembles to.
pub fn assemble(api: ApiKind, stream: &[u8]) -> ResponseView {
    let mut parser = SseParser::new();
    let mut assembler = StreamAssembler::new(api);
    for event in parser.push(stream) {
        assembler.push_event(&event);
    }
    if let Some(event) = parser.finish() {
        assembler.push_event(&event);
    }
    assembler.finish()
}

/// The text of the assembled reply.
pub fn text_of(api: ApiKind, stream: &[u8]) -> String {
    let view = assemble(api, stream);
    view.message.and_then(|m| m.content).unwrap_or_default()
}

/// The arguments of the assembled reply's first tool call.
pub fn arguments_of(api: ApiKind, stream: &[u8]) -> String {
    let view = assemble(api, stream);
    let message = view.message.unwrap();
    message.tool_calls[0].arguments.clone()
}

/// One event in wire form.
pub fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn typed(data: Value) -> String {
    let name = data["type"].as_str().unwrap().to_owned();
    sse(Some(&name), &data)
}

/// An OpenAI chat chunk with one choice.
pub fn chat_chunk(delta: Value, finish_reason: Option<&str>) -> String {
    sse(
        None,
        &json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,
                "model":"gpt-4.1-mini","system_fingerprint":"fp_1",
                "choices":[{"index":0,"delta":delta,"logprobs":null,"finish_reason":finish_reason}]}),
    )
}

/// A text reply streamed as `deltas`.
pub fn text_stream(api: ApiKind, deltas: &[&str]) -> String {
    match api {
        ApiKind::OpenAiChat => chat_text(deltas),
        ApiKind::OpenAiResponses => responses_text(deltas),
        ApiKind::AnthropicMessages => anthropic_text(deltas),
    }
}

/// A reply calling one tool, its arguments streamed as `fragments`.
pub fn tool_stream(api: ApiKind, fragments: &[&str]) -> String {
    match api {
        ApiKind::OpenAiChat => chat_tool(fragments),
        ApiKind::OpenAiResponses => responses_tool(fragments),
        ApiKind::AnthropicMessages => anthropic_tool(fragments),
    }
}

fn chat_text(deltas: &[&str]) -> String {
    let mut out = chat_chunk(
        json!({"role":"assistant","content":"","refusal":null}),
        None,
    );
    for delta in deltas {
        out += &chat_chunk(json!({"content": delta}), None);
    }
    out += &chat_chunk(json!({}), Some("stop"));
    out + "data: [DONE]\n\n"
}

fn chat_tool(fragments: &[&str]) -> String {
    let mut out = chat_chunk(
        json!({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1",
               "type":"function","function":{"name":"send","arguments":""}}],"refusal":null}),
        None,
    );
    for fragment in fragments {
        out += &chat_chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments": fragment}}]}),
            None,
        );
    }
    out += &chat_chunk(json!({}), Some("tool_calls"));
    out + "data: [DONE]\n\n"
}

fn response(status: &str, output: Value) -> Value {
    json!({"id":"resp_1","object":"response","created_at":1,"status":status,
           "model":"gpt-4.1-mini-2025-04-14","output":output,
           "usage": if status == "completed" {
               json!({"input_tokens":12,"output_tokens":7,"total_tokens":19})
           } else { Value::Null }})
}

fn responses_text(deltas: &[&str]) -> String {
    let text: String = deltas.concat();
    let part =
        |text: &str| json!({"type":"output_text","annotations":[],"logprobs":[],"text":text});
    let item = |status: &str, content: Value| json!({"id":"msg_1","type":"message","status":status,"content":content,"role":"assistant"});
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    let mut out = typed(
        json!({"type":"response.created","sequence_number":next(),"response":response("in_progress", json!([]))}),
    );
    out += &typed(
        json!({"type":"response.output_item.added","sequence_number":next(),
                          "output_index":0,"item":item("in_progress", json!([]))}),
    );
    out += &typed(
        json!({"type":"response.content_part.added","sequence_number":next(),
                          "item_id":"msg_1","output_index":0,"content_index":0,"part":part("")}),
    );
    for delta in deltas {
        out += &typed(
            json!({"type":"response.output_text.delta","sequence_number":next(),
                              "item_id":"msg_1","output_index":0,"content_index":0,
                              "delta":delta,"logprobs":[]}),
        );
    }
    out += &typed(
        json!({"type":"response.output_text.done","sequence_number":next(),
                          "item_id":"msg_1","output_index":0,"content_index":0,
                          "text":text,"logprobs":[]}),
    );
    out += &typed(
        json!({"type":"response.content_part.done","sequence_number":next(),
                          "item_id":"msg_1","output_index":0,"content_index":0,"part":part(&text)}),
    );
    let done = item("completed", json!([part(&text)]));
    out += &typed(
        json!({"type":"response.output_item.done","sequence_number":next(),
                          "output_index":0,"item":done}),
    );
    out + &typed(json!({"type":"response.completed","sequence_number":next(),
                         "response":response("completed", json!([done]))}))
}

fn responses_tool(fragments: &[&str]) -> String {
    let arguments: String = fragments.concat();
    let item = |status: &str, arguments: &str| {
        json!({"id":"fc_1","type":"function_call","status":status,"arguments":arguments,
               "call_id":"call_1","name":"send"})
    };
    let mut out = typed(
        json!({"type":"response.created","sequence_number":0,"response":response("in_progress", json!([]))}),
    );
    out += &typed(
        json!({"type":"response.output_item.added","sequence_number":1,
                          "output_index":0,"item":item("in_progress", "")}),
    );
    for (i, fragment) in fragments.iter().enumerate() {
        out += &typed(json!({"type":"response.function_call_arguments.delta",
                              "sequence_number":2 + i,"item_id":"fc_1","output_index":0,
                              "delta":fragment}));
    }
    let n = 2 + fragments.len();
    out += &typed(
        json!({"type":"response.function_call_arguments.done","sequence_number":n,
                          "item_id":"fc_1","output_index":0,"arguments":arguments}),
    );
    let done = item("completed", &arguments);
    out += &typed(
        json!({"type":"response.output_item.done","sequence_number":n + 1,
                          "output_index":0,"item":done}),
    );
    out + &typed(json!({"type":"response.completed","sequence_number":n + 2,
                         "response":response("completed", json!([done]))}))
}

fn anthropic_start() -> String {
    typed(
        json!({"type":"message_start","message":{"id":"msg_1","type":"message",
        "role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],
        "stop_reason":null,"stop_sequence":null,
        "usage":{"input_tokens":25,"cache_creation_input_tokens":0,
                 "cache_read_input_tokens":0,"output_tokens":1}}}),
    )
}

fn anthropic_end(stop_reason: &str) -> String {
    typed(
        json!({"type":"message_delta","delta":{"stop_reason":stop_reason,"stop_sequence":null},
                 "usage":{"output_tokens":15}}),
    ) + &typed(json!({"type":"message_stop"}))
}

/// An Anthropic `content_block_delta` with a text delta.
pub fn anthropic_text_delta(index: u64, text: &str) -> String {
    typed(json!({"type":"content_block_delta","index":index,
                 "delta":{"type":"text_delta","text":text}}))
}

fn anthropic_text(deltas: &[&str]) -> String {
    let mut out = anthropic_start();
    out += &typed(json!({"type":"content_block_start","index":0,
                         "content_block":{"type":"text","text":""}}));
    out += &typed(json!({"type":"ping"}));
    for delta in deltas {
        out += &anthropic_text_delta(0, delta);
    }
    out += &typed(json!({"type":"content_block_stop","index":0}));
    out + &anthropic_end("end_turn")
}

fn anthropic_tool(fragments: &[&str]) -> String {
    let mut out = anthropic_start();
    out += &typed(json!({"type":"content_block_start","index":0,
        "content_block":{"type":"tool_use","id":"toolu_1","name":"send","input":{}}}));
    for fragment in fragments {
        out += &typed(json!({"type":"content_block_delta","index":0,
                             "delta":{"type":"input_json_delta","partial_json":fragment}}));
    }
    out += &typed(json!({"type":"content_block_stop","index":0}));
    out + &anthropic_end("tool_use")
}
