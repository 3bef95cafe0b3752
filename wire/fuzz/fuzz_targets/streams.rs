//! Any byte stream, cut anywhere, as an SSE reply of every API: the parser, the assembler,
//! the placeholder restorer and the log-prob stripper never panic, the parser's events do
//! not depend on where the stream is cut, and a restorer with nothing to do passes the bytes
//! through unchanged. And the same input as the text of an OpenAI chat stream with known
//! placeholders spliced in, cut into deltas anywhere: the restored stream does not depend on
//! where its bytes are cut, and its text is exactly `unmask` of the whole text.
#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use atdp_wire::{Added, ApiKind, SseParser, SseRestorer, SseStripper, StreamAssembler};
use libfuzzer_sys::fuzz_target;
use atdp_detect::Scanner;
use atdp_policies::{Action, KeyRing, MaskPolicy, VaultItem, mask};

static KEYS: LazyLock<Arc<KeyRing>> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("fuzz");
    Arc::new(keys)
});

/// Placeholders of a few values (their tokens, and the vault), so that restoring has
/// something to find. One of the values holds a quote and a backslash.
static VAULT: LazyLock<(Vec<String>, Arc<HashMap<String, VaultItem>>)> = LazyLock::new(|| {
    let text = "jane@example.com +44 20 7946 0958 536-22-1234";
    let scanner = Scanner::new(None).unwrap_or_else(|e| panic!("{e}"));
    let masked = mask(text, &scanner.scan(text), &MaskPolicy::all(Action::Tokenize), "fuzz", &KEYS)
        .unwrap_or_else(|e| panic!("{e}"));
    let tokens = masked.vault.iter().map(|v| v.token.clone()).collect();
    (tokens, Arc::new(masked.vault.into_iter().map(|v| (v.token.clone(), v)).collect()))
});

/// Restores a stream given in chunks.
fn restore(chunks: &[&[u8]]) -> Vec<u8> {
    let mut restorer = SseRestorer::new(ApiKind::OpenAiChat, "fuzz".into(), VAULT.1.clone(), KEYS.clone());
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend_from_slice(&restorer.push(chunk).unwrap_or_else(|e| panic!("{e}")));
    }
    out.extend_from_slice(&restorer.finish().unwrap_or_else(|e| panic!("{e}")));
    out
}

fn chat_stream(data: &[u8]) -> (String, String) {
    let tokens = &VAULT.0;
    // Bytes below 4 splice a placeholder; the high bit of a byte ends a delta before it.
    let mut text = String::new();
    let mut cuts = Vec::new();
    for &byte in data {
        if byte & 0x80 != 0 {
            cuts.push(text.len());
        }
        match byte & 0x7f {
            b @ 0..4 => text.push_str(&tokens[usize::from(b) % tokens.len()]),
            b => text.push(char::from(b)),
        }
    }
    let mut stream = String::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": &text[from..cut]}, "finish_reason": null}]});
        stream.push_str(&format!("data: {chunk}\n\n"));
        from = cut;
    }
    stream.push_str("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    (text, stream)
}

fn events(chunks: &[&[u8]]) -> Vec<(Option<String>, String)> {
    let mut parser = SseParser::new();
    let mut out: Vec<_> = chunks
        .iter()
        .flat_map(|c| parser.push(c))
        .map(|e| (e.event, e.data))
        .collect();
    out.extend(parser.finish().map(|e| (e.event, e.data)));
    out
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the cut points: every (n+1)th byte.
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(step % 16) + 1;
    let chunks: Vec<&[u8]> = stream.chunks(step).collect();
    assert_eq!(events(&chunks), events(&[stream]), "events depend on the cuts");

    for api in ApiKind::ALL {
        let mut assembler = StreamAssembler::new(api);
        let mut parser = SseParser::new();
        let mut restorer = SseRestorer::new(api, "fuzz".into(), VAULT.1.clone(), KEYS.clone());
        let mut idle = SseRestorer::new(api, "fuzz".into(), Arc::new(HashMap::new()), KEYS.clone());
        let mut stripper = SseStripper::new(Added { logprobs: true, token_ids: true });
        let mut passed = Vec::new();
        for chunk in &chunks {
            for event in parser.push(chunk) {
                assembler.push_event(&event);
            }
            let _ = restorer.push(chunk);
            let _ = stripper.push(chunk);
            passed.extend_from_slice(&idle.push(chunk).unwrap_or_else(|e| panic!("{e}")));
        }
        let _ = restorer.finish();
        let _ = stripper.finish();
        passed.extend_from_slice(&idle.finish().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(passed, stream, "a restorer without placeholders must pass bytes through");
        let _ = assembler.finish();
    }

    let (text, stream) = chat_stream(stream);
    let cut: Vec<&[u8]> = stream.as_bytes().chunks(step).collect();
    let whole = restore(&[stream.as_bytes()]);
    assert_eq!(restore(&cut), whole, "restoring depends on where the bytes are cut");
    let mut content = String::new();
    for (_, data) in events(&[&whole]) {
        if let Ok(chunk) = serde_json::from_str::<serde_json::Value>(&data) {
            content.push_str(chunk["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
        }
    }
    let expected = atdp_policies::unmask(&text, "fuzz", &VAULT.1, &KEYS).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(content, expected, "restored text differs from unmasking it whole");
});
