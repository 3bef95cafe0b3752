//! One reading of a request body.
//!
//! The proxy decides and masks on the document this module parses, and what it forwards is
//! its own serialisation of that document, never the client's bytes: a reader upstream
//! cannot see anything the proxy did not. What JSON leaves open is settled here:
//!
//! - an object that repeats a key (`serde_json` keeps the last copy, other parsers the first)
//!   is refused, at any depth;
//! - invalid UTF-8 and `\u` escapes that are lone surrogates are refused (`serde_json`);
//! - numbers are read as `i64`, `u64` or `f64`; every `f64` (a fraction, an exponent, an
//!   integer beyond `u64`) is the one nearest the client's digits (`serde_json`'s own reading
//!   can be a few units in the last place off; its exact mode would change the build of every
//!   crate that reads JSON, so the digits are read again here) and is forwarded in its
//!   shortest exact form, which every correct reader reads back to the same `f64`; a number
//!   beyond `f64` is refused;
//! - nesting deeper than 128 levels, trailing bytes and a byte-order mark are refused.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::WireError;

/// The custom error a repeated key raises inside the parser, recognised by its text.
const DUPLICATE: &str = "an object repeats a key";

/// Parses a request body, refusing every form that two JSON readers could read differently
/// (see the module documentation). Errors give the position, never the body's text.
pub fn parse_json_body(body: &[u8]) -> Result<Value, WireError> {
    let mut reader = serde_json::Deserializer::from_slice(body);
    let parsed = Strict.deserialize(&mut reader).and_then(|value| {
        reader.end()?;
        Ok(value)
    });
    let mut value = parsed.map_err(|error| {
        if error.is_data() && error.to_string().starts_with(DUPLICATE) {
            WireError::DuplicateKey {
                line: error.line(),
                column: error.column(),
            }
        } else {
            WireError::NotJson(atdp_policies::json_error_kind(&error))
        }
    })?;
    if has_float(&value) {
        let mut numbers = NumberTokens { body, at: 0 };
        read_floats_exactly(&mut value, &mut numbers);
    }
    Ok(value)
}

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(object) => object.values().any(has_float),
        _ => false,
    }
}

/// Replaces every `f64` in `value` by the nearest `f64` to its digits. The document was parsed
/// from the same bytes, with keys in their order and none repeated, so its numbers in document
/// order are the number tokens of the body in order.
fn read_floats_exactly(value: &mut Value, numbers: &mut NumberTokens<'_>) {
    match value {
        Value::Number(n) => {
            let Some(token) = numbers.next() else {
                return;
            };
            if n.is_f64() {
                // The digits are ASCII and valid JSON, which `f64::from_str` reads correctly
                // rounded; the parser already refused a number beyond f64.
                let exact = std::str::from_utf8(token)
                    .ok()
                    .and_then(|digits| digits.parse::<f64>().ok())
                    .and_then(Number::from_f64);
                if let Some(exact) = exact {
                    *n = exact;
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| read_floats_exactly(item, numbers)),
        Value::Object(object) => object
            .values_mut()
            .for_each(|item| read_floats_exactly(item, numbers)),
        _ => {}
    }
}

/// The number tokens of a valid JSON text, in order: the runs that start with `-` or a digit
/// outside strings (`true`, `false` and `null` hold neither).
struct NumberTokens<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Iterator for NumberTokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let body = self.body;
        while self.at < body.len() {
            match body[self.at] {
                b'"' => {
                    // Skip the string: up to the next quote not escaped.
                    self.at += 1;
                    while self.at < body.len() && body[self.at] != b'"' {
                        self.at += if body[self.at] == b'\\' { 2 } else { 1 };
                    }
                    self.at += 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = self.at;
                    while self.at < body.len()
                        && matches!(
                            body[self.at],
                            b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                        )
                    {
                        self.at += 1;
                    }
                    return Some(&body[start..self.at]);
                }
                _ => self.at += 1,
            }
        }
        None
    }
}

/// Builds a [`Value`] like `serde_json` does, but refuses an object that repeats a key.
#[derive(Debug, Clone, Copy)]
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number is out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(DUPLICATE));
            }
            let value = map.next_value_seed(Strict)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_with_its_position() {
        for body in [
            r#"{"model":"a","model":"b"}"#,
            r#"{"messages":[{"role":"user","content":"x","content":"y"}]}"#,
            r#"{"metadata":{"a":{"b":[{"k":1,"k":2}]}}}"#,
        ] {
            match parse_json_body(body.as_bytes()) {
                Err(WireError::DuplicateKey { line, column }) => {
                    assert_eq!(line, 1, "{body}");
                    assert!(column > 0, "{body}");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        // The same key in sibling objects is not a repetition.
        let value = parse_json_body(br#"{"a":{"k":1},"b":{"k":2}}"#).unwrap();
        assert_eq!(value["b"]["k"], 2);
    }

    #[test]
    fn a_repeated_key_message_does_not_quote_the_key() {
        let error = parse_json_body(br#"{"jane@example.com":1,"jane@example.com":2}"#)
            .unwrap_err()
            .to_string();
        assert!(!error.contains("jane"), "{error}");
    }

    #[test]
    fn other_ambiguities_are_refused_or_normalised() {
        // Lone surrogates, invalid UTF-8, numbers beyond f64, trailing bytes, a byte-order
        // mark, nesting past the limit: refused.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for body in [
            br#"{"a":"\ud800"}"#.as_slice(),
            br#"{"a":"\udc00x"}"#,
            b"{\"a\":\"\xff\"}",
            br#"{"a":1e400}"#,
            br#"{"a":1} {"b":2}"#,
            b"\xef\xbb\xbf{\"a\":1}",
            deep.as_bytes(),
        ] {
            assert!(
                matches!(parse_json_body(body), Err(WireError::NotJson(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // A surrogate pair is one character.
        let value = parse_json_body(br#"{"a":"\ud83d\ude00"}"#).unwrap();
        assert_eq!(value["a"], "\u{1f600}");
        // An integer beyond u64 is read as the nearest f64, which is what is forwarded.
        let value = parse_json_body(br#"{"a":123456789012345678901234567890}"#).unwrap();
        assert_eq!(value.to_string(), r#"{"a":1.2345678901234568e+29}"#);
    }

    #[test]
    fn a_float_is_the_nearest_to_its_digits_and_reads_back_as_itself() {
        // Digits on which serde_json's own reading is units in the last place off, among
        // strings that hold digits, quotes and escapes, in arrays and objects.
        let tiny = format!("0.{}10005000004", "0".repeat(201));
        let digits = [
            tiny.as_str(),
            "1.0005000004e-202",
            "123456789012345678901234567890",
            "-2.2250738585072011e-308",
            "4.9406564584124654e-324",
            "0.1",
            "1.7976931348623157e308",
        ];
        for number in digits {
            let body = format!(
                r#"{{"s":"1.5 \" -2e3","n":[7,{number}],"o":{{"k\"9":-0.0,"x":{number}}},"i":-12}}"#
            );
            let value = parse_json_body(body.as_bytes()).unwrap();
            let nearest: f64 = number.parse().unwrap();
            assert_eq!(value["n"][1].as_f64(), Some(nearest), "{number}");
            assert_eq!(value["o"]["x"].as_f64(), Some(nearest), "{number}");
            assert_eq!(value["s"], "1.5 \" -2e3");
            assert_eq!(value["i"], -12);
            assert_eq!(value["n"][0], 7);
            let forwarded = serde_json::to_vec(&value).unwrap();
            assert_eq!(parse_json_body(&forwarded).unwrap(), value, "{number}");
        }
    }

    #[test]
    fn the_order_of_keys_is_kept() {
        let value = parse_json_body(br#"{"z":1,"a":2,"m":3}"#).unwrap();
        assert_eq!(value.to_string(), r#"{"z":1,"a":2,"m":3}"#);
    }
}
