//! What to mask in one text: the scanner's spans and the known values' occurrences, merged,
//! less what lies in placeholders that this masking wrote itself.
//!
//! The scanner's spans come from its cache when it has the text; the known values are
//! matched after that lookup and never enter the cache (they belong to one masking, the
//! cache to every request of the tenant). Where spans overlap they become one span covering
//! them all, of the entity whose action is strictest, then of the longest (then the earliest;
//! of the same bytes, the known value's), so that no piece of either stays in the clear.
//!
//! Where the scanner finds a value of a shaped type the policy leaves in the clear, the text
//! is read again without that type: a value of a type the policy masks may lie inside or
//! across it (an order reference that the policy allows, written around a card number), and
//! the scanner, which knows no policy, keeps one of two overlapping values.

use std::ops::Range;

use super::{JsonMasker, MEMO_BYTES, Pass};
use crate::error::Result;
use crate::mask::{Action, MaskPolicy, MaskedSpan};

/// A byte range of a text to mask as `entity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hit<'e> {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) entity: &'e str,
}

impl Hit<'_> {
    pub(crate) fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

impl<'a> JsonMasker<'a> {
    /// What to mask in `text`, ordered and not overlapping. Short texts found clean are
    /// remembered for the rest of the document.
    /// A member's value whose key gives it context is read also after its key
    /// (`Pass::context`), and is never remembered as clean (the same text may be clean
    /// elsewhere).
    pub(super) fn find(&self, text: &str, pass: &mut Pass) -> Result<Vec<Hit<'a>>> {
        let short = text.len() <= MEMO_BYTES && pass.context.is_none();
        if short && pass.clean.contains(text) {
            return Ok(Vec::new());
        }
        let mut hits = if pass.known_only {
            Vec::new()
        } else {
            self.scanned(text)
        };
        if let Some(prefix) = pass.context.as_ref().filter(|_| !pass.known_only) {
            let joined = format!("{prefix}{text}");
            // What lies in the value, of what is found after the key; a span that starts in
            // the key is cut at the value's start.
            let after: Vec<Hit<'a>> = self
                .scanned(&joined)
                .into_iter()
                .filter(|s| s.end > prefix.len())
                .map(|s| Hit {
                    start: s.start.max(prefix.len()) - prefix.len(),
                    end: s.end - prefix.len(),
                    entity: s.entity,
                })
                .filter(|hit| !hits.contains(hit))
                .collect();
            if !after.is_empty() {
                for hit in &after {
                    let value = text.get(hit.range()).unwrap_or_default();
                    pass.by_context
                        .push((value.to_owned(), hit.entity.to_owned()));
                }
                hits.extend(after);
                hits = merged(hits, self.policy);
            }
        }
        if let Some(known) = self.known {
            let mut found = Vec::new();
            known.find(text, &mut found)?;
            if !found.is_empty() {
                // The known values first: where the scanner found the very same bytes with an
                // action as strict, the value keeps the entity it is known as (and its
                // action), not the scanner's guess.
                found.append(&mut hits);
                hits = merged(found, self.policy);
            }
        }
        if short && hits.is_empty() {
            pass.clean.insert(text.into());
        }
        Ok(hits)
    }

    /// The scanner's findings in `text` (from its cache when it has the text). Where one is
    /// of a shaped type the policy allows, the text is read again for the shaped types it
    /// does not allow (cached too, apart), and what overlaps is merged ([`merged`]): an
    /// allowed value never covers one the policy masks. (An allowed name needs no second
    /// reading: the scanner never lets a name cover a shaped value.)
    fn scanned(&self, text: &str) -> Vec<Hit<'a>> {
        let hit = |s: atdp_detect::Span| Hit {
            start: s.start,
            end: s.end,
            entity: s.entity,
        };
        let mut hits: Vec<Hit<'a>> = self
            .scanner
            .scan_for(self.tenant, text)
            .into_iter()
            .map(hit)
            .collect();
        let name = |entity: &str| atdp_detect::NAME_ENTITIES.contains(&entity);
        let allowed = |entity: &str| self.policy.action(entity) == Action::Allow;
        if hits.iter().any(|h| allowed(h.entity) && !name(h.entity)) {
            let skip = |entity: &str| allowed(entity) || name(entity);
            let reading = self.policy.allowed_name();
            let again = self
                .scanner
                .scan_without_for(self.tenant, &reading, text, &skip);
            hits.extend(again.into_iter().map(hit));
            hits = merged(hits, self.policy);
        }
        hits
    }
}

/// `hits` ordered by start and without overlaps: hits that overlap become one, spanning them
/// all, with the entity whose action under `policy` is strictest, then the longest (then the
/// one that starts first, then the one given first).
pub(crate) fn merged<'e>(mut hits: Vec<Hit<'e>>, policy: &MaskPolicy) -> Vec<Hit<'e>> {
    hits.sort_by_key(|h| (h.start, std::cmp::Reverse(h.end)));
    let rank = |hit: &Hit<'_>| (policy.action(hit.entity).strictness(), hit.end - hit.start);
    let mut out: Vec<Hit<'e>> = Vec::with_capacity(hits.len());
    let mut best = (0, 0);
    for hit in hits {
        match out.last_mut() {
            Some(last) if hit.start < last.end => {
                if rank(&hit) > best {
                    best = rank(&hit);
                    last.entity = hit.entity;
                }
                last.end = last.end.max(hit.end);
            }
            _ => {
                best = rank(&hit);
                out.push(hit);
            }
        }
    }
    out
}

/// `hits` less what lies in the placeholders that this masking already wrote into the text
/// (`written`): a decoded level of escapes shows those placeholders in a new context
/// (`api_key = "<SECRET_…>"` once an escaped quote is decoded), and a run of text parts
/// writes them before the parts are walked. Masking a placeholder again would leave the vault
/// entry it stands for out of the text. The rest of such a hit is masked on its own, piece by
/// piece; a piece without a letter or digit is dropped.
pub(crate) fn outside_placeholders<'e>(
    text: &str,
    hits: Vec<Hit<'e>>,
    written: &[&MaskedSpan],
) -> Vec<Hit<'e>> {
    if hits.is_empty() {
        return hits;
    }
    let mut tokens: Vec<&str> = written
        .iter()
        .filter(|span| span.action != Action::Allow && !span.token.is_empty())
        .map(|span| span.token.as_str())
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    if tokens.is_empty() {
        return hits;
    }
    // One pass for every placeholder (a text can hold thousands).
    let Ok(automaton) = aho_corasick::AhoCorasick::new(&tokens) else {
        return hits;
    };
    let mut placed: Vec<(usize, usize)> = automaton
        .find_overlapping_iter(text)
        .map(|m| (m.start(), m.end()))
        .collect();
    // Placeholders never contain one another, so by start they are also by end.
    placed.sort_unstable();
    if placed.is_empty() {
        return hits;
    }
    let mut kept = Vec::with_capacity(hits.len());
    for hit in hits {
        let mut from = hit.start;
        let piece = |start: usize, end: usize, kept: &mut Vec<Hit<'e>>| {
            if text
                .get(start..end)
                .is_some_and(|piece| piece.chars().any(char::is_alphanumeric))
            {
                kept.push(Hit { start, end, ..hit });
            }
        };
        // The placeholders that end after the hit starts, in order of start.
        let first = placed.partition_point(|&(_, end)| end <= hit.start);
        for &(start, end) in placed.get(first..).unwrap_or_default() {
            if start >= hit.end {
                break;
            }
            if end <= from {
                continue;
            }
            if start > from {
                piece(from, start, &mut kept);
            }
            from = from.max(end);
        }
        if from < hit.end {
            piece(from, hit.end, &mut kept);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(start: usize, end: usize, entity: &str) -> Hit<'_> {
        Hit { start, end, entity }
    }

    #[test]
    fn overlapping_hits_become_one_of_the_longest_entity() {
        let hits = vec![
            hit(10, 14, "D"),
            hit(0, 8, "A"),
            hit(5, 20, "B"),
            hit(12, 13, "C"),
            hit(20, 25, "E"),
            hit(30, 33, "F"),
            hit(30, 33, "G"),
        ];
        assert_eq!(
            merged(hits, &MaskPolicy::all(Action::Tokenize)),
            [hit(0, 20, "B"), hit(20, 25, "E"), hit(30, 33, "F")]
        );
    }

    #[test]
    fn overlapping_hits_take_the_strictest_action_first() {
        let policy = MaskPolicy {
            default: Action::Tokenize,
            per_entity: [("LONG", Action::Allow), ("SHOWN", Action::Mask)]
                .map(|(entity, action)| (entity.to_owned(), action))
                .into(),
        };
        // An allowed value never decides over one that is masked, however long.
        assert_eq!(
            merged(vec![hit(0, 30, "LONG"), hit(5, 10, "CARD")], &policy),
            [hit(0, 30, "CARD")]
        );
        // Showing the last four characters is less strict than a placeholder.
        assert_eq!(
            merged(vec![hit(0, 30, "SHOWN"), hit(25, 40, "CARD")], &policy),
            [hit(0, 40, "CARD")]
        );
        // Of equal strictness, the longest.
        assert_eq!(
            merged(vec![hit(0, 5, "CARD"), hit(3, 30, "EMAIL")], &policy),
            [hit(0, 30, "EMAIL")]
        );
    }
}
