//! The base model's prompt format: its chat template and tokenizer (the trainer's own
//! [`ChatFormat`]), the tool-call markers, and the tables that map mistral.rs's token texts
//! back to ids.

use std::collections::HashMap;
use std::path::Path;

use atdp_model_files::{ChatFormat, GENERATION_CONFIG_FILE};
use atdp_schema::{Message, Tool};
use mistralrs::core::ResponseLogprob;
use serde_json::Value;

use crate::error::{ApiError, Error, Result};
use crate::tools::{CLOSE, Markers, OPEN};

/// The base model's prompt format: chat template, tokenizer, and what decoding needs.
pub struct PromptFormat {
    chat: ChatFormat,
    /// Each token's text as mistral.rs reports it, mapped to the token (`None`: several
    /// tokens have that text).
    by_text: HashMap<String, Option<u32>>,
    /// Tokens that end a turn (`generation_config.json`'s `eos_token_id` and the
    /// tokenizer's `eos_token`): not part of the reply text.
    end_ids: Vec<u32>,
    open_id: Option<u32>,
    markers: Markers,
}

impl std::fmt::Debug for PromptFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptFormat")
            .field("vocabulary", &self.by_text.len())
            .field("end_ids", &self.end_ids)
            .field("markers", &self.markers)
            .finish_non_exhaustive()
    }
}

/// A token of the vocabulary in a grammar: `<[id]>`, or the text as a string literal.
fn grammar_token(chat: &ChatFormat, text: &str) -> String {
    match chat.tokenizer().token_to_id(text) {
        Some(id) => format!("<[{id}]>"),
        None => Value::from(text).to_string(),
    }
}

impl PromptFormat {
    /// Loads the chat template and tokenizer of the model in `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        let bad = |message: String| Error::Base {
            path: dir.display().to_string(),
            message,
        };
        let chat = ChatFormat::load(dir).map_err(|e| bad(e.to_string()))?;
        let tokenizer = chat.tokenizer();
        let mut by_text: HashMap<String, Option<u32>> = HashMap::new();
        for id in 0..tokenizer.get_vocab_size(true) as u32 {
            let Ok(text) = tokenizer.decode(&[id], false) else {
                continue;
            };
            by_text
                .entry(text)
                .and_modify(|known| *known = None)
                .or_insert(Some(id));
        }
        let mut end_ids: Vec<u32> = tokenizer
            .token_to_id(chat.eos_token())
            .into_iter()
            .collect();
        let generation = dir.join(GENERATION_CONFIG_FILE);
        if let Ok(text) = std::fs::read_to_string(&generation) {
            let config: Value = serde_json::from_str(&text)
                .map_err(|e| bad(format!("{GENERATION_CONFIG_FILE}: {e}")))?;
            let ids = match config.get("eos_token_id") {
                Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_u64).collect(),
                Some(id) => id.as_u64().into_iter().collect(),
                None => Vec::new(),
            };
            end_ids.extend(ids.into_iter().filter_map(|id| u32::try_from(id).ok()));
        }
        end_ids.sort_unstable();
        end_ids.dedup();
        let markers = Markers {
            open: grammar_token(&chat, OPEN),
            close: grammar_token(&chat, CLOSE),
            end_of_turn: Some(grammar_token(&chat, chat.eos_token())),
        };
        Ok(PromptFormat {
            open_id: chat.tokenizer().token_to_id(OPEN),
            chat,
            by_text,
            end_ids,
            markers,
        })
    }

    /// How grammars name the tool-call and end-of-turn tokens.
    pub(crate) fn markers(&self) -> &Markers {
        &self.markers
    }

    /// The `<tool_call>` token, when the vocabulary has one.
    pub(crate) fn open_id(&self) -> Option<u32> {
        self.open_id
    }

    /// The prompt's token ids: the conversation rendered by the chat template (with the
    /// generation prompt), tokenized as the trainer tokenizes it.
    pub(crate) fn prompt(
        &self,
        messages: &[Message],
        tools: &[Tool],
    ) -> std::result::Result<Vec<u32>, ApiError> {
        let text = self
            .chat
            .render(messages, tools, true)
            .map_err(|e| ApiError::invalid(format!("the chat template: {e}"), Some("messages")))?;
        self.chat
            .encode(&text)
            .map_err(|e| ApiError::server(format!("tokenizing the prompt: {e}")))
    }

    /// The text of `ids`, special tokens kept.
    pub(crate) fn decode(&self, ids: &[u32]) -> String {
        self.chat.tokenizer().decode(ids, false).unwrap_or_default()
    }

    /// The reply text of a completion: `ids` less a final end-of-turn token.
    pub(crate) fn reply_text(&self, ids: &[u32]) -> String {
        match ids.split_last() {
            Some((last, rest)) if self.end_ids.contains(last) => self.decode(rest),
            _ => self.decode(ids),
        }
    }

    /// The one token whose text mistral.rs reported as `bytes`.
    pub(crate) fn identify(&self, entry: &ResponseLogprob) -> Option<u32> {
        let text = std::str::from_utf8(entry.bytes.as_deref()?).ok()?;
        self.by_text.get(text).copied().flatten()
    }

    pub(crate) fn is_end(&self, id: u32) -> bool {
        self.end_ids.contains(&id)
    }
}
