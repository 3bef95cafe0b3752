//! Masking every string of a JSON document: message contents, system prompts, tool results,
//! fields no schema models, and JSON carried inside strings (tool-call arguments), which is
//! parsed, masked and written back.

use serde_json::Value;

use crate::detect::Scanner;
use crate::error::Result;
use crate::mask::{MaskPolicy, MaskedSpan, VaultItem, mask};
use crate::vault::KeyRing;

/// What masking a document did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonMasked {
    /// Each masked span with the path of the string it was in: `messages[1].content`, and
    /// for JSON inside a string, the path inside after `#`:
    /// `messages[2].tool_calls[0].function.arguments#.email`.
    pub spans: Vec<(String, MaskedSpan)>,
    /// Originals to store in the vault.
    pub vault: Vec<VaultItem>,
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
}

/// How deep JSON inside strings is followed (a string holding JSON holding a string …).
const MAX_EMBEDDED_DEPTH: usize = 4;

fn key_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match (path.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_owned())),
    }
}

impl JsonMasker<'_> {
    /// Masks every string value of `document` (object keys are left as they are).
    pub fn mask(&self, document: &mut Value) -> Result<JsonMasked> {
        let mut out = JsonMasked::default();
        self.walk(document, String::new(), 0, &mut out)?;
        Ok(out)
    }

    fn walk(
        &self,
        value: &mut Value,
        path: String,
        depth: usize,
        out: &mut JsonMasked,
    ) -> Result<()> {
        match value {
            Value::String(text) => {
                if let Some(masked) = self.mask_string(text, &path, depth, out)? {
                    *text = masked;
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    self.walk(item, format!("{path}[{index}]"), depth, out)?;
                }
            }
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    self.walk(item, key_path(&path, key), depth, out)?;
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        Ok(())
    }

    /// The masked form of one string, or `None` when nothing in it was masked.
    fn mask_string(
        &self,
        text: &str,
        path: &str,
        depth: usize,
        out: &mut JsonMasked,
    ) -> Result<Option<String>> {
        let trimmed = text.trim_start();
        if depth < MAX_EMBEDDED_DEPTH
            && (trimmed.starts_with('{') || trimmed.starts_with('['))
            && let Ok(mut inner) = serde_json::from_str::<Value>(text)
        {
            let before = out.spans.len();
            self.walk(&mut inner, format!("{path}#"), depth + 1, out)?;
            if out.spans.len() == before {
                return Ok(None);
            }
            return serde_json::to_string(&inner)
                .map(Some)
                .map_err(|e| crate::Error::Mask(format!("cannot write back JSON at {path}: {e}")));
        }
        let spans = self.scanner.scan(text);
        if spans.is_empty() {
            return Ok(None);
        }
        let masked = mask(text, &spans, self.policy, self.tenant, self.keys)?;
        out.spans
            .extend(masked.spans.into_iter().map(|s| (path.to_owned(), s)));
        for item in masked.vault {
            if !out.vault.iter().any(|v| v.token == item.token) {
                out.vault.push(item);
            }
        }
        Ok(Some(masked.text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::{Action, unmask};
    use std::collections::HashMap;

    #[test]
    fn masks_messages_tool_arguments_and_unmodelled_fields() {
        let mut keys = KeyRing::default();
        keys.generate("acme");
        let scanner = Scanner::new(None).unwrap();
        let policy = MaskPolicy::all(Action::Tokenize);
        let masker = JsonMasker {
            scanner: &scanner,
            policy: &policy,
            tenant: "acme",
            keys: &keys,
        };
        let original = serde_json::json!({
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": "Escalate to ops@example.com."},
                {"role": "user", "content": [{"type": "text", "text": "My card is 4111 1111 1111 1111"}]},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "lookup", "arguments": "{\"email\":\"jane@example.com\",\"limit\":3}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"owner\": {\"phone\": \"+44 20 7946 0958\"}}"}
            ],
            "metadata": {"user note": "ssn 536-22-1234"},
            "temperature": 0.2
        });
        let mut document = original.clone();
        let masked = masker.mask(&mut document).unwrap();
        let text = document.to_string();
        for pii in [
            "ops@example.com",
            "4111 1111 1111 1111",
            "jane@example.com",
            "+44 20 7946 0958",
            "536-22-1234",
        ] {
            assert!(!text.contains(pii), "{pii} left in {text}");
        }
        let paths: Vec<&str> = masked.spans.iter().map(|(p, _)| p.as_str()).collect();
        assert!(paths.contains(&"messages[0].content"), "{paths:?}");
        assert!(paths.contains(&"messages[1].content[0].text"), "{paths:?}");
        assert!(
            paths.contains(&"messages[2].tool_calls[0].function.arguments#.email"),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"messages[3].content#.owner.phone"),
            "{paths:?}"
        );
        assert!(paths.contains(&r#"metadata["user note"]"#), "{paths:?}");
        // Untouched JSON inside strings keeps its exact text; masked JSON stays valid JSON.
        let arguments = document["messages"][2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        let parsed: Value = serde_json::from_str(arguments).unwrap();
        assert_eq!(parsed["limit"], 3);
        // Unmasking each string restores the originals.
        let vault: HashMap<String, VaultItem> = masked
            .vault
            .iter()
            .map(|v| (v.token.clone(), v.clone()))
            .collect();
        let restored = unmask(arguments, "acme", &vault, &keys).unwrap();
        let restored: Value = serde_json::from_str(&restored).unwrap();
        assert_eq!(restored["email"], "jane@example.com");
        assert_eq!(document["temperature"], original["temperature"]);
    }
}
