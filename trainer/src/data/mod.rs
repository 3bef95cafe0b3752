//! Training data: steps and rewards selected from the lake ([`read_lake`]), their masked
//! text's placeholders rendered as surrogate values ([`render_step`]), each usable step
//! turned into a tokenized example ([`build_examples`]) with its prompt rendered by the
//! model's own chat template and a loss mask on the completion tokens only.

mod credit;
mod lake;
mod surrogate;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use atdp_schema::Step;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::returns::StepKey;
pub use atdp_model_files::ChatFormat;
pub use credit::{Credit, assign as assign_credit};
pub use lake::{LakeData, Selection, TableRead, read_lake, read_lake_to_monitor};
pub use surrogate::{Placeholders, render as render_surrogates, render_step, surrogate};

/// One training example: a prompt and the completion the behaviour policy produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The step it comes from.
    pub step_id: String,
    /// The step's trajectory.
    pub trajectory_id: String,
    /// The step's tenant.
    pub tenant_id: String,
    /// Prompt then completion token ids.
    pub tokens: Vec<u32>,
    /// Number of prompt tokens; the loss covers `tokens[prompt_len..]` only.
    pub prompt_len: usize,
    /// The behaviour policy's log-prob of each completion token, when recorded and of the
    /// completion's length.
    pub behaviour_logprobs: Option<Vec<f32>>,
    /// A hash of the rendered prompt (the default GRPO group key).
    pub prompt_hash: u64,
    /// The policy-gradient weight of each completion token (see [`Credit`]); `None`: 1 for
    /// every token.
    pub weights: Option<Vec<f32>>,
    /// The step's tags (a GRPO group key can be one of them).
    pub tags: std::collections::BTreeMap<String, String>,
}

impl Example {
    /// Number of completion tokens.
    pub fn completion_len(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// The sum of its completion tokens' weights (their number when unweighted).
    pub fn credited_tokens(&self) -> f64 {
        match &self.weights {
            Some(w) => w.iter().map(|&x| f64::from(x)).sum(),
            None => self.completion_len() as f64,
        }
    }

    /// The step it comes from, as (tenant, trajectory, step).
    pub fn key(&self) -> StepKey {
        StepKey::new(&self.tenant_id, &self.trajectory_id, &self.step_id)
    }
}

/// How steps became examples, and why some did not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExampleStats {
    /// Steps seen.
    pub steps: usize,
    /// Examples built.
    pub examples: usize,
    /// Steps skipped: status not `ok` or no response.
    pub skipped_not_ok: usize,
    /// Steps skipped: the prompt alone reaches the maximum length.
    pub skipped_too_long: usize,
    /// Examples whose completion was cut to fit the maximum length.
    pub truncated: usize,
    /// Examples using the recorded `completion_token_ids`.
    pub recorded_token_ids: usize,
    /// Examples whose response was tokenized again (no ids recorded, or not of this vocabulary).
    pub retokenized: usize,
    /// Examples with recorded behaviour log-probs.
    pub with_behaviour_logprobs: usize,
}

/// Builds an example from every step with status `ok` and a response. Prompts longer than
/// `max_len - 1` are skipped, completions cut to fit `max_len`; both are counted.
pub fn build_examples(
    steps: &[Step],
    chat: &ChatFormat,
    model_vocab: usize,
    max_len: usize,
) -> Result<(Vec<Example>, ExampleStats)> {
    let mut stats = ExampleStats {
        steps: steps.len(),
        ..ExampleStats::default()
    };
    let vocab = chat.vocab_size().min(model_vocab);
    let mut examples = Vec::new();
    for step in steps {
        let Some(response) = step
            .response_message
            .as_ref()
            .filter(|_| step.status == "ok")
        else {
            stats.skipped_not_ok += 1;
            continue;
        };
        let (prompt, completion_text) =
            chat.prompt_and_completion(&step.request_messages, &step.tools, response)?;
        let prompt_ids = chat.encode(&prompt)?;
        let recorded = step
            .completion_token_ids
            .as_ref()
            .filter(|ids| !ids.is_empty() && ids.iter().all(|&i| i >= 0 && (i as usize) < vocab))
            .map(|ids| ids.iter().map(|&i| i as u32).collect::<Vec<u32>>());
        let mut completion = match recorded {
            Some(ids) => {
                stats.recorded_token_ids += 1;
                ids
            }
            None => {
                stats.retokenized += 1;
                chat.encode(&completion_text)?
            }
        };
        let mut behaviour = step
            .completion_logprobs
            .clone()
            .filter(|lp| lp.len() == completion.len() && lp.iter().all(|v| v.is_finite()));
        if prompt_ids.len() + 1 > max_len || completion.is_empty() {
            stats.skipped_too_long += 1;
            continue;
        }
        if prompt_ids.len() + completion.len() > max_len {
            let keep = max_len - prompt_ids.len();
            completion.truncate(keep);
            if let Some(lp) = behaviour.as_mut() {
                lp.truncate(keep);
            }
            stats.truncated += 1;
        }
        if behaviour.is_some() {
            stats.with_behaviour_logprobs += 1;
        }
        let mut hasher = DefaultHasher::new();
        prompt.hash(&mut hasher);
        let prompt_len = prompt_ids.len();
        let mut tokens = prompt_ids;
        tokens.extend(completion);
        examples.push(Example {
            step_id: step.step_id.clone(),
            trajectory_id: step.trajectory_id.clone(),
            tenant_id: step.tenant_id.clone(),
            tokens,
            prompt_len,
            behaviour_logprobs: behaviour,
            prompt_hash: hasher.finish(),
            weights: None,
            tags: step.tags.clone(),
        });
    }
    stats.examples = examples.len();
    Ok((examples, stats))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use atdp_schema::{Message, Tool, ToolCall};

    use super::*;
    use atdp_model_files::{Arch, TOKENIZER_CONFIG_FILE};

    use crate::{IM_END, InitSpec, added_token_id, init_model};

    fn msg(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: Some(content.into()),
            ..Message::default()
        }
    }

    fn step(reply: Message) -> Step {
        Step {
            step_id: "s1".into(),
            trajectory_id: "t1".into(),
            status: "ok".into(),
            request_messages: vec![msg("system", "Be brief."), msg("user", "Hi")],
            response_message: Some(reply),
            ..Step::default()
        }
    }

    /// A template written for Python's Jinja (string methods, as in Llama 3's) renders.
    #[test]
    fn templates_may_call_python_string_methods() {
        let dir = tempfile::tempdir().unwrap();
        init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let path = dir.path().join(TOKENIZER_CONFIG_FILE);
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config["chat_template"] = serde_json::Value::from(
            "{% for m in messages %}{% if m.role.startswith('sys') %}[{{ m.content.strip().upper() }}]{% else %}<{{ m.role }}>{{ m.content.split(' ')|join('_') }}{% endif %}{% endfor %}",
        );
        std::fs::write(&path, config.to_string()).unwrap();
        let chat = ChatFormat::load(dir.path()).unwrap();
        let text = chat
            .render(
                &[msg("system", "  Be brief. "), msg("user", "a b c")],
                &[],
                false,
            )
            .unwrap();
        assert_eq!(text, "[BE BRIEF.]<user>a_b_c");
    }

    #[test]
    fn prompts_use_the_chat_template_and_the_loss_covers_the_reply_only() {
        let dir = tempfile::tempdir().unwrap();
        init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let chat = ChatFormat::load(dir.path()).unwrap();
        let s = step(msg("assistant", "Hello"));
        let (ex, stats) = build_examples(std::slice::from_ref(&s), &chat, 300, 512).unwrap();
        assert_eq!(stats.examples, 1);
        let e = &ex[0];
        let text = chat.tokenizer().decode(&e.tokens, false).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>"
        );
        let completion = chat
            .tokenizer()
            .decode(&e.tokens[e.prompt_len..], false)
            .unwrap();
        assert_eq!(completion, "Hello<|im_end|>");
        assert_eq!(*e.tokens.last().unwrap(), added_token_id(IM_END).unwrap());

        // Tools and tool calls go through the template.
        let mut s2 = step(Message {
            role: "assistant".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                arguments: r#"{"ref":"A1"}"#.into(),
            }],
            ..Message::default()
        });
        s2.tools = vec![Tool {
            kind: "function".into(),
            name: "lookup".into(),
            description: Some("Find it.".into()),
            parameters: Some(r#"{"type":"object"}"#.into()),
        }];
        let (ex, _) = build_examples(&[s2], &chat, 300, 4096).unwrap();
        let text = chat.tokenizer().decode(&ex[0].tokens, false).unwrap();
        assert!(text.contains(r#""name": "lookup""#), "{text}");
        assert!(text.contains("# Tools"), "{text}");
        let completion = chat
            .tokenizer()
            .decode(&ex[0].tokens[ex[0].prompt_len..], false)
            .unwrap();
        assert_eq!(
            completion,
            "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"ref\": \"A1\"}}\n</tool_call><|im_end|>"
        );

        // A tool result in the history is rendered as the template says.
        let mut s2b = step(msg("assistant", "Found it."));
        s2b.request_messages.push(Message {
            role: "assistant".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            }],
            ..Message::default()
        });
        s2b.request_messages.push(Message {
            role: "tool".into(),
            content: Some("order A1: shipped".into()),
            tool_call_id: Some("c1".into()),
            ..Message::default()
        });
        let (ex, _) = build_examples(&[s2b], &chat, 300, 4096).unwrap();
        let text = chat.tokenizer().decode(&ex[0].tokens, false).unwrap();
        assert!(
            text.ends_with(
                "<|im_start|>user\n<tool_response>\norder A1: shipped\n</tool_response><|im_end|>\n<|im_start|>assistant\nFound it.<|im_end|>"
            ),
            "{text}"
        );

        // Recorded ids of this vocabulary are used with their log-probs; others are not.
        let mut s3 = step(msg("assistant", "Hello"));
        s3.completion_token_ids = Some(vec![72, 101, 299]);
        s3.completion_logprobs = Some(vec![-1.0, -2.0, -0.5]);
        let mut s4 = s3.clone();
        s4.completion_token_ids = Some(vec![72, 70_000]);
        let mut s5 = s3.clone();
        s5.status = "upstream_error".into();
        let (ex, stats) = build_examples(&[s3, s4, s5], &chat, 300, 4096).unwrap();
        assert_eq!(ex[0].tokens[ex[0].prompt_len..], [72, 101, 299]);
        assert_eq!(
            ex[0].behaviour_logprobs.as_deref(),
            Some(&[-1.0, -2.0, -0.5][..])
        );
        assert_eq!(ex[1].behaviour_logprobs, None);
        assert_eq!((stats.recorded_token_ids, stats.retokenized), (1, 1));
        assert_eq!(stats.skipped_not_ok, 1);

        // Too long: the completion is cut, or the step skipped when the prompt fills it.
        let plen = ex[0].prompt_len;
        let s6 = step(msg("assistant", "Hello there, a long reply"));
        let (ex, stats) = build_examples(&[s6.clone(), s6], &chat, 300, plen + 2).unwrap();
        assert_eq!(ex[0].completion_len(), 2);
        assert_eq!(stats.truncated, 2);
        let (ex, stats) = build_examples(&[step(msg("assistant", "x"))], &chat, 300, 4).unwrap();
        assert!(ex.is_empty());
        assert_eq!(stats.skipped_too_long, 1);
    }
}
