//! Any bytes, as a JSON document when they parse and as a string inside a request otherwise:
//! masking never panics, and when it succeeds every placeholder of its vault is in the output.
//! (Masking the output again may find its own placeholders in context, e.g. after `api_key =`,
//! so "finds nothing the second time" is not a property of the scanner; that nothing is left
//! in the clear is the JSON masker's property test, `policies/tests/it/json_masking.rs`.)
//!
//! With known values: the first line of the input, when there are more, lists values split by
//! `|` (kept to letters, digits and ` .@+-`, so that they never hold JSON syntax), and the
//! values the first masking found are added to them. Masking with them never panics, and
//! masking with them alone (a scanner that finds nothing) leaves none of them in the output:
//! masking that output again finds nothing.
#![no_main]

use std::sync::LazyLock;

use atdp_detect::Scanner;

use atdp_policies::{Action, JsonMasker, KeyRing, KnownValues, MaskPolicy};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

static SCANNER: LazyLock<Scanner> =
    LazyLock::new(|| Scanner::new(None).unwrap_or_else(|e| panic!("scanner: {e}")));
/// Finds nothing: only the known values are masked.
static BLIND: LazyLock<Scanner> =
    LazyLock::new(|| Scanner::new(Some(&[])).unwrap_or_else(|e| panic!("scanner: {e}")));
static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("fuzz");
    keys
});

/// Every placeholder of the vault is in the output.
fn check_vault(document: &Value, masked: &atdp_policies::JsonMasked) {
    let output = document.to_string();
    for item in &masked.vault {
        assert!(output.contains(&item.token), "{} missing", item.token);
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (head, body) = match text.split_once('\n') {
        Some((head, body)) => (head, body),
        None => ("", text.as_ref()),
    };
    let original = serde_json::from_str::<Value>(body)
        .unwrap_or_else(|_| json!({"messages": [{"role": "tool", "content": body}]}));
    let policy = MaskPolicy::all(Action::Tokenize);
    let masker = JsonMasker {
        scanner: &SCANNER,
        policy: &policy,
        tenant: "fuzz",
        keys: &KEYS,
        known: None,
    };
    let mut document = original.clone();
    // Too deep to check is an error, which the proxy turns into a refusal.
    let Ok(masked) = masker.mask(&mut document) else {
        return;
    };
    check_vault(&document, &masked);

    let listed: Vec<String> = head
        .split('|')
        .map(|v| {
            v.chars()
                .filter(|c| c.is_ascii_alphanumeric() || " .@+-".contains(*c))
                .collect()
        })
        .collect();
    let pairs = listed
        .iter()
        .map(|v| (v.as_str(), "KNOWN"))
        .chain(masked.values.iter());
    let Ok(known) = KnownValues::new(pairs) else {
        return;
    };
    let knowing = JsonMasker {
        known: Some(&known),
        ..masker
    };
    let mut document = original.clone();
    if let Ok(masked) = knowing.mask(&mut document) {
        check_vault(&document, &masked);
    }

    let only_known = JsonMasker {
        scanner: &BLIND,
        ..knowing
    };
    let mut document = original;
    let Ok(masked) = only_known.mask(&mut document) else {
        return;
    };
    check_vault(&document, &masked);
    let again = only_known.mask(&mut document);
    let left = again.map(|m| m.spans.len()).unwrap_or(0);
    assert_eq!(left, 0, "a known value left unmasked in {document}");
});
