//! A small byte-level BPE tokenizer in Hugging Face's `tokenizer.json` format, built in code:
//! the 256 byte tokens (GPT-2's byte-to-unicode alphabet, token id = byte value), a few dozen
//! English merges, and the ChatML special tokens of Qwen2.5, laid out as Qwen2's tokenizer is
//! (NFC, a Qwen2 split regex, byte-level). Its `tokenizer_config.json` carries a ChatML chat
//! template with tool calls in the Qwen2.5 style.
//!
//! [`learn_merges`] learns further merges from a corpus, as a tokenizer is trained: the most
//! frequent adjacent pair within the pre-tokenized words, merged and counted again. They are
//! appended after the built-in merges and take the ids after the added tokens, so that every
//! id of the built-in vocabulary stays what it is. Agent traffic is mostly JSON (tool
//! definitions, calls, results), which a byte-level vocabulary spells one character at a
//! time; learned merges make its words single tokens, as a real model's vocabulary does.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use serde_json::{Map, Value, json};
use tokenizers::{
    Model, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, Tokenizer,
};

use crate::{Error, Result};

/// The merges, in rank order, in the byte-level alphabet (`Ġ` is a space).
const MERGES: [(&str, &str); 39] = [
    ("Ġ", "t"),
    ("Ġ", "a"),
    ("h", "e"),
    ("i", "n"),
    ("r", "e"),
    ("o", "n"),
    ("Ġt", "he"),
    ("e", "r"),
    ("Ġ", "s"),
    ("a", "t"),
    ("Ġ", "w"),
    ("Ġ", "o"),
    ("e", "n"),
    ("Ġ", "c"),
    ("i", "t"),
    ("i", "s"),
    ("a", "n"),
    ("o", "r"),
    ("e", "s"),
    ("Ġ", "b"),
    ("e", "d"),
    ("Ġ", "f"),
    ("in", "g"),
    ("Ġ", "p"),
    ("o", "u"),
    ("Ġa", "n"),
    ("a", "l"),
    ("a", "r"),
    ("Ġt", "o"),
    ("Ġ", "m"),
    ("Ġo", "f"),
    ("Ġ", "in"),
    ("Ġ", "d"),
    ("Ġ", "h"),
    ("Ġan", "d"),
    ("l", "l"),
    ("l", "o"),
    ("Ġw", "or"),
    ("H", "e"),
];

/// End of text; also the padding and BOS token.
pub const ENDOFTEXT: &str = "<|endoftext|>";
/// Starts a ChatML turn.
pub const IM_START: &str = "<|im_start|>";
/// Ends a ChatML turn: the end-of-sequence token of a chat model.
pub const IM_END: &str = "<|im_end|>";

/// Added tokens after the byte tokens and merges: (content, special).
const ADDED: [(&str, bool); 5] = [
    (ENDOFTEXT, true),
    (IM_START, true),
    (IM_END, true),
    ("<tool_call>", false),
    ("</tool_call>", false),
];

/// Tokens in the vocabulary: 256 bytes + 39 merges + 5 added = 300.
pub const VOCAB_SIZE: usize = 256 + MERGES.len() + ADDED.len();

/// The id of an added token.
pub fn added_token_id(content: &str) -> Option<u32> {
    ADDED
        .iter()
        .position(|(c, _)| *c == content)
        .and_then(|i| u32::try_from(256 + MERGES.len() + i).ok())
}

/// Qwen2's pre-tokenizer split (contractions, letters, single digits, punctuation runs,
/// newlines, whitespace).
const SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-2's printable stand-in for each byte: printable Latin-1 bytes map to themselves, the
/// others to U+0100 onwards in byte order.
fn byte_to_char(byte: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(byte) {
        return char::from(byte);
    }
    let rank = (0..byte).filter(|b| !printable(*b)).count() as u32;
    char::from_u32(256 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// A merge learned from a corpus: the left and right token, in the byte-level alphabet.
pub type Merge = (String, String);

/// The `tokenizer.json`: the built-in vocabulary, then the `learned` merges (ids from
/// [`VOCAB_SIZE`] on, in order).
pub(crate) fn tokenizer_json(learned: &[Merge]) -> Value {
    let mut vocab = Map::new();
    for byte in 0..=255u8 {
        vocab.insert(byte_to_char(byte).to_string(), json!(byte));
    }
    for (i, (left, right)) in MERGES.iter().enumerate() {
        vocab.insert(format!("{left}{right}"), json!(256 + i));
    }
    for (i, (left, right)) in learned.iter().enumerate() {
        vocab.insert(format!("{left}{right}"), json!(VOCAB_SIZE + i));
    }
    // An added token that the model's vocabulary lacks gets the id after the model's last
    // when the file is read, whatever id it names: with learned tokens after them, the added
    // tokens are entries of the vocabulary as well, at their own ids.
    if !learned.is_empty() {
        for (content, _) in ADDED {
            vocab.insert(content.to_owned(), json!(added_token_id(content)));
        }
    }
    let merges: Vec<String> = MERGES
        .iter()
        .map(|(l, r)| format!("{l} {r}"))
        .chain(learned.iter().map(|(l, r)| format!("{l} {r}")))
        .collect();
    let added: Vec<Value> = ADDED
        .iter()
        .enumerate()
        .map(|(i, (content, special))| {
            json!({
                "id": 256 + MERGES.len() + i,
                "content": content,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": special,
            })
        })
        .collect();
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false
    });
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": SPLIT_REGEX},
                    "behavior": "Isolated",
                    "invert": false
                },
                byte_level
            ]
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": merges
        }
    })
}

/// The tokenizer with the built-in vocabulary and the `learned` merges.
pub fn tokenizer(learned: &[Merge]) -> Result<Tokenizer> {
    Tokenizer::from_str(&tokenizer_json(learned).to_string())
        .map_err(|e| Error::invalid("tokenizer", e.to_string()))
}

/// Learns up to `count` merges from `texts`, after the built-in ones: the texts are split
/// into words as the tokenizer splits them (special tokens apart), each word is spelled with
/// the built-in vocabulary, and the most frequent adjacent pair (ties: the smaller pair) is
/// merged, until `count` merges or no pair occurs twice. A pair whose merge would spell a
/// token the vocabulary already has is not taken. The same texts give the same merges.
pub fn learn_merges(texts: &[String], count: usize) -> Result<Vec<Merge>> {
    let base = tokenizer(&[])?;
    let failed = |e: tokenizers::Error| Error::invalid("tokenizer corpus", e.to_string());
    let pre = base
        .get_pre_tokenizer()
        .ok_or_else(|| Error::invalid("tokenizer", "no pre-tokenizer"))?;
    let mut counts: HashMap<Vec<String>, usize> = HashMap::new();
    for text in texts {
        for piece in split_special(text) {
            // As the tokenizer reads text: normalised (NFC) before it is split into words.
            let mut normalized = NormalizedString::from(piece);
            if let Some(normalizer) = base.get_normalizer() {
                normalizer.normalize(&mut normalized).map_err(failed)?;
            }
            let mut words = PreTokenizedString::from(normalized.get());
            pre.pre_tokenize(&mut words).map_err(failed)?;
            for (word, _, _) in words.get_splits(OffsetReferential::Original, OffsetType::Byte) {
                let spelled = base.get_model().tokenize(word).map_err(failed)?;
                let symbols: Vec<String> = spelled.into_iter().map(|t| t.value).collect();
                if symbols.len() > 1 {
                    *counts.entry(symbols).or_default() += 1;
                }
            }
        }
    }
    let mut words: Vec<(Vec<String>, usize)> = counts.into_iter().collect();
    words.sort();
    let mut known: HashSet<String> = base.get_vocab(true).into_keys().collect();
    let mut learned = Vec::new();
    while learned.len() < count {
        let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
        for (symbols, n) in &words {
            for pair in symbols.windows(2) {
                *pairs.entry((&pair[0], &pair[1])).or_default() += n;
            }
        }
        let best = pairs
            .into_iter()
            .filter(|((l, r), n)| *n >= 2 && !known.contains(&format!("{l}{r}")))
            .max_by(|(a, na), (b, nb)| na.cmp(nb).then_with(|| b.cmp(a)));
        let Some(((left, right), _)) = best else {
            break;
        };
        let (left, right) = (left.to_owned(), right.to_owned());
        let joined = format!("{left}{right}");
        for (symbols, _) in &mut words {
            let mut i = 0;
            while i + 1 < symbols.len() {
                if symbols[i] == left && symbols[i + 1] == right {
                    symbols[i] = joined.clone();
                    symbols.remove(i + 1);
                }
                i += 1;
            }
        }
        known.insert(joined);
        learned.push((left, right));
    }
    Ok(learned)
}

/// `text` without its added tokens: the pieces between them.
fn split_special(text: &str) -> Vec<&str> {
    let mut pieces = vec![text];
    for (token, _) in ADDED {
        pieces = pieces.iter().flat_map(|p| p.split(token)).collect();
    }
    pieces.retain(|p| !p.is_empty());
    pieces
}

/// ChatML with tools, in the Qwen2.5 style: tool signatures in the system turn, calls as
/// `<tool_call>` JSON in the assistant turn, results as `<tool_response>` in a user turn.
pub const CHAT_TEMPLATE: &str = r#"{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"#;

/// The `tokenizer_config.json`: special tokens, ChatML template, no BOS added.
pub(crate) fn tokenizer_config_json() -> Value {
    let mut decoder = Map::new();
    for (content, special) in ADDED {
        if let Some(id) = added_token_id(content) {
            decoder.insert(
                id.to_string(),
                json!({
                    "content": content, "lstrip": false, "normalized": false,
                    "rstrip": false, "single_word": false, "special": special
                }),
            );
        }
    }
    json!({
        "add_bos_token": false,
        "add_prefix_space": false,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": ENDOFTEXT,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": false,
        "eos_token": IM_END,
        "errors": "replace",
        "model_max_length": 2048,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": false,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": null
    })
}

/// The `generation_config.json`: stop at `<|im_end|>` or `<|endoftext|>`, greedy.
pub(crate) fn generation_config_json() -> Value {
    json!({
        "bos_token_id": added_token_id(ENDOFTEXT),
        "eos_token_id": [added_token_id(IM_END), added_token_id(ENDOFTEXT)],
        "pad_token_id": added_token_id(ENDOFTEXT),
        "do_sample": false
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn base() -> Tokenizer {
        tokenizer(&[]).unwrap()
    }

    #[test]
    fn byte_alphabet_is_gpt2s() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'A'), 'A');
        assert_eq!(byte_to_char(0), 'Ā');
        let all: std::collections::HashSet<char> = (0..=255u8).map(byte_to_char).collect();
        assert_eq!(all.len(), 256);
    }

    #[test]
    fn loads_and_round_trips_text() {
        let tok = base();
        assert_eq!(tok.get_vocab_size(true), VOCAB_SIZE);
        for text in [
            "Hello, world",
            "the cat and the hat\n\n  spaces",
            "naïve café 😀 1234",
        ] {
            let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
            assert_eq!(tok.decode(&ids, false).unwrap(), text);
        }
        // Merges apply: " the" is one token, "Hello" is He + ll + o.
        let ids = tok.encode("Hello the", false).unwrap().get_ids().to_vec();
        let tokens: Vec<String> = ids.iter().map(|i| tok.id_to_token(*i).unwrap()).collect();
        assert_eq!(tokens, ["He", "ll", "o", "Ġthe"]);
    }

    #[test]
    fn special_tokens_are_single_ids() {
        let tok = base();
        let (start, end) = (
            added_token_id(IM_START).unwrap(),
            added_token_id(IM_END).unwrap(),
        );
        assert_eq!((start, end), (296, 297));
        let text = "<|im_start|>user\nHi<|im_end|>\n<|endoftext|>";
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(ids.first(), Some(&start));
        assert_eq!(ids.iter().filter(|i| **i == end).count(), 1);
        assert_eq!(ids.last(), Some(&295));
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
        assert_eq!(tok.decode(&ids, true).unwrap(), "user\nHi\n");
        assert!(ids.iter().all(|i| (*i as usize) < VOCAB_SIZE));
    }

    #[test]
    fn learned_merges_spell_the_corpus_words_whole_and_keep_the_built_in_ids() {
        let texts: Vec<String> = (0..40)
            .map(|i| {
                format!(
                    "<|im_start|>assistant\n<tool_call>\n{{\"name\": \"refund_order\", \
                     \"arguments\": {{\"order\": \"{i:05}\"}}}}\n</tool_call><|im_end|>\n"
                )
            })
            .collect();
        let merges = learn_merges(&texts, 500).unwrap();
        assert_eq!(merges, learn_merges(&texts, 500).unwrap());
        // Every repeated word merged whole, then nothing occurs twice any more.
        assert!((10..500).contains(&merges.len()), "{}", merges.len());
        assert_eq!(learn_merges(&texts, 5).unwrap(), merges[..5]);

        let (plain, learned) = (base(), tokenizer(&merges).unwrap());
        assert_eq!(learned.get_vocab_size(true), VOCAB_SIZE + merges.len());
        for (token, id) in plain.get_vocab(true) {
            assert_eq!(learned.token_to_id(&token), Some(id), "{token}");
        }
        let text = texts[7].as_str();
        let before = plain.encode(text, false).unwrap().len();
        let ids = learned.encode(text, false).unwrap().get_ids().to_vec();
        assert!(
            ids.len() * 2 < before,
            "{} tokens against {before}",
            ids.len()
        );
        assert_eq!(learned.decode(&ids, false).unwrap(), text);
        let call = learned
            .encode(" \"refund_order\", \"arguments", false)
            .unwrap();
        assert_eq!(
            call.get_tokens(),
            ["Ġ\"", "refund", "_order", "\",", "Ġ\"", "arguments"]
        );
        // Special tokens are never parts of a merge; digits stay single.
        assert!(
            merges
                .iter()
                .all(|(l, r)| !l.contains("im_") && !r.contains("im_"))
        );
        assert!(
            merges
                .iter()
                .all(|(l, r)| !format!("{l}{r}").contains("00"))
        );
    }

    #[test]
    fn chat_template_renders_tools_calls_and_results() {
        let mut env = minijinja::Environment::new();
        env.add_template("chat", CHAT_TEMPLATE).unwrap();
        let ctx = json!({
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"function": {"arguments": {"city": "Paris"}, "name": "weather"}, "type": "function"}
                ]},
                {"role": "tool", "content": "sunny"},
                {"role": "assistant", "content": "Sunny."}
            ],
            "tools": [{"function": {"name": "weather"}, "type": "function"}],
            "add_generation_prompt": true
        });
        let out = env.get_template("chat").unwrap().render(&ctx).unwrap();
        let expected = concat!(
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n",
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
            r#"{"function":{"name":"weather"},"type":"function"}"#,
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n",
            "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n",
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n",
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|im_end|>\n",
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n",
            "<|im_start|>assistant\nSunny.<|im_end|>\n",
            "<|im_start|>assistant\n",
        );
        assert_eq!(out, expected);

        let plain = json!({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false});
        let out = env.get_template("chat").unwrap().render(&plain).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }
}
