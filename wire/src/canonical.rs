//! One reading of a request body.
//!
//! The proxy decides and masks on the document this module parses, and what it forwards is
//! its own serialisation of that document, never the client's bytes: a reader upstream
//! cannot see anything the proxy did not. What JSON leaves open is settled here:
//!
//! - an object that repeats a key (`serde_json` keeps the last copy, other parsers the first)
//!   is refused, at any depth;
//! - invalid UTF-8 and `\u` escapes that are lone surrogates are refused (`serde_json`);
//! - numbers are read as `i64`, `u64` or `f64`: an integer beyond `u64` becomes an `f64` (the
//!   nearest, or one unit in the last place from it, as serde_json reads) and is forwarded as
//!   such (normalised), a number beyond `f64` is refused;
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
    parsed.map_err(|error| {
        if error.is_data() && error.to_string().starts_with(DUPLICATE) {
            WireError::DuplicateKey {
                line: error.line(),
                column: error.column(),
            }
        } else {
            WireError::NotJson(policies::json_error_kind(&error))
        }
    })
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
    fn the_order_of_keys_is_kept() {
        let value = parse_json_body(br#"{"z":1,"a":2,"m":3}"#).unwrap();
        assert_eq!(value.to_string(), r#"{"z":1,"a":2,"m":3}"#);
    }
}
