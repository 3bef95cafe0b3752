//! Removing what the proxy asked an upstream for on its own account (behaviour log-probs and
//! token ids, for the trainer) before the reply reaches a client that did not ask for it.
//! OpenAI chat only: the API of the local servers (vLLM, SGLang, mistral.rs) that return them.

use bytes::Bytes;
use serde_json::Value;

use super::sse::{Splitter, replace_data};

/// What the proxy added to the request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Added {
    /// `logprobs: true`.
    pub logprobs: bool,
    /// `return_token_ids: true` (vLLM).
    pub token_ids: bool,
}

impl Added {
    /// Whether anything was added (so the reply needs stripping).
    pub fn any(self) -> bool {
        self.logprobs || self.token_ids
    }

    /// Strips one completion or chunk in place; returns whether it changed.
    pub fn strip(self, document: &mut Value) -> bool {
        let mut changed = false;
        // vLLM also returns the prompt's token ids with `return_token_ids`.
        if self.token_ids
            && let Some(map) = document.as_object_mut()
        {
            changed |= map.remove("prompt_token_ids").is_some();
        }
        let Some(choices) = document.get_mut("choices").and_then(Value::as_array_mut) else {
            return changed;
        };
        for choice in choices {
            let Some(choice) = choice.as_object_mut() else {
                continue;
            };
            if self.logprobs
                && let Some(logprobs) = choice.get_mut("logprobs")
                && !logprobs.is_null()
            {
                *logprobs = Value::Null;
                changed = true;
            }
            if self.token_ids && choice.remove("token_ids").is_some() {
                changed = true;
            }
        }
        changed
    }
}

/// Strips a streamed reply, event by event; events that need no change pass byte for byte.
#[derive(Debug)]
pub struct SseStripper {
    added: Added,
    splitter: Splitter,
}

impl SseStripper {
    /// A stripper for what the proxy added.
    pub fn new(added: Added) -> Self {
        SseStripper {
            added,
            splitter: Splitter::default(),
        }
    }

    fn block(&self, bytes: Vec<u8>, data: Option<&str>, out: &mut Vec<u8>) {
        if let Some(mut document) = data.and_then(|d| serde_json::from_str::<Value>(d).ok())
            && self.added.strip(&mut document)
        {
            out.extend_from_slice(&replace_data(&bytes, &document.to_string()));
        } else {
            out.extend_from_slice(&bytes);
        }
    }

    /// Takes the next bytes; returns those of the events they complete, stripped.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(chunk.len());
        for block in self.splitter.push(chunk) {
            let data = block.event.as_ref().map(|e| e.data.clone());
            self.block(block.bytes, data.as_deref(), &mut out);
        }
        Bytes::from(out)
    }

    /// Ends the stream: returns an unterminated last event, stripped.
    pub fn finish(&mut self) -> Bytes {
        let mut out = Vec::new();
        if let Some(block) = self.splitter.finish() {
            let data = block.event.as_ref().map(|e| e.data.clone());
            self.block(block.bytes, data.as_deref(), &mut out);
        }
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: &str = r#"data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.1}]},"finish_reason":null,"token_ids":[9]}]}"#;

    #[test]
    fn added_fields_are_removed_and_the_rest_passes_untouched() {
        let all = Added {
            logprobs: true,
            token_ids: true,
        };
        let mut stripper = SseStripper::new(all);
        let stream = format!("{CHUNK}\n\n: keep-alive\n\ndata: [DONE]\n\n");
        let mut out = Vec::new();
        for piece in stream.as_bytes().chunks(7) {
            out.extend_from_slice(&stripper.push(piece));
        }
        out.extend_from_slice(&stripper.finish());
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""logprobs":null"#), "{text}");
        assert!(
            !text.contains("token_ids") && !text.contains("-0.1"),
            "{text}"
        );
        assert!(text.ends_with(": keep-alive\n\ndata: [DONE]\n\n"), "{text}");
        // Nothing added: nothing changes.
        let mut untouched = SseStripper::new(Added::default());
        assert_eq!(&untouched.push(stream.as_bytes())[..], stream.as_bytes());
    }

    #[test]
    fn whole_replies_too() {
        let mut reply: Value = serde_json::from_str(
            r#"{"prompt_token_ids":[5],"choices":[{"index":0,"message":{"content":"x"},"logprobs":{"content":[]},"token_ids":[1]}]}"#,
        )
        .unwrap();
        assert!(
            Added {
                logprobs: true,
                token_ids: false
            }
            .strip(&mut reply)
        );
        assert!(reply["choices"][0]["logprobs"].is_null());
        assert_eq!(reply["choices"][0]["token_ids"][0], 1, "not added, so kept");
        assert!(
            Added {
                logprobs: false,
                token_ids: true
            }
            .strip(&mut reply)
        );
        assert!(
            reply.get("prompt_token_ids").is_none()
                && reply["choices"][0].get("token_ids").is_none()
        );
    }
}
