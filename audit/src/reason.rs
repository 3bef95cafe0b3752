//! The written reason that a reveal, an erasure and a key rotation need. A reason is
//! evidence: it must say something a reader of the audit trail can see. So it must hold at
//! least [`MIN_REASON_VISIBLE`] visible characters: characters that are not white space,
//! not control characters, not format characters (Unicode category Cf: zero-width spaces
//! and joiners, the byte-order mark, bidirectional controls, tag characters) and not other
//! characters that render as nothing (variation selectors, fillers, the Braille blank,
//! combining marks on their own). A reason of zero-width spaces looks empty in the trail,
//! and is refused like an empty one.

use crate::error::{Error, Result};

/// Longest reason accepted, in characters.
pub const MAX_REASON: usize = 2_000;

/// Fewest visible characters a reason must hold.
pub const MIN_REASON_VISIBLE: usize = 5;

/// Characters that render as nothing, or only change how their neighbours render: format
/// characters (Cf, Unicode 16), default-ignorable code points, invisible fillers and the
/// common blocks of combining marks. Ranges are inclusive and sorted.
const INVISIBLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0300}', '\u{036F}'),
    ('\u{0483}', '\u{0489}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{1AB0}', '\u{1AFF}'),
    ('\u{1DC0}', '\u{1DFF}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{20D0}', '\u{20FF}'),
    ('\u{2800}', '\u{2800}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FE20}', '\u{FE2F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` shows as something on a page: not white space, not a control or format
/// character, not an invisible filler or a lone combining mark.
pub fn is_visible(c: char) -> bool {
    !c.is_whitespace()
        && !c.is_control()
        && INVISIBLE
            .binary_search_by(|(low, high)| {
                if *high < c {
                    std::cmp::Ordering::Less
                } else if *low > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_err()
}

/// `reason` without leading and trailing white space, when it is a reason for `action`
/// ("a reveal", "an erasure", …): at least [`MIN_REASON_VISIBLE`] visible characters and at
/// most [`MAX_REASON`] characters in all. Otherwise [`Error::Invalid`] says what is missing.
pub fn checked<'a>(reason: &'a str, action: &str) -> Result<&'a str> {
    let reason = reason.trim();
    let visible = reason.chars().filter(|c| is_visible(*c)).count();
    if visible < MIN_REASON_VISIBLE {
        return Err(Error::Invalid(format!(
            "{action} needs a written reason of at least {MIN_REASON_VISIBLE} visible characters (letters, digits or punctuation; spaces and invisible characters do not count)"
        )));
    }
    if reason.chars().count() > MAX_REASON {
        return Err(Error::Invalid(format!(
            "the reason is longer than {MAX_REASON} characters"
        )));
    }
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_disjoint() {
        for pair in INVISIBLE.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
    }

    #[test]
    fn invisible_and_blank_reasons_are_refused() {
        for reason in [
            "",
            "    ",
            "\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}",
            "\u{FEFF}\u{2060}\u{200C}\u{200D}\u{2061}\u{2062}\u{2063}",
            "\u{202E}\u{2066}\u{2067}\u{2068}\u{2069}\u{200E}\u{200F}\u{061C}",
            "\u{00A0}\u{2003}\u{3000}\u{205F}\u{180E}\u{2800}\u{3164}\u{115F}",
            "\u{E0061}\u{E0062}\u{E0063}\u{E0064}\u{E0065}\u{E007F}",
            "\u{0301}\u{0302}\u{0303}\u{0304}\u{0305}\u{FE0F}",
            "\t\r\n\u{0007}\u{001B}\u{0085}\u{2028}\u{2029}",
            // Four visible characters, padded with invisible ones.
            "a\u{200B}b\u{200B}c\u{200B}d\u{200B}\u{200B}",
        ] {
            let refused = checked(reason, "a reveal");
            match refused {
                Err(Error::Invalid(message)) => {
                    assert!(
                        message.contains("at least 5 visible characters"),
                        "{message}"
                    )
                }
                other => panic!("{reason:?} was accepted: {other:?}"),
            }
        }
    }

    #[test]
    fn visible_reasons_are_kept_trimmed() {
        assert_eq!(
            checked("  Subject access request #4411 \n", "a reveal").unwrap(),
            "Subject access request #4411"
        );
        for reason in ["SAR-1", "#4411", "Прошу", "依頼番号五", "طلب وصول", "a.b.c"]
        {
            assert_eq!(checked(reason, "a reveal").unwrap(), reason);
        }
        let long = "x".repeat(MAX_REASON + 1);
        assert!(matches!(checked(&long, "a reveal"), Err(Error::Invalid(_))));
    }
}
