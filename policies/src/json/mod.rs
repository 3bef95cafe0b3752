//! Masking a whole JSON document: every string value and every object key, numbers (card
//! numbers are bare digits), and JSON carried inside strings (tool-call arguments, tool
//! results), which is parsed, masked and written back, at any depth. What exactly is read is
//! in docs/policies.md, "What the JSON masker reads". Adjacent text parts of a message are
//! also read joined, as the provider reads them (`parts`), and values known from elsewhere
//! (the request's, when its reply is masked) are masked by their exact text (`known`).
//!
//! The walk allocates nothing for what it finds nothing in: paths are built on the stack and
//! written out only for a span, JSON inside strings is parsed into a tree that borrows from
//! the string, and a string without a backslash is scanned once. Only a run of text parts
//! allocates its joined text, which it scans once more. Without known values, what the scanner
//! finds is masked as it found it; known values cost one more pass over each text.
//!
//! Invariants: every placeholder this masking writes stays in the text (none is masked
//! again: `find::outside_placeholders`), and every vault entry is a placeholder of the
//! output.

mod decoded;
mod embedded;
mod escape;
mod find;
mod known;
mod number;
mod parse;
mod parts;
mod path;

use std::collections::HashSet;
use std::fmt::Write;
use std::ops::Range;

use serde_json::{Map, Value};

pub use known::{FoundValues, KnownValues, MIN_KNOWN_CHARS};

/// `text` with its JSON escapes (`\u0040`, `\n`) decoded until none is left, as a reader
/// that decodes them would see it: for checking text that is not masked but must not carry
/// a value in any spelling (names and ids).
pub fn decode_json_escapes(text: &str) -> String {
    escape::decode_all(text)
}

use crate::error::{Error, Result};
use crate::mask::{Action, MaskPolicy, MaskedSpan, VaultItem, mask_ranges};
use crate::vault::KeyRing;
use atdp_detect::Scanner;
use find::outside_placeholders;
use parse::Fail;
use path::Path;

/// What masking a document did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonMasked {
    /// Each masked span with the path of the string, key or number it was in:
    /// `messages[1].content`, and for JSON inside a string, the path inside after `#`:
    /// `messages[2].tool_calls[0].function.arguments#.email`. Paths name keys as masked.
    pub spans: Vec<(String, MaskedSpan)>,
    /// Originals to store in the vault.
    pub vault: Vec<VaultItem>,
    /// The originals of the values masked (every span whose action is not `allow`), to mask
    /// them by their exact text elsewhere ([`KnownValues`]). Kept in memory only.
    pub values: FoundValues,
    /// The originals of the values found with the words around them, whatever their action:
    /// those of a type the detectors may need context for ([`Scanner::found_by_context`]) and
    /// those found only after their key; not names, places and organisations (a name that is
    /// also a word, `Claude`, would refuse every model named after it). A name or id the
    /// request carries as given may not repeat one of them: read alone, it would not be found
    /// there. Kept in memory only.
    pub by_context: FoundValues,
}

/// Masks `document` in place.
#[derive(Debug, Clone, Copy)]
pub struct JsonMasker<'a> {
    /// The detectors.
    pub scanner: &'a Scanner,
    /// Actions per entity.
    pub policy: &'a MaskPolicy,
    /// The tenant whose keys are used.
    pub tenant: &'a str,
    /// The keys.
    pub keys: &'a KeyRing,
    /// Values masked wherever they occur, whatever the scanner finds there, each as its
    /// entity with the policy's action for it (`allow` leaves them).
    pub known: Option<&'a KnownValues>,
}

/// How deep the walk goes: arrays, objects and steps into JSON inside a string, counted
/// together from the document's root. serde_json refuses documents nested deeper than 128
/// levels, which leaves at least 32 for JSON inside strings.
pub(crate) const MAX_DEPTH: usize = 160;

/// How many times the JSON escapes of one string are decoded, each decoding revealing the
/// next (`\u005cu0040` is `\u0040`, which is `@`).
pub(crate) const MAX_DECODE_ROUNDS: usize = 32;

/// Texts up to this long that were found clean are remembered for the rest of the document,
/// so that the keys and short values that repeat (`role`, `type`, `description`) are scanned
/// once.
const MEMO_BYTES: usize = 32;

/// The state of one `mask` call.
#[derive(Default)]
struct Pass {
    /// What was found so far.
    found: JsonMasked,
    /// Short texts in which nothing was found.
    clean: HashSet<Box<str>>,
    /// The spans (in `found.spans`) whose tokens a run of text parts wrote into the part being
    /// walked, one range per run around it: scans there must not mask them again.
    protected: Vec<Range<usize>>,
    /// `word: ` while the value of a member whose key gives it context
    /// ([`Scanner::key_context`]) is masked: the value is read also after it.
    context: Option<String>,
    /// What was found in values only after their key, with its entity: masked wherever else
    /// the document holds it ([`JsonMasker::mask`]).
    by_context: Vec<(String, String)>,
    /// Whether only the known values are looked for: the second walk of
    /// [`JsonMasker::mask`], over text the first walk already read (and masked: the detectors
    /// would read its placeholders as words).
    known_only: bool,
}

impl Pass {
    /// The spans recorded in the protected ranges.
    fn protected_spans(&self) -> Vec<&MaskedSpan> {
        self.protected_spans_at().map(|(_, span)| span).collect()
    }

    /// Whether an `allow` span equal to `span` was recorded in the protected ranges at
    /// `path`, or at the string that holds the JSON `path` is in. The value may be spelled
    /// with escapes in one and decoded in the other (a run reads a part's escapes in the raw
    /// text, the part's own walk in its decoded text): they are the same value.
    fn allowed_already(&self, path: &str, span: &MaskedSpan) -> bool {
        let same_place = |recorded: &str| {
            path.strip_prefix(recorded)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
        };
        let same = |s: &MaskedSpan| {
            s == span
                || (s.entity == span.entity
                    && s.action == span.action
                    && escape::decode_all(&s.token) == escape::decode_all(&span.token))
        };
        self.protected_spans_at()
            .any(|(recorded, s)| same_place(recorded) && same(s))
    }

    /// The spans recorded in the protected ranges, with their paths.
    fn protected_spans_at(&self) -> impl Iterator<Item = &(String, MaskedSpan)> {
        let spans = &self.found.spans;
        self.protected
            .iter()
            .flat_map(|range| spans.get(range.clone()).unwrap_or_default())
    }
}

/// The error for a text hidden under more than [`MAX_DECODE_ROUNDS`] levels of escapes.
fn hidden_too_deep() -> Error {
    Error::Mask(format!(
        "a string hides its text under more than {MAX_DECODE_ROUNDS} levels of JSON escapes, \
         so it cannot be checked; decode it before sending"
    ))
}

/// Whether `value` is read after its key's context word: a string, a number, or an array of
/// them.
fn plain_value(value: &Value) -> bool {
    match value {
        Value::String(_) | Value::Number(_) => true,
        Value::Array(items) => items
            .iter()
            .all(|item| matches!(item, Value::String(_) | Value::Number(_))),
        _ => false,
    }
}

/// The depth one level below `depth`, or the error that refuses the document.
fn deeper(depth: usize) -> Result<usize> {
    if depth >= MAX_DEPTH {
        return Err(Error::Mask(format!(
            "the JSON nests more than {MAX_DEPTH} levels (arrays, objects and JSON inside \
             strings together), so it cannot be checked; send it less deeply nested"
        )));
    }
    Ok(depth + 1)
}

impl<'a> JsonMasker<'a> {
    /// Masks every string value, object key and number of `document`, and the JSON inside
    /// its strings. Any failure is an error and the document must not be used: nesting too
    /// deep to check, escapes hidden too many levels deep, or a masking error.
    ///
    /// A value found only with what is around it is masked wherever else the document holds
    /// it as well: one found only after its key (a password in a tool call's arguments), and
    /// one of a shaped type whose detectors may need the words around it
    /// ([`Scanner::found_by_context`]: a phone number after "mobile:", a customer id after
    /// its cue word), repeated in another message without those words or beside a word that
    /// lowers its score ("tracking"). A second walk looks for them alone as known values
    /// (matched in the normalised view, so a repeat spelled with other digits or grouped
    /// otherwise is found too), leaving the placeholders of the first alone. Only a document
    /// with such a value pays for it. Names, places and organisations are not carried so:
    /// each text is read with its own words, and a name that is also a word (`Will`, `May`)
    /// would be masked wherever the word is.
    pub fn mask(&self, document: &mut Value) -> Result<JsonMasked> {
        let mut pass = Pass::default();
        self.walk(document, &Path::Root, 0, &mut pass)?;
        let mut by_context = std::mem::take(&mut pass.by_context);
        let name = |entity: &str| atdp_detect::NAME_ENTITIES.contains(&entity);
        let shaped_by_context =
            |entity: &str| !name(entity) && self.scanner.found_by_context(entity);
        by_context.extend(
            pass.found
                .values
                .iter()
                .filter(|(_, entity)| shaped_by_context(entity))
                .map(|(value, entity)| (value.to_owned(), entity.to_owned())),
        );
        // An allowed span's token is its original.
        let allowed = pass
            .found
            .spans
            .iter()
            .map(|(_, span)| span)
            .filter(|span| span.action == Action::Allow && shaped_by_context(&span.entity));
        for span in allowed {
            pass.found.by_context.insert(&span.token, &span.entity);
        }
        for (value, entity) in by_context.iter().filter(|(_, entity)| !name(entity)) {
            pass.found.by_context.insert(value, entity);
        }
        let masked: Vec<(&str, &str)> = by_context
            .iter()
            .map(|(value, entity)| (value.as_str(), entity.as_str()))
            .filter(|(_, entity)| self.policy.action(entity) != Action::Allow)
            .collect();
        if masked.is_empty() {
            return Ok(pass.found);
        }
        let known = KnownValues::new(masked)?;
        let again = JsonMasker {
            scanner: self.scanner,
            policy: self.policy,
            tenant: self.tenant,
            keys: self.keys,
            known: Some(&known),
        };
        let first_walk = 0..pass.found.spans.len();
        pass.protected = Vec::from([first_walk]);
        pass.clean.clear();
        pass.known_only = true;
        again.walk(document, &Path::Root, 0, &mut pass)?;
        pass.protected.clear();
        Ok(pass.found)
    }

    /// The word the member `key` gives its value to be read after, when its value is `plain`
    /// (a string, a number, or an array of them) and the key holds a context word; or, for
    /// the member `value`, the word its object's `name` or `key` gives (`pair`:
    /// `{"name": "DB_PASSWORD", "value": "…"}`).
    fn member_context(&self, key: &str, plain: bool, pair: Option<&'a str>) -> Option<&'a str> {
        if !plain {
            return None;
        }
        self.scanner
            .key_context(key)
            .or(pair.filter(|_| key == "value"))
    }

    /// The word an object's `name` or `key` member gives its `value` member.
    fn pair_context<'k>(&self, names: impl Iterator<Item = &'k str>) -> Option<&'a str> {
        let scanner: &'a Scanner = self.scanner;
        names.into_iter().find_map(|name| scanner.key_context(name))
    }

    fn walk(
        &self,
        value: &mut Value,
        path: &Path<'_>,
        depth: usize,
        pass: &mut Pass,
    ) -> Result<()> {
        match value {
            Value::String(text) => {
                if let Some(masked) = self.mask_string(text, path, depth, pass, false)? {
                    *text = masked;
                }
            }
            Value::Number(number) => {
                let mut inline = number::StackText::new();
                let written;
                let literal = if write!(inline, "{number}").is_ok() {
                    inline.as_str()
                } else {
                    written = number.to_string();
                    &written
                };
                if let Some(masked) = self.mask_number(literal, path, pass)? {
                    *value = Value::String(masked);
                }
            }
            Value::Array(items) => {
                let depth = deeper(depth)?;
                let mut index = 0;
                while let Some(rest) = items.get_mut(index..).filter(|r| !r.is_empty()) {
                    let run = parts::run_length(rest, parts::value_text);
                    if run >= 2 {
                        let run_items = rest.get_mut(..run).unwrap_or_default();
                        self.walk_value_run(run_items, path, index, depth, pass)?;
                        index += run;
                    } else {
                        if let Some(item) = rest.first_mut() {
                            self.walk(item, &Path::Index(path, index), depth, pass)?;
                        }
                        index += 1;
                    }
                }
            }
            Value::Object(map) => self.walk_object(map, path, depth, pass, None)?,
            Value::Null | Value::Bool(_) => {}
        }
        Ok(())
    }

    /// Walks an object one level below `depth`: its keys, then its members. The text of a text
    /// part in a run (its member `part`: `text`, or `refusal`) is not scanned again as it
    /// stands.
    fn walk_object(
        &self,
        map: &mut Map<String, Value>,
        path: &Path<'_>,
        depth: usize,
        pass: &mut Pass,
        part: Option<&str>,
    ) -> Result<()> {
        let depth = deeper(depth)?;
        let renamed = self.mask_keys(map.keys().map(String::as_str), path, depth, pass)?;
        if !renamed.is_empty() {
            rename(map, renamed);
        }
        let pair = self.pair_context(["name", "key"].iter().filter_map(|k| map.get(*k)?.as_str()));
        for (key, item) in map.iter_mut() {
            let member = Path::Key(path, key);
            match item {
                Value::String(text) if part == Some(key.as_str()) => {
                    if let Some(masked) = self.mask_string(text, &member, depth, pass, true)? {
                        *text = masked;
                    }
                }
                _ => match self.member_context(key, plain_value(item), pair) {
                    Some(word) => {
                        pass.context = Some(format!("{word}: "));
                        let walked = self.walk(item, &member, depth, pass);
                        pass.context = None;
                        walked?;
                    }
                    None => self.walk(item, &member, depth, pass)?,
                },
            }
        }
        Ok(())
    }

    /// The masked form of one string (a value or a key), or `None` when nothing in it
    /// changed. A string holding JSON is masked as JSON and written back only when something
    /// in it changed or a key in it was given twice; otherwise its bytes are kept. `scanned`:
    /// the text as it stands was scanned already (as a part of a run).
    fn mask_string(
        &self,
        text: &str,
        path: &Path<'_>,
        depth: usize,
        pass: &mut Pass,
        scanned: bool,
    ) -> Result<Option<String>> {
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            let inside = deeper(depth)?;
            match parse::parse(text, MAX_DEPTH - inside) {
                Ok(mut parsed) => {
                    // The JSON inside is a document of its own: its members have their keys.
                    let context = pass.context.take();
                    let walked =
                        self.walk_node(&mut parsed.root, &Path::Inside(path), inside, pass);
                    pass.context = context;
                    let changed = walked?;
                    if !changed && !parsed.duplicates {
                        return Ok(None);
                    }
                    let mut written = String::with_capacity(text.len());
                    embedded::write(&parsed.root, &mut written);
                    return Ok(Some(written));
                }
                Err(Fail::TooDeep) => {
                    return Err(Error::Mask(format!(
                        "JSON inside a string nests beyond {MAX_DEPTH} levels, so it cannot \
                         be checked; send it less deeply nested"
                    )));
                }
                // Not JSON (cut off, say): plain text, escapes included.
                Err(Fail::Syntax) => {}
            }
        }
        self.mask_text(text, path, pass, scanned)
    }

    /// Masks `text` as plain text. A text whose JSON escapes decode is masked by what every
    /// level of it shows ([`Self::mask_escaped`]). `scanned`: the text as it stands was
    /// scanned and masked already.
    fn mask_text(
        &self,
        text: &str,
        path: &Path<'_>,
        pass: &mut Pass,
        scanned: bool,
    ) -> Result<Option<String>> {
        if text.contains('\\')
            && let Some(masked) = self.mask_escaped(text, path, pass, scanned)?
        {
            return Ok(masked);
        }
        if scanned {
            return Ok(None);
        }
        let hits = self.find_outside(text, pass)?;
        let masked = self.mask_hits(text, &hits, path, pass)?;
        Ok(masked.filter(|masked| masked != text))
    }

    /// What to mask in `text`: what [`Self::find`] finds, less the placeholders that a run of
    /// text parts around it wrote.
    fn find_outside(&self, text: &str, pass: &mut Pass) -> Result<Vec<find::Hit<'a>>> {
        let hits = self.find(text, pass)?;
        if hits.is_empty() || pass.protected.is_empty() {
            return Ok(hits);
        }
        Ok(outside_placeholders(text, hits, &pass.protected_spans()))
    }

    /// Masks `hits` of `text`, recording the spans at `path`, the masked originals and the
    /// vault entries; `None` when there was nothing to mask. Spans that `allow` leaves in
    /// place are found again where a run of text parts recorded them already: such a span is
    /// not recorded twice.
    fn mask_hits(
        &self,
        text: &str,
        hits: &[find::Hit<'a>],
        path: &Path<'_>,
        pass: &mut Pass,
    ) -> Result<Option<String>> {
        if hits.is_empty() {
            return Ok(None);
        }
        let ranges = hits.iter().map(|h| (h.range(), h.entity));
        let masked = mask_ranges(text, ranges, self.policy, self.tenant, self.keys)?;
        let path = path.render();
        let guarded = !pass.protected.is_empty();
        for (hit, span) in hits.iter().zip(masked.spans) {
            if span.action != Action::Allow {
                let original = text.get(hit.range()).unwrap_or_default();
                pass.found.values.insert(original, hit.entity);
            } else if guarded && pass.allowed_already(&path, &span) {
                continue;
            }
            pass.found.spans.push((path.clone(), span));
        }
        absorb_vault(&mut pass.found.vault, masked.vault);
        Ok(Some(masked.text))
    }

    /// The masked form of a number given by its literal, as a string, or `None` when nothing
    /// in it changed (a number stays a number unless something in it is masked).
    fn mask_number(
        &self,
        literal: &str,
        path: &Path<'_>,
        pass: &mut Pass,
    ) -> Result<Option<String>> {
        let found = number::each_form(literal, |form| {
            let hits = self.find_outside(form, pass)?;
            let Some(masked) = self.mask_hits(form, &hits, path, pass)? else {
                return Ok(None);
            };
            Ok(Some((masked != form).then_some(masked)))
        })?;
        Ok(found.flatten())
    }

    /// Masks the keys of one object, given in order, recording their spans at the path of
    /// their member. Returns the new name of each key that changed, with its position. A key
    /// in which nothing changed keeps its name; a masked key that comes out as a name the
    /// object already has gets the first free `~2`, `~3`, … appended, in key order.
    fn mask_keys<'k>(
        &self,
        keys: impl Iterator<Item = &'k str> + Clone,
        path: &Path<'_>,
        depth: usize,
        pass: &mut Pass,
    ) -> Result<Vec<(usize, String)>> {
        // Each key's spans are recorded with paths relative to the key, then put under its
        // member's path once the key's final name is known.
        let mut found: Vec<(usize, &str, Option<String>, std::ops::Range<usize>)> = Vec::new();
        for (index, key) in keys.clone().enumerate() {
            let first = pass.found.spans.len();
            let masked = self.mask_string(key, &Path::Root, depth, pass, false)?;
            let spans = first..pass.found.spans.len();
            if masked.is_some() || !spans.is_empty() {
                found.push((index, key, masked, spans));
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let changed = |index: usize| {
            found
                .iter()
                .any(|(at, _, masked, _)| *at == index && masked.is_some())
        };
        let mut taken: HashSet<String> = keys
            .enumerate()
            .filter(|(index, _)| !changed(*index))
            .map(|(_, key)| key.to_owned())
            .collect();
        let mut renamed = Vec::new();
        for (index, key, masked, spans) in found {
            let name = match masked {
                Some(masked) => {
                    let name = free_name(masked, &taken);
                    taken.insert(name.clone());
                    renamed.push((index, name.clone()));
                    name
                }
                None => key.to_owned(),
            };
            let member = Path::Key(path, &name).render();
            for (relative, _) in pass.found.spans.get_mut(spans).unwrap_or_default() {
                relative.insert_str(0, &member);
            }
        }
        Ok(renamed)
    }
}

/// `name`, or with the first `~N` (from 2) that makes it a name not in `taken`.
fn free_name(name: String, taken: &HashSet<String>) -> String {
    if !taken.contains(&name) {
        return name;
    }
    (2..=taken.len() + 2)
        .map(|n| format!("{name}~{n}"))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(name)
}

/// Renames the members of `map` at the given positions (in increasing order).
fn rename(map: &mut Map<String, Value>, renamed: Vec<(usize, String)>) {
    let members = std::mem::take(map);
    let mut renamed = renamed.into_iter().peekable();
    for (index, (key, value)) in members.into_iter().enumerate() {
        let key = match renamed.next_if(|(at, _)| *at == index) {
            Some((_, name)) => name,
            None => key,
        };
        map.insert(key, value);
    }
}

/// Adds `items` to `vault`, one entry per token.
pub(super) fn absorb_vault(vault: &mut Vec<VaultItem>, items: Vec<VaultItem>) {
    for item in items {
        if !vault.iter().any(|v| v.token == item.token) {
            vault.push(item);
        }
    }
}

#[cfg(test)]
mod context_tests;
#[cfg(test)]
mod tests;
