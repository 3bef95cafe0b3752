//! Parsing JSON carried inside a string into a tree that borrows from the text, keeps each
//! number's literal, bounds the nesting and notices keys given twice in one object.
//!
//! serde_json keeps the last of two members with the same key, while a model reading the text
//! may take the first: such a string is rewritten with one member per key, the last, as
//! serde_json, JavaScript's `JSON.parse` and Python's `json` read it.

use std::borrow::Cow;
use std::collections::HashMap;

use super::escape::{self, LoneSurrogate};

/// A JSON value parsed from a string.
#[derive(Debug, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    /// The number's literal text, as written.
    Number(&'a str),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    /// The members in their order, one per key.
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// A parsed text.
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub(crate) root: Node<'a>,
    /// Whether some object had a key twice (only the last member of it was kept).
    pub(crate) duplicates: bool,
}

/// Why a text was not parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    /// It is not JSON (as serde_json reads it).
    Syntax,
    /// Its arrays and objects nest deeper than allowed.
    TooDeep,
}

/// Objects up to this size are checked for repeated keys pair by pair, without allocating.
const PAIRWISE: usize = 16;

/// Parses `text`, whose arrays and objects may nest `depth` levels.
pub(crate) fn parse(text: &str, depth: usize) -> Result<Parsed<'_>, Fail> {
    let mut parser = Parser {
        text,
        at: 0,
        duplicates: false,
    };
    let root = parser.value(depth)?;
    parser.skip_space();
    if parser.at != text.len() {
        return Err(Fail::Syntax);
    }
    Ok(Parsed {
        root,
        duplicates: parser.duplicates,
    })
}

struct Parser<'a> {
    text: &'a str,
    /// Always at a character boundary: the parser stops only next to ASCII bytes.
    at: usize,
    duplicates: bool,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, Fail> {
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Node::String),
            Some(b't') => self.word("true", Node::Bool(true)),
            Some(b'f') => self.word("false", Node::Bool(false)),
            Some(b'n') => self.word("null", Node::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(Fail::Syntax),
        }
    }

    fn word(&mut self, word: &str, node: Node<'a>) -> Result<Node<'a>, Fail> {
        if !self.text[self.at..].starts_with(word) {
            return Err(Fail::Syntax);
        }
        self.at += word.len();
        Ok(node)
    }

    fn array(&mut self, depth: usize) -> Result<Node<'a>, Fail> {
        let depth = depth.checked_sub(1).ok_or(Fail::TooDeep)?;
        self.at += 1;
        let mut items = Vec::new();
        if self.eat(b']') {
            return Ok(Node::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            if self.eat(b',') {
                continue;
            }
            if self.eat(b']') {
                return Ok(Node::Array(items));
            }
            return Err(Fail::Syntax);
        }
    }

    fn object(&mut self, depth: usize) -> Result<Node<'a>, Fail> {
        let depth = depth.checked_sub(1).ok_or(Fail::TooDeep)?;
        self.at += 1;
        let mut members = Vec::new();
        if !self.eat(b'}') {
            loop {
                self.skip_space();
                if self.peek() != Some(b'"') {
                    return Err(Fail::Syntax);
                }
                let key = self.string()?;
                if !self.eat(b':') {
                    return Err(Fail::Syntax);
                }
                members.push((key, self.value(depth)?));
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b'}') {
                    break;
                }
                return Err(Fail::Syntax);
            }
        }
        self.duplicates |= keep_last(&mut members);
        Ok(Node::Object(members))
    }

    /// A string at `self.at` (its opening quote), borrowed when it has no escape.
    fn string(&mut self) -> Result<Cow<'a, str>, Fail> {
        let bytes = self.text.as_bytes();
        let start = self.at + 1;
        let special = |b: &u8| matches!(b, b'"' | b'\\' | 0x00..=0x1f);
        let mut at = start
            + bytes[start..]
                .iter()
                .position(special)
                .ok_or(Fail::Syntax)?;
        if bytes[at] == b'"' {
            self.at = at + 1;
            return Ok(Cow::Borrowed(&self.text[start..at]));
        }
        let mut out = String::from(&self.text[start..at]);
        loop {
            match bytes.get(at) {
                Some(b'"') => {
                    self.at = at + 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let (c, used) = escape::escape(&self.text[at + 1..], LoneSurrogate::Refuse)
                        .ok_or(Fail::Syntax)?;
                    out.push(c);
                    at += 1 + used;
                }
                Some(0x20..=0xff) => {
                    let run = bytes[at..].iter().position(special).ok_or(Fail::Syntax)?;
                    out.push_str(&self.text[at..at + run]);
                    at += run;
                }
                // A control character, or the end of the text.
                _ => return Err(Fail::Syntax),
            }
        }
    }

    /// A number, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, kept as its literal.
    fn number(&mut self) -> Result<Node<'a>, Fail> {
        let bytes = self.text.as_bytes();
        let digits = |from: usize| {
            bytes[from..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        let start = self.at;
        let mut at = start + usize::from(bytes[start] == b'-');
        match bytes.get(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => at += digits(at),
            _ => return Err(Fail::Syntax),
        }
        if bytes.get(at) == Some(&b'.') {
            let fraction = digits(at + 1);
            if fraction == 0 {
                return Err(Fail::Syntax);
            }
            at += 1 + fraction;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            let exponent = digits(at);
            if exponent == 0 {
                return Err(Fail::Syntax);
            }
            at += exponent;
        }
        self.at = at;
        Ok(Node::Number(&self.text[start..at]))
    }
}

/// Drops every member whose key a later member repeats; whether there was one.
fn keep_last(members: &mut Vec<(Cow<'_, str>, Node<'_>)>) -> bool {
    let keep: Vec<bool> = if members.len() <= PAIRWISE {
        let repeated = |i: usize| members[i + 1..].iter().any(|(key, _)| *key == members[i].0);
        if !(0..members.len()).any(repeated) {
            return false;
        }
        (0..members.len()).map(|i| !repeated(i)).collect()
    } else {
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(members.len());
        for (i, (key, _)) in members.iter().enumerate() {
            last.insert(key, i);
        }
        if last.len() == members.len() {
            return false;
        }
        (0..members.len())
            .map(|i| last.get(members[i].0.as_ref()) == Some(&i))
            .collect()
    };
    let mut index = 0;
    members.retain(|_| {
        index += 1;
        keep.get(index - 1).copied().unwrap_or(true)
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Parsed<'_>, Fail> {
        parse(text, 128)
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let texts = [
            r#"{"a": [1, -0.5e+3, 0, true, false, null, "x\"\u00e9\ud83d\ude00"], "b": {}}"#,
            " [ ] ",
            r#"{"":""}"#,
            "-0",
            "1E5",
            r#""\/\b\f\n\r\t""#,
        ];
        for text in texts {
            let ours = parsed(text).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(text).unwrap();
            let mut written = String::new();
            super::super::embedded::write(&ours.root, &mut written);
            let again: serde_json::Value = serde_json::from_str(&written).unwrap();
            assert_eq!(again, theirs, "{text}");
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        let texts = [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "1e",
            "-",
            "+1",
            "[1 2]",
            "{1:2}",
            "{\"a\" 1}",
            "tru",
            "nulls",
            "\"a",
            "\"\u{1}\"",
            r#""\x""#,
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\u12""#,
            "[1] x",
            "{\"a\":1}}",
            "'a'",
        ];
        for text in texts {
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err(),
                "{text:?}"
            );
            assert_eq!(parsed(text).err(), Some(Fail::Syntax), "{text:?}");
        }
    }

    #[test]
    fn keeps_numbers_as_written_and_borrows_plain_strings() {
        let ours = parsed(r#"[4111111111111111.0, 1e400, "plain", "esc\n"]"#).unwrap();
        let Node::Array(items) = ours.root else {
            panic!("not an array");
        };
        assert_eq!(items[0], Node::Number("4111111111111111.0"));
        assert_eq!(items[1], Node::Number("1e400"));
        assert!(matches!(&items[2], Node::String(Cow::Borrowed("plain"))));
        assert!(matches!(&items[3], Node::String(Cow::Owned(s)) if s == "esc\n"));
    }

    #[test]
    fn repeated_keys_keep_the_last_member() {
        let ours = parsed(r#"{"e": 1, "x": 2, "\u0065": 3}"#).unwrap();
        assert!(ours.duplicates);
        assert_eq!(
            ours.root,
            Node::Object(vec![
                ("x".into(), Node::Number("2")),
                ("e".into(), Node::Number("3"))
            ])
        );
        // Past the pairwise size too.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{}\": {i}", i % 30)).collect();
        let text = format!("{{{}}}", many.join(","));
        let ours = parsed(&text).unwrap();
        assert!(ours.duplicates);
        let Node::Object(members) = ours.root else {
            panic!("not an object");
        };
        assert_eq!(members.len(), 30);
        assert_eq!(members[0], ("k10".into(), Node::Number("10")));
        assert_eq!(members[29], ("k9".into(), Node::Number("39")));
        assert!(
            !parsed(r#"{"a": {"a": 1}, "b": [{"a": 2}]}"#)
                .unwrap()
                .duplicates
        );
    }

    #[test]
    fn nesting_beyond_the_bound_is_too_deep() {
        assert!(parse("[[[1]]]", 3).is_ok());
        assert_eq!(parse("[[[1]]]", 2).err(), Some(Fail::TooDeep));
        assert_eq!(parse(r#"{"a":{"b":{}}}"#, 2).err(), Some(Fail::TooDeep));
        let deep = "[".repeat(100_000);
        assert_eq!(parse(&deep, 160).err(), Some(Fail::TooDeep));
    }
}
