//! Any bytes, as a JSON document when they parse and as a string inside a request otherwise:
//! masking never panics, and when it succeeds every placeholder of its vault is in the output.
//! (Masking the output again may find its own placeholders in context, e.g. after `api_key =`,
//! so "finds nothing the second time" is not a property; that nothing is left in the clear is
//! the JSON masker's property test, `policies/tests/it/json_masking.rs`.)
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use atdp_policies::{Action, JsonMasker, KeyRing, MaskPolicy, Scanner};
use serde_json::{Value, json};

static SCANNER: LazyLock<Scanner> =
    LazyLock::new(|| Scanner::new(None).unwrap_or_else(|e| panic!("scanner: {e}")));
static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut keys = KeyRing::default();
    keys.generate("fuzz");
    keys
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut document = serde_json::from_str::<Value>(&text)
        .unwrap_or_else(|_| json!({"messages": [{"role": "tool", "content": text}]}));
    let policy = MaskPolicy::all(Action::Tokenize);
    let masker = JsonMasker {
        scanner: &SCANNER,
        policy: &policy,
        tenant: "fuzz",
        keys: &KEYS,
    };
    // Too deep to check is an error, which the proxy turns into a refusal.
    let Ok(masked) = masker.mask(&mut document) else {
        return;
    };
    let output = document.to_string();
    for item in &masked.vault {
        assert!(output.contains(&item.token), "{} missing", item.token);
    }
});
