//! Any text with placeholders, cut into chunks anywhere: streamed unmasking gives the same
//! result as unmasking the whole text at once.
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use atdp_detect::Scanner;
use atdp_policies::{Action, KeyRing, MaskPolicy, StreamUnmasker, VaultItem, mask, unmask};

static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("fuzz");
    keys
});

/// Known placeholders, so that the fuzzer's texts can contain real ones.
static VAULT: LazyLock<(Vec<String>, HashMap<String, VaultItem>)> = LazyLock::new(|| {
    let scanner = Scanner::new(None).unwrap_or_else(|e| panic!("scanner: {e}"));
    let text = "jane@example.com 4111 1111 1111 1111 +44 20 7946 0958 536-22-1234";
    let masked = mask(
        text,
        &scanner.scan(text),
        &MaskPolicy::all(Action::Tokenize),
        "fuzz",
        &KEYS,
    )
    .unwrap_or_else(|e| panic!("mask: {e}"));
    let tokens = masked.vault.iter().map(|v| v.token.clone()).collect();
    let vault = masked.vault.into_iter().map(|v| (v.token.clone(), v)).collect();
    (tokens, vault)
});

fuzz_target!(|data: &[u8]| {
    let (tokens, vault) = &*VAULT;
    // Bytes below 8 splice in a known placeholder; the high bit of every byte marks a cut.
    let mut text = String::new();
    let mut cuts = Vec::new();
    for &byte in data {
        if byte & 0x80 != 0 {
            cuts.push(text.len());
        }
        match byte & 0x7f {
            b @ 0..8 => text.push_str(&tokens[usize::from(b) % tokens.len()]),
            b => text.push(char::from(b)),
        }
    }
    let whole = unmask(&text, "fuzz", vault, &KEYS).unwrap_or_else(|e| panic!("unmask: {e}"));
    let mut stream = StreamUnmasker::new();
    let mut out = String::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        let chunk = &text[from..cut];
        out.push_str(&stream.push(chunk, "fuzz", vault, &KEYS).unwrap_or_else(|e| panic!("{e}")));
        from = cut;
    }
    out.push_str(&stream.finish("fuzz", vault, &KEYS).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(out, whole);
});
