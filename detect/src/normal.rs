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
//! - the superscript, subscript and circled digits (`²`, `₄`, `①`, `⓿`, `❶`) are their
//!   ASCII digit, and the one dot leader `․` is `'.'`;
//! - the circled, squared and mathematical letters (`ⓙ`, `🅐`, `𝐣𝐚𝐧𝐞`) are their ASCII
//!   letter;
//! - a letter of Greek, Cyrillic or Armenian that is drawn as a Latin letter (Cyrillic `а`,
//!   `е`, `о`, `р`, `с`, `С`, `Н`; Greek `ο`, `ν`, `Α`; the dotless `ı`) is that Latin letter:
//!   `sk-prоj-…` with a Cyrillic `о` is the secret, `СН93 0076 …` typed on a Cyrillic layout
//!   the Swiss IBAN. [`Normalized::keeping_letters`] leaves these letters as written, for
//!   custom entities (a pattern such as `Договор №\d+` names Cyrillic letters) and for a
//!   value's canonical spelling;
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
                    let letter = letters
                        && byte.is_ascii_alphabetic()
                        && text
                            .get(at..)
                            .and_then(|t| t.chars().next())
                            .is_some_and(|c| {
                                look_alike(c).is_some() || styled_letter(c) || c == '%' || c == '&'
                            });
                    folded_letters |= letter;
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

    /// Whether a letter of another script drawn as a Latin one, or a styled letter, was
    /// folded: the view then reads differently from [`Normalized::keeping_letters`]'s. (A
    /// letter decoded from an escape counts too, whichever it was: that costs only a second
    /// reading.)
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
        fold(c).or_else(|| look_alike(c).map(Folded::Ascii))
    } else {
        fold(c).filter(|_| !styled_letter(c))
    }
}

/// Whether `c` is a circled, squared or mathematical letter.
fn styled_letter(c: char) -> bool {
    matches!(u32::from(c), 0x24B6..=0x24E9 | 0x1D400..=0x1D6A3 | 0x1F130..=0x1F189)
}

/// The Latin letter that `c`, a letter of another script, is drawn as: the common letters of
/// Greek, Cyrillic and Armenian that Unicode's confusables (UTS #39) map to one Latin
/// letter, and the dotless `ı` and `ȷ`. Pairs read as one letter (`rn` for `m`) and other
/// scripts are not here.
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

/// Letters of other scripts drawn as a Latin letter, by code point.
#[rustfmt::skip]
const LOOK_ALIKES: &[(u32, u8)] = &[
    (0x0131, b'i'), (0x0237, b'j'), (0x037F, b'J'),
    (0x0391, b'A'), (0x0392, b'B'), (0x0395, b'E'), (0x0396, b'Z'), (0x0397, b'H'),
    (0x0399, b'I'), (0x039A, b'K'), (0x039C, b'M'), (0x039D, b'N'), (0x039F, b'O'),
    (0x03A1, b'P'), (0x03A4, b'T'), (0x03A5, b'Y'), (0x03A7, b'X'),
    (0x03B1, b'a'), (0x03B3, b'y'), (0x03B9, b'i'), (0x03BA, b'k'), (0x03BD, b'v'),
    (0x03BF, b'o'), (0x03C1, b'p'), (0x03C3, b'o'), (0x03C5, b'u'), (0x03C7, b'x'),
    (0x03DC, b'F'), (0x03F1, b'p'), (0x03F2, b'c'), (0x03F3, b'j'), (0x03F9, b'C'),
    (0x0405, b'S'), (0x0406, b'I'), (0x0408, b'J'), (0x0410, b'A'), (0x0412, b'B'),
    (0x0415, b'E'), (0x041A, b'K'), (0x041C, b'M'), (0x041D, b'H'), (0x041E, b'O'),
    (0x0420, b'P'), (0x0421, b'C'), (0x0422, b'T'), (0x0423, b'Y'), (0x0425, b'X'),
    (0x042C, b'b'), (0x0430, b'a'), (0x0433, b'r'), (0x0435, b'e'), (0x043A, b'k'),
    (0x043E, b'o'), (0x0440, b'p'), (0x0441, b'c'), (0x0443, b'y'), (0x0445, b'x'),
    (0x0455, b's'), (0x0456, b'i'), (0x0458, b'j'), (0x0474, b'V'), (0x0475, b'v'),
    (0x04AE, b'Y'), (0x04AF, b'y'), (0x04BB, b'h'), (0x04C0, b'I'), (0x04CF, b'l'),
    (0x0501, b'd'), (0x050C, b'G'), (0x051A, b'Q'), (0x051B, b'q'), (0x051C, b'W'),
    (0x051D, b'w'),
    (0x054D, b'U'), (0x054F, b'S'), (0x0555, b'O'), (0x0563, b'q'), (0x0566, b'q'),
    (0x0570, b'h'), (0x0578, b'n'), (0x057D, b'u'), (0x0581, b'g'), (0x0585, b'o'),
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
