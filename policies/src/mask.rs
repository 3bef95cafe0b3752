//! Masking actions, and unmasking placeholders back to their originals (also on a stream of
//! text chunks whose boundaries fall inside a placeholder).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::vault::{KeyRing, SealedValue};
use atdp_detect::Span;

/// What to do with a detected value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Replace with `[ENTITY]`.
    Redact,
    /// Keep the last 4 characters, star the rest.
    Mask,
    /// Replace with a keyed hash `<ENTITY#…>` (not reversible, still joinable).
    Hash,
    /// Replace with a placeholder `<ENTITY_…>` and keep the original encrypted in the vault.
    Tokenize,
    /// Leave as it is.
    Allow,
}

impl Action {
    /// How little of a value the action lets through: where values found overlap, they are
    /// masked as one, by the strictest of their actions (`redact`, then `hash`, `tokenize`,
    /// `mask`, which shows the last four characters, and `allow`).
    pub(crate) fn strictness(self) -> u8 {
        match self {
            Action::Allow => 0,
            Action::Mask => 1,
            Action::Tokenize => 2,
            Action::Hash => 3,
            Action::Redact => 4,
        }
    }

    /// The action's name as written in policies and in the `pii` column.
    pub fn name(self) -> &'static str {
        match self {
            Action::Redact => "redact",
            Action::Mask => "mask",
            Action::Hash => "hash",
            Action::Tokenize => "tokenize",
            Action::Allow => "allow",
        }
    }
}

/// Which action applies to which entity type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskPolicy {
    /// For entity types not listed.
    pub default: Action,
    /// Per entity type.
    pub per_entity: HashMap<String, Action>,
}

impl MaskPolicy {
    /// One action for everything.
    pub fn all(action: Action) -> Self {
        MaskPolicy {
            default: action,
            per_entity: HashMap::new(),
        }
    }

    /// The action for `entity`.
    pub fn action(&self, entity: &str) -> Action {
        self.per_entity.get(entity).copied().unwrap_or(self.default)
    }

    /// A name for the entity types this policy leaves in the clear: the same for every policy
    /// that leaves the same types.
    pub(crate) fn allowed_name(&self) -> String {
        let allows_rest = self.default == Action::Allow;
        let mut listed: Vec<&str> = self
            .per_entity
            .iter()
            .filter(|(_, action)| (**action == Action::Allow) != allows_rest)
            .map(|(entity, _)| entity.as_str())
            .collect();
        listed.sort_unstable();
        let kind = if allows_rest { "all but" } else { "only" };
        format!("allowed {kind} {}", listed.join(","))
    }
}

/// One masked span of the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MaskedSpan {
    /// Entity type.
    pub entity: String,
    /// What replaced the value.
    pub token: String,
    /// The action taken.
    pub action: Action,
}

/// A vault entry to store: the encrypted original of a tokenized value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultItem {
    /// The placeholder.
    pub token: String,
    /// Entity type.
    pub entity: String,
    /// The encrypted original.
    pub sealed: SealedValue,
}

/// The result of masking one text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masked {
    /// The masked text.
    pub text: String,
    /// What was masked, in order.
    pub spans: Vec<MaskedSpan>,
    /// Originals to store in the vault (one per distinct token).
    pub vault: Vec<VaultItem>,
}

fn keep_last_four(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    let keep = chars.len().min(4);
    let hidden = chars.len() - keep;
    "*".repeat(hidden) + &chars[hidden..].iter().collect::<String>()
}

/// Masks `spans` of `text` (as returned by the scanner: ordered, not overlapping) for
/// `tenant`. Any failure (no keys for the tenant, a span off a character boundary) is an
/// error: the caller must refuse to use the text, never fall back to the original.
pub fn mask(
    text: &str,
    spans: &[Span],
    policy: &MaskPolicy,
    tenant: &str,
    keys: &KeyRing,
) -> Result<Masked> {
    let ranges = spans.iter().map(|s| (s.start..s.end, s.entity));
    mask_ranges(text, ranges, policy, tenant, keys)
}

/// Masks the byte ranges of `text` given with their entity types (ordered, not overlapping),
/// as [`mask`] masks a scanner's spans; the entity types need not be `'static`.
pub fn mask_ranges<'e>(
    text: &str,
    ranges: impl IntoIterator<Item = (Range<usize>, &'e str)>,
    policy: &MaskPolicy,
    tenant: &str,
    keys: &KeyRing,
) -> Result<Masked> {
    let mut out = String::with_capacity(text.len());
    let mut masked = Vec::new();
    let mut vault: Vec<VaultItem> = Vec::new();
    let mut at = 0;
    for (range, entity) in ranges {
        let value = text
            .get(range.clone())
            .filter(|_| range.start >= at)
            .ok_or_else(|| {
                Error::Mask(format!(
                    "span {}..{} is not a valid, ordered span of the text",
                    range.start, range.end
                ))
            })?;
        out.push_str(&text[at..range.start]);
        let action = policy.action(entity);
        let token = match action {
            Action::Allow => value.to_owned(),
            Action::Redact => format!("[{entity}]"),
            Action::Mask => keep_last_four(value),
            Action::Hash => keys.keyed_hash(tenant, entity, value)?,
            Action::Tokenize => {
                let token = keys.token(tenant, entity, value)?;
                if !vault.iter().any(|v| v.token == token) {
                    vault.push(VaultItem {
                        token: token.clone(),
                        entity: entity.to_owned(),
                        sealed: keys.seal(tenant, entity, value)?,
                    });
                }
                token
            }
        };
        out.push_str(&token);
        masked.push(MaskedSpan {
            entity: entity.to_owned(),
            token,
            action,
        });
        at = range.end;
    }
    out.push_str(&text[at..]);
    Ok(Masked {
        text: out,
        spans: masked,
        vault,
    })
}

/// A placeholder: `<ENTITY_` + 12 hex digits + `>`.
static PLACEHOLDER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"<([A-Z][A-Z0-9_]*)_([0-9a-f]{12})>").ok());

/// Longest placeholder a stream may hold back while waiting for its end.
const MAX_PLACEHOLDER: usize = 96;

/// Replaces every placeholder found in `vault` (token → entry) by its original. Unknown
/// placeholders stay as they are. A known one that does not decrypt is an error.
pub fn unmask(
    text: &str,
    tenant: &str,
    vault: &HashMap<String, VaultItem>,
    keys: &KeyRing,
) -> Result<String> {
    let Some(placeholder) = PLACEHOLDER.as_ref() else {
        return Err(Error::Pattern("placeholder pattern".into()));
    };
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for found in placeholder.find_iter(text) {
        let Some(item) = vault.get(found.as_str()) else {
            continue;
        };
        out.push_str(&text[at..found.start()]);
        out.push_str(&keys.open(tenant, &item.entity, &item.sealed)?);
        at = found.end();
    }
    out.push_str(&text[at..]);
    Ok(out)
}

/// Unmasks a stream of text chunks, holding back a possible placeholder cut by a chunk
/// boundary until the next chunk completes it.
#[derive(Debug, Default)]
pub struct StreamUnmasker {
    held: String,
}

impl StreamUnmasker {
    /// A new stream.
    pub fn new() -> Self {
        StreamUnmasker::default()
    }

    /// Takes the next chunk; returns the unmasked text that is now safe to emit.
    pub fn push(
        &mut self,
        chunk: &str,
        tenant: &str,
        vault: &HashMap<String, VaultItem>,
        keys: &KeyRing,
    ) -> Result<String> {
        self.held.push_str(chunk);
        let cut = match self.held.rfind('<') {
            Some(open)
                if !self.held[open..].contains('>') && self.held.len() - open < MAX_PLACEHOLDER =>
            {
                open
            }
            _ => self.held.len(),
        };
        let rest = self.held.split_off(cut);
        let ready = std::mem::replace(&mut self.held, rest);
        unmask(&ready, tenant, vault, keys)
    }

    /// Ends the stream; returns what was held back.
    pub fn finish(
        &mut self,
        tenant: &str,
        vault: &HashMap<String, VaultItem>,
        keys: &KeyRing,
    ) -> Result<String> {
        let rest = std::mem::take(&mut self.held);
        unmask(&rest, tenant, vault, keys)
    }
}

#[cfg(test)]
mod tests;
