//! Putting the originals of masked placeholders back into text: whole strings of a reply
//! document ([`restore_json`]), and text fields that arrive in fragments ([`FieldStream`]).
//!
//! An original goes in as it is into plain text, and JSON-escaped (without quotes) into
//! JSON text, such as a tool call's `arguments`: the placeholder sits inside a JSON string
//! there, and an original holding `"` or `\` must not end that string.

use std::borrow::Cow;
use std::collections::HashMap;

use atdp_policies::{KeyRing, TOKEN_HEX_DIGITS, VaultItem};
use serde_json::Value;

use super::WireError;

/// Keys whose string value is JSON text (tool-call arguments), restored JSON-escaped.
const JSON_TEXT_KEYS: &[&str] = &["arguments", "partial_json"];

/// What restoring needs: the tenant, its vault entries (token → entry), the entity types
/// they are of ([`entity_types`]) and the tenant's keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Originals<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) vault: &'a HashMap<String, VaultItem>,
    pub(crate) entities: &'a [String],
    pub(crate) keys: &'a KeyRing,
}

/// The distinct entity types of `vault`'s entries: a placeholder is `<` + type + `_` +
/// [`TOKEN_HEX_DIGITS`] hex digits + `>`, so these few names tell whether held text can still
/// become a placeholder, whatever the number of entries.
pub(crate) fn entity_types(vault: &HashMap<String, VaultItem>) -> Vec<String> {
    let mut types: Vec<String> = vault.values().map(|item| item.entity.clone()).collect();
    types.sort_unstable();
    types.dedup();
    types
}

/// The kind of text a placeholder sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextMode {
    /// Text as the user reads it: originals go in as they are.
    Plain,
    /// JSON text: originals go in JSON-escaped.
    JsonText,
}

/// Replaces the placeholders of every string in `value` (a reply document) by their
/// originals; returns how many strings changed. Strings under an `arguments` or
/// `partial_json` key are JSON text and get the originals JSON-escaped. Placeholders not
/// in `vault` stay as they are; one that does not decrypt is an error. Object keys are not
/// rewritten.
pub fn restore_json(
    value: &mut Value,
    tenant: &str,
    vault: &HashMap<String, VaultItem>,
    keys: &KeyRing,
) -> Result<usize, WireError> {
    if vault.is_empty() {
        return Ok(0);
    }
    restore_value(
        value,
        TextMode::Plain,
        Originals {
            tenant,
            vault,
            entities: &entity_types(vault),
            keys,
        },
    )
}

/// [`restore_json`] with the originals bundled. Recursion is bounded by serde_json's
/// nesting limit on parsed documents.
pub(crate) fn restore_value(
    value: &mut Value,
    mode: TextMode,
    originals: Originals<'_>,
) -> Result<usize, WireError> {
    match value {
        Value::String(text) => match restore_text(text, mode, originals)? {
            Cow::Owned(restored) => {
                *text = restored;
                Ok(1)
            }
            Cow::Borrowed(_) => Ok(0),
        },
        Value::Array(items) => items.iter_mut().try_fold(0, |n, item| {
            Ok(n + restore_value(item, TextMode::Plain, originals)?)
        }),
        Value::Object(map) => map.iter_mut().try_fold(0, |n, (key, item)| {
            let mode = if JSON_TEXT_KEYS.contains(&key.as_str()) {
                TextMode::JsonText
            } else {
                TextMode::Plain
            };
            Ok(n + restore_value(item, mode, originals)?)
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(0),
    }
}

/// `text` with every placeholder known to the vault replaced by its original; borrowed
/// when nothing was replaced.
pub(crate) fn restore_text<'t>(
    text: &'t str,
    mode: TextMode,
    originals: Originals<'_>,
) -> Result<Cow<'t, str>, WireError> {
    let mut out = String::new();
    let mut replaced = false;
    let mut copied = 0;
    let mut from = 0;
    while let Some(open) = text.get(from..).and_then(|rest| rest.find('<')) {
        let open = from + open;
        let after = open + 1;
        let Some(end) = text.get(after..).and_then(|rest| rest.find(['<', '>'])) else {
            break;
        };
        let end = after + end;
        // Another `<` before the `>`: the placeholder, if any, starts there.
        if text.get(end..=end) == Some("<") {
            from = end;
            continue;
        }
        from = end + 1;
        let Some(item) = text.get(open..=end).and_then(|t| originals.vault.get(t)) else {
            continue;
        };
        let original = originals
            .keys
            .open(originals.tenant, &item.entity, &item.sealed)?;
        out.push_str(text.get(copied..open).unwrap_or_default());
        match mode {
            TextMode::Plain => out.push_str(&original),
            TextMode::JsonText => push_json_escaped(&mut out, &original),
        }
        copied = end + 1;
        replaced = true;
    }
    if !replaced {
        return Ok(Cow::Borrowed(text));
    }
    out.push_str(text.get(copied..).unwrap_or_default());
    Ok(Cow::Owned(out))
}

/// Appends `text` as the inside of a JSON string: `"`, `\` and control characters escaped.
fn push_json_escaped(out: &mut String, text: &str) {
    let quoted = Value::String(text.to_owned()).to_string();
    let inner = quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(&quoted);
    out.push_str(inner);
}

/// One text field of a stream (a choice's content, a tool call's arguments, a content
/// block's text), restored fragment by fragment.
///
/// A fragment's tail that may be the start of a placeholder (from its last `<`, a prefix
/// of a token in the vault) is held back until a later fragment completes or refutes it,
/// or the field ends ([`FieldStream::finish`]). Only true prefixes of known tokens are
/// held, so `<div` or `a < b` pass without delay.
pub(crate) struct FieldStream {
    held: String,
    mode: TextMode,
}

impl std::fmt::Debug for FieldStream {
    // The held text is reply text: its length only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FieldStream")
            .field("held_bytes", &self.held.len())
            .field("mode", &self.mode)
            .finish()
    }
}

impl FieldStream {
    /// A field whose text is of `mode`.
    pub(crate) fn new(mode: TextMode) -> Self {
        FieldStream {
            held: String::new(),
            mode,
        }
    }

    /// Whether text is held back.
    pub(crate) fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Takes the next fragment; returns the restored text now safe to emit.
    pub(crate) fn push(
        &mut self,
        fragment: &str,
        originals: Originals<'_>,
    ) -> Result<String, WireError> {
        self.held.push_str(fragment);
        let cut = match self.held.rfind('<') {
            Some(open) if may_become_token(self.held.get(open..), originals.entities) => open,
            _ => self.held.len(),
        };
        let rest = self.held.split_off(cut);
        let ready = std::mem::replace(&mut self.held, rest);
        Ok(restore_text(&ready, self.mode, originals)?.into_owned())
    }

    /// Ends the field; returns what was held back (an incomplete placeholder stays as it
    /// came).
    pub(crate) fn finish(&mut self, originals: Originals<'_>) -> Result<String, WireError> {
        let rest = std::mem::take(&mut self.held);
        Ok(restore_text(&rest, self.mode, originals)?.into_owned())
    }
}

/// Whether `tail` (from a `<`) is the start, but not the whole, of a placeholder of one of
/// `entities`: `<` + type + `_` + up to [`TOKEN_HEX_DIGITS`] lower-case hex digits, no `>`. Decided by
/// the placeholders' fixed shape, in time bounded by the longest type name, whatever the
/// number of placeholders the call made.
fn may_become_token(tail: Option<&str>, entities: &[String]) -> bool {
    let Some(rest) = tail.and_then(|t| t.strip_prefix('<')) else {
        return false;
    };
    entities.iter().any(|entity| {
        match rest.strip_prefix(entity.as_str()) {
            Some(after) => match after.strip_prefix('_') {
                Some(hex) => {
                    hex.len() <= TOKEN_HEX_DIGITS
                        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                }
                None => after.is_empty(),
            },
            // Still inside the type's name.
            None => entity.starts_with(rest),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::may_become_token;

    #[test]
    fn held_text_is_decided_by_the_placeholders_shape() {
        let entities = ["EMAIL_ADDRESS".to_owned(), "US_SSN".to_owned()];
        let held = |tail: &str| may_become_token(Some(tail), &entities);
        for tail in [
            "<",
            "<E",
            "<EMAIL_ADD",
            "<EMAIL_ADDRESS",
            "<EMAIL_ADDRESS_",
            "<EMAIL_ADDRESS_0123456789a",
            "<EMAIL_ADDRESS_0123456789ab",
            "<US_SSN_ff",
        ] {
            assert!(held(tail), "{tail}");
        }
        for tail in [
            "<div",
            "< b",
            "<EMAIL_ADDRESS_0123456789abc",
            "<EMAIL_ADDRESS_01G",
            "<EMAIL_ADDRESSES",
            "<PERSON_01",
            "<US_SSN_0123>",
            "no bracket",
        ] {
            assert!(!held(tail), "{tail}");
        }
        assert!(!may_become_token(Some("<E"), &[]));
        assert!(!may_become_token(None, &entities));
    }
}
