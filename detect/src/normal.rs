//! The text the shaped detectors read: ordinary spellings folded onto the ASCII the patterns
//! and validators name, with a map back to the original.
//!
//! A value can be written with characters other than the ones its pattern names and still
//! read the same to a person: card digits grouped by no-break spaces, an SSN with en dashes,
//! fullwidth digits and `＠`, digits of another script, a zero-width space inside an e-mail
//! address. The scanner looks for the shaped entity types in a *view* of the text where
//!
//! - every Unicode decimal digit (general category Nd, any script) is its ASCII digit;
//! - the fullwidth forms of ASCII (U+FF01–U+FF5E) are that ASCII;
//! - every space separator (Zs: no-break, narrow no-break, figure, thin, ideographic …) is
//!   `' '`;
//! - every dash (Pd: hyphen, non-breaking hyphen, en and em dash, small and fullwidth
//!   hyphen-minus …) and the minus sign U+2212 is `'-'`;
//! - the small forms of ASCII punctuation (U+FE50–U+FE6B: `﹫`, `﹒`, `﹢` …) are that
//!   ASCII, and the ideographic full stops `。` and `｡` are `'.'` (as in domain names);
//! - the superscript, subscript, circled, parenthesised and full-stop digits (`²`, `₄`, `①`,
//!   `⓿`, `❶`, `⑴`, `⒈`) are their ASCII digit, and the one dot leader `․`, the hyphenation
//!   point `‧` and the middle dots `·`, `・` and `･` (digit groups written `4111·1111…`) are
//!   `'.'`;
//! - the circled, squared and mathematical letters (`ⓙ`, `🅐`, `𝐣𝐚𝐧𝐞`) are their ASCII
//!   letter;
//! - a letter that Unicode reads as one Latin letter, by its compatibility decomposition
//!   (the letterlike `ℎ`, the modifier letter `ᵃ`, the Kelvin sign) or its confusables
//!   skeleton (Cyrillic `а`, `е`, `о`, `р`, `с`, `С`, `Н`; Greek `ο`, `ν`, `Α`; Cherokee `Ꭺ`;
//!   the small capital `ᴀ`; the dotless `ı`), is that Latin letter: `sk-prоj-…` with a
//!   Cyrillic `о` is the secret, `СН93 0076 …` typed on a Cyrillic layout
//!   the Swiss IBAN. [`Normalized::keeping_letters`] leaves these letters as written, for
//!   custom entities (a pattern such as `Договор №\d+` names Cyrillic letters) and for a
//!   value's canonical spelling;
//! - the katakana long sound mark `ー` and its halfwidth form (what a Japanese keyboard types
//!   for `-` in kana mode: `03ー1234ー5678`) are `'-'` for the built-in detectors;
//! - format characters (Cf: zero-width space, joiners, word joiner, byte order mark, soft
//!   hyphen, bidirectional marks …) and the other default-ignorable code points (variation
//!   selectors, the combining grapheme joiner, Hangul fillers) are removed, and so are the
//!   combining diacritical marks (U+0300–U+036F: `4̲1̲1̲1̲`, `jose\u{301}@…`) and the
//!   combining enclosing marks (U+20DD–U+20E4: a keycap `4️⃣`).
//!
//! - a percent escape of printable ASCII (`%40`, `%2e`) is that character, as in a URL's
//!   query or a form body (`email=jane%40example.com`);
//! - an HTML character reference (`&#64;`, `&#x40;`, `&commat;`, `&nbsp;`, `&shy;`) is the
//!   character it names when that is printable ASCII, and is folded or removed as that
//!   character would be otherwise (`&#65312;` is `＠`, so `@`; `&#8203;` is removed).
//!
//! An escape of an escape (`%2540`, `&amp;#64;`) is decoded twice; deeper nesting is not. Every other character is kept as
//! it is. Each original character, or escape, becomes at most one character of the view, so
//! the view is never longer than the original. The tables are
//! those of the `regex` crate's Unicode data (a test checks them against it), so that what
//! `\d`, `\p{Zs}` or `\p{Pd}` would match is exactly what is folded.
//!
//! **Map.** [`Normalized::original`] turns a span of the view into the span of the original
//! that holds the same characters: it starts at the original of its first character and ends
//! after the original of its last, so characters removed *inside* the span lie inside the
//! mapped span, and those removed just before or after it lie outside. Mapped offsets are
//! character boundaries of the original whenever the view's offsets are character
//! boundaries of the view.
//!
//! **Cost.** ASCII text (the common case) is its own view: no copy, no map. Other text is
//! read once; a text with nothing to fold (prose with accents, CJK without fullwidth digits)
//! is also its own view. Only a text with something to fold is copied, with one map entry per
//! folded or removed character.

use std::borrow::Cow;

/// A text's view for the shaped detectors, and the map back to the text.
#[derive(Debug, Clone)]
pub struct Normalized<'a> {
    view: Cow<'a, str>,
    /// One entry per folded or removed character, in text order.
    edits: Vec<Edit>,
    /// Whether an escape (`%40`, `&#64;`) was decoded.
    escapes: bool,
    /// Whether a letter was folded ([`Normalized::folded_letters`]).
    letters: bool,
    /// The view offsets of the letters folded from look-alikes and styled letters, in order.
    look_alikes: Vec<usize>,
}

/// One folded (`view_end == view + 1`) or removed (`view_end == view`) character or escape.
#[derive(Debug, Clone, Copy)]
struct Edit {
    /// Its byte offset in the view.
    view: usize,
    /// One past its byte in the view (`view` when it was removed).
    view_end: usize,
    /// One past its last byte in the original.
    original_end: usize,
}

impl<'a> Normalized<'a> {
    /// The view of `text`.
    pub fn new(text: &'a str) -> Normalized<'a> {
        Normalized::with(text, true, true)
    }

    /// The view of `text` with the letters of other scripts and the styled letters left as
    /// written (every other fold made): what custom entities, whose patterns and words may be
    /// written in those scripts, read, and what a value's canonical spelling is made from (a
    /// look-alike spelling is another value: mail to it goes elsewhere).
    pub fn keeping_letters(text: &'a str) -> Normalized<'a> {
        Normalized::with(text, true, false)
    }

    /// The view of `text` with escapes left as written: what the shaped detectors read beside
    /// [`Normalized::new`]'s view when that one decoded escapes, so that a value whose
    /// escapes are part of it (a password with `%2F` in a URL) is still found whole.
    pub fn without_escapes(text: &'a str) -> Normalized<'a> {
        Normalized::with(text, false, true)
    }

    /// The view with escapes decoded or not, and letters of other scripts drawn as Latin ones
    /// folded or not.
    pub(crate) fn with(text: &'a str, escapes: bool, letters: bool) -> Normalized<'a> {
        let plain =
            text.is_ascii() && (!escapes || memchr::memchr2(b'%', b'&', text.as_bytes()).is_none());
        let next = if plain {
            None
        } else {
            next_fold(text, 0, escapes, letters)
        };
        let Some(mut next) = next else {
            return Normalized {
                view: Cow::Borrowed(text),
                edits: Vec::new(),
                escapes: false,
                letters: false,
                look_alikes: Vec::new(),
            };
        };
        let mut decoded = false;
        let mut folded_letters = false;
        let mut look_alikes = Vec::new();
        let mut view = String::with_capacity(text.len());
        let mut edits = Vec::new();
        let mut from = 0;
        loop {
            let (at, len, folded) = next;
            view.push_str(text.get(from..at).unwrap_or_default());
            let original_end = at + len;
            decoded |= matches!(text.as_bytes()[at], b'%' | b'&');
            match folded {
                Folded::Removed => edits.push(Edit {
                    view: view.len(),
                    view_end: view.len(),
                    original_end,
                }),
                Folded::Ascii(byte) => {
                    // Only a folded letter or `-` can come from a letter of another script.
                    let first = (letters && (byte.is_ascii_alphabetic() || byte == b'-'))
                        .then(|| text.get(at..).and_then(|t| t.chars().next()))
                        .flatten();
                    let letter = byte.is_ascii_alphabetic()
                        && first.is_some_and(|c| {
                            look_alike(c).is_some() || styled_letter(c) || c == '%' || c == '&'
                        });
                    let mark = first.is_some_and(long_sound_mark);
                    folded_letters |= letter || mark;
                    let at = view.len();
                    if letter {
                        look_alikes.push(at);
                    }
                    view.push(char::from(byte));
                    edits.push(Edit {
                        view: at,
                        view_end: at + 1,
                        original_end,
                    });
                }
            }
            from = original_end;
            match next_fold(text, from, escapes, letters) {
                Some(found) => next = found,
                None => break,
            }
        }
        view.push_str(text.get(from..).unwrap_or_default());
        Normalized {
            view: Cow::Owned(view),
            edits,
            escapes: decoded,
            letters: folded_letters,
            look_alikes,
        }
    }

    /// Whether the view's byte `at` is a letter folded from another script or style: it
    /// joins no Latin word (`карта4111…` is a word and a card, not one token).
    pub fn look_alike_at(&self, at: usize) -> bool {
        self.look_alikes.binary_search(&at).is_ok()
    }

    /// Whether a letter of another script drawn as a Latin one, a styled letter or a long
    /// sound mark was folded: the view then reads differently from
    /// [`Normalized::keeping_letters`]'s. (A letter decoded from an escape counts too,
    /// whichever it was: that costs only a second reading.)
    pub fn folded_letters(&self) -> bool {
        self.letters
    }

    /// Whether an escape was decoded: the text then also has a view without escapes
    /// ([`Normalized::without_escapes`]) that reads differently.
    pub fn decoded_escapes(&self) -> bool {
        self.escapes
    }

    /// The view.
    pub fn as_str(&self) -> &str {
        &self.view
    }

    /// Whether the view is the text itself (nothing was folded or removed).
    pub fn is_identity(&self) -> bool {
        self.edits.is_empty()
    }

    /// The span of the original text that holds the view's `start..end` (`start <= end`,
    /// both at most the view's length).
    pub fn original(&self, start: usize, end: usize) -> (usize, usize) {
        if self.edits.is_empty() {
            return (start, end);
        }
        // The character at `start` comes after every edit before it, and after the
        // characters removed at `start` itself.
        let before_start = self
            .edits
            .partition_point(|e| e.view < start || (e.view == start && e.view_end == e.view));
        // The character that ends at `end` comes after every edit that starts before `end`
        // (a folded one may be that character), and before the characters removed at `end`.
        let before_end = self.edits.partition_point(|e| e.view < end);
        let start = self.shifted(start, before_start);
        (start, self.shifted(end, before_end).max(start))
    }

    /// `at`, a view offset that follows the first `edits` edits and no other, in the
    /// original.
    fn shifted(&self, at: usize, edits: usize) -> usize {
        match edits.checked_sub(1).and_then(|last| self.edits.get(last)) {
            Some(edit) => edit.original_end + at.saturating_sub(edit.view_end),
            None => at,
        }
    }

    /// Whether a character was removed at the view's offset `at`: what touches there in the
    /// view was apart in the original (a word and a number with a zero-width space between
    /// them are not one token).
    pub fn removed_at(&self, at: usize) -> bool {
        let first = self.edits.partition_point(|e| e.view < at);
        self.edits[first..]
            .iter()
            .take_while(|e| e.view == at)
            .any(|e| e.view_end == e.view)
    }
}

/// What a character becomes in the view, when not itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Folded {
    Removed,
    Ascii(u8),
}

/// How a range of [`FOLDS`] is folded.
#[derive(Debug, Clone, Copy)]
enum Fold {
    /// Removed from the view.
    Drop,
    /// Replaced by this ASCII byte.
    Byte(u8),
    /// Decimal digits, in runs of ten from zero: replaced by the ASCII digit.
    Digits,
    /// Fullwidth ASCII (U+FF01–U+FF5E): replaced by the ASCII character.
    Fullwidth,
    /// Digits that are no decimal digits (superscripts, subscripts, circled), in order from
    /// this value: replaced by the ASCII digit.
    DigitsFrom(u8),
    /// Letters drawn in a style (circled, squared), in order from this ASCII letter:
    /// replaced by the ASCII letter.
    LettersFrom(u8),
    /// The mathematical alphanumeric letters (U+1D400–U+1D6A3): thirteen styles of `A`–`Z`
    /// then `a`–`z`, replaced by the ASCII letter.
    MathLetters,
}

/// Whether the eight bytes of `word` hold `byte`.
fn holds(word: u64, byte: u8) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & (ONES << 7) != 0
}

/// The first character or escape (when `escapes`) at or after `from` (a character boundary)
/// that the view folds or removes: its offset, its length in bytes and what it becomes.
/// `letters`: whether letters of other scripts drawn as Latin ones are folded.
fn next_fold(
    text: &str,
    from: usize,
    escapes: bool,
    letters: bool,
) -> Option<(usize, usize, Folded)> {
    let bytes = text.as_bytes();
    let mut at = from;
    while at < bytes.len() {
        // ASCII without an escape's start, eight bytes at a time.
        if let Some(Ok(chunk)) = bytes.get(at..at + 8).map(<[u8; 8]>::try_from) {
            let word = u64::from_le_bytes(chunk);
            if word & 0x8080_8080_8080_8080 == 0
                && (!escapes || (!holds(word, b'%') && !holds(word, b'&')))
            {
                at += 8;
                continue;
            }
        }
        match bytes[at] {
            b'%' | b'&' if escapes => {
                if let Some((len, folded)) = escape(bytes, at, letters) {
                    return Some((at, len, folded));
                }
                at += 1;
            }
            0..0x80 => at += 1,
            // U+00C0–U+02FF and U+0380–U+057F (Latin letters, Greek, Cyrillic, Armenian
            // letters): two bytes each, folded only when they are drawn as a Latin letter.
            0xC3..=0xCB | 0xCE..=0xD5 if !letters => at += 2,
            _ => {
                let c = text.get(at..)?.chars().next()?;
                let folded = fold_letters(c, letters);
                if let Some(folded) = folded {
                    return Some((at, c.len_utf8(), folded));
                }
                at += c.len_utf8();
            }
        }
    }
    None
}

/// HTML's named character references the view decodes: those of the characters shaped
/// values are written with, and the invisible ones.
const NAMED: &[(&[u8], char)] = &[
    (b"amp", '&'),
    (b"apos", '\''),
    (b"colon", ':'),
    (b"comma", ','),
    (b"commat", '@'),
    (b"dash", '\u{2010}'),
    (b"emsp", '\u{2003}'),
    (b"ensp", '\u{2002}'),
    (b"hairsp", '\u{200A}'),
    (b"horbar", '\u{2015}'),
    (b"gt", '>'),
    (b"hyphen", '\u{2010}'),
    (b"lowbar", '_'),
    (b"lpar", '('),
    (b"lrm", '\u{200E}'),
    (b"lt", '<'),
    (b"mdash", '\u{2014}'),
    (b"minus", '\u{2212}'),
    (b"nbsp", '\u{A0}'),
    (b"NoBreak", '\u{2060}'),
    (b"NonBreakingSpace", '\u{A0}'),
    (b"ndash", '\u{2013}'),
    (b"num", '#'),
    (b"period", '.'),
    (b"plus", '+'),
    (b"quot", '"'),
    (b"rlm", '\u{200F}'),
    (b"rpar", ')'),
    (b"shy", '\u{AD}'),
    (b"sol", '/'),
    (b"thinsp", '\u{2009}'),
    (b"zwj", '\u{200D}'),
    (b"zwnj", '\u{200C}'),
    (b"ZeroWidthSpace", '\u{200B}'),
];

/// The escape at `at` (`%` or `&`) and what it becomes: its length and the fold.
///
/// - `%XX`: the byte, when it is printable ASCII; `%25XX` (an escaped `%` before two hex
///   digits: escaped twice) as the character `%XX` names; a run of `%XX` that spells one UTF-8 character, as that
///   character folds (`%EF%BC%A0` is `＠`, so `@`).
/// - `&name;`, `&#N;`, `&#xH;` (leading zeros allowed); `&amp;` before another reference as
///   that reference (escaped twice). A numeric reference without its `;` (which browsers
///   read) is not decoded: whether it is one would depend on what follows it, and a span of
///   the view must read the same when its own text is normalised again.
fn escape(bytes: &[u8], at: usize, letters: bool) -> Option<(usize, Folded)> {
    let (len, c) = if bytes[at] == b'%' {
        percent(bytes, at)?
    } else {
        let (len, c) = reference(bytes.get(at + 1..)?)?;
        let twice = (c == '&')
            .then(|| reference(&bytes[at + 1 + len..]))
            .flatten()
            .filter(|(_, inner)| folds(*inner));
        match twice {
            Some((more, inner)) => (1 + len + more, inner),
            None => (1 + len, c),
        }
    };
    let folded = match u8::try_from(c) {
        Ok(byte) if (0x20..0x7F).contains(&byte) => Folded::Ascii(byte),
        _ => fold_letters(c, letters)?,
    };
    Some((len, folded))
}

/// Whether an escape of `c` is decoded: printable ASCII, or a character the view folds (a
/// look-alike letter included; a view that keeps those letters then keeps the escape).
fn folds(c: char) -> bool {
    u8::try_from(c).is_ok_and(|b| (0x20..0x7F).contains(&b))
        || fold(c).is_some()
        || look_alike(c).is_some()
        || long_sound_mark(c)
}

/// The byte of the `%XX` at `at`.
fn percent_byte(bytes: &[u8], at: usize) -> Option<u8> {
    let hex = |b: &u8| char::from(*b).to_digit(16);
    if bytes.get(at) != Some(&b'%') {
        return None;
    }
    let high = hex(bytes.get(at + 1)?)?;
    let low = hex(bytes.get(at + 2)?)?;
    u8::try_from(high * 16 + low).ok()
}

/// The percent escape at `at`: its length and the character it spells.
fn percent(bytes: &[u8], at: usize) -> Option<(usize, char)> {
    let first = percent_byte(bytes, at)?;
    if first == b'%'
        && let Some(Some(byte)) = bytes.get(at + 3..at + 5).map(|h| {
            std::str::from_utf8(h)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        && byte < 0x80
        && folds(char::from(byte))
    {
        return Some((5, char::from(byte)));
    }
    let width = match first {
        0x00..0x80 => return Some((3, char::from(first))),
        0xC2..0xE0 => 2,
        0xE0..0xF0 => 3,
        0xF0..0xF5 => 4,
        _ => return None,
    };
    let mut utf8 = [first, 0, 0, 0];
    for (i, slot) in utf8.iter_mut().enumerate().take(width).skip(1) {
        *slot = percent_byte(bytes, at + 3 * i)?;
    }
    let c = std::str::from_utf8(&utf8[..width]).ok()?.chars().next()?;
    Some((3 * width, c))
}

/// The character reference after an `&` (`rest` starts after it): its length and the
/// character it names.
fn reference(rest: &[u8]) -> Option<(usize, char)> {
    if let Some(number) = rest.strip_prefix(b"#") {
        let (digits, radix, skip) = match number.first() {
            Some(b'x' | b'X') => (&number[1..], 16, 2),
            _ => (number, 10, 1),
        };
        let count = digits
            .iter()
            .take(32)
            .take_while(|b| char::from(**b).is_digit(radix))
            .count();
        if count == 0 {
            return None;
        }
        let text = std::str::from_utf8(&digits[..count]).ok()?;
        let trimmed = text.trim_start_matches('0');
        let value = if trimmed.is_empty() {
            0
        } else {
            u32::from_str_radix(trimmed, radix).ok()?
        };
        if digits.get(count) != Some(&b';') {
            return None;
        }
        return Some((skip + count + 1, char::from_u32(value)?));
    }
    let end = rest.iter().take(24).position(|&b| b == b';')?;
    let name = &rest[..end];
    let c = NAMED.iter().find(|(n, _)| *n == name)?.1;
    Some((end + 1, c))
}

/// What `c` becomes in the view: [`fold`]'s fold, and where `letters`, the Latin letter a
/// look-alike of another script is drawn as; without `letters`, styled letters (circled,
/// squared, mathematical) stay as written too.
fn fold_letters(c: char, letters: bool) -> Option<Folded> {
    if letters {
        fold(c)
            .or_else(|| look_alike(c).map(Folded::Ascii))
            .or_else(|| long_sound_mark(c).then_some(Folded::Ascii(b'-')))
    } else {
        fold(c).filter(|_| !styled_letter(c))
    }
}

/// Whether `c` is the katakana long sound mark `ー` or its halfwidth form `ｰ`: a letter
/// (it lengthens the vowel before it), but what a Japanese keyboard types for `-` in kana
/// mode, so `03ー1234ー5678` is a phone number. The built-in detectors read it as `-`;
/// custom entities, whose words may be katakana (`コーヒー`), read it as written.
fn long_sound_mark(c: char) -> bool {
    matches!(c, '\u{30FC}' | '\u{FF70}')
}

/// Whether `c` is a circled, squared or mathematical letter.
fn styled_letter(c: char) -> bool {
    matches!(u32::from(c), 0x24B6..=0x24E9 | 0x1D400..=0x1D6A3 | 0x1F130..=0x1F189)
}

/// The Latin letter that `c`, a letter of another script or style, is read as: the letters
/// whose compatibility decomposition (NFKC) is one ASCII letter, else whose confusables
/// skeleton (UTS #39) is one, and Greek and Cyrillic `κ к χ`, drawn as `k` and `x` in most
/// fonts (`normal::tests::every_letter_read_as_a_latin_one_is_folded` checks the table
/// against Unicode's data). Symbols (`×`), parenthesised letters and pairs read as one
/// letter (`rn` for `m`) are not here.
fn look_alike(c: char) -> Option<u8> {
    let code = u32::from(c);
    // Accented Latin letters, most of those the view reads, are none.
    if code < 0x0131 {
        return None;
    }
    let at = LOOK_ALIKES.partition_point(|(first, _)| *first < code);
    LOOK_ALIKES
        .get(at)
        .filter(|(first, _)| *first == code)
        .map(|(_, latin)| *latin)
}

/// Letters of other scripts and styles read as a Latin letter, by code point.
#[rustfmt::skip]
const LOOK_ALIKES: &[(u32, u8)] = &[
    (0x0131, b'i'), (0x017F, b's'), (0x0184, b'b'), (0x018D, b'g'), (0x0192, b'f'), (0x0196, b'I'),
    (0x01A6, b'R'), (0x01BD, b's'), (0x01BF, b'p'), (0x01C0, b'l'), (0x0237, b'j'), (0x024C, b'R'),
    (0x0251, b'a'), (0x0261, b'g'), (0x0263, b'y'), (0x0269, b'i'), (0x026A, b'i'), (0x026F, b'w'),
    (0x0284, b'f'), (0x028B, b'u'), (0x028F, b'y'), (0x02B0, b'h'), (0x02B2, b'j'), (0x02B3, b'r'),
    (0x02B7, b'w'), (0x02B8, b'y'), (0x02E1, b'l'), (0x02E2, b's'), (0x02E3, b'x'),
    (0x037F, b'J'), (0x0391, b'A'), (0x0392, b'B'), (0x0395, b'E'), (0x0396, b'Z'), (0x0397, b'H'),
    (0x0399, b'I'), (0x039A, b'K'), (0x039C, b'M'), (0x039D, b'N'), (0x039F, b'O'), (0x03A1, b'P'),
    (0x03A4, b'T'), (0x03A5, b'Y'), (0x03A7, b'X'), (0x03B1, b'a'), (0x03B3, b'y'), (0x03B9, b'i'),
    (0x03BA, b'k'), (0x03BD, b'v'), (0x03BF, b'o'), (0x03C1, b'p'), (0x03C3, b'o'), (0x03C5, b'u'),
    (0x03C7, b'x'), (0x03D2, b'Y'), (0x03DC, b'F'), (0x03ED, b'o'), (0x03F1, b'p'), (0x03F2, b'c'),
    (0x03F3, b'j'), (0x03F8, b'p'), (0x03F9, b'C'), (0x03FA, b'M'), (0x0405, b'S'), (0x0406, b'I'),
    (0x0408, b'J'), (0x0410, b'A'), (0x0412, b'B'), (0x0415, b'E'), (0x041A, b'K'), (0x041C, b'M'),
    (0x041D, b'H'), (0x041E, b'O'), (0x0420, b'P'), (0x0421, b'C'), (0x0422, b'T'), (0x0423, b'Y'),
    (0x0425, b'X'), (0x042C, b'b'), (0x0430, b'a'), (0x0433, b'r'), (0x0435, b'e'), (0x043A, b'k'),
    (0x043E, b'o'), (0x0440, b'p'), (0x0441, b'c'), (0x0443, b'y'), (0x0445, b'x'), (0x0448, b'w'),
    (0x0455, b's'), (0x0456, b'i'), (0x0458, b'j'), (0x0461, b'w'), (0x0474, b'V'), (0x0475, b'v'),
    (0x04AE, b'Y'), (0x04AF, b'y'), (0x04BA, b'h'), (0x04BB, b'h'), (0x04BD, b'e'), (0x04C0, b'I'),
    (0x04CF, b'l'), (0x0501, b'd'), (0x050C, b'G'), (0x051A, b'Q'), (0x051B, b'q'), (0x051C, b'W'),
    (0x051D, b'w'), (0x054D, b'U'), (0x054F, b'S'), (0x0555, b'O'), (0x0561, b'w'), (0x0563, b'q'),
    (0x0566, b'q'), (0x0570, b'h'), (0x0575, b'j'), (0x0578, b'n'), (0x057C, b'n'), (0x057D, b'u'),
    (0x0581, b'g'), (0x0582, b'i'), (0x0584, b'f'), (0x0585, b'o'), (0x05D5, b'l'), (0x05D8, b'v'),
    (0x05DF, b'l'), (0x05E1, b'o'), (0x0627, b'l'), (0x0647, b'o'), (0x06BE, b'o'), (0x06C1, b'o'),
    (0x06D5, b'o'), (0x07CA, b'l'), (0x07CB, b'o'), (0x07CC, b'Y'), (0x07D3, b'F'), (0x07D5, b'b'),
    (0x07E0, b'T'), (0x0840, b'o'), (0x0B20, b'O'), (0x0C02, b'o'), (0x0C82, b'o'), (0x0D02, b'o'),
    (0x0D1F, b's'), (0x0D20, b'o'), (0x0D82, b'o'), (0x1004, b'c'), (0x101D, b'o'), (0x105A, b'c'),
    (0x10B9, b'h'), (0x10BD, b'S'), (0x10CD, b'Z'), (0x10E7, b'y'), (0x10FD, b'S'), (0x10FF, b'o'),
    (0x110B, b'o'), (0x11BC, b'o'), (0x1200, b'U'), (0x12D0, b'O'), (0x13A0, b'D'), (0x13A1, b'R'),
    (0x13A2, b'T'), (0x13A5, b'i'), (0x13A9, b'Y'), (0x13AA, b'A'), (0x13AB, b'J'), (0x13AC, b'E'),
    (0x13B3, b'W'), (0x13B7, b'M'), (0x13BB, b'H'), (0x13BD, b'Y'), (0x13C0, b'G'), (0x13C2, b'h'),
    (0x13C3, b'Z'), (0x13CF, b'b'), (0x13D2, b'R'), (0x13D4, b'W'), (0x13D5, b'S'), (0x13D9, b'V'),
    (0x13DA, b'S'), (0x13DE, b'L'), (0x13DF, b'C'), (0x13E2, b'P'), (0x13E6, b'K'), (0x13E7, b'd'),
    (0x13F3, b'G'), (0x13F4, b'B'), (0x142F, b'V'), (0x144C, b'U'), (0x146D, b'P'), (0x146F, b'd'),
    (0x1472, b'b'), (0x148D, b'J'), (0x14AA, b'L'), (0x1541, b'x'), (0x157C, b'H'), (0x157D, b'x'),
    (0x1587, b'R'), (0x15AF, b'b'), (0x15B4, b'F'), (0x15C5, b'A'), (0x15DE, b'D'), (0x15EA, b'D'),
    (0x15F0, b'M'), (0x15F7, b'B'), (0x16B7, b'X'), (0x16C1, b'l'), (0x16D0, b'l'), (0x16D5, b'K'),
    (0x16D6, b'M'), (0x1763, b'x'), (0x1A45, b'o'), (0x1BEA, b'o'), (0x1BEC, b'x'), (0x1C82, b'o'),
    (0x1C83, b'c'), (0x1CBD, b'S'), (0x1CBF, b'O'), (0x1CF5, b'X'), (0x1D04, b'c'), (0x1D0F, b'o'),
    (0x1D11, b'o'), (0x1D1C, b'u'), (0x1D20, b'v'), (0x1D21, b'w'), (0x1D22, b'z'), (0x1D26, b'r'),
    (0x1D2C, b'A'), (0x1D2E, b'B'), (0x1D30, b'D'), (0x1D31, b'E'), (0x1D33, b'G'), (0x1D34, b'H'),
    (0x1D35, b'I'), (0x1D36, b'J'), (0x1D37, b'K'), (0x1D38, b'L'), (0x1D39, b'M'), (0x1D3A, b'N'),
    (0x1D3C, b'O'), (0x1D3E, b'P'), (0x1D3F, b'R'), (0x1D40, b'T'), (0x1D41, b'U'), (0x1D42, b'W'),
    (0x1D43, b'a'), (0x1D47, b'b'), (0x1D48, b'd'), (0x1D49, b'e'), (0x1D4D, b'g'), (0x1D4F, b'k'),
    (0x1D50, b'm'), (0x1D52, b'o'), (0x1D56, b'p'), (0x1D57, b't'), (0x1D58, b'u'), (0x1D5B, b'v'),
    (0x1D62, b'i'), (0x1D63, b'r'), (0x1D64, b'u'), (0x1D65, b'v'), (0x1D83, b'g'), (0x1D8C, b'y'),
    (0x1D9C, b'c'), (0x1DA0, b'f'), (0x1DBB, b'z'), (0x1E9D, b'f'), (0x1EFF, b'y'), (0x1FBE, b'i'),
    (0x2071, b'i'), (0x207F, b'n'), (0x2090, b'a'), (0x2091, b'e'), (0x2092, b'o'), (0x2093, b'x'),
    (0x2095, b'h'), (0x2096, b'k'), (0x2097, b'l'), (0x2098, b'm'), (0x2099, b'n'), (0x209A, b'p'),
    (0x209B, b's'), (0x209C, b't'), (0x2102, b'C'), (0x210A, b'g'), (0x210B, b'H'), (0x210C, b'H'),
    (0x210D, b'H'), (0x210E, b'h'), (0x2110, b'I'), (0x2111, b'I'), (0x2112, b'L'), (0x2113, b'l'),
    (0x2115, b'N'), (0x2119, b'P'), (0x211A, b'Q'), (0x211B, b'R'), (0x211C, b'R'), (0x211D, b'R'),
    (0x2124, b'Z'), (0x2128, b'Z'), (0x212A, b'K'), (0x212C, b'B'), (0x212D, b'C'), (0x212F, b'e'),
    (0x2130, b'E'), (0x2131, b'F'), (0x2133, b'M'), (0x2134, b'o'), (0x2139, b'i'), (0x213D, b'y'),
    (0x2145, b'D'), (0x2146, b'd'), (0x2147, b'e'), (0x2148, b'i'), (0x2149, b'j'), (0x2160, b'I'),
    (0x2164, b'V'), (0x2169, b'X'), (0x216C, b'L'), (0x216D, b'C'), (0x216E, b'D'), (0x216F, b'M'),
    (0x2170, b'i'), (0x2174, b'v'), (0x2179, b'x'), (0x217C, b'l'), (0x217D, b'c'), (0x217E, b'd'),
    (0x217F, b'm'), (0x2C6B, b'Z'), (0x2C6C, b'z'), (0x2C7C, b'j'), (0x2C7D, b'V'), (0x2C82, b'B'),
    (0x2C85, b'r'), (0x2C8C, b'Z'), (0x2C8D, b'z'), (0x2C8E, b'H'), (0x2C92, b'I'), (0x2C93, b'i'),
    (0x2C94, b'K'), (0x2C98, b'M'), (0x2C9A, b'N'), (0x2C9E, b'O'), (0x2C9F, b'o'), (0x2CA2, b'P'),
    (0x2CA3, b'p'), (0x2CA4, b'C'), (0x2CA5, b'c'), (0x2CA6, b'T'), (0x2CA8, b'Y'), (0x2CA9, b'y'),
    (0x2CAC, b'X'), (0x2CBD, b'w'), (0x2CCE, b'P'), (0x2CCF, b'p'), (0x2CD0, b'L'), (0x2D2D, b'z'),
    (0x2D38, b'V'), (0x2D39, b'E'), (0x2D4A, b'l'), (0x2D4F, b'l'), (0x2D54, b'O'), (0x2D55, b'Q'),
    (0x2D5D, b'X'), (0x3007, b'O'), (0x3112, b'T'), (0x311A, b'Y'), (0x3147, b'o'), (0x4E05, b'T'),
    (0x4E2B, b'Y'), (0xA4D0, b'B'), (0xA4D1, b'P'), (0xA4D2, b'd'), (0xA4D3, b'D'), (0xA4D4, b'T'),
    (0xA4D6, b'G'), (0xA4D7, b'K'), (0xA4D9, b'J'), (0xA4DA, b'C'), (0xA4DC, b'Z'), (0xA4DD, b'F'),
    (0xA4DF, b'M'), (0xA4E0, b'N'), (0xA4E1, b'L'), (0xA4E2, b'S'), (0xA4E3, b'R'), (0xA4E6, b'V'),
    (0xA4E7, b'H'), (0xA4EA, b'W'), (0xA4EB, b'X'), (0xA4EC, b'Y'), (0xA4EE, b'A'), (0xA4F0, b'E'),
    (0xA4F2, b'l'), (0xA4F3, b'O'), (0xA4F4, b'U'), (0xA50B, b'T'), (0xA557, b'B'), (0xA56F, b'l'),
    (0xA576, b'S'), (0xA5CB, b'E'), (0xA647, b'i'), (0xA6C9, b'Z'), (0xA6DF, b'V'), (0xA731, b's'),
    (0xA781, b'l'), (0xA798, b'F'), (0xA799, b'f'), (0xA79F, b'u'), (0xA7AE, b'I'), (0xA7B2, b'J'),
    (0xA7B3, b'X'), (0xA7B4, b'B'), (0xA7F1, b'S'), (0xA7F2, b'C'), (0xA7F3, b'F'), (0xA7F4, b'Q'),
    (0xA7FA, b'w'), (0xA7FE, b'l'), (0xAB32, b'e'), (0xAB35, b'f'), (0xAB3D, b'o'), (0xAB47, b'r'),
    (0xAB48, b'r'), (0xAB4E, b'u'), (0xAB52, b'u'), (0xAB5A, b'y'), (0xAB64, b'a'), (0xAB75, b'i'),
    (0xAB81, b'r'), (0xAB83, b'w'), (0xAB93, b'z'), (0xABA4, b'w'), (0xABA9, b'v'), (0xABAA, b's'),
    (0xABAF, b'c'), (0xFBA6, b'o'), (0xFBA7, b'o'), (0xFBA8, b'o'), (0xFBA9, b'o'), (0xFBAA, b'o'),
    (0xFBAB, b'o'), (0xFBAC, b'o'), (0xFBAD, b'o'), (0xFE8D, b'l'), (0xFE8E, b'l'), (0xFEE9, b'o'),
    (0xFEEA, b'o'), (0xFEEB, b'o'), (0xFEEC, b'o'), (0xFFB7, b'o'), (0x10282, b'B'),
    (0x10286, b'E'), (0x10287, b'F'), (0x1028A, b'l'), (0x10290, b'X'), (0x10292, b'O'),
    (0x10295, b'P'), (0x10296, b'S'), (0x10297, b'T'), (0x102A0, b'A'), (0x102A1, b'B'),
    (0x102A2, b'C'), (0x102A5, b'F'), (0x102AB, b'O'), (0x102B0, b'M'), (0x102B1, b'T'),
    (0x102B2, b'Y'), (0x102B4, b'X'), (0x102CF, b'H'), (0x10301, b'B'), (0x10302, b'C'),
    (0x10309, b'l'), (0x1030F, b'O'), (0x10311, b'M'), (0x10315, b'T'), (0x10317, b'X'),
    (0x1031C, b'b'), (0x10404, b'O'), (0x10415, b'C'), (0x1041B, b'L'), (0x10420, b'S'),
    (0x1042C, b'o'), (0x1043D, b'c'), (0x10448, b's'), (0x104B4, b'R'), (0x104C2, b'O'),
    (0x104CE, b'U'), (0x104EA, b'o'), (0x104F6, b'u'), (0x10507, b'Z'), (0x1050E, b'l'),
    (0x10513, b'N'), (0x10516, b'O'), (0x10518, b'K'), (0x1051B, b'C'),
    (0x1051D, b'V'), (0x10525, b'F'), (0x10526, b'L'), (0x10527, b'X'), (0x107A5, b'q'),
    (0x10926, b'l'), (0x1092C, b'o'), (0x10C13, b'X'), (0x10C17, b'O'), (0x10C1F, b'V'),
    (0x10C20, b'Y'), (0x10C21, b'M'), (0x10C3E, b'l'), (0x10C82, b'X'), (0x10CA5, b'I'),
    (0x10CC2, b'x'), (0x10D07, b'o'), (0x11124, b'o'), (0x11302, b'o'), (0x11706, b'v'),
    (0x1170A, b'w'), (0x1170E, b'w'), (0x1170F, b'w'), (0x118A0, b'V'), (0x118A2, b'F'),
    (0x118A3, b'L'), (0x118A4, b'Y'), (0x118A6, b'E'), (0x118A9, b'Z'), (0x118AE, b'E'),
    (0x118B2, b'L'), (0x118B5, b'O'), (0x118B8, b'U'), (0x118BC, b'T'), (0x118C0, b'v'),
    (0x118C1, b's'), (0x118C2, b'F'), (0x118C3, b'i'), (0x118C4, b'y'), (0x118C8, b'o'),
    (0x118D7, b'o'), (0x118D8, b'u'), (0x118DC, b'y'), (0x11ABC, b'Z'), (0x11ABE, b'N'),
    (0x11DDA, b'l'), (0x16A19, b'r'), (0x16AD6, b'S'), (0x16AE9, b'O'), (0x16D63, b'l'),
    (0x16EAA, b'I'), (0x16EB6, b'b'), (0x16F08, b'V'), (0x16F0A, b'T'), (0x16F16, b'L'),
    (0x16F28, b'l'), (0x16F35, b'R'), (0x16F3A, b'S'), (0x16F40, b'A'), (0x16F42, b'U'),
    (0x16F43, b'Y'), (0x1D6A4, b'i'), (0x1D6A5, b'j'), (0x1D6A8, b'A'), (0x1D6A9, b'B'),
    (0x1D6AC, b'E'), (0x1D6AD, b'Z'), (0x1D6AE, b'H'), (0x1D6B0, b'I'), (0x1D6B1, b'K'),
    (0x1D6B3, b'M'), (0x1D6B4, b'N'), (0x1D6B6, b'O'), (0x1D6B8, b'P'), (0x1D6BB, b'T'),
    (0x1D6BC, b'Y'), (0x1D6BE, b'X'), (0x1D6C2, b'a'), (0x1D6C4, b'y'), (0x1D6CA, b'i'),
    (0x1D6CE, b'v'), (0x1D6D0, b'o'), (0x1D6D2, b'p'), (0x1D6D4, b'o'), (0x1D6D6, b'u'),
    (0x1D6E0, b'p'), (0x1D6E2, b'A'), (0x1D6E3, b'B'), (0x1D6E6, b'E'), (0x1D6E7, b'Z'),
    (0x1D6E8, b'H'), (0x1D6EA, b'I'), (0x1D6EB, b'K'), (0x1D6ED, b'M'), (0x1D6EE, b'N'),
    (0x1D6F0, b'O'), (0x1D6F2, b'P'), (0x1D6F5, b'T'), (0x1D6F6, b'Y'), (0x1D6F8, b'X'),
    (0x1D6FC, b'a'), (0x1D6FE, b'y'), (0x1D704, b'i'), (0x1D708, b'v'), (0x1D70A, b'o'),
    (0x1D70C, b'p'), (0x1D70E, b'o'), (0x1D710, b'u'), (0x1D71A, b'p'), (0x1D71C, b'A'),
    (0x1D71D, b'B'), (0x1D720, b'E'), (0x1D721, b'Z'), (0x1D722, b'H'), (0x1D724, b'I'),
    (0x1D725, b'K'), (0x1D727, b'M'), (0x1D728, b'N'), (0x1D72A, b'O'), (0x1D72C, b'P'),
    (0x1D72F, b'T'), (0x1D730, b'Y'), (0x1D732, b'X'), (0x1D736, b'a'), (0x1D738, b'y'),
    (0x1D73E, b'i'), (0x1D742, b'v'), (0x1D744, b'o'), (0x1D746, b'p'), (0x1D748, b'o'),
    (0x1D74A, b'u'), (0x1D754, b'p'), (0x1D756, b'A'), (0x1D757, b'B'), (0x1D75A, b'E'),
    (0x1D75B, b'Z'), (0x1D75C, b'H'), (0x1D75E, b'I'), (0x1D75F, b'K'), (0x1D761, b'M'),
    (0x1D762, b'N'), (0x1D764, b'O'), (0x1D766, b'P'), (0x1D769, b'T'), (0x1D76A, b'Y'),
    (0x1D76C, b'X'), (0x1D770, b'a'), (0x1D772, b'y'), (0x1D778, b'i'), (0x1D77C, b'v'),
    (0x1D77E, b'o'), (0x1D780, b'p'), (0x1D782, b'o'), (0x1D784, b'u'), (0x1D78E, b'p'),
    (0x1D790, b'A'), (0x1D791, b'B'), (0x1D794, b'E'), (0x1D795, b'Z'), (0x1D796, b'H'),
    (0x1D798, b'I'), (0x1D799, b'K'), (0x1D79B, b'M'), (0x1D79C, b'N'), (0x1D79E, b'O'),
    (0x1D7A0, b'P'), (0x1D7A3, b'T'), (0x1D7A4, b'Y'), (0x1D7A6, b'X'), (0x1D7AA, b'a'),
    (0x1D7AC, b'y'), (0x1D7B2, b'i'), (0x1D7B6, b'v'), (0x1D7B8, b'o'), (0x1D7BA, b'p'),
    (0x1D7BC, b'o'), (0x1D7BE, b'u'), (0x1D7C8, b'p'), (0x1D7CA, b'F'), (0x1EE00, b'l'),
    (0x1EE24, b'o'), (0x1EE80, b'l'), (0x1EE84, b'o'),
];

fn fold(c: char) -> Option<Folded> {
    let code = u32::from(c);
    // Nothing below U+00A0 is folded: ASCII and the C1 controls.
    if code < 0xA0 {
        return None;
    }
    let at = FOLDS.partition_point(|(_, last, _)| *last < code);
    let &(first, _, fold) = FOLDS.get(at).filter(|(first, _, _)| *first <= code)?;
    let ascii = |value: u32| u8::try_from(value).ok().map(Folded::Ascii);
    match fold {
        Fold::Drop => Some(Folded::Removed),
        Fold::Byte(byte) => Some(Folded::Ascii(byte)),
        Fold::Digits => ascii(u32::from(b'0') + (code - first) % 10),
        Fold::Fullwidth => ascii(code - 0xFEE0),
        Fold::DigitsFrom(start) => ascii(u32::from(b'0') + u32::from(start) + (code - first)),
        Fold::LettersFrom(start) => ascii(u32::from(start) + (code - first)),
        Fold::MathLetters => {
            let letter = (code - first) % 52;
            match letter {
                0..26 => ascii(u32::from(b'A') + letter),
                _ => ascii(u32::from(b'a') + letter - 26),
            }
        }
    }
}

/// The folded characters, by range `(first, last)`, sorted and disjoint. Made from the
/// Unicode 16.0 tables of `regex-syntax` 0.8 (the `regex` crate's `\d`, `\p{Zs}`, `\p{Pd}`,
/// `\p{Cf}` and `\p{Default_Ignorable_Code_Point}`), plus the minus sign, the small forms,
/// the ideographic full stops and the one dot leader, the combining diacritical marks and
/// enclosing marks (a keycap), the superscript, subscript and circled digits, and the
/// circled, squared and mathematical letters; `folds_agree_with_the_regex_unicode_tables`
/// checks them.
#[rustfmt::skip]
const FOLDS: &[(u32, u32, Fold)] = &[
    (0x00A0, 0x00A0, Fold::Byte(b' ')),
    (0x00AD, 0x00AD, Fold::Drop),
    (0x00B2, 0x00B3, Fold::DigitsFrom(2)),
    (0x00B7, 0x00B7, Fold::Byte(b'.')),
    (0x00B9, 0x00B9, Fold::DigitsFrom(1)),
    (0x0300, 0x036F, Fold::Drop),
    (0x058A, 0x058A, Fold::Byte(b'-')),
    (0x05BE, 0x05BE, Fold::Byte(b'-')),
    (0x0600, 0x0605, Fold::Drop),
    (0x061C, 0x061C, Fold::Drop),
    (0x0660, 0x0669, Fold::Digits),
    (0x06DD, 0x06DD, Fold::Drop),
    (0x06F0, 0x06F9, Fold::Digits),
    (0x070F, 0x070F, Fold::Drop),
    (0x07C0, 0x07C9, Fold::Digits),
    (0x0890, 0x0891, Fold::Drop),
    (0x08E2, 0x08E2, Fold::Drop),
    (0x0966, 0x096F, Fold::Digits),
    (0x09E6, 0x09EF, Fold::Digits),
    (0x0A66, 0x0A6F, Fold::Digits),
    (0x0AE6, 0x0AEF, Fold::Digits),
    (0x0B66, 0x0B6F, Fold::Digits),
    (0x0BE6, 0x0BEF, Fold::Digits),
    (0x0C66, 0x0C6F, Fold::Digits),
    (0x0CE6, 0x0CEF, Fold::Digits),
    (0x0D66, 0x0D6F, Fold::Digits),
    (0x0DE6, 0x0DEF, Fold::Digits),
    (0x0E50, 0x0E59, Fold::Digits),
    (0x0ED0, 0x0ED9, Fold::Digits),
    (0x0F20, 0x0F29, Fold::Digits),
    (0x1040, 0x1049, Fold::Digits),
    (0x1090, 0x1099, Fold::Digits),
    (0x115F, 0x1160, Fold::Drop),
    (0x1400, 0x1400, Fold::Byte(b'-')),
    (0x1680, 0x1680, Fold::Byte(b' ')),
    (0x17B4, 0x17B5, Fold::Drop),
    (0x17E0, 0x17E9, Fold::Digits),
    (0x1806, 0x1806, Fold::Byte(b'-')),
    (0x180B, 0x180F, Fold::Drop),
    (0x1810, 0x1819, Fold::Digits),
    (0x1946, 0x194F, Fold::Digits),
    (0x19D0, 0x19D9, Fold::Digits),
    (0x1A80, 0x1A89, Fold::Digits),
    (0x1A90, 0x1A99, Fold::Digits),
    (0x1B50, 0x1B59, Fold::Digits),
    (0x1BB0, 0x1BB9, Fold::Digits),
    (0x1C40, 0x1C49, Fold::Digits),
    (0x1C50, 0x1C59, Fold::Digits),
    (0x2000, 0x200A, Fold::Byte(b' ')),
    (0x200B, 0x200F, Fold::Drop),
    (0x2010, 0x2015, Fold::Byte(b'-')),
    (0x2024, 0x2024, Fold::Byte(b'.')),
    (0x2027, 0x2027, Fold::Byte(b'.')),
    (0x202A, 0x202E, Fold::Drop),
    (0x202F, 0x202F, Fold::Byte(b' ')),
    (0x205F, 0x205F, Fold::Byte(b' ')),
    (0x2060, 0x206F, Fold::Drop),
    (0x2070, 0x2070, Fold::DigitsFrom(0)),
    (0x2074, 0x2079, Fold::DigitsFrom(4)),
    (0x2080, 0x2089, Fold::DigitsFrom(0)),
    (0x20DD, 0x20E4, Fold::Drop),
    (0x2212, 0x2212, Fold::Byte(b'-')),
    (0x2460, 0x2468, Fold::DigitsFrom(1)),
    (0x2474, 0x247C, Fold::DigitsFrom(1)),
    (0x2488, 0x2490, Fold::DigitsFrom(1)),
    (0x24B6, 0x24CF, Fold::LettersFrom(b'A')),
    (0x24D0, 0x24E9, Fold::LettersFrom(b'a')),
    (0x24EA, 0x24EA, Fold::DigitsFrom(0)),
    (0x24F5, 0x24FD, Fold::DigitsFrom(1)),
    (0x24FF, 0x24FF, Fold::DigitsFrom(0)),
    (0x2776, 0x277E, Fold::DigitsFrom(1)),
    (0x2780, 0x2788, Fold::DigitsFrom(1)),
    (0x278A, 0x2792, Fold::DigitsFrom(1)),
    (0x2E17, 0x2E17, Fold::Byte(b'-')),
    (0x2E1A, 0x2E1A, Fold::Byte(b'-')),
    (0x2E3A, 0x2E3B, Fold::Byte(b'-')),
    (0x2E40, 0x2E40, Fold::Byte(b'-')),
    (0x2E5D, 0x2E5D, Fold::Byte(b'-')),
    (0x3000, 0x3000, Fold::Byte(b' ')),
    (0x3002, 0x3002, Fold::Byte(b'.')),
    (0x301C, 0x301C, Fold::Byte(b'-')),
    (0x3030, 0x3030, Fold::Byte(b'-')),
    (0x30A0, 0x30A0, Fold::Byte(b'-')),
    (0x30FB, 0x30FB, Fold::Byte(b'.')),
    (0x3164, 0x3164, Fold::Drop),
    (0xA620, 0xA629, Fold::Digits),
    (0xA8D0, 0xA8D9, Fold::Digits),
    (0xA900, 0xA909, Fold::Digits),
    (0xA9D0, 0xA9D9, Fold::Digits),
    (0xA9F0, 0xA9F9, Fold::Digits),
    (0xAA50, 0xAA59, Fold::Digits),
    (0xABF0, 0xABF9, Fold::Digits),
    (0xFE00, 0xFE0F, Fold::Drop),
    (0xFE31, 0xFE32, Fold::Byte(b'-')),
    (0xFE50, 0xFE50, Fold::Byte(b',')),
    (0xFE52, 0xFE52, Fold::Byte(b'.')),
    (0xFE54, 0xFE54, Fold::Byte(b';')),
    (0xFE55, 0xFE55, Fold::Byte(b':')),
    (0xFE56, 0xFE56, Fold::Byte(b'?')),
    (0xFE57, 0xFE57, Fold::Byte(b'!')),
    (0xFE58, 0xFE58, Fold::Byte(b'-')),
    (0xFE59, 0xFE59, Fold::Byte(b'(')),
    (0xFE5A, 0xFE5A, Fold::Byte(b')')),
    (0xFE5B, 0xFE5B, Fold::Byte(b'{')),
    (0xFE5C, 0xFE5C, Fold::Byte(b'}')),
    (0xFE5F, 0xFE5F, Fold::Byte(b'#')),
    (0xFE60, 0xFE60, Fold::Byte(b'&')),
    (0xFE61, 0xFE61, Fold::Byte(b'*')),
    (0xFE62, 0xFE62, Fold::Byte(b'+')),
    (0xFE63, 0xFE63, Fold::Byte(b'-')),
    (0xFE64, 0xFE64, Fold::Byte(b'<')),
    (0xFE65, 0xFE65, Fold::Byte(b'>')),
    (0xFE66, 0xFE66, Fold::Byte(b'=')),
    (0xFE68, 0xFE68, Fold::Byte(b'\\')),
    (0xFE69, 0xFE69, Fold::Byte(b'$')),
    (0xFE6A, 0xFE6A, Fold::Byte(b'%')),
    (0xFE6B, 0xFE6B, Fold::Byte(b'@')),
    (0xFEFF, 0xFEFF, Fold::Drop),
    (0xFF01, 0xFF5E, Fold::Fullwidth),
    (0xFF61, 0xFF61, Fold::Byte(b'.')),
    (0xFF65, 0xFF65, Fold::Byte(b'.')),
    (0xFFA0, 0xFFA0, Fold::Drop),
    (0xFFF0, 0xFFFB, Fold::Drop),
    (0x104A0, 0x104A9, Fold::Digits),
    (0x10D30, 0x10D39, Fold::Digits),
    (0x10D40, 0x10D49, Fold::Digits),
    (0x10D6E, 0x10D6E, Fold::Byte(b'-')),
    (0x10EAD, 0x10EAD, Fold::Byte(b'-')),
    (0x11066, 0x1106F, Fold::Digits),
    (0x110BD, 0x110BD, Fold::Drop),
    (0x110CD, 0x110CD, Fold::Drop),
    (0x110F0, 0x110F9, Fold::Digits),
    (0x11136, 0x1113F, Fold::Digits),
    (0x111D0, 0x111D9, Fold::Digits),
    (0x112F0, 0x112F9, Fold::Digits),
    (0x11450, 0x11459, Fold::Digits),
    (0x114D0, 0x114D9, Fold::Digits),
    (0x11650, 0x11659, Fold::Digits),
    (0x116C0, 0x116C9, Fold::Digits),
    (0x116D0, 0x116E3, Fold::Digits),
    (0x11730, 0x11739, Fold::Digits),
    (0x118E0, 0x118E9, Fold::Digits),
    (0x11950, 0x11959, Fold::Digits),
    (0x11BF0, 0x11BF9, Fold::Digits),
    (0x11C50, 0x11C59, Fold::Digits),
    (0x11D50, 0x11D59, Fold::Digits),
    (0x11DA0, 0x11DA9, Fold::Digits),
    (0x11F50, 0x11F59, Fold::Digits),
    (0x13430, 0x1343F, Fold::Drop),
    (0x16130, 0x16139, Fold::Digits),
    (0x16A60, 0x16A69, Fold::Digits),
    (0x16AC0, 0x16AC9, Fold::Digits),
    (0x16B50, 0x16B59, Fold::Digits),
    (0x16D70, 0x16D79, Fold::Digits),
    (0x1BCA0, 0x1BCA3, Fold::Drop),
    (0x1CCF0, 0x1CCF9, Fold::Digits),
    (0x1D173, 0x1D17A, Fold::Drop),
    (0x1D400, 0x1D6A3, Fold::MathLetters),
    (0x1D7CE, 0x1D7FF, Fold::Digits),
    (0x1E140, 0x1E149, Fold::Digits),
    (0x1E2F0, 0x1E2F9, Fold::Digits),
    (0x1E4F0, 0x1E4F9, Fold::Digits),
    (0x1E5F1, 0x1E5FA, Fold::Digits),
    (0x1E950, 0x1E959, Fold::Digits),
    (0x1F130, 0x1F149, Fold::LettersFrom(b'A')),
    (0x1F150, 0x1F169, Fold::LettersFrom(b'A')),
    (0x1F170, 0x1F189, Fold::LettersFrom(b'A')),
    (0x1FBF0, 0x1FBF9, Fold::Digits),
    (0xE0000, 0xE0FFF, Fold::Drop),
];

#[cfg(test)]
mod tests;
