//! The tagger's input: the tokens of a text and the features of each (see the parent
//! module), and which tokens are candidates at all.

use super::super::lists::{Cue, Lexicon, PARTICLES, TITLES, is_calendar, key_cue};
use super::super::scan::{Scan, Word, fold, glued, runs};
use super::super::{ENTITIES, whole_words};
use crate::detect::Span;

/// Feature slots per token.
pub(crate) const FEATURES: usize = 14;

/// A token: `start..end` are byte offsets into the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// The tokens of `text`.
pub(crate) fn tokens(text: &str) -> Vec<Token> {
    runs(text, char::is_alphanumeric)
        .into_iter()
        .map(|(start, end)| Token { start, end })
        .collect()
}

/// FNV-1a of a slot number and some byte strings, as a bucket id in `1..buckets`.
struct Hasher(u64);

impl Hasher {
    fn new(slot: u8) -> Hasher {
        let mut h = Hasher(0xcbf2_9ce4_8422_2325);
        h.write(&[slot]);
        h
    }

    fn write(&mut self, bytes: &[u8]) -> &mut Hasher {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    fn bucket(&self, buckets: usize) -> u32 {
        let buckets = buckets.max(2) as u64;
        (1 + self.0 % (buckets - 1)) as u32
    }
}

/// The shape of a word: `X` upper, `x` lower, `d` digit, runs of one class kept to two.
fn shape(word: &str, out: &mut Vec<u8>) {
    out.clear();
    let mut run = 0;
    for c in word.chars() {
        let class = if c.is_uppercase() {
            b'X'
        } else if c.is_lowercase() {
            b'x'
        } else if c.is_numeric() {
            b'd'
        } else {
            b'-'
        };
        if out.last() == Some(&class) {
            run += 1;
        } else {
            run = 1;
        }
        if run <= 2 {
            out.push(class);
        }
    }
}

/// What lies between two tokens, kept short: spaces as `_`, a line break as `n`, up to
/// four other characters.
fn gap(between: &str, out: &mut Vec<u8>) {
    out.clear();
    for c in between.chars() {
        let class = match c {
            '\n' | '\r' => b'n',
            c if c.is_whitespace() => b'_',
            c if c.is_ascii() => c as u8,
            _ => b'~',
        };
        if out.last() != Some(&class) && out.len() < 4 {
            out.push(class);
        }
    }
}

/// The features of each token of `text` (`tokens × FEATURES` bucket ids, 0 for an empty
/// slot), given the rules' spans (`rules`, unresolved) and the model's bucket count; and for
/// each token whether it could be part of an entity at all (see [`Input::candidate`]).
pub(crate) fn features(
    lexicon: &'static Lexicon,
    text: &str,
    tokens: &[Token],
    rules: &[Span],
    buckets: usize,
) -> Input {
    let lower_text = !text.chars().any(char::is_uppercase);
    let mut scan = Scan {
        lexicon,
        text,
        words: tokens
            .iter()
            .map(|t| Word {
                start: t.start,
                end: t.end,
            })
            .collect(),
        known: vec![None; tokens.len()],
        buffer: String::new(),
        lower_text,
    };
    // The best rule span over each token, and whether the token starts it.
    let mut rule: Vec<Option<(usize, bool, f32)>> = vec![None; tokens.len()];
    for span in rules {
        let kind = ENTITIES.iter().position(|e| *e == span.entity).unwrap_or(0);
        let first = tokens.partition_point(|t| t.end <= span.start);
        for (i, token) in tokens.iter().enumerate().skip(first) {
            if token.start >= span.end {
                break;
            }
            let slot = &mut rule[i];
            if slot.is_none_or(|(_, _, score)| score < span.score) {
                *slot = Some((kind, token.start <= span.start, span.score));
            }
        }
    }
    let in_places = |automaton: &aho_corasick::AhoCorasick, marks: &mut Vec<u8>| {
        for m in automaton.find_iter(text) {
            if !whole_words(text, m.start(), m.end()) {
                continue;
            }
            let first = tokens.partition_point(|t| t.end <= m.start());
            for (i, token) in tokens.iter().enumerate().skip(first) {
                if token.start >= m.end() {
                    break;
                }
                marks[i] = if token.start <= m.start() { b'B' } else { b'I' };
            }
        }
    };
    let mut place = vec![0u8; tokens.len()];
    if lower_text {
        in_places(&lexicon.places_in_lower, &mut place);
    } else {
        in_places(&lexicon.places, &mut place);
    }
    // Cues and JSON keys: the kind of value they announce, for the tokens after them.
    let mut cue = vec![0u8; tokens.len()];
    let announce = |end: usize, kind: Cue, cue: &mut Vec<u8>| {
        let first = tokens.partition_point(|t| t.start < end);
        let letter = match kind {
            Cue::PersonStrong => b'P',
            Cue::PersonWeak => b'p',
            Cue::PersonIntro => b'i',
            Cue::Location => b'L',
            Cue::LocationWeak => b'l',
            Cue::Organization => b'O',
        };
        for slot in cue.iter_mut().skip(first).take(3) {
            if *slot == 0 {
                *slot = letter;
            }
        }
    };
    let bytes = text.as_bytes();
    for m in lexicon.cues.find_iter(text) {
        let before_ok = m.start() == 0 || !bytes[m.start() - 1].is_ascii_alphanumeric();
        let after_ok = bytes
            .get(m.end())
            .is_none_or(|b| !b.is_ascii_alphanumeric());
        if before_ok && after_ok {
            for kind in &lexicon.cue_kinds[m.pattern().as_usize()] {
                announce(m.end(), *kind, &mut cue);
            }
        }
    }
    let mut key = vec![None; tokens.len()];
    for whole in lexicon.json_key.find_iter(text) {
        let name = whole.as_str().trim_start_matches(['\\', '"']);
        let name = name.split(['\\', '"']).next().unwrap_or_default();
        if let Some(kind) = key_cue(name) {
            announce(whole.end(), kind, &mut cue);
        }
        let first = tokens.partition_point(|t| t.start < whole.end());
        if let Some(slot) = key.get_mut(first) {
            *slot = Some(name);
        }
    }

    let mut out = vec![0u32; tokens.len() * FEATURES];
    let mut seed = vec![false; tokens.len()];
    let mut folded = String::new();
    let mut scratch = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let word = &text[token.start..token.end];
        let slots = &mut out[i * FEATURES..(i + 1) * FEATURES];
        let numeric = word.chars().any(char::is_numeric);
        fold(word, &mut folded);
        shape(word, &mut scratch);
        let length = word.chars().count().min(9) as u8;
        if numeric {
            slots[0] = Hasher::new(0).write(b"#").write(&scratch).bucket(buckets);
        } else {
            slots[0] = Hasher::new(0).write(folded.as_bytes()).bucket(buckets);
            let chars = folded.chars().count();
            if chars >= 4 {
                // The byte offsets of the fourth character and of the third from the end.
                let mut at = folded.char_indices().map(|(at, _)| at);
                let head_end = at.nth(3).unwrap_or(folded.len());
                let tail_start = folded.char_indices().nth(chars - 3).map_or(0, |(at, _)| at);
                slots[1] = Hasher::new(1)
                    .write(&folded.as_bytes()[tail_start..])
                    .bucket(buckets);
                slots[2] = Hasher::new(2)
                    .write(&folded.as_bytes()[..head_end])
                    .bucket(buckets);
            }
        }
        slots[3] = Hasher::new(3)
            .write(&scratch)
            .write(&[b'0' + length])
            .bucket(buckets);
        if !numeric {
            let facts = scan.facts(i);
            let flags = [
                facts.given,
                facts.frequent,
                facts.surname,
                facts.common,
                facts.title || TITLES.contains(&folded.as_str()),
                is_calendar(word),
                PARTICLES.contains(&folded.as_str()),
            ];
            let bits: u8 = flags
                .iter()
                .enumerate()
                .map(|(b, on)| u8::from(*on) << b)
                .sum();
            slots[4] = Hasher::new(4).write(&[bits]).bucket(buckets);
            // A listed name that is also a common word (`last`, `check`, `will`) is a
            // candidate only when capitalised, or in text without capitals.
            seed[i] = facts.capitalised
                || facts.title
                || ((facts.given || facts.surname) && (!facts.common || lower_text));
        } else {
            seed[i] = true;
        }
        // A weak cue (`to`, `for`, `in`: most of prose follows one) makes a word a candidate
        // only in text without capitals, where names are written in lower case too; a strong
        // one (`Dear`, `lives in`, `works at`) always does.
        let by_cue = match cue[i] {
            0 => false,
            b'p' | b'l' => lower_text,
            _ => true,
        };
        seed[i] |= rule[i].is_some() || place[i] != 0 || by_cue || key[i].is_some();
        if place[i] != 0 {
            slots[5] = Hasher::new(5).write(&[place[i]]).bucket(buckets);
        }
        slots[6] = match rule[i] {
            Some((kind, starts, score)) => Hasher::new(6)
                .write(&[kind as u8, u8::from(starts), (score * 20.0) as u8])
                .bucket(buckets),
            None => Hasher::new(6).write(b"none").bucket(buckets),
        };
        let before = i
            .checked_sub(1)
            .map_or(&text[..token.start], |p| &text[tokens[p].end..token.start]);
        gap(before, &mut scratch);
        slots[7] = Hasher::new(7).write(&scratch).bucket(buckets);
        let after = tokens
            .get(i + 1)
            .map_or(&text[token.end..], |n| &text[token.end..n.start]);
        gap(after, &mut scratch);
        slots[8] = Hasher::new(8).write(&scratch).bucket(buckets);
        slots[9] = Hasher::new(9)
            .write(&[
                u8::from(lower_text),
                u8::from(i == 0),
                u8::from(scan.starts_sentence(i)),
            ])
            .bucket(buckets);
        if let Some(name) = key[i] {
            fold(name, &mut folded);
            slots[10] = Hasher::new(10).write(folded.as_bytes()).bucket(buckets);
        }
        if cue[i] != 0 {
            slots[11] = Hasher::new(11).write(&[cue[i]]).bucket(buckets);
        }
        if glued(text, token.start, token.end) {
            slots[12] = Hasher::new(12).write(b"glued").bucket(buckets);
        }
        // The word two tokens before, when one token lies between: `name = "Jane Doe"`.
        if let Some(p) = i.checked_sub(2) {
            let before = &text[tokens[p].start..tokens[p].end];
            if !before.chars().any(char::is_numeric) {
                fold(before, &mut folded);
                slots[13] = Hasher::new(13).write(folded.as_bytes()).bucket(buckets);
            }
        }
    }
    let candidate = (0..tokens.len())
        .map(|i| seed[i.saturating_sub(1)..(i + 2).min(tokens.len())].contains(&true))
        .collect();
    Input {
        features: out,
        candidate,
    }
}

/// The tagger's input for one text.
pub(crate) struct Input {
    /// `tokens × FEATURES` bucket ids.
    pub(crate) features: Vec<u32>,
    /// Whether each token, or a token beside it, is capitalised, holds a digit, is a listed
    /// name, title or place, lies in a rule's span or follows a cue or a JSON key. The others
    /// (lower-case words no list knows, amid such words) are `O` without the network: in
    /// the training corpora they nearly never begin or continue an entity, and they are most
    /// of the words of ordinary prose.
    pub(crate) candidate: Vec<bool>,
}
