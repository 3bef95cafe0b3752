//! Finding personal data and secrets in text.
//!
//! Every detector's pattern is compiled once into one `RegexSet`, which tells in a single
//! pass over the text which detectors can match at all; only those run to find their spans.
//! Matches are then validated (Luhn, mod-97, SSN rules, address parsers, entropy), checked
//! not to sit inside a longer token (an id, a hash, a longer number), scored with context
//! words, and overlapping spans resolved in favour of the higher score, then the longer span.

mod patterns;
mod validate;

use regex::{Regex, RegexSet};
use serde::Serialize;

use crate::error::{Error, Result};

/// A detected span: `start..end` are UTF-8 byte offsets into the scanned text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// Entity type, with Presidio's names where Presidio has one.
    pub entity: &'static str,
    /// Confidence in 0..=1.
    pub score: f32,
}

struct Detector {
    entity: &'static str,
    regex: Regex,
    score: f32,
    validate: Option<fn(&str) -> bool>,
    context: &'static [&'static str],
    group: usize,
}

/// The compiled detectors.
pub struct Scanner {
    set: RegexSet,
    detectors: Vec<Detector>,
    /// Spans scoring below this are dropped.
    threshold: f32,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("detectors", &self.detectors.len())
            .field("threshold", &self.threshold)
            .finish()
    }
}

/// How far before a match context words are looked for, in bytes.
const CONTEXT_WINDOW: usize = 48;
/// What a context word adds to a score.
const CONTEXT_BOOST: f32 = 0.3;

/// The entity types the built-in detectors report.
pub fn builtin_entities() -> Vec<&'static str> {
    let mut entities: Vec<&'static str> = patterns::BUILTIN.iter().map(|p| p.entity).collect();
    entities.sort_unstable();
    entities.dedup();
    entities
}

/// Whether `byte` continues a token (so a match next to it is part of something longer).
fn joins(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

impl Scanner {
    /// The built-in detectors, restricted to `entities` when given, reporting spans that
    /// score at least 0.5.
    pub fn new(entities: Option<&[String]>) -> Result<Scanner> {
        if let Some(wanted) = entities {
            let known = builtin_entities();
            if let Some(unknown) = wanted.iter().find(|e| !known.contains(&e.as_str())) {
                return Err(Error::UnknownEntity(unknown.clone()));
            }
        }
        let specs: Vec<&patterns::PatternSpec> = patterns::BUILTIN
            .iter()
            .filter(|p| entities.is_none_or(|w| w.iter().any(|e| e == p.entity)))
            .collect();
        let set = RegexSet::new(specs.iter().map(|p| p.pattern))
            .map_err(|e| Error::Pattern(e.to_string()))?;
        let detectors = specs
            .iter()
            .map(|p| {
                Ok(Detector {
                    entity: p.entity,
                    regex: Regex::new(p.pattern).map_err(|e| Error::Pattern(e.to_string()))?,
                    score: p.score,
                    validate: p.validate,
                    context: p.context,
                    group: p.group,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Scanner {
            set,
            detectors,
            threshold: 0.5,
        })
    }

    /// The spans of personal data and secrets in `text`, ordered by start, never overlapping.
    pub fn scan(&self, text: &str) -> Vec<Span> {
        let bytes = text.as_bytes();
        let mut candidates = Vec::new();
        for index in self.set.matches(text).iter() {
            let Some(detector) = self.detectors.get(index) else {
                continue;
            };
            for captures in detector.regex.captures_iter(text) {
                let Some(value) = captures.get(detector.group) else {
                    continue;
                };
                let (start, end) = (value.start(), value.end());
                // Part of a longer token (a UUID, a hash, a longer number): not this entity.
                let whole = captures
                    .get(0)
                    .map_or((start, end), |m| (m.start(), m.end()));
                if whole.0 > 0 && joins(bytes[whole.0 - 1]) && detector.group == 0 {
                    continue;
                }
                if end < bytes.len() && joins(bytes[end]) {
                    continue;
                }
                // A dotted number continuing (1.2.3.4.5) is a version, not an address.
                if end + 1 < bytes.len() && bytes[end] == b'.' && bytes[end + 1].is_ascii_digit() {
                    continue;
                }
                // Colon-separated groups continuing (a MAC address, a longer id): not IPv6.
                if detector.entity == "IP_ADDRESS"
                    && (bytes.get(end) == Some(&b':')
                        || (start > 0
                            && bytes[start - 1] == b':'
                            && bytes.get(start) != Some(&b':')))
                {
                    continue;
                }
                let value_text = &text[start..end];
                if detector.validate.is_some_and(|valid| !valid(value_text)) {
                    continue;
                }
                let mut score = detector.score;
                if !detector.context.is_empty() && has_context(text, start, detector.context) {
                    score = (score + CONTEXT_BOOST).min(1.0);
                }
                if score >= self.threshold {
                    candidates.push(Span {
                        start,
                        end,
                        entity: detector.entity,
                        score,
                    });
                }
            }
        }
        resolve_overlaps(candidates)
    }
}

/// Whether one of `words` appears (case-insensitive) within the window before `start`.
fn has_context(text: &str, start: usize, words: &[&str]) -> bool {
    let mut from = start.saturating_sub(CONTEXT_WINDOW);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let window = text[from..start].to_ascii_lowercase();
    words.iter().any(|w| window.contains(w))
}

/// Keeps the best of overlapping spans: higher score, then longer, then earlier.
fn resolve_overlaps(mut candidates: Vec<Span>) -> Vec<Span> {
    candidates.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then((b.end - b.start).cmp(&(a.end - a.start)))
            .then(a.start.cmp(&b.start))
    });
    let mut kept: Vec<Span> = Vec::with_capacity(candidates.len());
    for span in candidates {
        if kept
            .iter()
            .all(|k| span.end <= k.start || span.start >= k.end)
        {
            kept.push(span);
        }
    }
    kept.sort_by_key(|s| s.start);
    kept
}

#[cfg(test)]
mod tests;
