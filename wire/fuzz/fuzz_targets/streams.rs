//! Any byte stream, cut anywhere, as an SSE reply of every API: the parser, the assembler,
//! the placeholder restorer and the log-prob stripper never panic, the parser's events do
//! not depend on where the stream is cut, and a restorer or stripper with nothing to do
//! passes the bytes through unchanged.
#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use atdp_wire::{Added, ApiKind, SseParser, SseRestorer, SseStripper, StreamAssembler};
use libfuzzer_sys::fuzz_target;
use policies::{Action, KeyRing, MaskPolicy, Scanner, VaultItem, mask};

static KEYS: LazyLock<Arc<KeyRing>> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("fuzz");
    Arc::new(keys)
});

/// Placeholders of a few values, so that restoring has something to find.
static VAULT: LazyLock<Arc<HashMap<String, VaultItem>>> = LazyLock::new(|| {
    let text = "jane@example.com +44 20 7946 0958";
    let scanner = Scanner::new(None).unwrap_or_else(|e| panic!("{e}"));
    let masked = mask(text, &scanner.scan(text), &MaskPolicy::all(Action::Tokenize), "fuzz", &KEYS)
        .unwrap_or_else(|e| panic!("{e}"));
    Arc::new(masked.vault.into_iter().map(|v| (v.token.clone(), v)).collect())
});

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
        let mut restorer = SseRestorer::new(api, "fuzz".into(), VAULT.clone(), KEYS.clone());
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
});
