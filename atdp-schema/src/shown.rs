//! Recorded text as a person is shown it on a terminal or in a spreadsheet. Agents choose
//! their ids and all their text, so what a command line tool prints of the lake must not
//! drive the terminal (escape sequences can clear the screen, fake a status line or write to
//! the clipboard), reorder what is read (bidirectional controls), or run as a formula when an
//! export is opened in a spreadsheet.

use std::borrow::Cow;

/// Whether `c` is written escaped: control characters (C0 but tab and line feed, DEL, C1) and
/// the bidirectional marks, embeddings, overrides and isolates.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every control and bidirectional character written as `\u{…}`; line feeds and
/// tabs stay (a caller that prints one record per line replaces them itself).
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` as a spreadsheet cell that is never read as a formula: one that starts with `=`,
/// `+`, `-`, `@`, a tab or a carriage return gets a leading `'`.
pub fn for_spreadsheet(text: &str) -> Cow<'_, str> {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{text}"))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formulas_are_shown_inert() {
        assert_eq!(
            for_terminal("ok\u{1b}]52;c;ZWNobw==\u{7}\u{1b}[2J\u{202e}x\u{9b}"),
            "ok\\u{1b}]52;c;ZWNobw==\\u{7}\\u{1b}[2J\\u{202e}x\\u{9b}"
        );
        assert_eq!(for_terminal("line\tone\nlíne two"), "line\tone\nlíne two");
        assert_eq!(
            for_spreadsheet("=HYPERLINK(\"http://x/\",\"open\")"),
            "'=HYPERLINK(\"http://x/\",\"open\")"
        );
        for formula in ["+1", "-1+2", "@SUM(A1)", "\tx", "\rx"] {
            assert!(for_spreadsheet(formula).starts_with('\''), "{formula}");
        }
        assert_eq!(for_spreadsheet("trajectory-1"), "trajectory-1");
    }
}
