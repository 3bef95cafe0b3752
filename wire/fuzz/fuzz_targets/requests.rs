//! Any request body, on every API: parsing answers (a view or a typed error) and never
//! panics; the JSON objects a view carries as text (`params`, `extra`, tool parameters)
//! are valid JSON. And the one reading: a body the strict reader accepts reads the same with
//! `serde_json`, and the proxy's serialisation of it (what goes upstream) reads back to the
//! same document (floats within one unit in the last place: serde_json's reading).
#![no_main]

use atdp_wire::{ApiKind, parse_json_body, parse_request, parse_response};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Equal documents, floats within one unit in the last place.
fn same_reading(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || x.to_bits().abs_diff(y.to_bits()) <= 1,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_reading(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|((kx, vx), (ky, vy))| kx == ky && same_reading(vx, vy))
        }
        _ => a == b,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = parse_json_body(data) else {
        return;
    };
    let loose: serde_json::Value = serde_json::from_slice(data).expect("strict accepted what serde_json refused");
    assert_eq!(loose, body, "two readings of one body");
    let forwarded = serde_json::to_vec(&body).expect("a document serialises");
    let again = parse_json_body(&forwarded).expect("the forwarded bytes read back");
    // serde_json (without its `float_roundtrip` feature) can read a float it wrote one unit in
    // the last place off: the bytes forwarded are exact, the reading back is what may differ.
    assert!(same_reading(&again, &body), "{again} read back as {body}");
    for api in ApiKind::ALL {
        if let Ok(view) = parse_request(api, &body) {
            let texts = view
                .params
                .iter()
                .chain(view.extra.iter())
                .chain(view.tools.iter().filter_map(|t| t.parameters.as_ref()));
            for text in texts {
                assert!(serde_json::from_str::<serde_json::Value>(text).is_ok(), "not JSON: {text}");
            }
        }
        // The same bytes as a reply: never a panic either.
        let _ = parse_response(api, &body);
    }
});
