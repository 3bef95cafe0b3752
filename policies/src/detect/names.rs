//! Names, places and organisations (`PERSON`, `LOCATION`, `ORGANIZATION`): shapeless personal
//! data, found in two passes: rules over word lists and the words around them (this module's
//! `rules`), then a small network, the `tagger`, that reads each word, its neighbours and
//! what the lists and the rules say of them, and finds the names that have no cue. Rules and
//! tagger spans of one type that overlap are merged into one.
//!
//! What the rules find:
//!
//! - **`PERSON`**: a given name followed by family names (`Jane Doe`, `Jan de Vries`); a title
//!   followed by names (`Mr Kowalczyk`; the title is not part of the span); words after a cue
//!   (`my name is …`, `Dear …`, `Regards, …`, `"customer": "…"`), in lower-case chat too when
//!   the words are in the name lists; a capitalised given name on its own.
//! - **`LOCATION`**: a street address with its number, postcode and city as one span, in the
//!   forms of English, German, Dutch, Nordic, French, Spanish, Italian, Portuguese and Polish
//!   addresses; a postcode followed by a city; a country, region or city from the place list;
//!   capitalised words after a cue (`lives in …`, `ship to …`).
//! - **`ORGANIZATION`**: capitalised words ending in a legal form or a company word (`Acme
//!   GmbH`, `Rossi e figli`, `Smith, Jones and Brown LLC`), a company word followed by names
//!   (`Grupo Vázquez`, `University of Leeds`), words after a cue (`works at …`,
//!   `"company": "…"`).
//!
//! The word lists are in `policies/data/names/`: given names and family names (the 1990 US
//! census lists, public domain, plus European given names), places, and common words that are
//! never a name on their own. Names are looked up without case and diacritics (`Müller` is
//! `muller`). What this does not find is in docs/policies.md, "Names, places and
//! organisations".

mod lists;
mod patterns;
mod scan;
pub(crate) mod tagger;

use regex::Regex;

use super::Span;
pub(crate) use lists::Lexicon;
use lists::{LEXICON, PARTICLES, is_calendar};
use scan::{Scan, fold, words};

/// Cache of each pattern's lazy DFA: the address and organisation patterns meet many states
/// on mixed text, and with the default (2 MiB) the cache is rebuilt over and over.
pub(super) const DFA_CACHE: usize = 8 << 20;

/// The entity types found here.
pub(crate) const ENTITIES: [&str; 3] = ["PERSON", "LOCATION", "ORGANIZATION"];

pub(super) const PERSON: &str = "PERSON";
pub(super) const LOCATION: &str = "LOCATION";
pub(super) const ORGANIZATION: &str = "ORGANIZATION";

/// Scores: a shape that is nearly always the entity, a cue or list match, a lone word.
pub(super) const STRONG: f32 = 0.85;
pub(super) const CUED: f32 = 0.75;
pub(super) const LISTED: f32 = 0.7;
pub(super) const LONE: f32 = 0.6;

/// Given names up to this place in the list are frequent enough to be a name on their own;
/// rarer ones (`Echo`, `Kit`) need a listed family name beside them.
pub(super) const FREQUENT: usize = 2000;

/// The lists and patterns, or why they could not be built.
pub(crate) fn lexicon() -> Result<&'static Lexicon, String> {
    LEXICON.as_ref().map_err(Clone::clone)
}

/// Whether the match at `start..end` is whole words, and not part of an identifier or a
/// placeholder (`<UK_NINO_…>`, `[UK_NINO]`: `_`, `<`, `[` and `]` join).
pub(super) fn whole_words(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '<' | '['))
        && !after.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '>' | ']'))
}

/// `text` with the first letter of each word upper-cased where that keeps its UTF-8 length,
/// so that byte offsets into it are offsets into `text`.
fn title_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphabetic() && !in_word {
            let mut upper = c.to_uppercase();
            match (upper.next(), upper.next()) {
                (Some(u), None) if u.len_utf8() == c.len_utf8() => out.push(u),
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
        in_word = c.is_alphanumeric() || matches!(c, '\'' | '’');
    }
    out
}

/// Every match of `regex` in `shaped`, less the trailing punctuation and the boundary it may
/// end with, that is whole words of `text` (of which `shaped` is a copy of the same length),
/// as a span. (Only the match is asked for: computing capture groups costs the lazy DFA far
/// more than finding the match.)
fn matched(
    regex: &Regex,
    shaped: &str,
    text: &str,
    entity: &'static str,
    score: f32,
    out: &mut Vec<Span>,
) {
    for m in regex.find_iter(shaped) {
        let value = m
            .as_str()
            .trim_end_matches(|c: char| c.is_whitespace() || ",;:!?)]}\"<".contains(c));
        // A trailing full stop ends the sentence unless the value ends in an abbreviation.
        let value = match value.strip_suffix('.') {
            Some(rest) if entity == LOCATION || !ends_in_abbreviation(rest) => rest,
            _ => value,
        };
        // A city is not followed by a weekday (`…, 46039 Volargne on Wednesday`).
        let mut value = value;
        while let Some((rest, last)) = value.rsplit_once(' ') {
            if !is_calendar(last) && !matches!(last, "on" | "am" | "le" | "el" | "il") {
                break;
            }
            value = rest.trim_end_matches([',', ' ']);
        }
        let end = m.start() + value.len();
        if !value.is_empty() && whole_words(text, m.start(), end) {
            out.push(Span {
                start: m.start(),
                end,
                entity,
                score,
            });
        }
    }
}

/// Whether `value` (without its last full stop) ends in a dotted abbreviation (`Co`, `S.A`).
fn ends_in_abbreviation(value: &str) -> bool {
    let last = value.rsplit([' ', '\u{a0}']).next().unwrap_or(value);
    last.contains('.') || matches!(last, "Co" | "Inc" | "Corp" | "Ltd" | "Lda" | "Av" | "Avda")
}

/// The spans of the wanted entity types among [`ENTITIES`] in `text`, unresolved (they may
/// overlap each other and the other detectors' spans).
pub(crate) fn find(lexicon: &'static Lexicon, text: &str, wanted: &[bool; 3], out: &mut Vec<Span>) {
    // The tagger reads what the rules found of every type, whichever are wanted.
    let mut found = rules(lexicon, text);
    let mut tagged = Vec::new();
    tagger::find(&lexicon.tagger, lexicon, text, &found, &mut tagged);
    merge(&mut found, tagged);
    out.extend(found.into_iter().filter(|span| {
        let index = ENTITIES.iter().position(|e| *e == span.entity).unwrap_or(0);
        wanted[index]
            && span.start < span.end
            && text.is_char_boundary(span.start)
            && text.is_char_boundary(span.end)
    }));
}

/// The tagger's spans added to the rules': where one overlaps a rule's span of the same type,
/// that span grows to cover both (the rules' shapes are sure of what they cover, the tagger
/// often of the words beside it); the others are added as they are, and overlaps of different
/// types are left to the scanner's resolution by score.
fn merge(found: &mut Vec<Span>, tagged: Vec<Span>) {
    // The rules' spans by start, with the length of the longest: the ones a tagger span can
    // overlap start less than that length before it.
    // Overlaps are decided on the rules' spans as they were found, not as they grow.
    found.sort_by_key(|s| s.start);
    let bounds: Vec<(usize, usize)> = found.iter().map(|s| (s.start, s.end)).collect();
    let longest = bounds
        .iter()
        .map(|(start, end)| end - start)
        .max()
        .unwrap_or(0);
    for span in tagged {
        let mut grown = false;
        let last = bounds.partition_point(|(start, _)| *start < span.end);
        let first = bounds[..last].partition_point(|(start, _)| start + longest <= span.start);
        for (rule, (_, end)) in found[first..last].iter_mut().zip(&bounds[first..last]) {
            if rule.entity == span.entity && span.start < *end {
                // The wider span keeps the better score, so that a threshold that the
                // tagger's span passes is not failed by a weaker rule span inside it.
                rule.start = rule.start.min(span.start);
                rule.end = rule.end.max(span.end);
                rule.score = rule.score.max(span.score);
                grown = true;
            }
        }
        if !grown {
            found.push(span);
        }
    }
}

/// The spans the rules find in `text`: word lists, address and organisation shapes, cues.
pub(crate) fn rules(lexicon: &'static Lexicon, text: &str) -> Vec<Span> {
    let mut found = Vec::new();
    // Lower-case text (chat) has no capitals to go by: addresses are read in a title-cased
    // copy, organisations by their lower-case legal form.
    let lower = !text.chars().any(char::is_uppercase);
    let titled;
    let shaped = if lower {
        titled = title_case(text);
        titled.as_str()
    } else {
        text
    };
    // Every address has a number (a house number or a postcode).
    if text.bytes().any(|b| b.is_ascii_digit()) {
        let mut addresses = Vec::new();
        for regex in &lexicon.addresses {
            matched(regex, shaped, text, LOCATION, STRONG + 0.05, &mut addresses);
        }
        found.extend(
            addresses
                .into_iter()
                .filter(|s| text[s.start..s.end].bytes().any(|b| b.is_ascii_digit())),
        );
    }
    {
        let mut buffer = String::new();
        for whole in lexicon.prefixed_places.find_iter(text) {
            // The name after the prefix and its space.
            let name = whole.as_str().split_once(' ').map_or("", |(_, name)| name);
            let first = name.split([' ', '-']).next().unwrap_or_default();
            fold(first, &mut buffer);
            if !lexicon.common.contains(buffer.as_str()) && !is_calendar(first) {
                found.push(Span {
                    start: whole.start(),
                    end: whole.end(),
                    entity: LOCATION,
                    score: LONE,
                });
            }
        }
        for m in lexicon.places.find_iter(text) {
            if whole_words(text, m.start(), m.end()) {
                found.push(Span {
                    start: m.start(),
                    end: m.end(),
                    entity: LOCATION,
                    score: LISTED,
                });
            }
        }
    }
    {
        let mut orgs = Vec::new();
        for regex in &lexicon.organizations {
            matched(regex, text, text, ORGANIZATION, STRONG + 0.05, &mut orgs);
        }
        if lower {
            for regex in &lexicon.lower_organizations {
                matched(regex, text, text, ORGANIZATION, CUED, &mut orgs);
            }
        }
        found.extend(
            orgs.into_iter()
                .filter_map(|span| trim_common(lexicon, text, span)),
        );
    }
    let words = words(text);
    let mut scan = Scan {
        lexicon,
        text,
        known: vec![None; words.len()],
        words,
        buffer: String::new(),
        lower_text: lower,
    };
    scan.people(&mut found);
    scan.before_verbs(&mut found);
    scan.cued(&mut found);
    scan.coordinated(&mut found);
    separate_lists(text, &mut found);
    found
}

/// An organisation read as a list that starts with the end of a person's name (`Mvh Erik
/// Axelsson, Pettersson & Jonsson HB`) starts after that name.
fn separate_lists(text: &str, found: &mut [Span]) {
    let mut people: Vec<(usize, usize)> = found
        .iter()
        .filter(|s| s.entity == PERSON && s.score >= LONE)
        .map(|s| (s.start, s.end))
        .collect();
    people.sort_unstable();
    for span in found.iter_mut().filter(|s| s.entity == ORGANIZATION) {
        // The person that starts last before the organisation.
        let before = people.partition_point(|(start, _)| *start < span.start);
        let Some(&(_, end)) = before.checked_sub(1).and_then(|i| people.get(i)) else {
            continue;
        };
        if span.start < end && end + 2 < span.end && text[end..].starts_with(", ") {
            span.start = end + 2;
        }
    }
}

/// `span` without the common words it starts with (`check if schenk groep` is `schenk
/// groep`); `None` when nothing but the legal form is left.
fn trim_common(lexicon: &Lexicon, text: &str, mut span: Span) -> Option<Span> {
    let mut buffer = String::new();
    loop {
        let value = &text[span.start..span.end];
        let first_end = value.find([' ', ',']).unwrap_or(value.len());
        fold(&value[..first_end], &mut buffer);
        if first_end == value.len() {
            return None;
        }
        if !lexicon.common.contains(buffer.as_str()) && !PARTICLES.contains(&buffer.as_str()) {
            return Some(span);
        }
        let rest = &value[first_end..];
        span.start += first_end + (rest.len() - rest.trim_start_matches([' ', ',']).len());
    }
}

#[cfg(test)]
mod tests;
