//! Any request body, on every API: parsing answers (a view or a typed error) and never
//! panics; the JSON objects a view carries as text (`params`, `extra`, tool parameters)
//! are valid JSON. And the one reading: a body the strict reader accepts reads the same with
//! `serde_json`, and the proxy's serialisation of it (what goes upstream) reads back to the
//! same document exactly (floats are read as the nearest to their digits, forwarded in their
//! shortest exact form).
#![no_main]

use atdp_wire::{ApiKind, parse_json_body, parse_request, parse_response};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The same document as `serde_json` reads it, whose floats may be a few units in the last
/// place from the nearest (its default, inexact reading): equal, floats within 1e-12 of each
/// other relatively.
fn same_reading(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => (x - y).abs() <= (x.abs() * 1e-12).max(1e-300),
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
    assert!(same_reading(&loose, &body), "two readings of one body: {loose} and {body}");
    let forwarded = serde_json::to_vec(&body).expect("a document serialises");
    let again = parse_json_body(&forwarded).expect("the forwarded bytes read back");
    assert_eq!(again, body, "the forwarded bytes read back differently");
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
