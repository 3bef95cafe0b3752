//! Finding personal data and secrets in text.
//!
//! The pattern detectors (the shaped entity types, secrets and custom entities) read a
//! normalised view of the text (`normal.rs`: digits of every script as ASCII digits, every
//! space as `' '`, every dash as `'-'`, fullwidth forms as ASCII, invisible format characters
//! removed), so that a value reads the same to them however it is spelled; their spans are
//! mapped back to the text's own byte offsets. The name detectors read the text itself.
//!
//! Every detector's pattern is compiled once into one `RegexSet`, which tells in a single
//! pass over the view which detectors can match at all; only those run to find their spans.
//! Matches are then validated (Luhn, mod-97, SSN rules, address parsers, entropy), checked
//! not to sit inside a longer token (an id, a hash, a longer number), scored with context
//! words, and overlapping spans resolved in favour of the higher score, then the longer span.

mod cache;
mod canonical;
mod error;
mod keys;
mod names;
mod normal;
mod patterns;
mod settings;
mod validate;

use std::sync::Mutex;

use aho_corasick::{AhoCorasick, MatchKind};
use regex::{Regex, RegexSet, RegexSetBuilder};
use serde::Serialize;

pub use canonical::canonical;
pub use error::{Error, Result};
/// The entity types the names tagger finds. The scanner never lets one of them cover a value
/// of another type: where they overlap, the shaped value is kept whole.
pub use names::ENTITIES as NAME_ENTITIES;

#[doc(hidden)]
pub use normal::Normalized;
pub use settings::{ContextWords, CustomEntity, CustomMatch, DetectionConfig};

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

/// How a detector finds its candidates.
enum Matcher {
    /// A pattern (also in the scanner's `RegexSet`); `group` is the value's capture group.
    Regex { regex: Regex, group: usize },
    /// A dictionary of words, matched as whole words.
    Words(AhoCorasick),
}

struct Detector {
    entity: &'static str,
    matcher: Matcher,
    score: f32,
    validate: Option<fn(&str) -> bool>,
    /// Lower-case words that raise the score when found shortly before a match.
    raise: Vec<String>,
    /// Lower-case words that lower it.
    lower: Vec<String>,
    /// Lower-case words of which one must precede a match as a whole word (empty: none).
    cue: &'static [&'static str],
    /// Declared in the policy file: it reads the view that keeps letters of other scripts.
    custom: bool,
}

/// The compiled detectors.
pub struct Scanner {
    /// The patterns of the regex detectors, one set per entity type, each with the indexes
    /// of its detectors in `detectors`.
    sets: Vec<(RegexSet, Vec<usize>)>,
    detectors: Vec<Detector>,
    /// Spans scoring below this are dropped.
    threshold: f32,
    /// Thresholds of their own, by entity type.
    thresholds: Vec<(&'static str, f32)>,
    /// Which of `PERSON`, `LOCATION` and `ORGANIZATION` are looked for, and their context
    /// words (raise, lower).
    names: [bool; 3],
    name_context: [(Vec<String>, Vec<String>); 3],
    /// The names detector, when one of them is looked for.
    name_detector: Option<&'static names::Names>,
    /// What recent texts were found to hold, by tenant (`None`: off).
    cache: Option<cache::ScanCache>,
    /// The words that make an object key the context of its value, with the text the value
    /// is read after (`keys.rs`).
    key_words: keys::KeyWords,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("detectors", &self.detectors.len())
            .field("threshold", &self.threshold)
            .finish()
    }
}

/// Entity types whose values are numbers that dash-joined ids often contain.
const NUMERIC: &[&str] = &[
    "CREDIT_CARD",
    "US_SSN",
    "PHONE_NUMBER",
    "IP_ADDRESS",
    "IBAN_CODE",
];

/// What the scan cache answered: texts of at least 128 bytes looked up, and those found
/// (the same tenant and the same text scanned recently). Shorter texts are scanned without a
/// lookup and are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Texts looked up.
    pub lookups: u64,
    /// Texts found.
    pub hits: u64,
    /// Bytes of the texts looked up.
    pub looked_up_bytes: u64,
    /// Bytes of the texts found.
    pub hit_bytes: u64,
}

/// Cache of the lazy DFA that runs all patterns at once. With the default (2 MiB) the cache
/// thrashes on text mixing non-ASCII characters, look-alikes and PII, and matching falls back
/// to a much slower engine. On such text 16 MiB scans about 10 MB/s against 6.5 MB/s with the
/// default, and 64 MiB 14 MB/s for 45 MB more per thread (docs/benchmarks.md).
const DFA_CACHE: usize = 16 << 20;

/// How far before a match context words are looked for, in bytes.
const CONTEXT_WINDOW: usize = 48;
/// What a context word adds to (or takes from) a score.
const CONTEXT_BOOST: f32 = 0.3;

/// The entity types the built-in detectors report.
pub fn builtin_entities() -> Vec<&'static str> {
    let mut entities: Vec<&'static str> = patterns::BUILTIN.iter().map(|p| p.entity).collect();
    entities.extend(names::ENTITIES);
    entities.sort_unstable();
    entities.dedup();
    entities
}

/// The names tagger's input for `text`, as its training reads it: each token's byte range and
/// its [`NAME_FEATURES`] feature ids, hashed into `buckets`. Not part of the stable API: it
/// exists so that `detect/train/names/train.py` learns from exactly what the scanner gives
/// the network.
#[doc(hidden)]
pub fn name_tagger_input(text: &str, buckets: usize) -> std::result::Result<TaggerInput, String> {
    names::tagger_input(names::lexicon()?, text, buckets)
}

/// What [`name_tagger_input`] gives: the tokens' byte ranges and their feature ids.
#[doc(hidden)]
pub type TaggerInput = (Vec<(usize, usize)>, Vec<u32>);

/// Feature slots per token of [`name_tagger_input`].
#[doc(hidden)]
pub const NAME_FEATURES: usize = names::tagger::FEATURES;

/// A `'static` copy of a custom entity name. Each distinct name is leaked once, so reloading
/// a policy many times does not grow memory.
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = names.iter().find(|n| **n == name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(leaked);
    leaked
}

/// Whether `byte` continues a token (so a match next to it is part of something longer).
fn joins(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

fn pattern_error(error: impl std::fmt::Display) -> Error {
    Error::Pattern(error.to_string())
}

impl Scanner {
    /// The built-in detectors, restricted to `entities` when given, reporting spans that
    /// score at least 0.5.
    pub fn new(entities: Option<&[String]>) -> Result<Scanner> {
        Scanner::with_config(&DetectionConfig::default(), entities)
    }

    /// The built-in detectors plus the custom entities and context words of `config`,
    /// restricted to `entities` when given.
    pub fn with_config(config: &DetectionConfig, entities: Option<&[String]>) -> Result<Scanner> {
        if let Some(wanted) = entities {
            let known = builtin_entities();
            if let Some(unknown) = wanted.iter().find(|e| {
                !known.contains(&e.as_str()) && !config.custom.iter().any(|c| &c.name == *e)
            }) {
                return Err(Error::UnknownEntity(unknown.clone()));
            }
        }
        let wanted = |entity: &str| {
            entities.is_none_or(|w| w.iter().any(|e| e == entity))
                && !config.disabled.iter().any(|d| d == entity)
        };
        let context = |entity: &str, raise: &[&str], lower: &[String]| {
            let extra = config.context.get(entity);
            let mut words = (
                raise.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>(),
                lower.to_vec(),
            );
            if let Some(extra) = extra {
                words.0.extend(extra.raise.iter().cloned());
                words.1.extend(extra.lower.iter().cloned());
            }
            words
        };
        let mut detectors = Vec::new();
        let mut patterns = Vec::new();
        for spec in patterns::BUILTIN.iter().filter(|p| wanted(p.entity)) {
            let (raise, lower) = context(spec.entity, spec.context, &[]);
            patterns.push(spec.trigger.unwrap_or(spec.pattern).to_owned());
            detectors.push(Detector {
                entity: spec.entity,
                matcher: Matcher::Regex {
                    regex: Regex::new(spec.pattern).map_err(pattern_error)?,
                    group: spec.group,
                },
                score: spec.score,
                validate: spec.validate,
                raise,
                lower,
                cue: spec.cue,
                custom: false,
            });
        }
        let custom: Vec<&CustomEntity> = config.custom.iter().filter(|c| wanted(&c.name)).collect();
        // Regex detectors first, so that the set's indexes are the detectors' indexes.
        for entity in &custom {
            if let CustomMatch::Pattern(pattern) = &entity.matcher {
                patterns.push(pattern.clone());
                detectors.push(custom_detector(
                    entity,
                    Matcher::Regex {
                        regex: Regex::new(pattern).map_err(pattern_error)?,
                        group: 0,
                    },
                    &context,
                ));
            }
        }
        for entity in &custom {
            if let CustomMatch::Words {
                words,
                case_sensitive,
            } = &entity.matcher
            {
                let automaton = AhoCorasick::builder()
                    .ascii_case_insensitive(!case_sensitive)
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(words)
                    .map_err(pattern_error)?;
                detectors.push(custom_detector(entity, Matcher::Words(automaton), &context));
            }
        }
        // One set of every pattern: on text that is mostly clean one pass tells that nothing
        // can match. (A set per entity type keeps the lazy DFA smaller, so it is faster on
        // text dense with numbers and ids, but slower on clean text: docs/benchmarks.md.)
        let set = RegexSetBuilder::new(&patterns)
            .dfa_size_limit(DFA_CACHE)
            .build()
            .map_err(pattern_error)?;
        let sets = vec![(set, (0..patterns.len()).collect())];
        let name_types = names::ENTITIES.map(wanted);
        let thresholds = config
            .thresholds
            .iter()
            .map(|(entity, score)| {
                let name = builtin_entities()
                    .into_iter()
                    .find(|b| b == entity)
                    .unwrap_or_else(|| intern(entity));
                (name, *score)
            })
            .collect();
        let name_context = names::ENTITIES.map(|entity| context(entity, &[], &[]));
        let detector_words = detectors.iter().flat_map(|d| {
            d.raise
                .iter()
                .map(String::as_str)
                .chain(d.cue.iter().copied())
        });
        let name_words = name_context
            .iter()
            .flat_map(|(raise, _)| raise.iter().map(String::as_str));
        let key_words = keys::KeyWords::new(detector_words.chain(name_words));
        Ok(Scanner {
            sets,
            threshold: config.threshold,
            thresholds,
            names: name_types,
            name_detector: if name_types.contains(&true) {
                Some(names::names().map_err(Error::Pattern)?)
            } else {
                None
            },
            name_context,
            cache: cache::ScanCache::new(config.cache_bytes),
            key_words,
            detectors,
        })
    }

    /// The context an object key gives its value, when it holds a credential keyword or a
    /// context or cue word of a detector (`password`, `apiKey`, `employeeSSN`, `mobile`): the
    /// word, spelled as the detectors read it (`password`, `api_key`, `ssn`, `mobile`). The
    /// JSON masker then reads the value also after it, as `word: value`.
    pub fn key_context(&self, key: &str) -> Option<&str> {
        self.key_words.context_of(key)
    }

    /// Whether a value of `entity` may be found only by what is around it: a detector of that
    /// type scores below the type's threshold without a context word, needs a cue word, reads
    /// the value after a keyword (`password: …`), or has words that lower its score beside
    /// it (`tracking`); or the type is a name, a place or an organisation, or one no detector
    /// reports. A value of any other type is found wherever it stands as a token.
    pub fn found_by_context(&self, entity: &str) -> bool {
        if names::ENTITIES.contains(&entity) {
            return true;
        }
        let mut of_type = self
            .detectors
            .iter()
            .filter(|d| d.entity == entity)
            .peekable();
        of_type.peek().is_none()
            || of_type.any(|d| {
                d.score < self.threshold(entity)
                    || !d.cue.is_empty()
                    || !d.lower.is_empty()
                    || matches!(d.matcher, Matcher::Regex { group, .. } if group != 0)
            })
    }

    /// The score a span of `entity` needs to be reported.
    fn threshold(&self, entity: &str) -> f32 {
        self.thresholds
            .iter()
            .find(|(name, _)| *name == entity)
            .map_or(self.threshold, |(_, score)| *score)
    }

    /// What the scan cache answered since this scanner was built; `None` when the cache is
    /// off (`cache_mib = 0`).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(cache::ScanCache::stats)
    }

    /// [`Scanner::scan`] of a text of `tenant`, answered from what recent scans of the same
    /// text for the same tenant found when it can be (`[detection] cache_mib`).
    pub fn scan_for(&self, tenant: &str, text: &str) -> Vec<Span> {
        let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| text.len() >= cache::MIN_BYTES)
        else {
            return self.scan(text);
        };
        if let Some(spans) = cache.get(tenant, text) {
            return spans;
        }
        let spans = self.scan(text);
        cache.put(tenant, text, &spans);
        spans
    }

    /// [`Scanner::scan_without`] for `tenant`, through the cache like
    /// [`Scanner::scan_for`]: `reading` names the entity types `skip` skips, and the same
    /// name must always stand for the same types.
    pub fn scan_without_for(
        &self,
        tenant: &str,
        reading: &str,
        text: &str,
        skip: &dyn Fn(&str) -> bool,
    ) -> Vec<Span> {
        let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| text.len() >= cache::MIN_BYTES)
        else {
            return self.scan_without(text, skip);
        };
        // Entries of this reading are kept apart from the tenant's plain scans.
        let key = format!("{tenant}\u{0}{reading}");
        if let Some(spans) = cache.get(&key, text) {
            return spans;
        }
        let spans = self.scan_without(text, skip);
        cache.put(&key, text, &spans);
        spans
    }

    /// The spans of personal data and secrets in `text`, ordered by start, never overlapping.
    pub fn scan(&self, text: &str) -> Vec<Span> {
        self.scan_without(text, &|_| false)
    }

    /// The spans [`Scanner::scan`] finds in `text` as if the entity types that `skip` names
    /// were not looked for: what they would have covered is open to the other types. A masker
    /// that leaves a type in the clear reads the text so, so that a value of a type it masks
    /// never hides inside or behind one it leaves. Not cached
    /// ([`Scanner::scan_without_for`] is).
    pub fn scan_without(&self, text: &str, skip: &dyn Fn(&str) -> bool) -> Vec<Span> {
        // The pattern and dictionary detectors read the normalised view; their spans are
        // mapped back to `text`. The name detectors read `text` itself: the tagger was trained
        // on text as it is written, and its features (capitals, the lists' words with their
        // accents) are read from it.
        let view = normal::Normalized::new(text);
        let mut candidates = self.shaped(text, &view, true, skip);
        // Where escapes were decoded, the text read with its escapes as written comes first:
        // a value whose escapes are part of it (a password with `%2F` in a URL) is found whole
        // there, and what the decoded view adds (`jane%40example.com`) joins it.
        if view.decoded_escapes() {
            let written = normal::Normalized::without_escapes(text);
            let decoded = resolve_overlaps(text, candidates);
            candidates = resolve_overlaps(text, self.shaped(text, &written, false, skip));
            join_decoded(&mut candidates, decoded);
        }
        let names_wanted = names::ENTITIES.iter().any(|entity| !skip(entity));
        if let Some(detector) = self.name_detector.filter(|_| names_wanted) {
            let mut found = Vec::new();
            let mut names = Vec::new();
            names::find(detector, text, &self.names, &mut found);
            for mut span in found.into_iter().filter(|span| !skip(span.entity)) {
                let which = names::ENTITIES.iter().position(|e| *e == span.entity);
                if let Some((raise, lower)) = which.map(|i| &self.name_context[i]) {
                    span.score = adjusted(
                        span.score,
                        has_context(text, span.start, raise),
                        has_context(text, span.start, lower),
                    );
                }
                if span.score >= self.threshold(span.entity) {
                    names.push(span);
                }
            }
            // A shaped value (an e-mail address, a phone number, a card) is never part of a
            // name, whatever the scores: its own type decides how it is masked and what Cedar
            // is told, so a card cannot pass as part of an address. A name's span keeps what
            // lies outside the shaped values the scanner keeps.
            let mut kept = resolve_overlaps(text, candidates);
            let pieces: Vec<Span> = names
                .into_iter()
                .flat_map(|name| outside(text, name, &kept))
                .collect();
            kept.extend(pieces);
            return resolve_overlaps(text, kept);
        }
        resolve_overlaps(text, candidates)
    }

    /// The shaped detectors' candidates in `view` (the view of `text`, with its escapes
    /// decoded or not as `escapes` says), mapped back to the text. Where the view folded
    /// letters of other scripts, the custom entities read the view that keeps them: their
    /// patterns and words may be written in those scripts.
    fn shaped(
        &self,
        text: &str,
        view: &normal::Normalized<'_>,
        escapes: bool,
        skip: &dyn Fn(&str) -> bool,
    ) -> Vec<Span> {
        let mut candidates = Vec::new();
        if view.folded_letters() && self.detectors.iter().any(|d| d.custom) {
            let kept = normal::Normalized::with(text, escapes, false);
            self.shaped_in(
                text,
                view,
                &|d| !d.custom && !skip(d.entity),
                &mut candidates,
            );
            self.shaped_in(
                text,
                &kept,
                &|d| d.custom && !skip(d.entity),
                &mut candidates,
            );
        } else {
            self.shaped_in(text, view, &|d| !skip(d.entity), &mut candidates);
        }
        candidates
    }

    /// Adds the candidates in `view` (of `text`) of the detectors `reads` chooses, mapped
    /// back to the text.
    fn shaped_in(
        &self,
        text: &str,
        view: &normal::Normalized<'_>,
        reads: &dyn Fn(&Detector) -> bool,
        out: &mut Vec<Span>,
    ) {
        let mut candidates = Vec::new();
        for (set, members) in &self.sets {
            for index in set.matches(view.as_str()).iter() {
                if let Some(detector) = members
                    .get(index)
                    .and_then(|i| self.detectors.get(*i))
                    .filter(|d| reads(d))
                {
                    self.candidates(detector, text, view, &mut candidates);
                }
            }
        }
        for detector in &self.detectors {
            if matches!(detector.matcher, Matcher::Words(_)) && reads(detector) {
                self.candidates(detector, text, view, &mut candidates);
            }
        }
        if !view.is_identity() {
            for span in &mut candidates {
                (span.start, span.end) = view.original(span.start, span.end);
            }
        }
        out.append(&mut candidates);
    }

    /// The spans one detector finds in `text`, `(value, whole match)` for each.
    fn matches(detector: &Detector, text: &str) -> Vec<((usize, usize), (usize, usize))> {
        match &detector.matcher {
            // Without a capture group the faster `find_iter` suffices.
            Matcher::Regex { regex, group: 0 } => regex
                .find_iter(text)
                .map(|m| ((m.start(), m.end()), (m.start(), m.end())))
                .collect(),
            Matcher::Regex { regex, group } => regex
                .captures_iter(text)
                .filter_map(|captures| {
                    let value = captures.get(*group)?;
                    let whole = captures.get(0).map_or(value.range(), |m| m.range());
                    Some(((value.start(), value.end()), (whole.start, whole.end)))
                })
                .collect(),
            Matcher::Words(automaton) => automaton
                .find_iter(text)
                .map(|m| ((m.start(), m.end()), (m.start(), m.end())))
                .collect(),
        }
    }

    /// The spans `detector` finds in the view of `original`, in the view's byte offsets.
    fn candidates(
        &self,
        detector: &Detector,
        original: &str,
        view: &normal::Normalized<'_>,
        out: &mut Vec<Span>,
    ) {
        let text = view.as_str();
        let bytes = text.as_bytes();
        // A letter folded from another script joins no Latin token.
        let joins_at = |at: usize| joins(bytes[at]) && !view.look_alike_at(at);
        let whole_value = !matches!(detector.matcher, Matcher::Regex { group, .. } if group != 0);
        for ((start, mut end), whole) in Scanner::matches(detector, text) {
            // A URL ends before the punctuation of the sentence around it.
            if detector.entity == "URL" {
                while end > start
                    && matches!(
                        bytes[end - 1],
                        b'.' | b',' | b';' | b':' | b'!' | b'?' | b')' | b']' | b'}'
                    )
                {
                    end -= 1;
                }
            }
            // A quote before an address is not part of it (`'jane@example.com'`).
            let start = if detector.entity == "EMAIL_ADDRESS" {
                start + text[start..end].len() - text[start..end].trim_start_matches('\'').len()
            } else {
                start
            };
            // An IBAN ends at its country's length: what follows is another word.
            if detector.entity == "IBAN_CODE"
                && let Some(length) = text.get(start..end).and_then(validate::iban_extent)
            {
                end = start + length;
            }
            // A phone number's extension (`x157`, `ext. 12`) is part of the number.
            let number_end = end;
            if detector.entity == "PHONE_NUMBER" {
                end += phone_extension(&bytes[end..]);
            }
            // Part of a longer token (a UUID, a hash, a longer number): not this entity. A
            // character the view removed between them (a zero-width space) keeps them apart.
            if whole.0 > 0 && joins_at(whole.0 - 1) && whole_value && !view.removed_at(whole.0) {
                continue;
            }
            if end < bytes.len() && joins_at(end) && !view.removed_at(end) {
                continue;
            }
            if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                continue;
            }
            // A dotted number continuing (1.2.3.4.5) is a version, not an address.
            if end + 1 < bytes.len() && bytes[end] == b'.' && bytes[end + 1].is_ascii_digit() {
                continue;
            }
            // A number in a dash-joined id (a UUID, `SO-536-22-1234`, `4111…-9d26`) is part
            // of that id.
            if NUMERIC.contains(&detector.entity)
                && ((bytes.get(end) == Some(&b'-') && end + 1 < bytes.len() && joins_at(end + 1))
                    || (start >= 2 && bytes[start - 1] == b'-' && joins_at(start - 2)))
            {
                continue;
            }
            // Colon-separated groups continuing (a MAC address, a longer id): not IPv6. An
            // IPv4 address may be followed by a port.
            let ipv6 = text[start..end].contains(':');
            if detector.entity == "IP_ADDRESS"
                && ipv6
                && (bytes.get(end) == Some(&b':')
                    || (start > 0 && bytes[start - 1] == b':' && bytes.get(start) != Some(&b':')))
            {
                continue;
            }
            if detector.entity == "PHONE_NUMBER" && !phone_alone(text, start, number_end) {
                continue;
            }
            let value_text = &text[start..number_end];
            if detector.validate.is_some_and(|valid| !valid(value_text)) {
                continue;
            }
            if !detector.cue.is_empty() && !has_cue(text, start, detector.cue) {
                continue;
            }
            // Context words are read in the view (a Latin word spelled with look-alikes) and,
            // where letters were folded, in the text as written (a word of another script,
            // which the view may fold only in part: `ТЕЛЕФОН` reads `TEЛEФOH`).
            let at = view.original(start, start).0;
            let near = |words: &[String]| {
                has_context(text, start, words)
                    || (view.folded_letters() && has_context(original, at, words))
            };
            let score = adjusted(detector.score, near(&detector.raise), near(&detector.lower));
            if score >= self.threshold(detector.entity) {
                out.push(Span {
                    start,
                    end,
                    entity: detector.entity,
                    score,
                });
            }
        }
    }
}

fn custom_detector(
    entity: &CustomEntity,
    matcher: Matcher,
    context: &impl Fn(&str, &[&str], &[String]) -> (Vec<String>, Vec<String>),
) -> Detector {
    let raise: Vec<&str> = entity.context.raise.iter().map(String::as_str).collect();
    let (raise, lower) = context(&entity.name, &raise, &entity.context.lower);
    Detector {
        entity: intern(&entity.name),
        matcher,
        score: entity.score,
        validate: None,
        raise,
        lower,
        cue: &[],
        custom: true,
    }
}

/// `score` raised where a raising context word was found before the value, lowered where a
/// lowering one was.
fn adjusted(score: f32, raised: bool, lowered: bool) -> f32 {
    let mut score = score;
    if raised {
        score = (score + CONTEXT_BOOST).min(1.0);
    }
    if lowered {
        score = (score - CONTEXT_BOOST).max(0.0);
    }
    score
}

/// Whether one of `words` appears (case-insensitive) within the window before `start`.
fn has_context(text: &str, start: usize, words: &[String]) -> bool {
    if words.is_empty() {
        return false;
    }
    let mut from = start.saturating_sub(CONTEXT_WINDOW);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let window = text[from..start].to_lowercase();
    words.iter().any(|w| window.contains(w.as_str()))
}

/// Whether one of `words` appears as a whole word (not inside a longer word, so `tin` is not
/// found in `meeting`) within the window before `start`, case-insensitive.
fn has_cue(text: &str, start: usize, words: &[&str]) -> bool {
    let mut from = start.saturating_sub(CONTEXT_WINDOW);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let window = text[from..start].to_lowercase();
    let word_char = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    words.iter().any(|word| {
        window.match_indices(word).any(|(at, found)| {
            !word_char(window[..at].chars().next_back())
                && !word_char(window[at + found.len()..].chars().next())
        })
    })
}

/// Currency signs, and currency codes and words (lower case): a number next to one is an
/// amount.
const CURRENCY_SIGNS: &[char] = &['€', '$', '£', '¥', '₹', '₽', '₩', '₺', '¢', '円', '元'];
const CURRENCY_WORDS: &[&str] = &[
    "eur", "euro", "euros", "usd", "dollar", "dollars", "gbp", "chf", "pln", "zł", "zl", "jpy",
    "yen", "inr", "rupees", "brl", "reais", "aud", "cad", "kr",
];

/// The length of a phone number's extension at the start of `after` (the bytes following the
/// number): `x157`, ` x 157`, `ext. 12`, `ext12`, ` extension 4401`, any case, one to six
/// digits; 0 when there is none.
fn phone_extension(after: &[u8]) -> usize {
    let skip_space = |at: usize| at + usize::from(after.get(at) == Some(&b' '));
    let at = skip_space(0);
    let rest = &after[at..];
    let marker = ["extension", "ext.", "ext", "x"]
        .iter()
        .find(|word| {
            rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word.as_bytes())
        })
        .map_or(0, |word| word.len());
    if marker == 0 {
        return 0;
    }
    let digits_at = skip_space(at + marker);
    let digits = after[digits_at.min(after.len())..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if (1..=6).contains(&digits) {
        digits_at + digits
    } else {
        0
    }
}

/// Whether a phone-shaped match at `start..end` of the view stands alone: not continued by a
/// time or a decimal (`10:30`, `345,67`), not part of a longer number grouped by spaces
/// (`1 912 345 678`), and not an amount (a currency sign, code or word before or after it),
/// unless it is written with a country code (`+44 20 7946 0958 kr` is a phone number: no
/// amount is written so, and a number that is both is masked rather than left).
fn phone_alone(text: &str, start: usize, end: usize) -> bool {
    let bytes = text.as_bytes();
    let digit_at = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_digit);
    if matches!(bytes.get(end), Some(b':' | b',' | b' ')) && digit_at(end + 1) {
        return false;
    }
    if start >= 2 && bytes[start - 1] == b' ' && digit_at(start - 2) {
        return false;
    }
    if text[start..end].starts_with('+') {
        return true;
    }
    let after = text[end..].trim_start_matches(' ');
    let before = text[..start].trim_end_matches(' ');
    let sign = |c: Option<char>| c.is_some_and(|c| CURRENCY_SIGNS.contains(&c));
    if sign(after.chars().next()) || sign(before.chars().next_back()) {
        return false;
    }
    let word_after: String = after.chars().take_while(|c| c.is_alphabetic()).collect();
    let mut word_before: Vec<char> = before
        .chars()
        .rev()
        .take_while(|c| c.is_alphabetic())
        .collect();
    word_before.reverse();
    let word_before: String = word_before.into_iter().collect();
    let currency = |word: String| CURRENCY_WORDS.contains(&word.to_lowercase().as_str());
    !currency(word_after) && !currency(word_before)
}

/// `name` as it is when it overlaps no span of `shaped` (ordered by start, not overlapping);
/// otherwise its parts outside them, trimmed of spaces and punctuation (a house number left
/// between two shaped values is still part of the address).
fn outside(text: &str, name: Span, shaped: &[Span]) -> Vec<Span> {
    let first = shaped.partition_point(|s| s.end <= name.start);
    let mut overlapping = shaped[first..]
        .iter()
        .take_while(|s| s.start < name.end)
        .map(|s| (s.start, s.end))
        .peekable();
    if overlapping.peek().is_none() {
        return vec![name];
    }
    let edge = |c: char| !c.is_alphanumeric();
    gaps(name.start, name.end, overlapping)
        .into_iter()
        .filter_map(|(start, end)| {
            let raw = text.get(start..end)?;
            let start = start + (raw.len() - raw.trim_start_matches(edge).len());
            let trimmed = raw.trim_matches(edge);
            (!trimmed.is_empty()).then_some(Span {
                start,
                end: start + trimmed.len(),
                entity: name.entity,
                score: name.score,
            })
        })
        .collect()
}

/// The parts of `start..end` that none of `taken` (ordered by start, not overlapping) covers.
fn gaps(
    start: usize,
    end: usize,
    taken: impl IntoIterator<Item = (usize, usize)>,
) -> Vec<(usize, usize)> {
    let mut at = start;
    let mut out = Vec::new();
    for (from, to) in taken.into_iter().chain([(end, end)]) {
        if at < from.min(end) {
            out.push((at, from.min(end)));
        }
        at = at.max(to);
    }
    out
}

/// Keeps the best of overlapping spans: higher score, then longer, then earlier.
/// Adds to `kept` (the spans found in the text as written, without overlaps) the spans found
/// in the text with its escapes decoded: one that overlaps nothing is added; one inside a kept
/// span adds nothing; one that overlaps kept spans otherwise replaces them with one span
/// covering all of them, of the type of the longest, so that nothing either reading found is
/// left partly unmasked.
fn join_decoded(kept: &mut Vec<Span>, decoded: Vec<Span>) {
    for span in decoded {
        let overlapping: Vec<usize> = (0..kept.len())
            .filter(|&i| kept[i].start < span.end && span.start < kept[i].end)
            .collect();
        if overlapping
            .iter()
            .any(|&i| kept[i].start <= span.start && span.end <= kept[i].end)
        {
            continue;
        }
        let mut longest = span.end - span.start;
        let mut joined = span;
        for &i in &overlapping {
            let other = &kept[i];
            if other.end - other.start > longest {
                longest = other.end - other.start;
                joined.entity = other.entity;
            }
            joined.score = joined.score.max(other.score);
            joined.start = joined.start.min(other.start);
            joined.end = joined.end.max(other.end);
        }
        for &i in overlapping.iter().rev() {
            kept.remove(i);
        }
        kept.push(joined);
    }
    kept.sort_by_key(|s| s.start);
}

/// The best of overlapping spans, by higher score, then longer, then earlier; of a span that
/// loses to others, the pieces of it outside them (trimmed of spaces, each with a letter or
/// digit), so that no part of a value found stays in the clear because another value was
/// joined to it (`4111 1111 1111 1111+jane@example.com`, where the address starts in the
/// card).
fn resolve_overlaps(text: &str, mut candidates: Vec<Span>) -> Vec<Span> {
    candidates.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then((b.end - b.start).cmp(&(a.end - a.start)))
            .then(a.start.cmp(&b.start))
    });
    // The kept spans by start. They never overlap, so by start they are also by end: the
    // ones a candidate overlaps are the last that start before it ends, back to the first
    // that ends after it starts.
    let mut kept: std::collections::BTreeMap<usize, Span> = std::collections::BTreeMap::new();
    for span in candidates {
        if span.start >= span.end {
            continue;
        }
        let mut taken: Vec<(usize, usize)> = kept
            .range(..span.end)
            .rev()
            .take_while(|(_, before)| before.end > span.start)
            .map(|(_, before)| (before.start, before.end))
            .collect();
        if taken.is_empty() {
            kept.insert(span.start, span);
            continue;
        }
        taken.reverse();
        for (start, end) in gaps(span.start, span.end, taken) {
            let Some(raw) = text.get(start..end) else {
                continue;
            };
            let trimmed = raw.trim();
            if !trimmed.chars().any(char::is_alphanumeric) {
                continue;
            }
            let start = start + (raw.len() - raw.trim_start().len());
            let piece = Span {
                start,
                end: start + trimmed.len(),
                ..span.clone()
            };
            kept.insert(piece.start, piece);
        }
    }
    kept.into_values().collect()
}

#[cfg(test)]
mod spelling_tests;
#[cfg(test)]
mod tests;
