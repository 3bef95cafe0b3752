//! Any text: the scanner's spans are ordered, disjoint and on character boundaries, and
//! tokenizing them then unmasking gives the text back, each value in the spelling its
//! placeholder was first seen with (every spelling of one value has one token).
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use atdp_detect::Scanner;
use atdp_policies::{Action, KeyRing, MaskPolicy, mask, unmask};
use libfuzzer_sys::fuzz_target;

static SCANNER: LazyLock<Scanner> =
    LazyLock::new(|| Scanner::new(None).unwrap_or_else(|e| panic!("scanner: {e}")));
static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("fuzz");
    keys
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let spans = SCANNER.scan(&text);
    let mut at = 0;
    for span in &spans {
        assert!(span.start >= at && span.start < span.end && span.end <= text.len());
        assert!(text.is_char_boundary(span.start) && text.is_char_boundary(span.end));
        at = span.end;
    }
    let masked = mask(
        &text,
        &spans,
        &MaskPolicy::all(Action::Tokenize),
        "fuzz",
        &KEYS,
    )
    .unwrap_or_else(|e| panic!("mask failed: {e}"));
    // A text that already holds one of the placeholders its own values mask to (the fuzzer
    // learns them from the comparisons in `unmask`) cannot round-trip: both occurrences are
    // restored. Only values of this same text can be restored that way, so nothing leaks;
    // docs/policies.md describes the case.
    if masked.vault.iter().any(|v| text.contains(&v.token)) {
        return;
    }
    let vault: HashMap<_, _> = masked
        .vault
        .iter()
        .map(|v| (v.token.clone(), v.clone()))
        .collect();
    let back =
        unmask(&masked.text, "fuzz", &vault, &KEYS).unwrap_or_else(|e| panic!("unmask: {e}"));
    // The text with every value in the first spelling of its token.
    let mut first: HashMap<String, &str> = HashMap::new();
    let mut expected = String::with_capacity(text.len());
    let mut at = 0;
    for span in &spans {
        let value = &text[span.start..span.end];
        let token = KEYS
            .token("fuzz", span.entity, value)
            .unwrap_or_else(|e| panic!("token: {e}"));
        expected.push_str(&text[at..span.start]);
        expected.push_str(first.entry(token).or_insert(value));
        at = span.end;
    }
    expected.push_str(&text[at..]);
    assert_eq!(back, expected);
});
