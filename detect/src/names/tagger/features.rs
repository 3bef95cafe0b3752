//! The tagger's input: the tokens of a text and the features of each (see the parent
//! module), and which tokens are candidates at all.

use super::super::lists::{Cue, Lexicon, PARTICLES, is_calendar, key_cue};
use super::super::scan::Scan;
use super::super::words::{Word, fold, glued, runs};
use super::super::{ENTITIES, Marks};
use crate::Span;

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
/// slot), given the rules' spans (`rules`, unresolved) and marks and the model's bucket count;
/// and for each token whether it could be part of an entity at all (see
/// [`Input::candidate`]). The scanner computes the same features for the tokens near
/// candidates only ([`Context`]).
pub(crate) fn features(
    lexicon: &'static Lexicon,
    text: &str,
    tokens: &[Token],
    rules: &[Span],
    marks: &Marks,
    buckets: usize,
) -> Input {
    let mut context = Context::new(lexicon, text, tokens, rules, marks, buckets);
    let candidate = context.candidates();
    let mut out = vec![0u32; tokens.len() * FEATURES];
    for (i, slots) in out.chunks_exact_mut(FEATURES).enumerate() {
        context.slots(i, slots);
    }
    Input {
        features: out,
        candidate,
    }
}

/// What the features of the tokens of one text are computed from: the rules' spans, cues,
/// keys and places over each token, and the lists (looked up once a token).
pub(crate) struct Context<'t, 'k> {
    text: &'t str,
    tokens: &'k [Token],
    scan: Scan<'t>,
    buckets: usize,
    lower_text: bool,
    /// The best rule span over each token: its type, whether the token starts it, its score.
    rule: Vec<Option<(usize, bool, f32)>>,
    /// `B` or `I` of a listed place, or 0.
    place: Vec<u8>,
    /// The kind of the cue within three tokens before, or 0.
    cue: Vec<u8>,
    /// The JSON key a token is the first token of the value of.
    key: Vec<Option<(usize, usize)>>,
    folded: String,
    scratch: Vec<u8>,
}

impl<'t, 'k> Context<'t, 'k> {
    pub(crate) fn new(
        lexicon: &'static Lexicon,
        text: &'t str,
        tokens: &'k [Token],
        rules: &[Span],
        marks: &Marks,
        buckets: usize,
    ) -> Context<'t, 'k> {
        let lower_text = marks.lower;
        let scan = Scan {
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
        let mut place = vec![0u8; tokens.len()];
        for &(start, end) in &marks.places {
            let first = tokens.partition_point(|t| t.end <= start);
            for (i, token) in tokens.iter().enumerate().skip(first) {
                if token.start >= end {
                    break;
                }
                place[i] = if token.start <= start { b'B' } else { b'I' };
            }
        }
        // Cues and JSON keys: the kind of value they announce, for the tokens after them.
        let mut cue = vec![0u8; tokens.len()];
        let announce = |end: usize, kind: Cue, cue: &mut Vec<u8>| {
            let first = tokens.partition_point(|t| t.start < end);
            let letter = match kind {
                Cue::PersonStrong => b'P',
                Cue::PersonWeak => b'p',
                Cue::PersonVerb => b'v',
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
        for &(_, end, pattern) in &marks.cues {
            if bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric()) {
                for kind in &lexicon.cue_kinds[pattern] {
                    announce(end, *kind, &mut cue);
                }
            }
        }
        let mut key = vec![None; tokens.len()];
        for &(end, from, to) in &marks.keys {
            if let Some(kind) = key_cue(&text[from..to]) {
                announce(end, kind, &mut cue);
            }
            let first = tokens.partition_point(|t| t.start < end);
            if let Some(slot) = key.get_mut(first) {
                *slot = Some((from, to));
            }
        }
        Context {
            text,
            tokens,
            scan,
            buckets,
            lower_text,
            rule,
            place,
            cue,
            key,
            folded: String::new(),
            scratch: Vec::new(),
        }
    }

    /// Whether each token, or a token beside it, is a seed (see [`Input::candidate`]).
    pub(crate) fn candidates(&mut self) -> Vec<bool> {
        let count = self.tokens.len();
        let mut seed = vec![false; count];
        for (i, slot) in seed.iter_mut().enumerate() {
            *slot = self.seed(i);
        }
        (0..count)
            .map(|i| seed[i.saturating_sub(1)..(i + 2).min(count)].contains(&true))
            .collect()
    }

    fn seed(&mut self, i: usize) -> bool {
        let token = self.tokens[i];
        let word = &self.text[token.start..token.end];
        let first = word.chars().next().unwrap_or(' ');
        if first.is_uppercase() || self.rule[i].is_some() || self.place[i] != 0 {
            return true;
        }
        if self.key[i].is_some() || word.bytes().any(|b| b.is_ascii_digit()) {
            return true;
        }
        if word.chars().any(char::is_numeric) {
            return true;
        }
        let cue = self.cue[i];
        if cue == b'i' || (self.lower_text && cue != 0) {
            return true;
        }
        // A lower-case word: a listed given name that is not a common word (in lower-case
        // text also a family name or a title), or after a strong cue any listed name.
        let facts = self.scan.facts(i);
        let listed = (facts.given || facts.surname) && !facts.common;
        if self.lower_text {
            facts.title || listed
        } else {
            (facts.given && !facts.common) || (matches!(cue, b'P' | b'L' | b'O') && listed)
        }
    }

    /// The bucket ids of token `i`'s features into `slots` (`FEATURES` of them).
    pub(crate) fn slots(&mut self, i: usize, slots: &mut [u32]) {
        let (text, tokens, buckets) = (self.text, self.tokens, self.buckets);
        let token = tokens[i];
        let word = &text[token.start..token.end];
        slots.fill(0);
        let numeric = word.chars().any(char::is_numeric);
        let folded = &mut self.folded;
        let scratch = &mut self.scratch;
        fold(word, folded);
        shape(word, scratch);
        let length = word.chars().take(9).count() as u8;
        if numeric {
            slots[0] = Hasher::new(0).write(b"#").write(scratch).bucket(buckets);
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
            .write(scratch)
            .write(&[b'0' + length])
            .bucket(buckets);
        if !numeric {
            let facts = self.scan.facts(i);
            let flags = [
                facts.given,
                facts.frequent,
                facts.surname,
                facts.common,
                facts.title,
                is_calendar(word),
                PARTICLES.contains(&self.folded.as_str()),
            ];
            let bits: u8 = flags
                .iter()
                .enumerate()
                .map(|(b, on)| u8::from(*on) << b)
                .sum();
            slots[4] = Hasher::new(4).write(&[bits]).bucket(buckets);
        }
        if self.place[i] != 0 {
            slots[5] = Hasher::new(5).write(&[self.place[i]]).bucket(buckets);
        }
        slots[6] = match self.rule[i] {
            Some((kind, starts, score)) => Hasher::new(6)
                .write(&[kind as u8, u8::from(starts), (score * 20.0) as u8])
                .bucket(buckets),
            None => Hasher::new(6).write(b"none").bucket(buckets),
        };
        let before = i
            .checked_sub(1)
            .map_or(&text[..token.start], |p| &text[tokens[p].end..token.start]);
        gap(before, &mut self.scratch);
        slots[7] = Hasher::new(7).write(&self.scratch).bucket(buckets);
        let after = tokens
            .get(i + 1)
            .map_or(&text[token.end..], |n| &text[token.end..n.start]);
        gap(after, &mut self.scratch);
        slots[8] = Hasher::new(8).write(&self.scratch).bucket(buckets);
        slots[9] = Hasher::new(9)
            .write(&[
                u8::from(self.lower_text),
                u8::from(i == 0),
                u8::from(self.scan.starts_sentence(i)),
            ])
            .bucket(buckets);
        if let Some((from, to)) = self.key[i] {
            fold(&text[from..to], &mut self.folded);
            slots[10] = Hasher::new(10)
                .write(self.folded.as_bytes())
                .bucket(buckets);
        }
        if self.cue[i] != 0 {
            slots[11] = Hasher::new(11).write(&[self.cue[i]]).bucket(buckets);
        }
        if glued(text, token.start, token.end) {
            slots[12] = Hasher::new(12).write(b"glued").bucket(buckets);
        }
        // The word two tokens before, when one token lies between: `name = "Jane Doe"`.
        if let Some(p) = i.checked_sub(2) {
            let before = &text[tokens[p].start..tokens[p].end];
            if !before.chars().any(char::is_numeric) {
                fold(before, &mut self.folded);
                slots[13] = Hasher::new(13)
                    .write(self.folded.as_bytes())
                    .bucket(buckets);
            }
        }
    }
}

/// The tagger's input for one text.
pub(crate) struct Input {
    /// `tokens × FEATURES` bucket ids.
    pub(crate) features: Vec<u32>,
    /// Whether each token, or a token beside it, is a seed: capitalised, holding a digit, in
    /// a rule's span or a listed place, the value of a JSON key, after a speaker's
    /// introduction (`i'm`, `my name is`), or a listed given name that is not a common word;
    /// in text without capitals also any listed name or title and any word after a cue; in
    /// text with capitals a listed name after a strong cue. The others (lower-case words no
    /// list knows, amid such words) are `O` without the network: in the training corpora
    /// they nearly never begin or continue an entity, and they are most of the words of
    /// ordinary prose.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) candidate: Vec<bool>,
}
