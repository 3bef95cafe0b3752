//! Values masked by their exact text: the originals that one masking masked
//! ([`FoundValues`]), and values to mask wherever they occur again, whatever the detectors
//! find there ([`KnownValues`]). A value found in a request by its context (a phone number
//! after "mobile", a name after a cue word) that the model repeats elsewhere in its reply is
//! masked in the reply as well when the reply is masked with the request's values.
//!
//! Invariants: neither type prints or serializes a value (`Debug` shows a count), so they
//! stay in memory. Matching is exact text, ASCII case-insensitive, on token boundaries, in
//! the normalised view of the text and of the value that the shaped detectors read
//! ([`Normalized`]: a value masked as `4155550172` is found spelled `４１５５５５０１７２`
//! or `415&#53;550172`, and the other way round): a
//! value that starts (ends) with a letter, digit or `_` matches only where no such character
//! comes before (after) it, so `Jan` is not found in `January` and `415 555 0172` not in
//! `1415 555 01729`. As for the detectors, a value that starts (ends) with an ASCII one is
//! apart from the letters of other scripts and from letters folded from them (`電話は
//! 4155550172`, `карта4155550172`), while one that starts (ends) with a letter beyond ASCII
//! continues into any (`Zoë` is not found in `Zoëy`). A value written as a number (digits
//! and separators) is also found with its digits grouped otherwise (`415-555-0172` as
//! `4155550172`), after a country code (`+1 415 555 0172`) and beside another number. One Aho-Corasick automaton finds every value in one pass over a text,
//! whatever the number of values; its cost is the text's length plus the matches it
//! reports, and at one position only values that end each other can match.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;

use aho_corasick::{AhoCorasick, MatchKind};
use atdp_detect::Normalized;

use super::find::Hit;
use crate::error::{Error, Result};

/// Values shorter than this many characters are not kept: they would mask common words.
pub const MIN_KNOWN_CHARS: usize = 3;

/// The originals of the values that a masking replaced (every span whose action is not
/// `allow`), each with its entity type, once each. Personal data: `Debug` prints only their
/// number, and the type cannot be serialized.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct FoundValues {
    /// (original, entity), in sort order.
    values: BTreeSet<(String, String)>,
}

impl FoundValues {
    /// How many distinct (original, entity) pairs there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether nothing was masked.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Each (original, entity) pair, in sort order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(v, e)| (v.as_str(), e.as_str()))
    }

    pub(crate) fn insert(&mut self, original: &str, entity: &str) {
        self.values.insert((original.to_owned(), entity.to_owned()));
    }
}

impl std::fmt::Debug for FoundValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoundValues")
            .field("count", &self.values.len())
            .finish()
    }
}

/// Values to mask wherever a [`JsonMasker`](super::JsonMasker) reads them, each as its entity
/// type with the policy's action for that type. Built from (original, entity) pairs, such as
/// [`FoundValues::iter`]. A value with fewer than [`MIN_KNOWN_CHARS`] characters, or without a
/// letter or digit, is ignored; of values that differ only in ASCII case, the first given is
/// kept with its entity. Personal data: `Debug` prints only the number of values.
#[derive(Clone)]
pub struct KnownValues {
    /// Every value, ASCII case-insensitively; `None` when there is none.
    automaton: Option<AhoCorasick>,
    /// For each value of the automaton, by pattern index: its entity type, and its first and
    /// its last character where they continue a token (`None` for a value found glued).
    values: Vec<(Box<str>, Option<char>, Option<char>)>,
    /// The values written as numbers (digits and separators, at least [`MIN_NUMBER_DIGITS`]
    /// digits), by their digits alone, with the index of their value: found however the
    /// digits are grouped.
    numbers: HashMap<String, usize>,
    /// The most digits of a value of `numbers`.
    longest_number: usize,
}

/// How many digits a value written as a number needs to be found whatever its separators:
/// as many as the shortest phone numbers.
const MIN_NUMBER_DIGITS: usize = 7;

/// How many digits a value written as a number may have to be found however its digits are
/// grouped (more than any phone, card or account number); a longer one is found as written.
const MAX_NUMBER_DIGITS: usize = 34;

/// The separators a number's digit groups are written with.
fn number_separator(byte: u8) -> bool {
    matches!(byte, b' ' | b'.' | b'-' | b'/' | b'(' | b')')
}

/// The digits of `spelled` when it is written as a number (digits and separators, and a
/// leading `+`) with at least [`MIN_NUMBER_DIGITS`] digits.
fn number_digits(spelled: &str) -> Option<String> {
    let bytes = spelled.strip_prefix('+').unwrap_or(spelled).as_bytes();
    let number = bytes
        .iter()
        .all(|b| b.is_ascii_digit() || number_separator(*b));
    let digits: String = bytes
        .iter()
        .filter(|b| b.is_ascii_digit())
        .map(|b| char::from(*b))
        .collect();
    (number && digits.len() >= MIN_NUMBER_DIGITS).then_some(digits)
}

/// Whether `c` continues a token: a value next to one is part of something longer.
fn joins(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether a value whose edge is `edge` (a character that continues a token) is part of a
/// longer token with `neighbor` beside it; `folded`: the neighbor is a letter the view folded
/// from another script.
fn joined(edge: char, neighbor: char, folded: bool) -> bool {
    joins(neighbor) && (!edge.is_ascii() || (neighbor.is_ascii() && !folded))
}

impl KnownValues {
    /// The values of `pairs`, each `(original, entity)`. An error when the automaton cannot
    /// be built (more values than it can hold): the caller must not store text it could not
    /// check.
    pub fn new<'v>(pairs: impl IntoIterator<Item = (&'v str, &'v str)>) -> Result<KnownValues> {
        KnownValues::with_glued(
            pairs
                .into_iter()
                .map(|(value, entity)| (value, entity, false)),
        )
    }

    /// Whether a value of `entity` spelled `value` can be told apart glued to other text: a
    /// shaped value with a digit or a sign (`jane@example.com`, `415-555-0172`), not a name
    /// and not a value of letters alone, which any longer word may hold (`Stan` in
    /// `understand`).
    pub fn gluable(value: &str, entity: &str) -> bool {
        !atdp_detect::NAME_ENTITIES.contains(&entity) && value.chars().any(|c| !c.is_alphabetic())
    }

    /// The values of `triples`, each `(original, entity, glued)`: a value with `glued` is found
    /// also where letters, digits or `_` continue it (`xjane@example.comx`), as in a reply
    /// where the proxy restored it from a placeholder the model wrote glued to other text.
    /// Written otherwise (grouped as another number), it is found on token boundaries only.
    pub fn with_glued<'v>(
        triples: impl IntoIterator<Item = (&'v str, &'v str, bool)>,
    ) -> Result<KnownValues> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut patterns: Vec<&str> = Vec::new();
        let mut values = Vec::new();
        let mut views: Vec<String> = Vec::new();
        let mut entities = Vec::new();
        for (original, entity, glued) in triples {
            let view = Normalized::new(original);
            let spelled = view.as_str();
            let long = spelled.chars().nth(MIN_KNOWN_CHARS - 1).is_some();
            if !long || !spelled.chars().any(char::is_alphanumeric) {
                continue;
            }
            if !seen.insert(spelled.to_ascii_lowercase()) {
                continue;
            }
            views.push(spelled.to_owned());
            entities.push((entity, glued));
        }
        let mut numbers = HashMap::new();
        for (spelled, (entity, glued)) in views.iter().zip(entities) {
            let starts = spelled.chars().next().filter(|c| joins(*c) && !glued);
            let ends = spelled.chars().next_back().filter(|c| joins(*c) && !glued);
            if let Some(digits) = number_digits(spelled).filter(|d| d.len() <= MAX_NUMBER_DIGITS) {
                numbers.entry(digits).or_insert(values.len());
            }
            patterns.push(spelled);
            values.push((Box::from(entity), starts, ends));
        }
        if patterns.is_empty() {
            return Ok(KnownValues {
                automaton: None,
                values,
                numbers,
                longest_number: 0,
            });
        }
        let automaton = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .map_err(|e| {
                Error::Mask(format!(
                    "the {} known values cannot be compiled for matching ({e}); mask with fewer",
                    patterns.len()
                ))
            })?;
        let longest_number = numbers.keys().map(String::len).max().unwrap_or(0);
        Ok(KnownValues {
            automaton: Some(automaton),
            values,
            numbers,
            longest_number,
        })
    }

    /// How many values are matched.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there is no value to match.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The entity type of a value that `text` holds on token boundaries, spelled in any way
    /// [`KnownValues`] matches; `None` when it holds none.
    pub fn first_in(&self, text: &str) -> Result<Option<&str>> {
        let mut found = Vec::new();
        self.find(text, &mut found)?;
        Ok(found.first().map(|hit| hit.entity))
    }

    /// Appends to `out` every occurrence of a value in `text` on token boundaries, in the
    /// order they end; occurrences may overlap.
    pub(super) fn find<'k>(&'k self, text: &str, out: &mut Vec<Hit<'k>>) -> Result<()> {
        let Some(automaton) = &self.automaton else {
            return Ok(());
        };
        let view = Normalized::new(text);
        let spelled = view.as_str();
        let all = automaton
            .try_find_overlapping_iter(spelled)
            .map_err(|e| Error::Mask(format!("known values: {e}")))?;
        for found in all {
            let Some((entity, starts, ends)) = self.values.get(found.pattern().as_usize()) else {
                continue;
            };
            let (start, end) = (found.start(), found.end());
            // A character the view removed (a zero-width space) keeps two tokens apart.
            let before = spelled.get(..start).and_then(|t| t.chars().next_back());
            let after = spelled.get(end..).and_then(|t| t.chars().next());
            let joined_before = starts.zip(before).is_some_and(|(edge, c)| {
                let folded = view.look_alike_at(start - c.len_utf8());
                joined(edge, c, folded) && !view.removed_at(start)
            });
            let joined_after = ends.zip(after).is_some_and(|(edge, c)| {
                joined(edge, c, view.look_alike_at(end)) && !view.removed_at(end)
            });
            if joined_before || joined_after {
                continue;
            }
            let (start, end) = view.original(start, end);
            out.push(Hit { start, end, entity });
        }
        self.find_numbers(&view, out);
        Ok(())
    }

    /// Appends to `out` every number of the view of a text whose digits are those of a value
    /// written as a number, however its groups are set apart (`415-555-0172` is found written
    /// `4155550172` or `(415) 555 0172`): a run of digits with up to two separators between
    /// groups, on token boundaries; the whole run, the run after a country code written onto
    /// it (`+14155550172`), or, where the run holds more than the value, whole groups of it (a
    /// country code set apart, `+1 415 555 0172`; a number beside another, `4155550172
    /// 4155550173`).
    fn find_numbers<'k>(&'k self, view: &Normalized<'_>, out: &mut Vec<Hit<'k>>) {
        if self.numbers.is_empty() {
            return;
        }
        let bytes = view.as_str().as_bytes();
        let word = |at: usize| {
            bytes[at].is_ascii_alphanumeric() && !view.look_alike_at(at) && !view.removed_at(at + 1)
        };
        // The spans found so far, so that a span is reported once however many runs hold it.
        let mut reported: HashSet<(usize, usize)> = out.iter().map(|h| (h.start, h.end)).collect();
        let mut at = 0;
        while at < bytes.len() {
            if !bytes[at].is_ascii_digit() || (at > 0 && word(at - 1)) {
                at += 1;
                continue;
            }
            let groups = digit_groups(bytes, at);
            let end = groups.last().map_or(at + 1, |group| group.end);
            let apart = bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric());
            for (start, end, entity) in self.number_hits(bytes, &groups, apart) {
                let (start, end) = view.original(start, end);
                if reported.insert((start, end)) {
                    out.push(Hit { start, end, entity });
                }
            }
            at = end.max(at + 1);
        }
    }

    /// The hits of [`KnownValues::find_numbers`] in one run of digit `groups` of `bytes`, as
    /// spans of `bytes` with their entity; `apart`: nothing continues the run's last group.
    fn number_hits(
        &self,
        bytes: &[u8],
        groups: &[Range<usize>],
        apart: bool,
    ) -> Vec<(usize, usize, &str)> {
        let mut hits = Vec::new();
        let digits_of = |group: &Range<usize>| bytes.get(group.clone()).unwrap_or_default();
        let (Some(first), Some(last)) = (groups.first(), groups.last()) else {
            return hits;
        };
        let total: usize = groups.iter().map(|g| g.len()).sum();
        if apart && total <= self.longest_number + COUNTRY_CODE_DIGITS {
            let whole: Vec<u8> = groups.iter().flat_map(digits_of).copied().collect();
            // A leading `+` (a country code's) is part of the number.
            let plus = first.start > 0 && bytes.get(first.start - 1) == Some(&b'+');
            let start = if plus { first.start - 1 } else { first.start };
            let code = if plus { 0..=COUNTRY_CODE_DIGITS } else { 0..=0 };
            for skipped in code {
                let Some(national) = whole.get(skipped..) else {
                    continue;
                };
                // After a country code, a number whose national form begins with a trunk `0`
                // (`+44 20 7946 0958` for `020 7946 0958`) is written without it.
                let trunk = (skipped > 0).then(|| [b"0".as_slice(), national].concat());
                let found = self
                    .number(national)
                    .or_else(|| trunk.as_deref().and_then(|d| self.number(d)));
                if let Some(entity) = found {
                    hits.push((start, last.end, entity));
                    return hits;
                }
            }
        }
        // Whole groups that make a value on their own; one that ends the run only when nothing
        // continues it.
        let mut i = 0;
        while i + 1 < groups.len() {
            let mut digits = Vec::new();
            let mut matched = None;
            for (j, group) in groups.iter().enumerate().skip(i) {
                digits.extend_from_slice(digits_of(group));
                if digits.len() > self.longest_number {
                    break;
                }
                if let Some(entity) = self
                    .number(&digits)
                    .filter(|_| apart || j + 1 < groups.len())
                {
                    matched = Some((j, entity));
                    break;
                }
            }
            match matched {
                Some((j, entity)) => {
                    if let (Some(from), Some(to)) = (groups.get(i), groups.get(j)) {
                        hits.push((from.start, to.end, entity));
                    }
                    i = j + 1;
                }
                None => i += 1,
            }
        }
        hits
    }

    /// The entity of the value written as a number whose digits are `digits`.
    fn number(&self, digits: &[u8]) -> Option<&str> {
        let digits = std::str::from_utf8(digits).ok()?;
        let index = self.numbers.get(digits)?;
        self.values.get(*index).map(|(entity, _, _)| &**entity)
    }
}

/// How many digits a country code written onto a number after `+` may have.
const COUNTRY_CODE_DIGITS: usize = 3;

/// The digit groups of the run that starts at `at`: digits, set apart by up to two
/// separators each.
fn digit_groups(bytes: &[u8], at: usize) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut next = at;
    loop {
        let start = next;
        while bytes.get(next).is_some_and(u8::is_ascii_digit) {
            next += 1;
        }
        groups.push(start..next);
        let gap = bytes
            .get(next..)
            .unwrap_or_default()
            .iter()
            .take(3)
            .take_while(|b| number_separator(**b))
            .count();
        if gap == 0 || gap > 2 || !bytes.get(next + gap).is_some_and(u8::is_ascii_digit) {
            return groups;
        }
        next += gap;
    }
}

impl std::fmt::Debug for KnownValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownValues")
            .field("count", &self.values.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(known: &KnownValues, text: &str) -> Vec<(String, String)> {
        let mut hits = Vec::new();
        known.find(text, &mut hits).unwrap();
        hits.sort_by_key(|h| (h.start, h.end));
        hits.iter()
            .map(|h| (text[h.start..h.end].to_owned(), h.entity.to_owned()))
            .collect()
    }

    #[test]
    fn values_match_on_token_boundaries_whatever_their_ascii_case() {
        let known = KnownValues::new([
            ("Jan", "PERSON"),
            ("415 555 0172", "PHONE_NUMBER"),
            ("+44 20 7946 0958", "PHONE_NUMBER"),
            ("jane@example.com", "EMAIL_ADDRESS"),
        ])
        .unwrap();
        assert!(
            found(
                &known,
                "January and Jans, 1415 555 01729, xjane@example.comx"
            )
            .is_empty()
        );
        assert_eq!(
            found(
                &known,
                "jan, JAN. (415 555 0172) call+44 20 7946 0958; JANE@EXAMPLE.COM"
            ),
            [
                ("jan".into(), "PERSON".into()),
                ("JAN".into(), "PERSON".into()),
                ("415 555 0172".into(), "PHONE_NUMBER".into()),
                ("+44 20 7946 0958".into(), "PHONE_NUMBER".into()),
                ("JANE@EXAMPLE.COM".into(), "EMAIL_ADDRESS".into()),
            ]
        );
        // A value starting with `+` may follow a letter; `_` continues a token.
        assert!(found(&known, "id_Jan Jan_2").is_empty());
        // Letters beyond ASCII continue a token too, and are matched exactly.
        let known = KnownValues::new([("Zoë", "PERSON")]).unwrap();
        assert_eq!(
            found(&known, "Zoë, Zoëy, ZOË"),
            [("Zoë".into(), "PERSON".into())]
        );
    }

    #[test]
    fn values_match_however_either_spelling_writes_their_characters() {
        let known = KnownValues::new([
            ("4155550172", "PHONE_NUMBER"),
            ("\u{FF4A}ane@example.com", "EMAIL_ADDRESS"),
        ])
        .unwrap();
        // Fullwidth digits, an HTML reference, a zero-width space inside; the text keeps its
        // own bytes.
        let fullwidth =
            "\u{FF14}\u{FF11}\u{FF15}\u{FF15}\u{FF15}\u{FF15}\u{FF10}\u{FF11}\u{FF17}\u{FF12}";
        let text = format!(
            "call {fullwidth} or 415&#53;550172 or 41555\u{200B}50172, mail jane@example.com"
        );
        assert_eq!(
            found(&known, &text),
            [
                (fullwidth.into(), "PHONE_NUMBER".into()),
                ("415&#53;550172".into(), "PHONE_NUMBER".into()),
                ("41555\u{200B}50172".into(), "PHONE_NUMBER".into()),
                ("jane@example.com".into(), "EMAIL_ADDRESS".into()),
            ]
        );
        // A value written as a number is found however its digits are grouped, whole only.
        let grouped = KnownValues::new([("415-555-0172", "PHONE_NUMBER")]).unwrap();
        assert_eq!(
            found(
                &grouped,
                "call 4155550172, (415) 555 0172 or 415.555.0172 now"
            ),
            [
                ("4155550172".into(), "PHONE_NUMBER".into()),
                ("415) 555 0172".into(), "PHONE_NUMBER".into()),
                ("415.555.0172".into(), "PHONE_NUMBER".into()),
            ]
        );
        assert!(
            found(
                &grouped,
                "14155550172 4155550172x A4155550172 415 555 01729"
            )
            .is_empty()
        );
        // With a country code, written onto it or set apart, and beside another number.
        assert_eq!(
            found(
                &grouped,
                "+14155550172, +1 415 555 0172, 0044 415 555 0172 and 4155550172 4155550173 \
                 or 415 555 0172 24h"
            ),
            [
                ("+14155550172".into(), "PHONE_NUMBER".into()),
                ("+1 415 555 0172".into(), "PHONE_NUMBER".into()),
                ("415 555 0172".into(), "PHONE_NUMBER".into()),
                ("4155550172".into(), "PHONE_NUMBER".into()),
                ("415 555 0172".into(), "PHONE_NUMBER".into()),
            ]
        );
        // A national number with a trunk `0`, after its country code.
        let london = KnownValues::new([("020 7946 0958", "PHONE_NUMBER")]).unwrap();
        assert_eq!(
            found(&london, "tracking +44 20 7946 0958"),
            [("+44 20 7946 0958".into(), "PHONE_NUMBER".into())]
        );
        // Letters of other scripts, or folded from them, keep a value of ASCII apart.
        assert_eq!(found(&known, "電話は4155550172です").len(), 1);
        assert_eq!(found(&known, "карта4155550172").len(), 1);
        // A removed character keeps tokens apart; a digit next to the value joins it.
        assert_eq!(found(&known, "x\u{200B}4155550172").len(), 1);
        assert!(found(&known, "94155550172 \u{FF19}4155550172").is_empty());
    }

    #[test]
    fn overlapping_values_are_all_reported_so_none_hides_another() {
        // Leftmost-longest matching would take `555 0172` and skip the valid `0172 99`.
        let known = KnownValues::new([("555 0172", "A"), ("0172 99", "B")]).unwrap();
        assert_eq!(
            found(&known, "1555 0172 99"),
            [("0172 99".into(), "B".into())]
        );
        let known = KnownValues::new([("Jane Doe", "A"), ("Doe Street", "B")]).unwrap();
        assert_eq!(
            found(&known, "Jane Doe Street"),
            [
                ("Jane Doe".into(), "A".into()),
                ("Doe Street".into(), "B".into())
            ]
        );
    }

    #[test]
    fn short_empty_and_repeated_values_are_ignored_and_nothing_is_printed() {
        let known = KnownValues::new([
            ("", "A"),
            ("Al", "PERSON"),
            ("--- ", "X"),
            ("Bob", "PERSON"),
            ("BOB", "LOCATION"),
            ("Zoë", "PERSON"),
        ])
        .unwrap();
        assert_eq!(known.len(), 2);
        assert_eq!(found(&known, "bob Al"), [("bob".into(), "PERSON".into())]);
        assert_eq!(format!("{known:?}"), "KnownValues { count: 2 }");
        let none = KnownValues::new([]).unwrap();
        assert!(none.is_empty());
        assert!(found(&none, "Bob").is_empty());

        let mut values = FoundValues::default();
        values.insert("jane@example.com", "EMAIL_ADDRESS");
        values.insert("jane@example.com", "EMAIL_ADDRESS");
        values.insert("030 1234 5678", "PHONE_NUMBER");
        assert_eq!(values.len(), 2);
        assert_eq!(format!("{values:?}"), "FoundValues { count: 2 }");
        assert_eq!(KnownValues::new(values.iter()).unwrap().len(), 2);
    }
}
