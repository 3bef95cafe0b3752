//! Which completion tokens a reward is credited to. A tool call's reward judges what the call
//! chose (the function, the argument values), not its syntax: the template's markers, the
//! JSON punctuation and the keys are the same in every well-formed call, and a server that
//! holds calls to their schema forces them token by token. With [`Credit::ToolChoices`] those
//! tokens carry no policy gradient, so that a few tokens of choice are not drowned by dozens of
//! scaffold tokens whose gradients are noise to the reward.
//!
//! Calls are found in the Qwen2.5/Hermes form (`<tool_call>` … `</tool_call>` around a JSON
//! object), the form the trainer's own models and `atdp-serve` use; a completion without such
//! a block is credited whole.

use crate::data::{ChatFormat, Example};
use crate::{Error, Result};

/// The opening marker of a call.
const CALL_OPEN: &str = "<tool_call>";
/// The closing marker of a call.
const CALL_CLOSE: &str = "</tool_call>";

/// Which completion tokens the policy gradient reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Credit {
    /// Every completion token (the default).
    #[default]
    All,
    /// Inside a tool call, only the function's name and the argument values; text outside
    /// calls whole.
    ToolChoices,
}

impl Credit {
    /// The setting's name in `train.toml`.
    pub fn from_name(name: &str) -> Option<Credit> {
        match name {
            "all" => Some(Credit::All),
            "tool_choices" => Some(Credit::ToolChoices),
            _ => None,
        }
    }

    /// Its name in `train.toml` and in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Credit::All => "all",
            Credit::ToolChoices => "tool_choices",
        }
    }
}

/// Sets each example's token weights for `credit` (none for [`Credit::All`], nor for a
/// completion without a call).
pub fn assign(examples: &mut [Example], chat: &ChatFormat, credit: Credit) -> Result<()> {
    if credit == Credit::All {
        return Ok(());
    }
    for example in examples {
        example.weights = tool_choices(chat, &example.tokens[example.prompt_len..])?;
    }
    Ok(())
}

/// The weight of each of `completion`'s tokens when only a call's choices are credited: 1 for
/// a token with a byte of a scalar value of the call's JSON (the function's name, the
/// argument values at any depth), or outside every call; 0 otherwise. `None` when the
/// completion holds no call. Tokens are decoded one by one (a token holding part of a
/// character decodes to U+FFFD), which keeps every ASCII byte, the markers and the JSON
/// syntax, at its position relative to the others.
pub fn tool_choices(chat: &ChatFormat, completion: &[u32]) -> Result<Option<Vec<f32>>> {
    let mut text = String::new();
    let mut ends = Vec::with_capacity(completion.len());
    for &id in completion {
        let piece = chat
            .tokenizer()
            .decode(&[id], false)
            .map_err(|e| Error::invalid("completion", format!("cannot decode a token: {e}")))?;
        text.push_str(&piece);
        ends.push(text.len());
    }
    if !text.contains(CALL_OPEN) {
        return Ok(None);
    }
    let credited = credited_bytes(&text);
    let mut start = 0;
    let weights = ends
        .iter()
        .map(|&end| {
            // A token that decodes to nothing (an id the tokenizer does not know) is credited.
            let any = start == end || credited[start..end].iter().any(|&c| c);
            start = end;
            if any { 1.0 } else { 0.0 }
        })
        .collect();
    Ok(Some(weights))
}

/// For each byte of `text`: whether it is credited (outside calls, or a value inside one).
fn credited_bytes(text: &str) -> Vec<bool> {
    let mut credited = vec![true; text.len()];
    let mut from = 0;
    while let Some(open) = text[from..].find(CALL_OPEN).map(|i| from + i) {
        let body = open + CALL_OPEN.len();
        let close = text[body..]
            .find(CALL_CLOSE)
            .map_or(text.len(), |i| body + i);
        let end = (close + CALL_CLOSE.len()).min(text.len());
        credited[open..end].iter_mut().for_each(|c| *c = false);
        for (a, b) in json_values(&text.as_bytes()[body..close]) {
            credited[body + a..body + b]
                .iter_mut()
                .for_each(|c| *c = true);
        }
        from = end;
    }
    credited
}

/// The byte spans of the scalar values (string contents, numbers, literals) of the JSON text
/// `json`, keys excluded. Lenient: a cut or malformed text gives the values seen so far.
fn json_values(json: &[u8]) -> Vec<(usize, usize)> {
    /// An open container: an object (expecting a key next, or a value) or an array.
    enum Open {
        Object { key_next: bool },
        Array,
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'{' => stack.push(Open::Object { key_next: true }),
            b'[' => stack.push(Open::Array),
            b'}' | b']' => {
                stack.pop();
            }
            c @ (b':' | b',') => {
                if let Some(Open::Object { key_next }) = stack.last_mut() {
                    *key_next = c == b',';
                }
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < json.len() && json[j] != b'"' {
                    j += if json[j] == b'\\' { 2 } else { 1 };
                }
                let end = j.min(json.len());
                if !matches!(stack.last(), Some(Open::Object { key_next: true })) {
                    spans.push((start, end));
                }
                i = end;
            }
            c if c.is_ascii_whitespace() => {}
            _ => {
                let start = i;
                while i < json.len() && !b",]}: \t\r\n".contains(&json[i]) {
                    i += 1;
                }
                spans.push((start, i));
                continue;
            }
        }
        i += 1;
    }
    spans
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn values(json: &str) -> Vec<&str> {
        json_values(json.as_bytes())
            .into_iter()
            .map(|(a, b)| &json[a..b])
            .collect()
    }

    #[test]
    fn values_are_found_and_keys_are_not() {
        assert_eq!(
            values(r#"{"name": "refund", "arguments": {"reference": "53311"}}"#),
            ["refund", "53311"]
        );
        assert_eq!(
            values(r#"{"name":"f","arguments":{"a":[1, "x", {"k": true}],"b":null,"c":"q\"r"}}"#),
            ["f", "1", "x", "true", "null", r#"q\"r"#]
        );
        // A cut call gives what came before the cut.
        assert_eq!(values(r#"{"name": "refu"#), ["refu"]);
    }

    #[test]
    fn only_a_calls_choices_and_the_text_around_it_are_credited() {
        let text = "Sure.\n<tool_call>\n{\"name\": \"refund\", \"arguments\": {\"reference\": \"53311\"}}\n</tool_call><|im_end|>";
        let credited = credited_bytes(text);
        let kept: String = text
            .char_indices()
            .filter(|(i, _)| credited[*i])
            .map(|(_, c)| c)
            .collect();
        assert_eq!(kept, "Sure.\nrefund53311<|im_end|>");
    }

    #[test]
    fn a_calls_scaffold_tokens_get_no_weight() {
        let chat = crate::init::chat_format(&[]).unwrap();
        let completion = "<tool_call>\n{\"name\": \"refund\", \"arguments\": {\"reference\": \"53311\"}}\n</tool_call><|im_end|>";
        let ids = chat.encode(completion).unwrap();
        let weights = tool_choices(&chat, &ids).unwrap().unwrap();
        assert_eq!(weights.len(), ids.len());
        let credited: Vec<u32> = ids
            .iter()
            .zip(&weights)
            .filter(|(_, w)| **w == 1.0)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(
            chat.tokenizer().decode(&credited, false).unwrap(),
            "refund53311<|im_end|>"
        );
        assert!(weights.iter().filter(|w| **w == 0.0).count() > 30);
        // Text without a call is credited whole.
        let ids = chat.encode("Done.<|im_end|>").unwrap();
        assert_eq!(tool_choices(&chat, &ids).unwrap(), None);
    }
}
