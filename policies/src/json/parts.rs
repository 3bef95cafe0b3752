//! Adjacent text parts of one message, read as the provider reads them: joined.
//!
//! A message's content can be an array of parts, and the provider reads the texts of adjacent
//! text parts as one text, with no separator: OpenAI's chat content parts
//! (`{"type": "text", "text": …}`, and `{"type": "refusal", "refusal": …}` in an assistant's
//! content), the Responses API's `input_text`, `output_text` and `refusal` parts, Anthropic's
//! `text` blocks. A value split across two parts (`write to ja` | `ne@example.com`)
//! or a context word in one part and its value in the next (`mobile:` | `0612345678`) shows
//! only in the joined text.
//!
//! In every array, of the document or of JSON inside its strings, a run of two or more
//! consecutive text parts (objects whose `type` is one of [`TEXT_TYPES`] and whose `text` is
//! a string) is scanned part by part and joined. What both scans find is merged (spans that
//! overlap become one) and masked in the joined text, so that each value gets one token: in
//! the part where it starts, with its pieces in the following parts removed, and with the
//! path of that part. Then each part is walked as any object is (its keys, its other members
//! such as `cache_control` or `annotations`, JSON and escapes in its text), except that its
//! text is not scanned again as it stands, and that the tokens written here are never masked
//! again. A part that a value covers entirely is left with an empty text.
//!
//! Cost: each text of a run is scanned twice, alone and joined, and the joined text is no
//! longer than the run's texts together; splitting the joined masking back into parts visits
//! each span once per part it covers.

use std::ops::Range;

use serde_json::Value;

use super::find::{Hit, merged, outside_placeholders};
use super::parse::Node;
use super::path::Path;
use super::{JsonMasker, MAX_DECODE_ROUNDS, Pass, absorb_vault, escape, hidden_too_deep};
use crate::error::{Error, Result};
use crate::mask::{Action, MaskedSpan, mask_ranges};

/// The `type` of a text part: OpenAI chat content parts and Anthropic blocks (`text`), the
/// OpenAI Responses API's input and output parts; and a refusal part (OpenAI chat and
/// Responses), whose text is its `refusal`.
pub(crate) const TEXT_TYPES: [&str; 4] = ["text", "input_text", "output_text", "refusal"];

/// The member that holds the text of a part of type `kind`, when it is a text part.
fn text_key(kind: &str) -> Option<&'static str> {
    match kind {
        "refusal" => Some("refusal"),
        _ if TEXT_TYPES.contains(&kind) => Some("text"),
        _ => None,
    }
}

/// The text of `item` when it is a text part, with the member that holds it.
fn value_part(item: &Value) -> Option<(&'static str, &str)> {
    let Value::Object(map) = item else {
        return None;
    };
    let key = text_key(map.get("type")?.as_str()?)?;
    Some((key, map.get(key)?.as_str()?))
}

/// The text of `item` when it is a text part.
pub(super) fn value_text(item: &Value) -> Option<&str> {
    value_part(item).map(|(_, text)| text)
}

/// The text of `item` when it is a text part, with the member that holds it.
fn node_part<'n>(item: &'n Node<'_>) -> Option<(&'static str, &'n str)> {
    let Node::Object(members) = item else {
        return None;
    };
    let member = |name: &str| members.iter().find(|(key, _)| key == name).map(|(_, v)| v);
    let Some(Node::String(kind)) = member("type") else {
        return None;
    };
    let key = text_key(kind)?;
    match member(key) {
        Some(Node::String(text)) => Some((key, text)),
        _ => None,
    }
}

/// The text of `item` when it is a text part.
pub(super) fn node_text<'n>(item: &'n Node<'_>) -> Option<&'n str> {
    node_part(item).map(|(_, text)| text)
}

/// How many items from the start of `items` are text parts.
pub(super) fn run_length<T>(items: &[T], text: impl Fn(&T) -> Option<&str>) -> usize {
    items.iter().take_while(|item| text(item).is_some()).count()
}

/// What masking a run did to one of its parts.
struct PartMasked {
    /// The part's new text, when it changed.
    text: Option<String>,
    /// The spans recorded for the part (those that start in it).
    spans: Range<usize>,
}

impl<'a> JsonMasker<'a> {
    /// Masks the run of text parts `items`, the items of the array at `path` from index
    /// `first` on, then walks each part.
    pub(super) fn walk_value_run(
        &self,
        items: &mut [Value],
        path: &Path<'_>,
        first: usize,
        depth: usize,
        pass: &mut Pass,
    ) -> Result<()> {
        let (keys, texts): (Vec<&str>, Vec<&str>) = items.iter().filter_map(value_part).unzip();
        let parts = self.mask_run(&texts, &keys, path, first, pass)?;
        for (offset, ((item, part), key)) in items.iter_mut().zip(parts).zip(keys).enumerate() {
            let Value::Object(map) = item else {
                continue;
            };
            if let (Some(text), Some(slot)) = (part.text, map.get_mut(key)) {
                *slot = Value::String(text);
            }
            pass.protected.push(part.spans);
            let at = Path::Index(path, first + offset);
            let walked = self.walk_object(map, &at, depth, pass, Some(key));
            pass.protected.pop();
            walked?;
        }
        Ok(())
    }

    /// [`Self::walk_value_run`] for JSON inside a string; whether anything changed.
    pub(super) fn walk_node_run(
        &self,
        items: &mut [Node<'_>],
        path: &Path<'_>,
        first: usize,
        depth: usize,
        pass: &mut Pass,
    ) -> Result<bool> {
        let (keys, texts): (Vec<&str>, Vec<&str>) = items.iter().filter_map(node_part).unzip();
        let parts = self.mask_run(&texts, &keys, path, first, pass)?;
        let mut changed = false;
        for (offset, ((item, part), text_key)) in items.iter_mut().zip(parts).zip(keys).enumerate()
        {
            let Node::Object(members) = item else {
                continue;
            };
            if let Some(text) = part.text {
                for (key, value) in members.iter_mut() {
                    if key == text_key {
                        *value = Node::String(text.into());
                        changed = true;
                        break;
                    }
                }
            }
            pass.protected.push(part.spans);
            let item = Path::Index(path, first + offset);
            let walked = self.walk_node_object(members, &item, depth, pass, Some(text_key));
            pass.protected.pop();
            changed |= walked?;
        }
        Ok(changed)
    }

    /// What the levels of JSON escapes of `joined` show, decoded again until none is left (as
    /// `mask_text` decodes a string): each finding as the range of `joined` it was decoded
    /// from, with its decoded text.
    fn find_decoded(&self, joined: &str, pass: &mut Pass) -> Result<Vec<(Hit<'a>, String)>> {
        let mut found = Vec::new();
        let mut level: Option<(String, Vec<usize>)> = None;
        for _ in 0..=MAX_DECODE_ROUNDS {
            let text = level.as_ref().map_or(joined, |(text, _)| text.as_str());
            let Some((decoded, step)) = escape::decode_mapped(text) else {
                return Ok(found);
            };
            // Where each byte of `decoded` comes from in `joined`.
            let from = match level {
                Some((_, before)) => step
                    .iter()
                    .map(|&at| before.get(at).copied().unwrap_or(joined.len()))
                    .collect(),
                None => step,
            };
            for hit in self.find(&decoded, pass)? {
                let (Some(&start), Some(&end)) = (from.get(hit.start), from.get(hit.end)) else {
                    continue;
                };
                let original = decoded.get(hit.range()).unwrap_or_default().to_owned();
                found.push((Hit { start, end, ..hit }, original));
            }
            level = Some((decoded, from));
        }
        Err(hidden_too_deep())
    }

    /// Scans the texts of a run alone and joined, masks what was found in the joined text and
    /// splits the result back into the parts; records the spans (at each part's member
    /// `keys[i]`) and the vault entries.
    fn mask_run(
        &self,
        texts: &[&str],
        keys: &[&str],
        path: &Path<'_>,
        first: usize,
        pass: &mut Pass,
    ) -> Result<Vec<PartMasked>> {
        let mut joined = String::with_capacity(texts.iter().map(|t| t.len()).sum());
        // Where each part starts in `joined`, then where the last one ends.
        let mut bounds = Vec::with_capacity(texts.len() + 1);
        let mut hits = Vec::new();
        for text in texts {
            let start = joined.len();
            bounds.push(start);
            joined.push_str(text);
            hits.extend(self.find(text, pass)?.into_iter().map(|h| Hit {
                start: h.start + start,
                end: h.end + start,
                ..h
            }));
        }
        bounds.push(joined.len());
        hits.extend(self.find(&joined, pass)?);
        // The part that holds byte `at` of `joined` (an empty part holds none).
        let part_of = |at: usize| bounds.partition_point(|&b| b <= at).saturating_sub(1);
        // What the joined text's escapes hide, in one part or across parts, is masked here
        // with what the raw text shows, overlaps merged: a part's own walk reads it masked,
        // so a raw finding there cannot hide a longer value its decoded text shows, and a
        // context word in one part still counts for the value in the next.
        let decoded = self.find_decoded(&joined, pass)?;
        hits.extend(decoded.iter().map(|(hit, _)| *hit));
        let hits =
            outside_placeholders(&joined, merged(hits, self.policy), &pass.protected_spans());
        let recorded = pass.found.spans.len();
        let mut parts: Vec<PartMasked> = texts
            .iter()
            .map(|_| PartMasked {
                text: None,
                spans: recorded..recorded,
            })
            .collect();
        if hits.is_empty() {
            return Ok(parts);
        }
        let masked = mask_ranges(
            &joined,
            hits.iter().map(|h| (h.range(), h.entity)),
            self.policy,
            self.tenant,
            self.keys,
        )?;
        let texts = split_back(&joined, &bounds, &hits, &masked.spans)?;
        for (part, text) in parts.iter_mut().zip(texts) {
            part.text = text;
        }
        for (hit, span) in hits.iter().zip(masked.spans) {
            let index = part_of(hit.start);
            if span.action != Action::Allow {
                pass.found
                    .values
                    .insert(piece(&joined, hit.range())?, hit.entity);
            }
            let item = Path::Index(path, first + index);
            let text = Path::Key(&item, keys.get(index).copied().unwrap_or("text"));
            pass.found.spans.push((text.render(), span));
            if let Some(part) = parts.get_mut(index) {
                part.spans.end = pass.found.spans.len();
            }
        }
        // A part's spans follow those of the parts before it.
        let mut start = recorded;
        for part in &mut parts {
            let end = part.spans.end.max(start);
            part.spans = start..end;
            start = end;
        }
        for (hit, original) in decoded {
            if self.policy.action(hit.entity) != Action::Allow {
                pass.found.values.insert(&original, hit.entity);
            }
        }
        absorb_vault(&mut pass.found.vault, masked.vault);
        Ok(parts)
    }
}

/// `text[range]`, or the error that refuses the document for a span off a character boundary.
fn piece(text: &str, range: Range<usize>) -> Result<&str> {
    text.get(range).ok_or_else(|| {
        Error::Mask("a span of joined text parts is off a character boundary".into())
    })
}

/// The new text of each part of `joined` (starting at `bounds`, then its end) once `hits` are
/// replaced by the tokens of `spans`, or `None` for a part in which nothing changed. A hit's
/// token goes in the part where it starts; its pieces in the following parts are removed.
/// `allow` changes nothing. Each hit is visited once per part it covers.
fn split_back(
    joined: &str,
    bounds: &[usize],
    hits: &[Hit<'_>],
    spans: &[MaskedSpan],
) -> Result<Vec<Option<String>>> {
    let parts = bounds.len().saturating_sub(1);
    let mut texts = vec![None; parts];
    // The first hit that ends after the current part starts.
    let mut next = 0;
    for (index, slot) in texts.iter_mut().enumerate() {
        let (Some(&low), Some(&high)) = (bounds.get(index), bounds.get(index + 1)) else {
            continue;
        };
        while hits.get(next).is_some_and(|h| h.end <= low) {
            next += 1;
        }
        let mut text: Option<String> = None;
        let mut at = low;
        for (hit, span) in hits
            .get(next..)
            .unwrap_or_default()
            .iter()
            .zip(spans.get(next..).unwrap_or_default())
        {
            if hit.start >= high {
                break;
            }
            if span.action == Action::Allow {
                continue;
            }
            let text = text.get_or_insert_with(|| String::with_capacity(high - low));
            text.push_str(piece(joined, at..hit.start.max(low))?);
            if hit.start >= low {
                text.push_str(&span.token);
            }
            at = hit.end.min(high);
        }
        if let Some(mut text) = text {
            text.push_str(piece(joined, at..high)?);
            *slot = Some(text);
        }
    }
    Ok(texts)
}
