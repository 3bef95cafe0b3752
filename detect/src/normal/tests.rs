use proptest::prelude::*;
use regex::Regex;

use super::*;

#[test]
fn ascii_text_is_its_own_view() {
    let text = "card 4111 1111 1111 1111, mail jane@example.com";
    let view = Normalized::new(text);
    assert!(matches!(view.view, Cow::Borrowed(_)));
    assert!(view.is_identity());
    assert_eq!(view.as_str(), text);
    assert_eq!(view.original(5, 24), (5, 24));
}

#[test]
fn ascii_text_without_an_escape_is_its_own_view() {
    for text in ["50% off, R&D & more", "100%", "&", "a %g &x"] {
        let view = Normalized::new(text);
        assert!(matches!(view.view, Cow::Borrowed(_)), "{text:?}");
    }
    // Where an escape is, it is one character of the view, mapped back whole.
    let text = "mail: jane%40example.com, ok";
    let view = Normalized::new(text);
    assert_eq!(view.as_str(), "mail: jane@example.com, ok");
    assert_eq!(view.original(6, 22), (6, 24));
    assert_eq!(view.original(10, 11), (10, 13));
}

#[test]
fn text_with_nothing_to_fold_is_its_own_view() {
    let text = "Grüße aus Köln, Zażółć gęślą jaźń, 東京都渋谷区、€ 12,50";
    let view = Normalized::new(text);
    assert!(matches!(view.view, Cow::Borrowed(_)));
    assert_eq!(view.original(7, 12), (7, 12));
}

#[test]
fn spellings_fold_onto_ascii() {
    for (text, folded) in [
        (
            "4111\u{A0}1111\u{202F}1111\u{2007}1111",
            "4111 1111 1111 1111",
        ),
        ("４１１１－１１１１", "4111-1111"),
        (
            "536\u{2013}22\u{2014}1234\u{2212}0\u{FE63}1\u{2010}2",
            "536-22-1234-0-1-2",
        ),
        ("jane＠example．com", "jane@example.com"),
        ("jane﹫example﹒com", "jane@example.com"),
        ("jane@例子。广告｡cn", "jane@例子.广告.cn"),
        (
            "ja\u{AD}ne\u{200B}\u{200D}@ex\u{2060}am\u{FEFF}ple\u{200E}.com",
            "jane@example.com",
        ),
        ("+٩٧١ ٥٠ ۱۲۳ ४५६७ ০৯", "+971 50 123 4567 09"),
        ("𝟘𝟙𝟚 𝟿", "012 9"),
        ("ＡＢＣ ｄｅｆ　（１）", "ABC def (1)"),
        ("👍\u{FE0F} é\u{301}", "👍 é"),
        (
            "4\u{FE0F}\u{20E3}1\u{FE0F}\u{20E3} ⁴¹₁₁ ①②❸➍ 4\u{332}1\u{332}",
            "41 4111 1234 41",
        ),
        ("jane@example\u{2024}com", "jane@example.com"),
        (
            "email=jane%40example%2ecom&x=1",
            "email=jane@example.com&x=1",
        ),
        ("%2B1%20(555)%20010-0199", "+1 (555) 010-0199"),
        (
            "jane&#64;example&period;com &#x40; &commat;",
            "jane@example.com @ @",
        ),
        ("ja&shy;ne&#8203;&#65312;x&nbsp;&#8211;", "jane@x -"),
        (
            "%2540 %4 %zz %0A %7f %25zz &#10; &bogus; &#x; & ; &#64 &amp;",
            "@ %4 %zz %0A %7f %zz &#10; &bogus; &#x; & ; &#64 &",
        ),
        (
            "jane&amp;#64;x%EF%BC%A0y &#0000000000000000064; 4111&ensp;1&thinsp;2&NoBreak;3",
            "jane@x@y @ 4111 1 23",
        ),
    ] {
        assert_eq!(Normalized::new(text).as_str(), folded, "{text:?}");
    }
}

#[test]
fn spans_map_back_over_what_was_removed_inside_them() {
    let text = "mail: \u{200B}ja\u{AD}ne＠example.com\u{200D}.";
    let view = Normalized::new(text);
    assert_eq!(view.as_str(), "mail: jane@example.com.");
    let start = view.as_str().find("jane").unwrap();
    let end = start + "jane@example.com".len();
    let (from, to) = view.original(start, end);
    // The soft hyphen inside is covered; the zero-width space before and the joiner after
    // are not.
    assert_eq!(&text[from..to], "ja\u{AD}ne＠example.com");
    assert!(view.removed_at(start));
    assert!(view.removed_at(end));
    assert!(!view.removed_at(start + 1));
    // The fullwidth `＠` alone.
    assert_eq!(view.original(start + 4, start + 5), (from + 6, from + 9));
}

/// The view's tables say what the `regex` crate's Unicode data says, for every character.
#[test]
fn look_alikes_are_sorted_for_their_search() {
    assert!(LOOK_ALIKES.windows(2).all(|pair| pair[0].0 < pair[1].0));
    assert!(
        FOLDS
            .windows(2)
            .all(|pair| pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0)
    );
    assert!(LOOK_ALIKES.iter().all(|(code, latin)| {
        latin.is_ascii_alphabetic() && char::from_u32(*code).is_some_and(char::is_alphabetic)
    }));
}

/// The one ASCII letter Unicode reads `c` as: its compatibility decomposition (NFKC: `ℎ`,
/// `ᵃ`, `ſ`), or else its confusables skeleton (UTS #39: Cyrillic `а`, Cherokee `Ꭺ`).
fn latin_reading(c: char) -> Option<u8> {
    use unicode_normalization::UnicodeNormalization;
    fn one(mut chars: impl Iterator<Item = char>) -> Option<u8> {
        let first = chars.next()?;
        (chars.next().is_none() && first.is_ascii_alphabetic()).then_some(first as u8)
    }
    let text = c.to_string();
    one(text.nfkc()).or_else(|| one(unicode_security::confusable_detection::skeleton(&text)))
}

/// Whether two ASCII letters are one letter for a reader: the same letter in either case, or
/// one of `I`, `l` and `i`, which the confusables use for one another.
fn same_letter(a: u8, b: u8) -> bool {
    let vertical = |x: u8| matches!(x, b'I' | b'l' | b'i');
    a.eq_ignore_ascii_case(&b) || (vertical(a) && vertical(b))
}

/// Every letter that Unicode reads as one Latin letter is folded onto it; every look-alike of
/// the table is one of them.
#[test]
fn every_letter_read_as_a_latin_one_is_folded() {
    let mut missed = Vec::new();
    // Below U+0131 are the Latin-1 letters: accented ones read as themselves, and the
    // ordinal indicators `ª` and `º` are no letters of a value.
    for c in (0x131..=0x10FFFF).filter_map(char::from_u32) {
        if !c.is_alphabetic() {
            continue;
        }
        let Some(latin) = latin_reading(c) else {
            continue;
        };
        match fold_letters(c, true) {
            Some(Folded::Ascii(folded)) if same_letter(folded, latin) => {}
            other => missed.push(format!(
                "U+{:04X} {c} reads {} folds {other:?}",
                u32::from(c),
                char::from(latin)
            )),
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
    let unread: Vec<String> = LOOK_ALIKES
        .iter()
        .filter_map(|&(code, latin)| {
            let c = char::from_u32(code)?;
            // Greek and Cyrillic small ka and Greek chi are drawn as `k` and `x` in most
            // fonts, though the confusables map them to no Latin letter.
            let drawn = matches!(c, 'κ' | 'к' | 'χ');
            let read = drawn || latin_reading(c).is_some_and(|read| same_letter(read, latin));
            (!read).then(|| format!("U+{code:04X} {c} is no look-alike of {}", char::from(latin)))
        })
        .collect();
    assert!(unread.is_empty(), "{}", unread.join("\n"));
}

#[test]
fn folds_agree_with_the_regex_unicode_tables() {
    let digit = Regex::new(r"^\d$").unwrap();
    let space = Regex::new(r"^\p{Zs}$").unwrap();
    let dash = Regex::new(r"^[\p{Pd}\u{2212}]$").unwrap();
    let removed =
        Regex::new(r"^[\p{Cf}\p{Default_Ignorable_Code_Point}\u{300}-\u{36F}\u{20DD}-\u{20E4}]$")
            .unwrap();
    // Digits that are no decimal digits: superscripts, subscripts, circled.
    let other_digit = Regex::new(r"^\p{No}$").unwrap();
    // Letters drawn in a style: symbols (circled, squared) or letters (mathematical), and
    // the code points left unassigned between the mathematical styles.
    let styled_letter = Regex::new(r"^[\p{So}\p{Lu}\p{Ll}\p{Cn}]$").unwrap();
    let mut buffer = [0u8; 4];
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        let one: &str = c.encode_utf8(&mut buffer);
        let folded = fold(c);
        if c.is_ascii() {
            assert_eq!(folded, None);
        } else if removed.is_match(one) {
            assert_eq!(folded, Some(Folded::Removed), "{c:?}");
        } else if digit.is_match(one) {
            assert!(
                matches!(folded, Some(Folded::Ascii(b'0'..=b'9'))),
                "{c:?}: {folded:?}"
            );
        } else if space.is_match(one) {
            assert_eq!(folded, Some(Folded::Ascii(b' ')), "{c:?}");
        } else if dash.is_match(one) {
            assert_eq!(folded, Some(Folded::Ascii(b'-')), "{c:?}");
        } else if ('\u{FF01}'..='\u{FF5E}').contains(&c) {
            assert_eq!(
                folded,
                Some(Folded::Ascii((u32::from(c) - 0xFEE0) as u8)),
                "{c:?}"
            );
        } else if let Some(Folded::Ascii(b'0'..=b'9')) = folded {
            assert!(other_digit.is_match(one), "{c:?}");
        } else if let Some(Folded::Ascii(byte)) = folded
            && byte.is_ascii_alphabetic()
        {
            // Circled, squared and mathematical letters.
            assert!(styled_letter.is_match(one), "{c:?}");
            assert!(
                ('\u{24B6}'..='\u{24E9}').contains(&c)
                    || ('\u{1F130}'..='\u{1F189}').contains(&c)
                    || ('\u{1D400}'..='\u{1D6A3}').contains(&c),
                "{c:?}"
            );
        } else if let Some(Folded::Ascii(byte)) = folded {
            // The small forms, the ideographic full stops, the one dot leader: ASCII
            // punctuation.
            assert!(byte.is_ascii_punctuation(), "{c:?}: {byte}");
        } else {
            assert_eq!(folded, None, "{c:?}");
        }
    }
    // The two-byte characters `next_fold` skips without decoding.
    for c in ('\u{C0}'..='\u{2FF}').chain('\u{380}'..='\u{57F}') {
        assert_eq!(fold(c), None, "{c:?}");
    }
    // Digit values: the zeros, nines and a middle digit of a few scripts.
    for (c, value) in [
        ('٠', b'0'),
        ('٩', b'9'),
        ('۴', b'4'),
        ('९', b'9'),
        ('๓', b'3'),
        ('０', b'0'),
        ('𝟵', b'9'),
        ('𝟎', b'0'),
        ('\u{116E3}', b'9'),
        ('²', b'2'),
        ('¹', b'1'),
        ('⁰', b'0'),
        ('⁹', b'9'),
        ('₀', b'0'),
        ('₉', b'9'),
        ('①', b'1'),
        ('⑨', b'9'),
        ('⓪', b'0'),
        ('⓿', b'0'),
        ('❶', b'1'),
        ('➒', b'9'),
    ] {
        assert_eq!(fold(c), Some(Folded::Ascii(value)), "{c:?}");
    }
}

/// Text made of pieces the view folds, removes or keeps.
fn spellings() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "4",
        "1",
        "٤",
        "۱",
        "४",
        "４",
        "𝟗",
        " ",
        "\u{A0}",
        "\u{202F}",
        "\u{3000}",
        "-",
        "\u{2013}",
        "\u{2212}",
        "－",
        "@",
        "＠",
        "﹫",
        ".",
        "。",
        "\u{200B}",
        "\u{200D}",
        "\u{AD}",
        "\u{FEFF}",
        "\u{FE0F}",
        "\u{E0041}",
        "a",
        "é",
        "e\u{301}",
        "東",
        "👍",
        "Ａ",
        "%40",
        "%2e",
        "%",
        "%4",
        "&#64;",
        "&#x40;",
        "&commat;",
        "&shy;",
        "&#8203;",
        "&",
        "&#",
        ";",
        "&amp;",
        "%25",
        "%EF%BC%A0",
        "%C3%A9",
        "6",
        "0",
        "\u{430}",
        "\u{391}",
        "\u{3BF}",
        "Мос",
        "x",
        "\u{1D41A}",
        "\u{24D0}",
    ]);
    prop::collection::vec(pieces, 0..40).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every span of the view maps to a span of the original, on character boundaries,
    /// whose own view is that span of the view: nothing of the value is left out, and
    /// nothing is added but characters the view removes inside it.
    #[test]
    fn mapped_spans_are_the_original_of_the_view(text in prop_oneof![any::<String>(), spellings()]) {
        let normalized = Normalized::new(&text);
        let view = normalized.as_str();
        prop_assert!(view.len() <= text.len());
        let bounds: Vec<usize> = view.char_indices().map(|(at, _)| at).chain([view.len()]).collect();
        let mut last = (0, 0);
        for (i, &start) in bounds.iter().enumerate() {
            for &end in &bounds[i..] {
                let (from, to) = normalized.original(start, end);
                prop_assert!(from <= to && to <= text.len(), "{start}..{end} -> {from}..{to}");
                prop_assert!(text.is_char_boundary(from) && text.is_char_boundary(to));
                let again = Normalized::new(&text[from..to]);
                prop_assert_eq!(again.as_str(), &view[start..end]);
                if start < end {
                    // Nothing removed at either edge.
                    let first = text[from..to].chars().next();
                    let last_char = text[from..to].chars().next_back();
                    prop_assert!(first.is_some_and(|c| fold(c) != Some(Folded::Removed)));
                    prop_assert!(last_char.is_some_and(|c| fold(c) != Some(Folded::Removed)));
                }
            }
            let here = normalized.original(start, start);
            prop_assert!(here >= last, "mapping goes backwards at {start}");
            last = here;
        }
    }
}
