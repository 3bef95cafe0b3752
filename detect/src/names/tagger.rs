//! The names tagger: a small neural network that labels each token of a text as the start
//! or the inside of a `PERSON`, `LOCATION` or `ORGANIZATION`, or as none, from the token, its
//! neighbours and what the word lists and the rules say of them.
//!
//! - **Tokens** are runs of letters and digits, with `'`, `’` and `-` inside (`O'Brien`,
//!   `Jean-Luc`, `NW1`); what lies between two tokens is a feature of both.
//! - **Features** of a token ([`FEATURES`] slots, see [`features`]): the folded word, its
//!   prefix and suffix, its shape, what the lists say of it (given name, family name,
//!   common word, title, weekday or month, particle, place), the rule span it lies in and
//!   that span's score, the text between it and its neighbours, the JSON key or cue before
//!   it, and whether the text is lower-case. Each is hashed (FNV-1a) into one of the
//!   model's buckets; slot 0 is empty.
//! - **The network**: the sum of a token's feature embeddings; the embeddings of the token
//!   and of `window` tokens on each side, side by side; one hidden layer (ReLU); seven
//!   outputs (`O`, then `B`/`I` for each type), as probabilities by softmax.
//! - **Which tokens run it**: only candidates (see [`features::Input::candidate`]) and the tokens
//!   after a token found part of an entity; the others are `O` without the network.
//! - **Spans**: consecutive tokens of one type (a token whose type reaches [`ENTITY_FLOOR`]),
//!   a new span at a token more likely `B` than `I`; the score is `SCORE_BASE + SCORE_RANGE ×`
//!   the span's mean probability of its type.
//!
//! The weights (`detect/data/names/tagger.bin`) were trained by
//! `detect/train/names/train.py` on generated corpora (`scripts/train-names` runs it end to
//! end); the file's layout is written there and read by [`Tagger::from_bytes`]. The training
//! reads its features from the `names-features` example (`detect/examples/`), which calls
//! this module, so that what the network learned from is what it is given.

use serde::Deserialize;

use super::lists::{Lexicon, is_calendar};
use super::words::{fold, glued, month_by_number};
use super::{LOCATION, Marks, ORGANIZATION, PERSON};
use crate::Span;

mod features;
use features::Context;
pub(crate) use features::{FEATURES, Token, features, tokens};

/// The labels, in the order of the network's outputs.
pub(crate) const LABELS: [&str; 7] = [
    "O",
    "B-PERSON",
    "I-PERSON",
    "B-LOCATION",
    "I-LOCATION",
    "B-ORGANIZATION",
    "I-ORGANIZATION",
];

const MAGIC: &[u8; 8] = b"ATDPTAG1";

/// A token is part of an entity when the probability of its most likely type reaches this,
/// even when `O` is likelier: a name let through costs more than a word masked (the trade is
/// measured in docs/benchmarks.md, "Names, places and organisations").
const ENTITY_FLOOR: f32 = 0.35;

/// A span's score is `SCORE_BASE + SCORE_RANGE × p`: at least the default threshold, above
/// the rules' list, cue and lone-word spans when the network is sure, below their shapes
/// (an address, a legal form), which the network only learned to follow.
const SCORE_BASE: f32 = 0.5;
const SCORE_RANGE: f32 = 0.3;

/// The shape of the network, from the weight file's header.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    buckets: usize,
    dim: usize,
    window: usize,
    hidden: usize,
    features: usize,
    labels: Vec<String>,
}

/// The network's weights: the embeddings as in the file (`i8`, a scale a bucket: 16 bytes a
/// row at 16 dimensions, so that the rows a text touches stay in the cache), the layers as
/// `f32`.
pub(crate) struct Tagger {
    buckets: usize,
    dim: usize,
    window: usize,
    hidden: usize,
    /// `buckets × dim`; row 0 (the empty slot) is zero.
    embed: Vec<i8>,
    scales: Vec<f32>,
    /// The first layer transposed: `(2 window + 1) dim × hidden`, so that a candidate's
    /// hidden units are computed as a sum of rows, which the compiler vectorises.
    w1t: Vec<f32>,
    b1: Vec<f32>,
    /// `labels × hidden`, row-major.
    w2: Vec<f32>,
    b2: Vec<f32>,
}

impl std::fmt::Debug for Tagger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tagger")
            .field("buckets", &self.buckets)
            .field("dim", &self.dim)
            .field("window", &self.window)
            .field("hidden", &self.hidden)
            .finish_non_exhaustive()
    }
}

/// Reads little-endian values from the weight file.
struct Reader<'b> {
    bytes: &'b [u8],
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], String> {
        if self.bytes.len() < n {
            return Err("names tagger weights: the file is cut short".to_owned());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn f32s(&mut self, n: usize) -> Result<Vec<f32>, String> {
        let bytes = self.take(n.checked_mul(4).ok_or("names tagger weights: too large")?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

impl Tagger {
    /// The network of a weight file: `ATDPTAG1`, the header's length (u32) and the header
    /// (JSON), then little-endian arrays: the embeddings as `i8` (`buckets × dim`) with one
    /// `f32` scale per bucket, then `w1`, `b1`, `w2`, `b2` as `f32`.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Tagger, String> {
        let mut reader = Reader { bytes };
        if reader.take(MAGIC.len())? != MAGIC {
            return Err("names tagger weights: not an ATDPTAG1 file".to_owned());
        }
        let length = reader.u32()? as usize;
        let header: Header = serde_json::from_slice(reader.take(length)?)
            .map_err(|e| format!("names tagger weights: header: {e}"))?;
        if header.features != FEATURES
            || header.labels != LABELS
            || header.buckets < 2
            || header.dim == 0
            || header.hidden == 0
            || header.window > 8
        {
            return Err(format!(
                "names tagger weights: the network ({} features, labels {:?}) is not the one \
                 this build reads ({FEATURES} features, labels {LABELS:?})",
                header.features, header.labels
            ));
        }
        let (buckets, dim, hidden) = (header.buckets, header.dim, header.hidden);
        let cells = buckets
            .checked_mul(dim)
            .ok_or("names tagger weights: too large")?;
        let mut embed: Vec<i8> = reader
            .take(cells)?
            .iter()
            .map(|q| q.cast_signed())
            .collect();
        let scales = reader.f32s(buckets)?;
        embed[..dim].fill(0);
        let too_large = || "names tagger weights: too large".to_owned();
        let inputs = (2 * header.window + 1)
            .checked_mul(dim)
            .ok_or_else(too_large)?;
        let w1 = reader.f32s(hidden.checked_mul(inputs).ok_or_else(too_large)?)?;
        let mut w1t = vec![0.0f32; w1.len()];
        for (h, row) in w1.chunks_exact(inputs).enumerate() {
            for (i, w) in row.iter().enumerate() {
                w1t[i * hidden + h] = *w;
            }
        }
        let b1 = reader.f32s(hidden)?;
        let w2 = reader.f32s(LABELS.len().checked_mul(hidden).ok_or_else(too_large)?)?;
        let b2 = reader.f32s(LABELS.len())?;
        if !reader.bytes.is_empty() {
            return Err("names tagger weights: bytes after the last array".to_owned());
        }
        let all_finite = [&scales, &w1t, &b1, &w2, &b2]
            .iter()
            .all(|v| v.iter().all(|x| x.is_finite()));
        if !all_finite {
            return Err("names tagger weights: a weight is not a finite number".to_owned());
        }
        Ok(Tagger {
            buckets,
            dim,
            window: header.window,
            hidden,
            embed,
            scales,
            w1t,
            b1,
            w2,
            b2,
        })
    }

    /// The probabilities of [`LABELS`] for each token, from its features
    /// (`tokens × FEATURES` bucket ids as [`features`] gives them).
    /// Tokens for which `run` is false are given `O` without the network's layers, unless the
    /// token before them is more likely part of an entity than not.
    #[cfg(test)]
    pub(crate) fn probabilities(&self, features: &[u32], run: &[bool]) -> Vec<[f32; 7]> {
        let tokens = features.len() / FEATURES;
        self.run(tokens, run, |i, slots| {
            slots.copy_from_slice(&features[i * FEATURES..(i + 1) * FEATURES]);
        })
    }

    /// The probabilities of [`LABELS`] for each of `tokens` tokens, whose features `slots`
    /// gives on demand (only for the tokens the network reads and their neighbours); `run`
    /// as for [`Tagger::probabilities`].
    fn run(
        &self,
        tokens: usize,
        run: &[bool],
        mut slots: impl FnMut(usize, &mut [u32]),
    ) -> Vec<[f32; 7]> {
        const NONE: [f32; 7] = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let dim = self.dim;
        let pad = self.window;
        // Each token's summed embedding, with `window` zero rows of padding on each side,
        // computed once it is needed.
        let mut summed = vec![0.0f32; (tokens + 2 * pad) * dim];
        let mut done = vec![false; tokens];
        let mut ids = [0u32; FEATURES];
        let mut need = |t: usize, summed: &mut [f32]| {
            let (first, last) = (t.saturating_sub(pad), (t + pad).min(tokens - 1));
            for u in first..=last {
                if std::mem::replace(&mut done[u], true) {
                    continue;
                }
                slots(u, &mut ids);
                let row = &mut summed[(u + pad) * dim..(u + pad + 1) * dim];
                for &id in &ids {
                    let id = id as usize;
                    if id == 0 || id >= self.buckets {
                        continue;
                    }
                    let scale = self.scales[id];
                    for (acc, q) in row.iter_mut().zip(&self.embed[id * dim..(id + 1) * dim]) {
                        *acc += f32::from(*q) * scale;
                    }
                }
            }
        };
        let inputs = (2 * pad + 1) * dim;
        let mut out = vec![NONE; tokens];
        // The candidates first, in batches.
        let candidates: Vec<usize> = (0..tokens)
            .filter(|t| run.get(*t).copied().unwrap_or(true))
            .collect();
        for &t in &candidates {
            need(t, &mut summed);
        }
        let mut hidden = vec![0.0f32; BATCH * self.hidden];
        for batch in candidates.chunks(BATCH) {
            // The window of token t is rows t..t + 2 pad + 1 of `summed`, contiguous.
            let xs: Vec<&[f32]> = batch
                .iter()
                .map(|&t| &summed[t * dim..t * dim + inputs])
                .collect();
            self.layers(&xs, &mut hidden);
            for (k, &t) in batch.iter().enumerate() {
                out[t] = self.output(&hidden[k * self.hidden..(k + 1) * self.hidden]);
            }
        }
        // A token after one the network did not call `O` always goes through it, so that an
        // entity may continue into words that are not candidates (`Berdzik i syn s.c.`).
        let mut after_entity = false;
        for t in 0..tokens {
            let candidate = run.get(t).copied().unwrap_or(true);
            if !candidate && !after_entity {
                continue;
            }
            if !candidate {
                need(t, &mut summed);
                let x = &summed[t * dim..t * dim + inputs];
                self.layers(&[x], &mut hidden);
                out[t] = self.output(&hidden[..self.hidden]);
            }
            let p = &out[t];
            // Whenever `find` may take this token into an entity, or `O` is not likelier
            // than not.
            let best = p[1..]
                .chunks_exact(2)
                .map(|bi| bi[0] + bi[1])
                .fold(0.0, f32::max);
            after_entity = best >= ENTITY_FLOOR || best > p[0] || p[0] < 0.5;
        }
        out
    }

    /// The hidden layer (ReLU) of each input window of `xs` (at most [`BATCH`]), into
    /// `hidden` (`hidden` units a window): the rows of the transposed first layer, each
    /// read once for the whole batch, scaled and added.
    fn layers(&self, xs: &[&[f32]], hidden: &mut [f32]) {
        let units = self.hidden;
        for k in 0..xs.len() {
            hidden[k * units..(k + 1) * units].copy_from_slice(&self.b1);
        }
        for (i, row) in self.w1t.chunks_exact(units).enumerate() {
            for (k, x) in xs.iter().enumerate() {
                let xi = x[i];
                if xi == 0.0 {
                    continue;
                }
                for (h, w) in hidden[k * units..(k + 1) * units].iter_mut().zip(row) {
                    *h += xi * w;
                }
            }
        }
        for h in &mut hidden[..xs.len() * units] {
            *h = h.max(0.0);
        }
    }

    /// The label probabilities from one token's hidden units.
    fn output(&self, hidden: &[f32]) -> [f32; 7] {
        let mut logits = [0.0f32; 7];
        for (logit, (row, bias)) in logits
            .iter_mut()
            .zip(self.w2.chunks_exact(self.hidden).zip(&self.b2))
        {
            *logit = bias + dot(row, hidden);
        }
        let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for l in &mut logits {
            *l = (*l - top).exp();
            total += *l;
        }
        for l in &mut logits {
            *l /= total;
        }
        logits
    }
}

/// Candidates whose hidden layer is computed together, each row of weights read once.
const BATCH: usize = 8;

/// `a · b`, in eight lanes that the compiler vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// The spans the tagger finds in `text`, given the rules' spans.
pub(crate) fn find(
    tagger: &Tagger,
    lexicon: &'static Lexicon,
    text: &str,
    rules: &[Span],
    marks: &Marks,
    out: &mut Vec<Span>,
) {
    let tokens = tokens(text);
    // One word alone (a JSON key, an enum value: `tags`, `pending`) has no neighbours to tell
    // a name from a word by; the rules decide on it alone, from the lists.
    if tokens.len() < 2 {
        return;
    }
    let mut context = Context::new(lexicon, text, &tokens, rules, marks, tagger.buckets);
    let candidate = context.candidates();
    if !candidate.contains(&true) {
        return;
    }
    let probabilities = tagger.run(tokens.len(), &candidate, |i, slots| {
        context.slots(i, slots);
    });
    let entities = [PERSON, LOCATION, ORGANIZATION];
    let digits = |t: &Token| text[t.start..t.end].chars().any(char::is_numeric);
    // The open span: its type, first and last token, and the sum of its tokens' probability.
    let mut open: Option<(usize, usize, usize, f32)> = None;
    let mut folded = String::new();
    let has_lower = text.chars().any(char::is_lowercase);
    let mut close = |open: &mut Option<(usize, usize, usize, f32)>, out: &mut Vec<Span>| {
        let Some((kind, first, last, total)) = open.take() else {
            return;
        };
        // A person's name starts after an article or a title the network took in (`A
        // technician`, `Mrs Fors`); a place's or an organisation's after an article.
        let mut first = first;
        while first < last {
            let word = &text[tokens[first].start..tokens[first].end];
            fold(word, &mut folded);
            let article = matches!(folded.as_str(), "a" | "an" | "the");
            if !(article || (kind == 0 && lexicon.entry(&folded).title)) {
                break;
            }
            first += 1;
        }
        let (start, end) = (tokens[first].start, tokens[last].end);
        // Not a word of an identifier or a placeholder (`jane\u0040x`, `[PERSON]`), not
        // common words alone (`May`, `Summer Sale`, `New Feature`), which the rules decide on
        // their own, not a month next to a number (`Jan 12`), not an acronym alone in text
        // that has lower case (`NINO`, `CRM`), and not numbers alone.
        let word = &text[start..end];
        let all_common = tokens[first..=last].iter().all(|t| {
            let word = &text[t.start..t.end];
            fold(word, &mut folded);
            let entry = lexicon.entry(&folded);
            // A title alone is no person (`Mrs`, `Dr`).
            entry.common
                || (kind == 0 && entry.title)
                || is_calendar(word)
                || word.chars().nth(1).is_none()
                || digits(t)
        });
        let lone_common = all_common
            || (first == last
                && (month_by_number(text, |i| tokens.get(i).map(|t| (t.start, t.end)), first)
                    || (word.chars().count() <= 5
                        && word.chars().all(char::is_uppercase)
                        && has_lower)));
        let has_word = tokens[first..=last]
            .iter()
            .any(|t| !digits(t) && text[t.start..t.end].chars().nth(1).is_some());
        if has_word
            && !lone_common
            && super::whole_words(text, start, end)
            && !glued(text, start, end)
        {
            out.push(Span {
                start,
                end,
                entity: entities[kind],
                score: SCORE_BASE + SCORE_RANGE * total / (last - first + 1) as f32,
            });
        }
    };
    for (i, p) in probabilities.iter().enumerate() {
        let typed = [p[1] + p[2], p[3] + p[4], p[5] + p[6]];
        let (kind, best) = typed
            .iter()
            .copied()
            .enumerate()
            .fold((0, f32::MIN), |a, b| if b.1 > a.1 { b } else { a });
        let token = &tokens[i];
        if (best < ENTITY_FLOOR && best <= p[0]) || !may_be_part(text, token, entities[kind]) {
            close(&mut open, out);
            continue;
        }
        let begins = p[1 + 2 * kind] > p[2 + 2 * kind];
        match &mut open {
            Some((k, _, last, total))
                if *k == kind
                    && !begins
                    && joins(&text[tokens[*last].end..token.start], entities[kind]) =>
            {
                *last = i;
                *total += best;
            }
            _ => {
                close(&mut open, out);
                open = Some((kind, i, i, best));
            }
        }
    }
    close(&mut open, out);
}

/// Whether `token` may be part of an `entity` span: digits only in a place (a house number,
/// a postcode), never a long run of letters and digits (an id, a hash), never a piece of an
/// identifier (`user_jane`).
fn may_be_part(text: &str, token: &Token, entity: &str) -> bool {
    let word = &text[token.start..token.end];
    let numeric = word.chars().any(char::is_numeric);
    let letters = word.chars().any(char::is_alphabetic);
    !(numeric && (entity != LOCATION || (letters && word.len() > 7)))
        && !glued(text, token.start, token.end)
}

/// Whether what lies between two tokens may lie inside one `entity` span: spaces, commas,
/// full stops, apostrophes, hyphens and `&` (`Smith & Jones`); in a place also line breaks
/// and `/` (`27/67`); never anything longer than four characters.
fn joins(between: &str, entity: &str) -> bool {
    between.chars().count() <= 4
        && between.chars().all(|c| {
            matches!(c, ' ' | '\u{a0}' | ',' | '.' | '\'' | '’' | '-' | '&')
                || (entity == LOCATION && matches!(c, '\n' | '\r' | '/'))
        })
}

#[cfg(test)]
mod tests;
