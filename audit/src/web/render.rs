//! How recorded text reaches a page. Everything the lake holds (message text, roles, tool
//! names, ids, models, reasons, revealed values) was written by someone the console does not
//! trust, so the templates show it only through these filters, and only as element text,
//! never in an attribute or a class name (recorded ids in URLs are the exception, and they
//! are percent-encoded by [`super::links`]):
//!
//! - [`filters::rec`] (long text: content previews, reasons, revealed values) and
//!   [`filters::field`] (short fields, cut at [`FIELD_CHARS`]) HTML-escape the text and wrap
//!   it in `<bdi>`, so right-to-left text cannot move the console's own words around it;
//!   bidirectional controls (embeddings, overrides, isolates, marks) and paragraph
//!   separators are shown as visible `[U+202E]`-style markers instead of acting, so nothing
//!   recorded can reorder text outside its own `<bdi>` (a paragraph separator would end the
//!   isolation early, and Chromium does honour one inside `<bdi>`).
//! - [`filters::visible`] does the same without `<bdi>`, for the console's own messages that
//!   quote input (an error naming a trajectory id).
//!
//! A message's role selects a class from a closed set ([`role_class`]).

use std::fmt::Write;

use crate::segments::prefix;

/// Characters of a short recorded field (an id, a role, a model, a tool name) shown on a
/// page; the rest is cut and marked `…`.
pub(crate) const FIELD_CHARS: usize = 200;

/// Bytes of a long recorded text shown on a page (content previews are cut before this).
pub(crate) const TEXT_BYTES: usize = 8 * 1024;

/// Whether `c` reorders or separates text for the bidirectional algorithm: the explicit
/// embeddings, overrides and isolates, the implicit marks, and the paragraph separators
/// other than the line feed (which browsers treat as a line break inside `<bdi>`; the HTML
/// parser turns a carriage return into one).
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{001C}'..='\u{001E}'
            | '\u{0085}'
            | '\u{2029}'
    )
}

/// Writes `text` HTML-escaped, bidirectional controls as visible markers.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&#60;"),
            '>' => out.push_str("&#62;"),
            '&' => out.push_str("&#38;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c if is_bidi_control(c) => {
                let _ = write!(out, "[U+{:04X}]", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

/// `text` isolated in `<bdi>`, escaped, cut at `max_chars` characters and `max_bytes`
/// bytes (marked `…` after the `<bdi>` when cut).
fn isolated(text: &str, max_chars: usize, max_bytes: usize) -> String {
    let mut shown = prefix(text, max_bytes);
    if let Some((at, _)) = shown.char_indices().nth(max_chars) {
        shown = shown.get(..at).unwrap_or_default();
    }
    let mut out = String::with_capacity(shown.len() + 16);
    out.push_str("<bdi>");
    escape_into(&mut out, shown);
    out.push_str("</bdi>");
    if shown.len() < text.len() {
        out.push('…');
    }
    out
}

/// The class of a message of `role`: one of a closed set, whatever the role says.
pub(crate) fn role_class(role: &str) -> &'static str {
    match role {
        "system" => "role-system",
        "developer" => "role-developer",
        "user" => "role-user",
        "assistant" => "role-assistant",
        "tool" | "function" => "role-tool",
        _ => "role-other",
    }
}

/// The templates' filters for recorded text (see the module header).
pub(crate) mod filters {
    use askama::filters::Safe;

    /// Long recorded text, isolated and escaped (at most [`super::TEXT_BYTES`] bytes).
    pub(crate) fn rec<T: AsRef<str>>(
        text: T,
        _: &dyn askama::Values,
    ) -> askama::Result<Safe<String>> {
        Ok(Safe(super::isolated(
            text.as_ref(),
            usize::MAX,
            super::TEXT_BYTES,
        )))
    }

    /// A short recorded field, isolated and escaped (at most [`super::FIELD_CHARS`]
    /// characters).
    pub(crate) fn field<T: AsRef<str>>(
        text: T,
        _: &dyn askama::Values,
    ) -> askama::Result<Safe<String>> {
        Ok(Safe(super::isolated(
            text.as_ref(),
            super::FIELD_CHARS,
            super::TEXT_BYTES,
        )))
    }

    /// The console's own text that quotes input: escaped, bidirectional controls visible.
    pub(crate) fn visible<T: AsRef<str>>(
        text: T,
        _: &dyn askama::Values,
    ) -> askama::Result<Safe<String>> {
        let mut out = String::new();
        super::escape_into(&mut out, super::prefix(text.as_ref(), super::TEXT_BYTES));
        Ok(Safe(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_text_is_isolated_escaped_and_its_controls_shown() {
        assert_eq!(
            isolated("a\u{202E}<b>\u{2066}\"'&\u{2029}z", 100, 100),
            "<bdi>a[U+202E]&#60;b&#62;[U+2066]&#34;&#39;&#38;[U+2029]z</bdi>"
        );
        assert_eq!(isolated("line\nline", 100, 100), "<bdi>line\nline</bdi>");
        assert_eq!(isolated("abcdef", 3, 100), "<bdi>abc</bdi>…");
        assert_eq!(isolated("ééé", 100, 3), "<bdi>é</bdi>…");
        for c in [
            '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}',
            '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}', '\u{001C}', '\u{0085}',
        ] {
            let shown = isolated(&format!("x{c}y"), 100, 100);
            assert!(!shown.contains(c), "{c:?}: {shown}");
        }
    }

    #[test]
    fn roles_map_to_a_closed_set_of_classes() {
        assert_eq!(role_class("assistant"), "role-assistant");
        assert_eq!(role_class("banner ok"), "role-other");
        assert_eq!(role_class("user\" onclick=\"x"), "role-other");
    }
}
