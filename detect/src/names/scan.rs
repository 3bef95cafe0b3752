//! Words and what the lists say of them, and the rules that read names from them.

use super::lists::{Cue, Lexicon, PARTICLES, PLACE_TAILS, is_calendar, key_cue};
use super::words::{MAX_WORD, Word, fold, month_by_number, name_shaped};
use super::{CUED, FREQUENT, LOCATION, LONE, ORGANIZATION, PERSON, STRONG, whole_words};
use crate::Span;

/// What the lists say of `text` (one word); `buffer` is scratch space.
pub(super) fn look_up<'t>(lexicon: &Lexicon, text: &'t str, buffer: &mut String) -> Facts<'t> {
    let capitalised = text.chars().next().is_some_and(char::is_uppercase);
    // A word longer than any listed one (a run of 200,000 `A`s) is not looked up.
    let entry = if text.len() <= MAX_WORD {
        fold(text, buffer);
        let mut entry = lexicon.entry(buffer);
        if entry.given == u32::MAX && !text.is_ascii() {
            // The extra given names keep their diacritics (`inês`).
            let given = lexicon.entry(&text.to_lowercase()).given;
            entry.given = given;
        }
        // A possessive is its name's (`Olivia's team`), when the whole word is no list's.
        if !entry.listed()
            && let Some(stem) = buffer
                .strip_suffix("'s")
                .or_else(|| buffer.strip_suffix("’s"))
                .filter(|stem| stem.len() >= 2)
        {
            let stem = lexicon.entry(stem);
            if stem.given != u32::MAX || stem.surname {
                entry = stem;
            }
        }
        entry
    } else {
        buffer.clear();
        lexicon.entry("")
    };
    // A particle (`van`, `de`) is never a given name on its own.
    let particle = PARTICLES.contains(&buffer.as_str());
    let given = entry.given != u32::MAX && !particle;
    Facts {
        text,
        title: entry.title,
        capitalised,
        lower: !text.chars().any(char::is_uppercase),
        given,
        frequent: given && (entry.given as usize) < FREQUENT,
        surname: entry.surname,
        // A name is a common word when the list says so, or when it is one letter long.
        common: entry.common || text.chars().nth(1).is_none(),
        place: entry.place,
        place_start: entry.place_start,
    }
}

/// What the lists say of one word.
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts<'t> {
    pub(super) text: &'t str,
    /// A title (`Mr`, `Frau`).
    pub(super) title: bool,
    pub(super) capitalised: bool,
    pub(super) lower: bool,
    pub(super) given: bool,
    /// A given name frequent enough to stand alone.
    pub(super) frequent: bool,
    pub(super) surname: bool,
    pub(super) common: bool,
    /// A listed place of one word.
    pub(super) place: bool,
    /// The first word of a listed place.
    pub(super) place_start: bool,
}

/// One scan of one text.
pub(super) struct Scan<'t> {
    pub(super) lexicon: &'static Lexicon,
    pub(super) text: &'t str,
    pub(super) words: Vec<Word>,
    /// What the lists say of each word, once looked up.
    pub(super) known: Vec<Option<Facts<'t>>>,
    pub(super) buffer: String,
    /// The text has no capital letter (lower-case chat).
    pub(super) lower_text: bool,
}

impl<'t> Scan<'t> {
    pub(super) fn facts(&mut self, index: usize) -> Facts<'t> {
        if let Some(Some(known)) = self.known.get(index) {
            return *known;
        }
        let facts = self.look_up(index);
        if let Some(slot) = self.known.get_mut(index) {
            *slot = Some(facts);
        }
        facts
    }

    pub(super) fn look_up(&mut self, index: usize) -> Facts<'t> {
        let word = self.words[index];
        look_up(
            self.lexicon,
            &self.text[word.start..word.end],
            &mut self.buffer,
        )
    }

    /// Whether word `next` directly follows word `index` (one or two spaces between them).
    pub(super) fn follows(&self, index: usize, next: usize) -> bool {
        let (Some(a), Some(b)) = (self.words.get(index), self.words.get(next)) else {
            return false;
        };
        let gap = &self.text[a.end..b.start];
        !gap.is_empty() && gap.len() <= 2 && gap.bytes().all(|b| b == b' ')
    }

    /// Whether word `index` is `Jan` written as a date (see [`month_by_number`]).
    pub(super) fn month_by_number(&self, index: usize) -> bool {
        month_by_number(
            self.text,
            |i| self.words.get(i).map(|w| (w.start, w.end)),
            index,
        )
    }

    /// The word after a title at `index` (`Mrs Fors`, `Mrs. Fors`), if the title is followed
    /// by one.
    pub(super) fn after_title(&self, index: usize) -> Option<usize> {
        let (word, next) = (self.words.get(index)?, self.words.get(index + 1)?);
        matches!(
            &self.text[word.end..next.start],
            " " | ". " | "  " | ".  " | "\u{a0}"
        )
        .then_some(index + 1)
    }

    /// Whether word `index` starts a sentence (nothing but quotes and brackets between it and
    /// the text's start or a sentence's end).
    pub(super) fn starts_sentence(&self, index: usize) -> bool {
        let before = &self.text[..self.words[index].start];
        match before
            .trim_end_matches(|c: char| c.is_whitespace() || "\"'“”‘’([{*-•>".contains(c))
            .chars()
            .next_back()
        {
            None => true,
            Some(c) => matches!(c, '.' | '!' | '?' | ':' | '\n' | '|' | ',' | ';' | '='),
        }
    }

    /// The family names that follow a given name or a title at `from`: capitalised words,
    /// with particles between them, up to three. Returns the index of the last one.
    pub(super) fn family(&mut self, from: usize, need_listed: bool) -> Option<usize> {
        let mut last = None;
        let mut at = from;
        let mut taken = 0;
        while taken < 3 && at < self.words.len() {
            let facts = self.facts(at);
            // `Jan de Vries`, but not `Sonia Nicolucci di Rossi e figli` (`di` is `of` there).
            if taken == 0
                && facts.lower
                && PARTICLES.contains(&facts.text)
                && self.follows(at, at + 1)
            {
                at += 1;
                continue;
            }
            let ok = facts.capitalised
                && !is_calendar(facts.text)
                && (if need_listed && taken == 0 {
                    facts.surname && !facts.common
                } else {
                    !facts.common || facts.surname
                });
            if !ok {
                break;
            }
            last = Some(at);
            taken += 1;
            if !self.follows(at, at + 1) {
                break;
            }
            at += 1;
        }
        last
    }

    pub(super) fn span(&self, first: usize, last: usize, entity: &'static str, score: f32) -> Span {
        Span {
            start: self.words[first].start,
            end: self.words[last].end,
            entity,
            score,
        }
    }

    /// Names by their lists and titles.
    pub(super) fn people(&mut self, out: &mut Vec<Span>) {
        let mut index = 0;
        while index < self.words.len() {
            // In text with capitals, a name starts with one (lower-case names there are found
            // after cues only): other words are not looked up.
            let word = self.words[index];
            let capital = self.text[word.start..word.end].starts_with(char::is_uppercase);
            // A title, in any case (`pani Kaja Trzcionka`, `Sayın Aydın`), or a title written
            // with a dot inside (`Sig.ra`, `Dott.ssa`, glued to the name's word), then names.
            let titled = if self.follows_title(index) {
                Some(index)
            } else if !capital && !self.lower_text {
                let next_capital = self
                    .words
                    .get(index + 1)
                    .is_some_and(|w| self.text[w.start..w.end].starts_with(char::is_uppercase));
                (next_capital && self.facts(index).title).then_some(index + 1)
            } else {
                None
            };
            if let Some(next) = titled {
                let gap_ok = next == index || {
                    self.words.get(next).is_some_and(|w| {
                        let gap = &self.text[self.words[index].end..w.start];
                        matches!(gap, " " | ". " | "  " | ".  " | "\u{a0}")
                    })
                };
                if gap_ok && let Some(last) = self.family(next, false) {
                    out.push(self.span(next, last, PERSON, STRONG));
                    index = last + 1;
                    continue;
                }
            }
            if !self.lower_text && !capital {
                index += 1;
                continue;
            }
            // `Jan 12`, `in Jan`: a month, not the given name.
            if self.month_by_number(index) {
                index += 1;
                continue;
            }
            let facts = self.facts(index);
            if facts.title && facts.capitalised {
                // `Mr.` or `Mr` then names.
                let next = index + 1;
                let gap_ok = self.words.get(next).is_some_and(|w| {
                    let gap = &self.text[self.words[index].end..w.start];
                    matches!(gap, " " | ". " | "  " | ".  " | "\u{a0}")
                });
                if gap_ok && let Some(last) = self.family(next, false) {
                    out.push(self.span(next, last, PERSON, STRONG));
                    index = last + 1;
                    continue;
                }
            }
            // `Bērziņš kungs`, `Ahmet Bey`: a title after the name.
            if facts.capitalised
                && !facts.common
                && !is_calendar(facts.text)
                && let Some(last) = self.before_post_title(index)
            {
                out.push(self.span(index, last, PERSON, CUED));
                index = last + 1;
                continue;
            }
            // `Doe, Jane`, as lists and records write names: two spans.
            if facts.capitalised && facts.surname && !facts.common {
                let next = index + 1;
                let comma = self
                    .words
                    .get(next)
                    .is_some_and(|w| &self.text[self.words[index].end..w.start] == ", ");
                if comma {
                    let given = self.facts(next);
                    if given.capitalised && given.given && !given.common {
                        out.push(self.span(index, index, PERSON, CUED));
                        out.push(self.span(next, next, PERSON, CUED));
                        index = next + 1;
                        continue;
                    }
                }
            }
            // Lower-case chat: a listed given name and a listed family name, neither common;
            // in text without a capital at all, a frequent given name and the word after it
            // unless that is common, or the given name alone.
            if facts.lower && facts.given && !facts.common && facts.text.len() >= 3 && !facts.place
            {
                let family = self
                    .follows(index, index + 1)
                    .then(|| self.facts(index + 1));
                let listed = family.as_ref().is_some_and(|f| {
                    f.lower
                        && !f.common
                        && f.text.len() >= 3
                        && !f.place
                        && !is_calendar(f.text)
                        && (f.surname || (self.lower_text && facts.frequent))
                });
                if listed {
                    out.push(self.span(index, index + 1, PERSON, LONE));
                    index += 2;
                    continue;
                }
                if self.lower_text && facts.frequent {
                    out.push(self.span(index, index, PERSON, LONE - 0.05));
                }
            }
            if facts.capitalised && facts.given && !is_calendar(facts.text) {
                let listed_only = facts.common || !facts.frequent;
                let family = if self.follows(index, index + 1) {
                    self.family(index + 1, listed_only)
                } else {
                    None
                };
                // `the Echo Dot`, `a Kindle`: a determiner does not come before a name.
                let penalty = if self.after_determiner(index) {
                    0.3
                } else {
                    0.0
                };
                match family {
                    Some(last) => {
                        out.push(self.span(index, last, PERSON, STRONG - penalty));
                        index = last + 1;
                        continue;
                    }
                    None if facts.frequent && !facts.common && !self.starts_sentence(index) => {
                        out.push(self.span(index, index, PERSON, LONE - penalty));
                    }
                    None if facts.frequent && !facts.common => {
                        out.push(self.span(index, index, PERSON, LONE - 0.05 - penalty));
                    }
                    None => {}
                }
            }
            index += 1;
        }
    }

    /// Whether word `index` follows a title that is written with a dot inside and so is not
    /// a word of its own (`Sig.ra Rossi`, `Dott.ssa Bianchi`, `Sr.ta Gil`).
    pub(super) fn follows_title(&self, index: usize) -> bool {
        let start = self.words[index].start;
        let before = self.text[..start].strip_suffix(' ').unwrap_or("");
        let chunk = before
            .rsplit([' ', '\n', '\t', '(', '"', ','])
            .next()
            .unwrap_or("");
        chunk.len() <= 9
            && chunk.contains('.')
            && matches!(
                chunk.to_lowercase().as_str(),
                "sig.ra" | "sig.na" | "dott.ssa" | "sr.ta" | "prof.ssa" | "avv." | "ing."
            )
    }

    /// The last word of a name of up to three capitalised words from `first` that a title
    /// follows (`Bērziņš kungs`, `Ahmet Bey`, `Ayşe Hanım`).
    pub(super) fn before_post_title(&mut self, first: usize) -> Option<usize> {
        let mut at = first;
        while at < first + 3 && self.follows(at, at + 1) {
            let next = self.words[at + 1];
            let word = &self.text[next.start..next.end];
            if matches!(
                word,
                "kungs" | "kundze" | "kungam" | "kundzei" | "Bey" | "Hanım" | "Hanim"
            ) {
                return Some(at);
            }
            let facts = self.facts(at + 1);
            if !facts.capitalised || facts.common {
                return None;
            }
            at += 1;
        }
        None
    }

    /// Whether word `index` comes right after an article or a possessive.
    pub(super) fn after_determiner(&self, index: usize) -> bool {
        index > 0 && self.follows(index - 1, index) && {
            let word = self.words[index - 1];
            let before = self.text[word.start..word.end].to_lowercase();
            matches!(
                before.as_str(),
                "the"
                    | "a"
                    | "an"
                    | "our"
                    | "your"
                    | "their"
                    | "this"
                    | "that"
                    | "these"
                    | "der"
                    | "die"
                    | "das"
                    | "le"
                    | "la"
                    | "les"
                    | "el"
                    | "il"
                    | "lo"
                    | "het"
            )
        }
    }

    /// The index of the first word that starts at or after byte `at`, when only separators
    /// (spaces, `:`, `=`, `,`, quotes) lie between.
    pub(super) fn word_after(&self, at: usize) -> Option<usize> {
        let index = self.words.partition_point(|w| w.start < at);
        let word = self.words.get(index)?;
        let gap = &self.text[at..word.start];
        (gap.len() <= 6
            && gap
                .chars()
                .all(|c| c.is_whitespace() || ":=,\"'[\\".contains(c)))
        .then_some(index)
    }

    /// Names before the verbs that follow a person (`Elmar will review`, `Rose Zanichelli
    /// said`): one or two capitalised words that are not common (a common first word only
    /// with a second), or a listed given name in lower-case text.
    pub(super) fn before_verbs(&mut self, out: &mut Vec<Span>) {
        let is_speech = |word: &str| {
            matches!(
                word,
                "said"
                    | "says"
                    | "asked"
                    | "asks"
                    | "wrote"
                    | "replied"
                    | "confirmed"
                    | "mentioned"
                    | "complained"
                    | "agreed"
            )
        };
        let is_verb = |word: &str| {
            matches!(
                word,
                "said"
                    | "says"
                    | "asked"
                    | "asks"
                    | "wrote"
                    | "writes"
                    | "replied"
                    | "confirmed"
                    | "mentioned"
                    | "complained"
                    | "agreed"
                    | "called"
                    | "emailed"
                    | "joins"
                    | "joined"
                    | "will"
                    | "would"
                    | "wants"
                    | "needs"
                    | "thinks"
                    | "reported"
                    | "approved"
                    | "signed"
                    | "sagte"
                    | "schrieb"
                    | "dit"
                    | "dijo"
                    | "zei"
                    | "powiedział"
                    | "powiedziała"
                    | "disse"
                    | "sa"
            )
        };
        for verb in 1..self.words.len() {
            let word = self.words[verb];
            if !is_verb(&self.text[word.start..word.end]) || !self.follows(verb - 1, verb) {
                continue;
            }
            let last = verb - 1;
            let facts = self.facts(last);
            if is_calendar(facts.text) || facts.place {
                continue;
            }
            if facts.capitalised && !facts.common {
                let mut first = last;
                if last > 0 && self.follows(last - 1, last) {
                    let before = self.facts(last - 1);
                    if before.capitalised
                        && !is_calendar(before.text)
                        && !self.after_determiner(last - 1)
                        && (!before.common || before.given)
                    {
                        first = last - 1;
                    }
                }
                // One word at the start of a sentence needs to be a listed name.
                if first == last && self.starts_sentence(last) && !(facts.given || facts.surname) {
                    continue;
                }
                out.push(self.span(first, last, PERSON, LONE));
            } else if facts.lower && facts.given && !facts.common && self.lower_text {
                out.push(self.span(last, last, PERSON, LONE));
            } else if self.lower_text
                && facts.lower
                && !facts.common
                && !facts.title
                && facts.text.len() >= 3
                && name_shaped(facts.text)
                && !self.after_determiner(last)
                && is_speech(&self.text[word.start..word.end])
            {
                // Lower-case chat: a word no list knows before a verb of speech (`ok so
                // tassilo said`, `wojtek asked`), unless an article or a possessive comes
                // before it (`the courier said`).
                out.push(self.span(last, last, PERSON, LONE - 0.05));
            }
        }
    }

    /// Words after cues.
    pub(super) fn cued(&mut self, marks: &super::Marks, out: &mut Vec<Span>) {
        let lexicon = self.lexicon;
        let bytes = self.text.as_bytes();
        let mut found: Vec<(usize, Cue)> = Vec::new();
        for &(_, end, pattern) in &marks.cues {
            // A cue is whole words.
            let after_ok = bytes.get(end).is_none_or(|b| {
                !b.is_ascii_alphanumeric() || !bytes[end - 1].is_ascii_alphanumeric()
            });
            if after_ok {
                for kind in &lexicon.cue_kinds[pattern] {
                    found.push((end, *kind));
                }
            }
        }
        for &(end, from, to) in &marks.keys {
            if let Some(cue) = key_cue(&self.text[from..to]) {
                found.push((end, cue));
            }
        }
        for (end, cue) in found {
            let Some(first) = self.word_after(end) else {
                continue;
            };
            // In text with capitals, a lower-case word after a weak cue (`to`, `in`, `for`:
            // much of prose follows one) is a name only when it is a listed place.
            if !self.lower_text
                && matches!(cue, Cue::PersonWeak | Cue::PersonVerb | Cue::LocationWeak)
                && !self.text[self.words[first].start..].starts_with(char::is_uppercase)
                && (cue != Cue::LocationWeak || !self.facts(first).place_start)
            {
                continue;
            }
            match cue {
                Cue::PersonStrong | Cue::PersonWeak | Cue::PersonVerb | Cue::PersonIntro => {
                    self.cued_person(first, cue, out);
                }
                Cue::Location => self.cued_words(first, LOCATION, CUED, out),
                Cue::LocationWeak => self.cued_words(first, LOCATION, LONE - 0.05, out),
                Cue::Organization => self.cued_words(first, ORGANIZATION, CUED, out),
            }
        }
    }

    pub(super) fn cued_person(&mut self, first: usize, cue: Cue, out: &mut Vec<Span>) {
        let mut first = first;
        // `Szanowny Panie Korda`, `Dear Mr. Smith`: the title is not the name, and a title
        // alone is none.
        if self.facts(first).title {
            match self.after_title(first) {
                Some(next) => first = next,
                None => return,
            }
        }
        let facts = self.facts(first);
        if facts.common || is_calendar(facts.text) {
            return;
        }
        let listed = facts.given || facts.surname;
        let place = facts.place || facts.place_start;
        let weak = matches!(cue, Cue::PersonWeak | Cue::PersonVerb);
        let mut score = CUED;
        let last = if facts.capitalised {
            // After a weak cue (`from Leeds`) a listed place is a place; after an intro, or
            // after a weak cue, two capitalised words that are neither common nor a place are
            // a name (`I'm Hemang Mander`, `with Hemang Mander`).
            let shaped = (cue == Cue::PersonIntro || weak) && self.follows(first, first + 1) && {
                let next = self.facts(first + 1);
                next.capitalised
                    && !next.common
                    && !next.title
                    && !next.place
                    && !is_calendar(next.text)
                    && name_shaped(facts.text)
                    && name_shaped(next.text)
            };
            if cue != Cue::PersonStrong && ((!listed && !shaped) || place) {
                return;
            }
            if weak && !listed {
                score = LONE;
            }
            self.family(first + 1, false)
                .filter(|_| self.follows(first, first + 1))
                .unwrap_or(first)
        } else if facts.lower
            && (facts.given
                || (self.lower_text
                    && cue != Cue::PersonWeak
                    && !place
                    && !facts.title
                    && name_shaped(facts.text)))
            && (cue != Cue::PersonWeak || self.lower_text)
        {
            // Lower-case chat: `i'm jane doe`, `my name is yasti gupta`, `tell uygu`. After a
            // weak cue (`for ruby`, `with honey`) only a listed name, and only in text without
            // capitals. The family name is a listed one, or in text without capitals after a
            // cue that is not weak any word that is neither common nor a place.
            let next = first + 1;
            if self.follows(first, next) {
                let family = self.facts(next);
                let shaped = family.lower
                    && !family.common
                    && !family.title
                    && !is_calendar(family.text)
                    && (family.surname
                        || (self.lower_text
                            && cue != Cue::PersonWeak
                            && !family.place
                            && name_shaped(family.text)));
                if shaped { next } else { first }
            } else {
                first
            }
        } else {
            return;
        };
        out.push(self.span(first, last, PERSON, score));
    }

    /// Up to four capitalised words after a place or organisation cue.
    pub(super) fn cued_words(
        &mut self,
        first: usize,
        entity: &'static str,
        score: f32,
        out: &mut Vec<Span>,
    ) {
        let mut last = None;
        let mut at = first;
        while at < self.words.len() && at < first + 4 {
            let facts = self.facts(at);
            if facts.lower
                && PLACE_TAILS.contains(&facts.text)
                && last.is_some()
                && entity == LOCATION
            {
                last = Some(at);
                break;
            }
            let joins = facts.lower && PARTICLES.contains(&facts.text) && last.is_some();
            if joins && self.follows(at, at + 1) {
                at += 1;
                continue;
            }
            if !facts.capitalised || is_calendar(facts.text) || (last.is_none() && facts.common) {
                break;
            }
            // After a weak cue (`changed from Escalated to Resolved`) a participle is a state,
            // not a place.
            if last.is_none()
                && score < CUED
                && (facts.text.ends_with("ed") || facts.text.ends_with("ing"))
            {
                break;
            }
            last = Some(at);
            if !self.follows(at, at + 1) && !self.hyphened(at) {
                break;
            }
            at += 1;
        }
        if let Some(last) = last {
            out.push(self.span(first, last, entity, score));
        } else if entity == LOCATION {
            // Lower-case text: a listed place after any cue, words that are not common after
            // a strong one (`lives in gießen now`).
            let word = self.words[first];
            // A place's name is short: look at the next 64 bytes only.
            let mut until = (word.start + 64).min(self.text.len());
            while !self.text.is_char_boundary(until) {
                until -= 1;
            }
            let listed = self
                .lexicon
                .places_in_lower
                .find(&self.text[word.start..until])
                .filter(|m| {
                    m.start() == 0 && whole_words(self.text, word.start, word.start + m.end())
                });
            if let Some(m) = listed {
                out.push(Span {
                    start: word.start,
                    end: word.start + m.end(),
                    entity: LOCATION,
                    score: LONE,
                });
            } else if score >= CUED && self.lower_text {
                let mut last = None;
                let mut at = first;
                while at < self.words.len() && at < first + 3 {
                    let facts = self.facts(at);
                    if !facts.lower || facts.common || is_calendar(facts.text) {
                        break;
                    }
                    last = Some(at);
                    if !self.follows(at, at + 1) {
                        break;
                    }
                    at += 1;
                }
                if let Some(last) = last {
                    out.push(self.span(first, last, LOCATION, LONE));
                }
            }
        }
    }

    /// The last word of a name starting at word `first`: up to three capitalised words that
    /// are not common. A person's name of one word must be a listed name.
    pub(super) fn name_shape(&mut self, first: usize, person: bool) -> Option<usize> {
        let mut last = None;
        let mut at = first;
        while at < self.words.len() && at < first + 3 {
            let facts = self.facts(at);
            if !facts.capitalised || facts.common || is_calendar(facts.text) {
                break;
            }
            let listed = facts.given || facts.surname;
            if at == first && person && !listed && !self.follows(at, at + 1) {
                return None;
            }
            last = Some(at);
            if !self.follows(at, at + 1) {
                break;
            }
            at += 1;
        }
        last
    }

    pub(super) fn hyphened(&self, index: usize) -> bool {
        self.words
            .get(index + 1)
            .is_some_and(|next| &self.text[self.words[index].end..next.start] == " & ")
    }
}
