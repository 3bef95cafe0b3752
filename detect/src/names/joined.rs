//! Names joined to others: a name listed beside a name found, and firms named by two family
//! names.

use super::lists::is_calendar;
use super::scan::Scan;
use super::words::name_shaped;
use super::{LOCATION, LONE, ORGANIZATION, PERSON, STRONG};
use crate::Span;

impl Scan<'_> {
    /// Names listed beside a name found (`Jane Doe and Anna Berg`, `["Ana Cruz","Rui Sá"]`),
    /// and places beside a place (`Lugo, Uganda`): the same entity.
    pub(super) fn coordinated(&mut self, found: &mut Vec<Span>) {
        const JOINS: &[&str] = &[
            ", ", "\",\"", "\", \"", " and ", " & ", ", and ", " und ", " et ", " e ", " y ",
            " en ", " och ", " i ", " / ", " or ",
        ];
        let seeds: Vec<Span> = found
            .iter()
            .filter(|s| matches!(s.entity, PERSON | LOCATION) && s.score >= LONE)
            .cloned()
            .collect();
        for seed in seeds {
            let person = seed.entity == PERSON;
            let after = &self.text[seed.end..];
            if let Some(join) = JOINS.iter().find(|j| after.starts_with(**j))
                && (person || *join == ", ")
            {
                let first = self
                    .words
                    .partition_point(|w| w.start < seed.end + join.len());
                if self
                    .words
                    .get(first)
                    .is_some_and(|w| w.start == seed.end + join.len())
                    && let Some(last) = self
                        .name_shape(first, person)
                        .or_else(|| self.lower_name(first, person))
                {
                    found.push(self.span(first, last, seed.entity, LONE + 0.05));
                }
            }
            let before = &self.text[..seed.start];
            if let Some(join) = JOINS.iter().find(|j| before.ends_with(**j))
                && (person || *join == ", ")
            {
                let end = seed.start - join.len();
                let last = self.words.partition_point(|w| w.end < end);
                if self.words.get(last).is_some_and(|w| w.end == end) {
                    let mut first = last;
                    while first > 0 && last - first < 2 && self.follows(first - 1, first) {
                        let facts = self.facts(first - 1);
                        if !facts.capitalised || facts.common {
                            break;
                        }
                        first -= 1;
                    }
                    if self.name_shape(first, person) == Some(last) {
                        found.push(self.span(first, last, seed.entity, LONE + 0.05));
                    }
                }
            }
        }
    }

    /// Firms named by two family names: two capitalised listed family names joined by `&` or
    /// a conjunction of one of the listed languages (`Lambert et Dubois`, `Kowalski i Nowak`),
    /// neither a given name frequent enough to stand alone (`John and Mary` are two people);
    /// or two capitalised names joined by a spaced dash, which people's names are not, one of
    /// them listed (`Parker - Parker`, `Friesen - Nolan`). Never a common word, a title, a
    /// place, a weekday or a month.
    pub(super) fn firms(&mut self, found: &mut Vec<Span>) {
        const DASHES: &[&str] = &[" - ", " – "];
        const CONJUNCTIONS: &[&str] = &[
            "and", "et", "und", "un", "y", "e", "i", "ir", "og", "och", "en", "és", "ve", "a",
            "si", "și",
        ];
        if self.lower_text {
            return;
        }
        let mut index = 0;
        while index + 1 < self.words.len() {
            let (first, next) = (self.words[index], self.words[index + 1]);
            let gap = &self.text[first.end..next.start];
            let dash = DASHES.contains(&gap);
            let last = if dash || gap == " & " {
                Some(index + 1)
            } else if gap == " "
                && CONJUNCTIONS.contains(&&self.text[next.start..next.end])
                && self
                    .words
                    .get(index + 2)
                    .is_some_and(|after| &self.text[next.end..after.start] == " ")
            {
                Some(index + 2)
            } else {
                None
            };
            let firm =
                last.is_some_and(|last| match (self.firm_word(index), self.firm_word(last)) {
                    (Some(a), Some(b)) if dash => a.listed || b.listed,
                    (Some(a), Some(b)) => a.family && b.family,
                    _ => false,
                });
            match last {
                Some(last) if firm => {
                    found.push(self.span(index, last, ORGANIZATION, STRONG));
                    index = last + 1;
                }
                _ => index += 1,
            }
        }
    }

    /// What word `index` is to [`Self::firms`]; `None` when it cannot be part of a firm's name.
    fn firm_word(&mut self, index: usize) -> Option<FirmWord> {
        let facts = self.facts(index);
        let possible = facts.capitalised
            && !facts.common
            && !facts.title
            && !facts.place
            && !facts.place_start
            && !is_calendar(facts.text)
            && facts.text.chars().nth(2).is_some()
            && name_shaped(facts.text);
        possible.then_some(FirmWord {
            family: facts.surname && !facts.frequent,
            listed: facts.surname || facts.given,
        })
    }

    /// In text without capitals, word `first` when it may be a person's name listed after
    /// another (`bartosz and wojtek`): a word of three or more letters shaped like a name that
    /// is not common, a title, a place, a weekday or a month.
    pub(super) fn lower_name(&mut self, first: usize, person: bool) -> Option<usize> {
        if !(self.lower_text && person) {
            return None;
        }
        let facts = self.facts(first);
        (facts.lower
            && !facts.common
            && !facts.title
            && !facts.place
            && !facts.place_start
            && !is_calendar(facts.text)
            && facts.text.len() >= 3
            && name_shaped(facts.text))
        .then_some(first)
    }
}

/// A word that may name a firm: a listed family name that is not a frequent given name
/// (`family`), a listed name of any kind (`listed`).
struct FirmWord {
    family: bool,
    listed: bool,
}
