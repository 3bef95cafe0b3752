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
//! The word lists are in `detect/data/names/`: given names and family names (the 1990 US
//! census lists, public domain, plus European given names), places, and common words that are
//! never a name on their own. Names are looked up without case and diacritics (`Müller` is
//! `muller`). What this does not find is in docs/policies.md, "Names, places and
//! organisations".

mod joined;
mod lists;
mod patterns;
mod scan;
pub(crate) mod tagger;
mod words;

use std::sync::LazyLock;

use regex::Regex;

use super::Span;
pub(crate) use lists::Lexicon;
use lists::{PARTICLES, PERSON_VERBS, is_calendar};
use scan::Scan;
use tagger::Tagger;
use words::{fold, words};

/// Cache of each pattern's lazy DFA: the address and organisation patterns meet many states
/// on mixed text, and with the default (2 MiB) the cache is rebuilt over and over.
pub(super) const DFA_CACHE: usize = 8 << 20;

/// The entity types found here.
pub const ENTITIES: [&str; 3] = ["PERSON", "LOCATION", "ORGANIZATION"];

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

/// What the detector reads with: the lists and patterns of the rules, and the tagger.
pub(crate) struct Names {
    lexicon: Lexicon,
    tagger: Tagger,
}

/// Built at the first use; an error (a pattern that does not compile, a damaged weight file)
/// is kept and given to every scanner that needs them, which then refuses to be built.
static NAMES: LazyLock<Result<Names, String>> = LazyLock::new(|| {
    Ok(Names {
        lexicon: lists::build()?,
        tagger: Tagger::from_bytes(include_bytes!("../data/names/tagger.bin"))?,
    })
});

/// The detector, or why it could not be built.
pub(crate) fn names() -> Result<&'static Names, String> {
    NAMES.as_ref().map_err(Clone::clone)
}

/// The lists and patterns, or why the detector could not be built.
pub(crate) fn lexicon() -> Result<&'static Lexicon, String> {
    names().map(|names| &names.lexicon)
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

/// Every match of `regex` in `shaped` within the `windows` (byte ranges, in order, apart),
/// less the trailing punctuation and the boundary it may end with, that is whole words of
/// `text` (of which `shaped` is a copy of the same length), as a span. (Only the match is
/// asked for: computing capture groups costs the lazy DFA far more than finding the match.)
fn matched(
    regex: &Regex,
    shaped: &str,
    text: &str,
    windows: &[(usize, usize)],
    entity: &'static str,
    score: f32,
    out: &mut Vec<Span>,
) {
    let matches = windows.iter().flat_map(|&(start, end)| {
        // What lies before the window still counts for its boundaries (`find_at`); what
        // follows it is a space or the text's end, as the window ends there.
        let haystack = &shaped[..end];
        let mut at = start;
        std::iter::from_fn(move || {
            let m = regex.find_at(haystack, at).filter(|_| at <= end)?;
            at = if m.end() > m.start() {
                m.end()
            } else {
                haystack[m.end()..]
                    .chars()
                    .next()
                    .map_or(end + 1, |c| m.end() + c.len_utf8())
            };
            Some(m)
        })
    });
    for m in matches {
        // A pattern that starts after a character outside words holds that character.
        let whole = m.as_str();
        let value = whole.trim_start_matches(|c: char| !c.is_alphanumeric());
        let start = m.start() + (whole.len() - value.len());
        // A closing parenthesis is punctuation unless the value opened it
        // (`Bau UG (haftungsbeschränkt)`).
        let mut value = value;
        loop {
            let trimmed =
                value.trim_end_matches(|c: char| c.is_whitespace() || ",;:!?]}\"<".contains(c));
            match trimmed.strip_suffix(')') {
                Some(rest) if trimmed.matches('(').count() < trimmed.matches(')').count() => {
                    value = rest;
                }
                _ => {
                    value = trimmed;
                    break;
                }
            }
        }
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
        let end = start + value.len();
        if !value.is_empty() && whole_words(text, start, end) {
            out.push(Span {
                start,
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
    last.contains('.')
        || matches!(
            last,
            "Co" | "Inc"
                | "Corp"
                | "Ltd"
                | "Lda"
                | "Ltda"
                | "Kft"
                | "Zrt"
                | "Nyrt"
                | "Bt"
                | "Av"
                | "Avda"
        )
}

/// The spans of the wanted entity types among [`ENTITIES`] in `text`, unresolved (they may
/// overlap each other and the other detectors' spans).
pub(crate) fn find(names: &'static Names, text: &str, wanted: &[bool; 3], out: &mut Vec<Span>) {
    let lexicon = &names.lexicon;
    // The tagger reads what the rules found of every type, whichever are wanted.
    let (mut found, marks) = rules_and_marks(lexicon, text);
    let mut tagged = Vec::new();
    tagger::find(&names.tagger, lexicon, text, &found, &marks, &mut tagged);
    merge(&mut found, tagged);
    if !marks.lower {
        let mut buffer = String::new();
        for span in found.iter_mut().filter(|span| span.entity == PERSON) {
            trim_person(lexicon, text, span, &mut buffer);
        }
    }
    out.extend(found.into_iter().filter(|span| {
        let index = ENTITIES.iter().position(|e| *e == span.entity).unwrap_or(0);
        wanted[index]
            && span.start < span.end
            && text.is_char_boundary(span.start)
            && text.is_char_boundary(span.end)
    }));
}

/// The tagger's input for `text` as its training reads it: each token's byte range and its
/// feature ids, hashed into `buckets`.
pub(crate) fn tagger_input(
    lexicon: &'static Lexicon,
    text: &str,
    buckets: usize,
) -> Result<super::TaggerInput, String> {
    let (rules, marks) = rules_and_marks(lexicon, text);
    let tokens = tagger::tokens(text);
    let input = tagger::features(lexicon, text, &tokens, &rules, &marks, buckets);
    Ok((
        tokens.iter().map(|t| (t.start, t.end)).collect(),
        input.features,
    ))
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
#[cfg(test)]
pub(crate) fn rules(lexicon: &'static Lexicon, text: &str) -> Vec<Span> {
    rules_and_marks(lexicon, text).0
}

/// What one pass over a text finds that both the rules and the tagger read: whether the text
/// is lower-case, its cues, JSON keys and listed places.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    /// The text has no capital letter (lower-case chat).
    pub(crate) lower: bool,
    /// Cues that start a word: start, end and their pattern.
    pub(crate) cues: Vec<(usize, usize, usize)>,
    /// JSON keys: the end of the key and its colon, and the key's name.
    pub(crate) keys: Vec<(usize, usize, usize)>,
    /// Listed places as whole words: capitalised ones, or in lower-case text the lower-case
    /// ones.
    pub(crate) places: Vec<(usize, usize)>,
}

/// Where a pattern that needs `anchor` bytes can match: `radius` bytes either side of each,
/// widened to the spaces around, merged where they overlap.
fn windows(
    text: &str,
    anchors: impl Iterator<Item = usize>,
    before: usize,
    after: usize,
) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let space = |b: &u8| b.is_ascii_whitespace();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for at in anchors {
        if out.last().is_some_and(|&(_, end)| at + after <= end) {
            continue;
        }
        // Back to the start of a word, forward to the space after one (at most 64 bytes
        // further; a window that ends inside a word only loses matches across that word).
        let mut start = at.saturating_sub(before);
        if start > 0 {
            start = bytes[start..at]
                .iter()
                .position(space)
                .map_or(start, |p| start + p + 1);
        }
        let mut end = (at + after).min(bytes.len());
        end = bytes[end..bytes.len().min(end + 64)]
            .iter()
            .position(space)
            .map_or((end + 64).min(bytes.len()), |p| end + p);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// The rules' spans and the marks they read, which the tagger reads too.
pub(crate) fn rules_and_marks(lexicon: &'static Lexicon, text: &str) -> (Vec<Span>, Marks) {
    let mut found = Vec::new();
    // Lower-case text (chat) has no capitals to go by: addresses are read in a title-cased
    // copy, organisations by their lower-case legal form.
    let lower = if text.is_ascii() {
        !text.bytes().any(|b| b.is_ascii_uppercase())
    } else {
        !text.chars().any(char::is_uppercase)
    };
    let titled;
    let shaped = if lower {
        titled = title_case(text);
        titled.as_str()
    } else {
        text
    };
    let words = words(text);
    let bytes = text.as_bytes();
    let whole = [(0, text.len())];
    // A capitalised word starts every organisation and most addresses: the patterns run
    // near them only (in lower-case text, everywhere).
    let capitals: Vec<usize> = words
        .iter()
        .filter(|w| text[w.start..].starts_with(char::is_uppercase))
        .map(|w| w.start)
        .collect();
    // Every address has a number (a house number or a postcode), and in text with capitals
    // a capitalised word.
    let digits = (0..bytes.len())
        .filter(|&i| bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_digit()));
    let near_digits = if lower {
        windows(text, digits, 160, 160)
    } else {
        windows(text, digits, 160, 160)
            .into_iter()
            .filter(|&(start, end)| {
                let first = capitals.partition_point(|c| *c < start);
                capitals.get(first).is_some_and(|c| *c < end)
            })
            .collect()
    };
    if !near_digits.is_empty() {
        let mut addresses = Vec::new();
        for regex in &lexicon.addresses {
            matched(
                regex,
                shaped,
                text,
                &near_digits,
                LOCATION,
                STRONG + 0.05,
                &mut addresses,
            );
        }
        found.extend(
            addresses
                .into_iter()
                .filter(|s| text[s.start..s.end].bytes().any(|b| b.is_ascii_digit())),
        );
    }
    let mut marks = Marks {
        lower,
        ..Marks::default()
    };
    {
        let mut buffer = String::new();
        for whole in lexicon.prefixed_places.find_iter(text) {
            // The name after the prefix and its space.
            let name = whole.as_str().split_once(' ').map_or("", |(_, name)| name);
            let first = name.split([' ', '-']).next().unwrap_or_default();
            fold(first, &mut buffer);
            if !lexicon.entry(&buffer).common && !is_calendar(first) {
                found.push(Span {
                    start: whole.start(),
                    end: whole.end(),
                    entity: LOCATION,
                    score: LONE,
                });
            }
        }
        if lower {
            for m in lexicon.places_in_lower.find_iter(text) {
                if whole_words(text, m.start(), m.end()) {
                    marks.places.push((m.start(), m.end()));
                }
            }
        } else {
            // Every listed place is capitalised: it is looked for where a capitalised word
            // starts only.
            let mut after = 0;
            for &at in &capitals {
                if at < after {
                    continue;
                }
                let input = aho_corasick::Input::new(text)
                    .range(at..)
                    .anchored(aho_corasick::Anchored::Yes);
                if let Ok(Some(m)) = lexicon.places.try_find(input)
                    && whole_words(text, m.start(), m.end())
                {
                    marks.places.push((m.start(), m.end()));
                    after = m.end();
                    found.push(Span {
                        start: m.start(),
                        end: m.end(),
                        entity: LOCATION,
                        score: LISTED,
                    });
                }
            }
        }
    }
    {
        let mut orgs = Vec::new();
        if !lower {
            let near_capitals = windows(text, capitals.iter().copied(), 0, 200);
            for regex in &lexicon.organizations {
                matched(
                    regex,
                    text,
                    text,
                    &near_capitals,
                    ORGANIZATION,
                    STRONG + 0.05,
                    &mut orgs,
                );
            }
            for regex in &lexicon.mixed_lower_organizations {
                matched(regex, text, text, &whole, ORGANIZATION, CUED, &mut orgs);
            }
        } else {
            for regex in &lexicon.lower_organizations {
                matched(regex, text, text, &whole, ORGANIZATION, CUED, &mut orgs);
            }
        }
        found.extend(
            orgs.into_iter()
                .filter_map(|span| trim_common(lexicon, text, span)),
        );
    }
    for m in lexicon.cues.find_iter(text) {
        // A cue starts a word.
        if m.start() == 0 || !bytes[m.start() - 1].is_ascii_alphanumeric() {
            marks
                .cues
                .push((m.start(), m.end(), m.pattern().as_usize()));
        }
    }
    for whole in lexicon.json_key.find_iter(text) {
        let from = whole.start()
            + (whole.as_str().len() - whole.as_str().trim_start_matches(['\\', '"']).len());
        let key = &text[from..whole.end()];
        let length = key.find(['\\', '"']).unwrap_or(key.len());
        marks.keys.push((whole.end(), from, from + length));
    }
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
    scan.cued(&marks, &mut found);
    scan.coordinated(&mut found);
    scan.firms(&mut found);
    separate_lists(text, &mut found);
    (found, marks)
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
/// groep`). A common word is kept when the rest is a legal form proper (`Demo Corp`,
/// `Apple Inc.`); with a word that also names a line of business (`Customer Services`,
/// `the Group`), nothing is left and the result is `None`.
fn trim_common(lexicon: &Lexicon, text: &str, mut span: Span) -> Option<Span> {
    let mut buffer = String::new();
    loop {
        let value = &text[span.start..span.end];
        let first_end = value.find([' ', ',']).unwrap_or(value.len());
        fold(&value[..first_end], &mut buffer);
        if first_end == value.len() {
            return None;
        }
        if !lexicon.entry(&buffer).common && !PARTICLES.contains(&buffer.as_str()) {
            return Some(span);
        }
        let rest = &value[first_end..];
        let rest = rest.trim_start_matches([' ', ',']);
        if !rest.contains([' ', ',']) {
            // One word is left: the legal form. The word before it names the organisation
            // when it is capitalised and not a word that only points at one.
            let named = value.starts_with(char::is_uppercase)
                && !PARTICLES.contains(&buffer.as_str())
                && !POINTERS.contains(&buffer.as_str());
            fold(rest.trim_end_matches('.'), &mut buffer);
            let proper = !GENERIC_FORMS.contains(&buffer.as_str());
            return (named && proper).then_some(span);
        }
        span.start += value.len() - rest.len();
    }
}

/// In text with capitals, a person's span without the common lower-case words it ends in
/// (`Lukas tomorrow`, `Ingrid again`) and without a verb that takes a person as its object
/// before a listed given name (`Ping Marta`, `Tell Anna`): a name there is capitalised but
/// for its particles (`Maria da Silva`), and the verb is not part of it.
fn trim_person(lexicon: &Lexicon, text: &str, span: &mut Span, buffer: &mut String) {
    while let Some((rest, last)) = text
        .get(span.start..span.end)
        .and_then(|value| value.rsplit_once(' '))
    {
        fold(last, buffer);
        let lower = !last.chars().any(char::is_uppercase);
        let common = lexicon.entry(buffer).common || is_calendar(last);
        if !(lower && common) || PARTICLES.contains(&buffer.as_str()) {
            break;
        }
        span.end = span.start + rest.trim_end().len();
    }
    let Some(value) = text.get(span.start..span.end) else {
        return;
    };
    if let Some((first, rest)) = value.split_once(' ') {
        fold(first, buffer);
        let verb = first.starts_with(char::is_uppercase) && PERSON_VERBS.contains(&buffer.as_str());
        let next = rest.trim_start();
        let next = next.split(' ').next().unwrap_or(next);
        fold(next, buffer);
        if verb && lexicon.entry(buffer).given != u32::MAX {
            span.start += value.len() - rest.trim_start().len();
        }
    }
}

/// Words that point at an organisation without naming it (`The Corp.`, `Our Ltd`).
const POINTERS: &[&str] = &[
    "the", "a", "an", "our", "your", "my", "their", "his", "her", "its", "this", "that", "any",
    "each", "every", "no", "which", "whose",
];

/// Words that end organisation names but are also ordinary words for a line of business:
/// a common word before one of them is not taken for a name.
const GENERIC_FORMS: &[&str] = &[
    "company",
    "group",
    "groep",
    "grupo",
    "gruppo",
    "gruppe",
    "grupp",
    "holding",
    "holdings",
    "partners",
    "associates",
    "technologies",
    "technology",
    "systems",
    "solutions",
    "labs",
    "laboratories",
    "industries",
    "consulting",
    "logistics",
    "foundation",
    "trust",
    "bank",
    "insurance",
    "capital",
    "ventures",
    "media",
    "software",
    "pharma",
    "motors",
    "airlines",
    "hotels",
    "enterprises",
    "investment",
    "investments",
    "international",
    "worldwide",
    "services",
];

#[cfg(test)]
mod tests;
