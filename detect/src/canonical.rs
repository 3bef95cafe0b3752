//! The canonical spelling of a detected value: what its token and keyed hash are computed
//! from, so that the spellings of one value (`jane%40example.com`, `jane＠example.com`,
//! `jane [at] example [dot] com`, `jane@example.com`) are one subject, which one erasure
//! reaches and one reveal names.
//!
//! - Every value: its normalised view (`normal.rs`: digits, spaces, dashes, fullwidth and
//!   small forms folded, invisible characters removed, escapes decoded), with letters of
//!   other scripts kept as written: `jаne@example.com` with a Cyrillic `а` is found as an
//!   address, but it is another address than `jane@example.com`, and gets its own token.
//! - An e-mail address spelled out: `[at]`, `(@)`, ` at ` as `@`; `[dot]`, `[.]`, ` dot ` as
//!   `.`. Case is kept: `Jane@Example.com` stays another spelling, as the address may be.
//! - A card, phone, SSN or IBAN: the separators (spaces, dashes, dots, parentheses) removed,
//!   so that `4111 1111 1111 1111` and `4111-1111-1111-1111` are `4111111111111111`.
//!
//! A value that is its own canonical spelling (the common case) is not copied.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

use crate::normal::Normalized;

/// `[at]`, `(@)`, ` at ` and the like, for `@`.
static SPELLED_AT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)\s*[\[({<]\s*(?:at|@)\s*[\])}>]\s*|\s+at\s+").ok());

/// `[dot]`, `(.)`, ` dot ` and the like, for `.`.
static SPELLED_DOT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)\s*[\[({<]\s*(?:dot|\.)\s*[\])}>]\s*|\s+dot\s+").ok());

/// The canonical spelling of `value`, detected as `entity`.
pub fn canonical<'a>(entity: &str, value: &'a str) -> Cow<'a, str> {
    let view = Normalized::keeping_letters(value);
    let folded: Cow<'a, str> = if view.is_identity() {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(view.as_str().to_owned())
    };
    match entity {
        "EMAIL_ADDRESS" => {
            let (Some(at), Some(dot)) = (SPELLED_AT.as_ref(), SPELLED_DOT.as_ref()) else {
                return folded;
            };
            if !at.is_match(&folded) && !dot.is_match(&folded) {
                return folded;
            }
            let joined = at.replace_all(&folded, "@");
            Cow::Owned(dot.replace_all(&joined, ".").into_owned())
        }
        "CREDIT_CARD" | "PHONE_NUMBER" | "US_SSN" | "IBAN_CODE" => {
            let separator = |c: char| matches!(c, ' ' | '-' | '.' | '(' | ')' | '/');
            if folded.contains(separator) {
                Cow::Owned(folded.chars().filter(|c| !separator(*c)).collect())
            } else {
                folded
            }
        }
        _ => folded,
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn the_spellings_of_a_value_have_one_canonical_spelling() {
        for (entity, spellings) in [
            (
                "EMAIL_ADDRESS",
                &[
                    "jane.doe@example.com",
                    "jane.doe%40example%2Ecom",
                    "jane.doe&#64;example.com",
                    "jane.doe＠example．com",
                    "jane.doe [at] example [dot] com",
                    "jane dot doe at example dot com",
                    "jane.doe(@)example(.)com",
                    "ja\u{200B}ne.doe@example.com",
                ][..],
            ),
            (
                "CREDIT_CARD",
                &[
                    "4111111111111111",
                    "4111 1111 1111 1111",
                    "4111-1111-1111-1111",
                    "4111%201111%201111%201111",
                    "４１１１ １１１１ １１１１ １１１１",
                ][..],
            ),
            (
                "PHONE_NUMBER",
                &[
                    "+44 20 7946 0958",
                    "+44 (20) 7946-0958",
                    "+442079460958",
                    "%2B44%2020%207946%200958",
                ][..],
            ),
            (
                "US_SSN",
                &["536-22-1234", "536 22 1234", "536\u{2013}22\u{2013}1234"][..],
            ),
        ] {
            let first = canonical(entity, spellings[0]).into_owned();
            for spelling in spellings {
                assert_eq!(canonical(entity, spelling), first, "{entity} {spelling:?}");
            }
        }
        // Case is kept, and other entities keep their separators.
        assert_ne!(
            canonical("EMAIL_ADDRESS", "Jane@Example.com"),
            "jane@example.com"
        );
        assert_eq!(canonical("PERSON", "Jean-Luc Picard"), "Jean-Luc Picard");
        assert!(matches!(
            canonical("EMAIL_ADDRESS", "jane@example.com"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
