//! Masking a text whose JSON escapes decode: a reader may decode them (once, or again until
//! none is left), so every level is read, from the text as sent to the text with no escape
//! left, and what each level shows is masked.
//!
//! Every level is scanned unmasked: a span that one level finds must not hide from another
//! level what that level finds. In `sk-proj-…` with escaped characters, the raw text shows a
//! place name `sk` and the decoded text a secret; masking `sk` first would leave the decoded
//! level a stub no detector knows. So each level's spans are carried to the last level, where
//! overlapping spans become one ([`merged`]). When the raw text's spans alone cover all of them,
//! the raw text is masked and keeps its spelling; otherwise the last level is masked and
//! replaces the text, escapes decoded.

use std::ops::Range;

use super::find::{Hit, merged};
use super::path::Path;
use super::{JsonMasker, MAX_DECODE_ROUNDS, Pass, escape, hidden_too_deep};
use crate::error::Result;
use crate::mask::Action;

impl<'a> JsonMasker<'a> {
    /// Masks `text` by what each level of its escapes shows; `None` when no escape in it
    /// decodes. Inside, `None` when nothing changed. `scanned`: the text as it stands was
    /// scanned and masked already (as a part of a run), so only its decoded levels are read.
    ///
    /// The levels are read one after the other, and the findings so far are carried to each
    /// new level as it is decoded: only two levels and one map are held at a time.
    pub(super) fn mask_escaped(
        &self,
        text: &str,
        path: &Path<'_>,
        pass: &mut Pass,
        scanned: bool,
    ) -> Result<Option<Option<String>>> {
        let Some((mut last, mut from)) = escape::decode_mapped(text) else {
            return Ok(None);
        };
        let raw = if scanned {
            Vec::new()
        } else {
            self.find_outside(text, pass)?
        };
        // The raw findings, and every level's, carried to the level decoded last.
        let mut by_raw: Vec<Hit<'a>> = raw.clone();
        let mut all: Vec<Hit<'a>> = raw.clone();
        let mut levels = 1;
        loop {
            by_raw = carry_all(&by_raw, &from);
            all = carry_all(&all, &from);
            all.extend(self.find_outside(&last, pass)?);
            let Some((next, next_from)) = escape::decode_mapped(&last) else {
                break;
            };
            levels += 1;
            if levels > MAX_DECODE_ROUNDS {
                return Err(hidden_too_deep());
            }
            (last, from) = (next, next_from);
        }
        let (by_raw, all) = (merged(by_raw, self.policy), merged(all, self.policy));
        let ranges = |hits: &[Hit<'_>]| hits.iter().map(Hit::range).collect::<Vec<_>>();
        if ranges(&all) == ranges(&by_raw) {
            // A reply may give the value back in its decoded spelling.
            for hit in &by_raw {
                if self.policy.action(hit.entity) != Action::Allow {
                    let spelled = last.get(hit.range()).unwrap_or_default();
                    pass.found.values.insert(spelled, hit.entity);
                }
            }
            let masked = self.mask_hits(text, &raw, path, pass)?;
            return Ok(Some(masked.filter(|masked| masked != text)));
        }
        let masked = self.mask_hits(&last, &all, path, pass)?;
        Ok(Some(masked.filter(|masked| *masked != last)))
    }
}

/// `hits` carried one level down, given where each byte of that level comes from: each hit
/// becomes the bytes that come wholly from it; a hit that leaves none is dropped.
fn carry_all<'e>(hits: &[Hit<'e>], from: &[usize]) -> Vec<Hit<'e>> {
    hits.iter()
        .filter_map(|hit| {
            let range = carry(hit.range(), from);
            (!range.is_empty()).then_some(Hit {
                start: range.start,
                end: range.end,
                entity: hit.entity,
            })
        })
        .collect()
}

/// The bytes of a decoded level that come wholly from `range` of the level before, given
/// where each byte comes from (`from`, ending with the length of the level before): an
/// escape cut by either end of `range` is left out.
fn carry(range: Range<usize>, from: &[usize]) -> Range<usize> {
    let bytes = from.get(..from.len().saturating_sub(1)).unwrap_or_default();
    let start = bytes.partition_point(|&at| at < range.start);
    let mut end = bytes.partition_point(|&at| at < range.end);
    if end > start {
        // The character before `end` comes from `source..from[end]`.
        let source = bytes.get(end - 1).copied().unwrap_or_default();
        if from.get(end).is_some_and(|&after| after > range.end) {
            end = bytes.partition_point(|&at| at < source);
        }
    }
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_carries_to_the_bytes_decoded_wholly_from_it() {
        // `ja\u006ee@x é` decodes to `jane@x é`.
        let (decoded, from) = escape::decode_mapped(r"ja\u006ee@x é").unwrap();
        assert_eq!(decoded, "jane@x é");
        assert_eq!(carry(0..14, &from), 0..9);
        assert_eq!(carry(2..8, &from), 2..3);
        // An escape cut at either end is left out.
        assert_eq!(carry(2..7, &from), 2..2);
        assert_eq!(carry(3..10, &from), 3..5);
        assert_eq!(carry(0..2, &from), 0..2);
        // A character of two bytes comes from two bytes.
        assert_eq!(carry(12..14, &from), 7..9);
    }
}
