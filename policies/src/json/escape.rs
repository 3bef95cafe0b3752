//! JSON string escapes: decoding them (strictly inside JSON, leniently in plain text, where a
//! reader may still decode them) and writing a string as JSON.

#[cfg(test)]
use std::borrow::Cow;
use std::fmt::Write;

/// How a `\u` escape naming half a surrogate pair, without its other half, is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoneSurrogate {
    /// It is a syntax error (JSON, as serde_json reads it).
    Refuse,
    /// It becomes U+FFFD (plain text).
    Replace,
}

/// The four hex digits at the start of `text` as a number.
fn hex4(text: &str) -> Option<u32> {
    let digits = text.get(..4)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// The escape that follows a backslash at the start of `after`: the character it stands for
/// and how many bytes of `after` it takes; `None` when `after` starts no valid escape.
pub(crate) fn escape(after: &str, lone: LoneSurrogate) -> Option<(char, usize)> {
    let simple = match after.as_bytes().first()? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => return unicode(&after[1..], lone),
        _ => return None,
    };
    Some((simple, 1))
}

/// A `uXXXX` escape (after its `u`), with the low half that must follow a high surrogate.
fn unicode(hex: &str, lone: LoneSurrogate) -> Option<(char, usize)> {
    let first = hex4(hex)?;
    let replaced = (lone == LoneSurrogate::Replace).then_some(('\u{FFFD}', 5));
    match first {
        0xD800..=0xDBFF => {
            let low = hex
                .get(4..)
                .and_then(|rest| rest.strip_prefix("\\u"))
                .and_then(hex4)
                .filter(|low| (0xDC00..=0xDFFF).contains(low));
            match low {
                Some(low) => char::from_u32(0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00))
                    .map(|c| (c, 11)),
                None => replaced,
            }
        }
        0xDC00..=0xDFFF => replaced,
        _ => char::from_u32(first).map(|c| (c, 5)),
    }
}

/// `text` with its JSON escapes decoded once (a backslash that starts no escape is kept, a
/// lone surrogate becomes U+FFFD); borrowed when there was nothing to decode. The plain
/// decoder that the tests check [`decode_mapped`] and the masked output against.
#[cfg(test)]
pub(crate) fn decode(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find('\\') else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut at = first;
    let mut changed = false;
    loop {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match escape(after, LoneSurrogate::Replace) {
            Some((c, used)) => {
                out.push(c);
                changed = true;
                rest = &after[used..];
            }
            None => {
                out.push('\\');
                rest = after;
            }
        }
        match rest.find('\\') {
            Some(next) => at = next,
            None => break,
        }
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` with its JSON escapes decoded again until none is left (at most one more time than
/// a masker reads them).
pub(crate) fn decode_all(text: &str) -> String {
    let mut out = text.to_owned();
    for _ in 0..=super::MAX_DECODE_ROUNDS {
        match decode_mapped(&out) {
            Some((decoded, _)) => out = decoded,
            None => break,
        }
    }
    out
}

/// `text` with its JSON escapes decoded once, as [`decode`] decodes them, and where each byte
/// of the result comes from: `from[i]` is the offset in `text` of the character or escape
/// that byte `i` belongs to (of the byte itself in an unescaped character), and the last entry
/// is `text.len()`. `None` when there was nothing to decode.
pub(crate) fn decode_mapped(text: &str) -> Option<(String, Vec<usize>)> {
    let first = text.find('\\')?;
    let mut out = String::with_capacity(text.len());
    let mut from = Vec::with_capacity(text.len() + 1);
    let mut changed = false;
    let copy = |out: &mut String, from: &mut Vec<usize>, start: usize, end: usize| {
        out.push_str(text.get(start..end).unwrap_or_default());
        from.extend(start..end);
    };
    let mut at = 0;
    let mut next = Some(first);
    while let Some(slash) = next {
        copy(&mut out, &mut from, at, slash);
        let after = text.get(slash + 1..).unwrap_or_default();
        match escape(after, LoneSurrogate::Replace) {
            Some((c, used)) => {
                out.push(c);
                from.extend(std::iter::repeat_n(slash, c.len_utf8()));
                changed = true;
                at = slash + 1 + used;
            }
            None => {
                copy(&mut out, &mut from, slash, slash + 1);
                at = slash + 1;
            }
        }
        next = text
            .get(at..)
            .and_then(|rest| rest.find('\\'))
            .map(|i| at + i);
    }
    copy(&mut out, &mut from, at, text.len());
    from.push(text.len());
    changed.then_some((out, from))
}

/// Appends `text` as a JSON string, quotes included, escaped as serde_json escapes it.
pub(crate) fn write_string(text: &str, out: &mut String) {
    out.push('"');
    let mut from = 0;
    for (at, byte) in text.bytes().enumerate() {
        let short = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[from..at]);
        if short.is_empty() {
            // Writing to a `String` cannot fail.
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(short);
        }
        from = at + 1;
    }
    out.push_str(&text[from..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_escape_and_keeps_what_is_not_one() {
        assert_eq!(
            decode(r#"a\"b\\c\/d\be\ff\ng\rh\ti\u0040j"#),
            "a\"b\\c/d\u{8}e\u{c}f\ng\rh\ti@j"
        );
        assert_eq!(
            decode(r"\ud83d\ude00 \ud83d x \ude00"),
            "\u{1F600} \u{FFFD} x \u{FFFD}"
        );
        assert!(matches!(decode(r"C:\x \u12 \"), Cow::Borrowed(_)));
        assert!(matches!(decode("no escape"), Cow::Borrowed(_)));
        assert_eq!(decode(r"\u005cu0040"), r"\u0040");
        assert_eq!(escape(r"ud800", LoneSurrogate::Refuse), None);
        assert_eq!(escape(r"u+123", LoneSurrogate::Refuse), None);
        assert_eq!(
            escape("uD83D\\uDE00", LoneSurrogate::Refuse),
            Some(('\u{1F600}', 11))
        );
    }

    #[test]
    fn decoding_with_a_map_decodes_as_decode_does_and_says_where_each_byte_was() {
        for text in [
            r#"a\"b\\c\/d\be\ff\ng\rh\ti\u0040j"#,
            r"\ud83d\ude00 \ud83d x \ude00 é",
            r"\u005cu0040 \x \",
        ] {
            let (decoded, from) = decode_mapped(text).unwrap();
            assert_eq!(decoded, decode(text), "{text}");
            assert_eq!(from.len(), decoded.len() + 1);
            assert_eq!(from.last(), Some(&text.len()));
        }
        let (decoded, from) = decode_mapped(r"ja\u006ee@x é").unwrap();
        assert_eq!(decoded, "jane@x é");
        assert_eq!(from, [0, 1, 2, 8, 9, 10, 11, 12, 13, 14]);
        assert_eq!(decode_mapped(r"C:\x no escape"), None);
        assert_eq!(decode_mapped("plain"), None);
    }

    #[test]
    fn writes_strings_as_serde_json_does() {
        for text in [
            "plain",
            "q\"b\\s/\n\r\t\u{8}\u{c}\u{1}\u{1f}",
            "é \u{1F600} \u{7f}",
            "",
        ] {
            let mut out = String::new();
            write_string(text, &mut out);
            assert_eq!(out, serde_json::to_string(text).unwrap());
        }
    }
}
