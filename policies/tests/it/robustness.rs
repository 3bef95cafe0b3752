//! Any input, however malformed, gets an answer and never a panic: random Unicode and
//! random bytes through the scanner, the masker and the unmasker. Coverage-guided fuzzing of
//! the same properties is in `policies/fuzz/` (`scripts/fuzz`).

use std::collections::HashMap;

use atdp_detect::*;
use atdp_policies::*;
use proptest::prelude::*;

fn ring() -> KeyRing {
    let mut ring = KeyRing::default();
    ring.generate("acme");
    ring
}

/// Text built from pieces that sit near detector boundaries.
fn tricky() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "@",
        ".",
        "-",
        " ",
        ":",
        "::",
        "+",
        "(",
        ")",
        "<",
        ">",
        "_",
        "0",
        "4111",
        "1111",
        "536",
        "22",
        "DE89",
        "sk-",
        "eyJ",
        "=",
        "\"",
        "'",
        "é",
        "\u{1F600}",
        "\n",
        "a",
        "Z",
        "ff",
        "<EMAIL_ADDRESS_",
        "0123456789ab>",
        "password=",
        "-----BEGIN PRIVATE KEY-----",
    ]);
    prop::collection::vec(pieces, 0..60).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn scanner_spans_are_valid_on_any_text(text in prop_oneof![any::<String>(), tricky()]) {
        let scanner = Scanner::new(None).unwrap();
        let spans = scanner.scan(&text);
        let mut last_end = 0;
        for span in &spans {
            prop_assert!(span.start >= last_end && span.start < span.end && span.end <= text.len());
            prop_assert!(text.is_char_boundary(span.start) && text.is_char_boundary(span.end));
            last_end = span.end;
        }
    }

    #[test]
    fn mask_and_stream_unmask_never_panic(text in prop_oneof![any::<String>(), tricky()], chunk in 1usize..9) {
        let keys = ring();
        let scanner = Scanner::new(None).unwrap();
        let masked = mask(&text, &scanner.scan(&text), &MaskPolicy::all(Action::Tokenize), "acme", &keys).unwrap();
        let vault: HashMap<String, VaultItem> = masked.vault.iter().map(|v| (v.token.clone(), v.clone())).collect();
        prop_assert_eq!(&unmask(&masked.text, "acme", &vault, &keys).unwrap(), &text);
        let chars: Vec<char> = masked.text.chars().collect();
        let mut stream = StreamUnmasker::new();
        let mut out = String::new();
        for piece in chars.chunks(chunk) {
            let piece: String = piece.iter().collect();
            out.push_str(&stream.push(&piece, "acme", &vault, &keys).unwrap());
        }
        out.push_str(&stream.finish("acme", &vault, &keys).unwrap());
        prop_assert_eq!(out, text);
    }

    #[test]
    fn json_masking_accepts_any_document(text in prop_oneof![any::<String>(), tricky()]) {
        let keys = ring();
        let scanner = Scanner::new(None).unwrap();
        let policy = MaskPolicy::all(Action::Redact);
        let masker = JsonMasker { scanner: &scanner, policy: &policy, tenant: "acme", keys: &keys, known: None };
        let mut document = serde_json::json!({"a": [text.clone(), {"b": text}], "c": "{\"d\": \"x@example.com\"}"});
        let masked = masker.mask(&mut document).unwrap();
        prop_assert!(masked.spans.iter().any(|(path, _)| path == "c#.d"));
    }
}
