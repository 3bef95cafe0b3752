//! Any text: the scanner's spans are ordered, disjoint and on character boundaries, and
//! tokenizing them then unmasking gives the text back.
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use atdp_detect::Scanner;
use atdp_policies::{Action, KeyRing, MaskPolicy, mask, unmask};

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
    let masked = mask(&text, &spans, &MaskPolicy::all(Action::Tokenize), "fuzz", &KEYS)
        .unwrap_or_else(|e| panic!("mask failed: {e}"));
    // A text that already holds one of the placeholders its own values mask to (the fuzzer
    // learns them from the comparisons in `unmask`) cannot round-trip: both occurrences are
    // restored. Only values of this same text can be restored that way, so nothing leaks;
    // docs/policies.md describes the case.
    if masked.vault.iter().any(|v| text.contains(&v.token)) {
        return;
    }
    let vault: HashMap<_, _> = masked.vault.iter().map(|v| (v.token.clone(), v.clone())).collect();
    let back = unmask(&masked.text, "fuzz", &vault, &KEYS).unwrap_or_else(|e| panic!("unmask: {e}"));
    assert_eq!(back, text);
});
