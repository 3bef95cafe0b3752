//! Generation with the trainer's prompt and exact completion token ids.
//!
//! The prompt is rendered by the trainer's own `ChatFormat` (the model's chat template in
//! minijinja, transformers' `tojson`) from messages and tools shaped as the proxy records
//! them, and tokenized by the same tokenizer: the served model conditions on the very ids the
//! trainer computes for the recorded step. mistral.rs gets those ids as a completion request
//! (`RequestMessage::CompletionTokens`), so its own chat template and tool parsing never run.
//!
//! mistral.rs 0.8.1 reports each sampled token as text only (`ResponseLogprob.token`), so the
//! ids are read from the sequence itself: a logits processor ([`TokenTap`]) sees the context
//! (prompt and tokens generated so far) before every step. That covers every token but the
//! last; to see the last one too, the engine is asked for one token more than `max_tokens`
//! and that extra token is dropped (finish reason `length`). A reply that ends earlier ends
//! with an end-of-turn token, a stop sequence or the model's length limit; that final token is
//! identified by its text (mistral.rs gives each token's decoded text), which names one token
//! of the vocabulary except for a token that ends inside a UTF-8 character: then, and only
//! then, the ids are left out rather than guessed.
//!
//! The reply text is the ids decoded (the end-of-turn token left out, special tokens such as
//! `<tool_call>` kept), so text, ids and the recorded step agree byte for byte; mistral.rs's
//! own text drops special tokens and leading whitespace.

use std::sync::{Arc, Mutex};

use candle_core::Tensor;
use mistralrs::core::{
    Constraint, CustomLogitsProcessor, NormalRequest, Request, RequestMessage, Response,
    ResponseLogprob, SamplingParams,
};
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::error::ApiError;
use crate::prompt::PromptFormat;

/// Sees the sequence's context before each sampling step and keeps the generated ids; bans
/// `ban` (the `<tool_call>` token under `tool_choice: none`).
#[derive(Debug)]
struct TokenTap {
    prompt_len: usize,
    seen: Mutex<Vec<u32>>,
    ban: Option<u32>,
}

impl TokenTap {
    fn generated(&self) -> Vec<u32> {
        match self.seen.lock() {
            Ok(seen) => seen.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl CustomLogitsProcessor for TokenTap {
    fn apply(&self, logits: &Tensor, context: &[u32]) -> candle_core::Result<Tensor> {
        if let Some(generated) = context.get(self.prompt_len..) {
            let mut seen = match self.seen.lock() {
                Ok(seen) => seen,
                Err(poisoned) => poisoned.into_inner(),
            };
            if let Some(new) = generated.get(seen.len()..) {
                seen.extend_from_slice(new);
            }
        }
        match self.ban {
            Some(id) if (id as usize) < logits.elem_count() => {
                let mut values: Vec<f32> = logits.to_dtype(candle_core::DType::F32)?.to_vec1()?;
                if let Some(v) = values.get_mut(id as usize) {
                    *v = f32::NEG_INFINITY;
                }
                Tensor::from_vec(values, logits.elem_count(), logits.device())?
                    .to_dtype(logits.dtype())
            }
            _ => Ok(logits.clone()),
        }
    }
}

/// One completion to generate.
#[derive(Clone)]
pub(crate) struct Job {
    /// The prompt's ids.
    pub prompt: Arc<Vec<u32>>,
    /// Sampling, `max_len` unset (set from `max_tokens`).
    pub sampling: SamplingParams,
    /// The decoding constraint.
    pub constraint: Constraint,
    /// OpenAI's `max_tokens`, within the room the context leaves.
    pub max_tokens: usize,
    /// Tokens the model's context holds after the prompt.
    pub room: usize,
    /// A token the model may not sample.
    pub ban: Option<u32>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The prompt is the conversation: only its length is printed.
        f.debug_struct("Job")
            .field("prompt_tokens", &self.prompt.len())
            .field("max_tokens", &self.max_tokens)
            .field("ban", &self.ban)
            .finish_non_exhaustive()
    }
}

/// A finished completion.
#[derive(Debug)]
pub(crate) struct Generated {
    /// Every generated token, end-of-turn token included; `None` when the last one could not
    /// be identified.
    pub ids: Option<Vec<u32>>,
    /// Tokens generated (also when `ids` is `None`).
    pub tokens: usize,
    /// The reply text (stop sequences not cut yet).
    pub text: String,
    /// mistral.rs's log-probability entries, one per token.
    pub logprobs: Vec<ResponseLogprob>,
    /// `stop` or `length`.
    pub finish: String,
}

/// The first line of an engine error, at most 300 characters.
fn shortened(message: &str) -> String {
    message
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect()
}

fn engine_error(response: Response) -> Option<ApiError> {
    match response {
        Response::ValidationError(e) => Some(ApiError::invalid(e.to_string(), None)),
        // mistral.rs's message names its internals (shapes, a backtrace): it goes to the
        // log, and the client is told the request failed in the model.
        Response::InternalError(e) => {
            tracing::warn!(error = %shortened(&e.to_string()), "The model failed a request.");
            Some(ApiError::server("the model failed on this request"))
        }
        Response::CompletionModelError(message, _) | Response::ModelError(message, _) => {
            tracing::warn!(error = %shortened(&message), "The model failed a request.");
            Some(ApiError::server("the model failed on this request"))
        }
        _ => None,
    }
}

async fn send(
    engine: &Engine,
    job: &Job,
    streaming: bool,
) -> std::result::Result<(mpsc::Receiver<Response>, Arc<TokenTap>), ApiError> {
    let tap = Arc::new(TokenTap {
        prompt_len: job.prompt.len(),
        seen: Mutex::new(Vec::new()),
        ban: job.ban,
    });
    let mut sampling = job.sampling.clone();
    // One token past `max_tokens`, so that the tap sees every token kept.
    // (Not past the context: at its end the last token is identified by its text.)
    sampling.max_len = Some(job.max_tokens.saturating_add(1).min(job.room.max(1)));
    let (tx, rx) = mpsc::channel(64);
    let request = Request::Normal(Box::new(NormalRequest {
        messages: RequestMessage::CompletionTokens(job.prompt.as_ref().clone()),
        sampling_params: sampling,
        response: tx,
        // The last token's text identifies it; the entries are left out of the response
        // when the client did not ask for them.
        return_logprobs: true,
        is_streaming: streaming,
        id: 0,
        constraint: job.constraint.clone(),
        suffix: None,
        tools: None,
        tool_choice: None,
        logits_processors: Some(vec![tap.clone() as Arc<dyn CustomLogitsProcessor>]),
        return_raw_logits: false,
        web_search_options: None,
        model_id: None,
        truncate_sequence: false,
    }));
    let sender = engine
        .model
        .inner()
        .get_sender(None)
        .map_err(|e| ApiError::server(format!("the model is not available: {e}")))?;
    sender
        .send(request)
        .await
        .map_err(|_| ApiError::server("the model stopped"))?;
    Ok((rx, tap))
}

/// Generates one whole completion.
pub(crate) async fn whole(engine: &Engine, job: &Job) -> std::result::Result<Generated, ApiError> {
    let (mut rx, tap) = send(engine, job, false).await?;
    let done = loop {
        match rx.recv().await {
            Some(Response::CompletionDone(done)) => break done,
            Some(other) => {
                if let Some(error) = engine_error(other) {
                    return Err(error);
                }
            }
            None => {
                return Err(ApiError::server(
                    "the model ended the request without a reply",
                ));
            }
        }
    };
    let Some(choice) = done.choices.into_iter().next() else {
        return Err(ApiError::server("the model returned no choice"));
    };
    let mut logprobs = choice.logprobs.and_then(|l| l.content).unwrap_or_default();
    let known = tap.generated();
    let format = &engine.format;
    let (ids, finish) = if known.len() >= job.max_tokens {
        logprobs.truncate(job.max_tokens);
        (Some(known[..job.max_tokens].to_vec()), "length".to_owned())
    } else {
        let agrees = logprobs.len() == known.len() + 1
            && known.iter().zip(&logprobs).all(|(id, entry)| {
                entry.bytes.as_deref() == Some(format.decode(&[*id]).as_bytes())
            });
        let last = logprobs.last().and_then(|entry| format.identify(entry));
        let ids = match (agrees, last) {
            (true, Some(last)) => Some(known.iter().copied().chain([last]).collect()),
            _ => {
                if !agrees {
                    tracing::warn!(
                        seen = known.len(),
                        entries = logprobs.len(),
                        "The tapped token ids disagree with mistral.rs's tokens; ids left out."
                    );
                }
                None
            }
        };
        (ids, choice.finish_reason)
    };
    let tokens = ids.as_ref().map_or(logprobs.len(), Vec::len);
    let text = match &ids {
        Some(ids) => format.reply_text(ids),
        None => format.decode(&known),
    };
    Ok(Generated {
        ids,
        tokens,
        text,
        logprobs,
        finish,
    })
}

/// What a stream step brings.
#[derive(Debug, Default)]
pub(crate) struct Step {
    /// New reply text (decoded from ids, a token or so behind the engine).
    pub text: String,
    /// Log-probability entries that arrived (a stream carries none for a token that ends
    /// inside a UTF-8 character).
    pub logprobs: Vec<ResponseLogprob>,
    /// At the end: every id (`None` when the last could not be identified), the tokens
    /// generated, and the finish reason.
    pub end: Option<(Option<Vec<u32>>, usize, String)>,
}

/// Turns ids into text as they come, holding back a character not yet whole (the
/// prefix-window method of Hugging Face's `DecodeStream`).
#[derive(Debug, Default)]
struct Detokenizer {
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl Detokenizer {
    fn push(&mut self, format: &PromptFormat, id: u32) -> String {
        self.ids.push(id);
        let before = format.decode(&self.ids[self.prefix..self.read]);
        let now = format.decode(&self.ids[self.prefix..]);
        if now.len() > before.len()
            && !now.ends_with('\u{FFFD}')
            && let Some(new) = now.get(before.len()..)
        {
            self.prefix = self.read;
            self.read = self.ids.len();
            return new.to_owned();
        }
        String::new()
    }

    /// What is left (a character cut at the end comes out as U+FFFD, as in the whole reply).
    fn finish(&mut self, format: &PromptFormat) -> String {
        let before = format.decode(&self.ids[self.prefix..self.read]);
        let now = format.decode(&self.ids[self.prefix..]);
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        now.get(before.len()..).unwrap_or_default().to_owned()
    }
}

/// A completion streamed from the engine.
pub(crate) struct TokenStream {
    rx: mpsc::Receiver<Response>,
    tap: Arc<TokenTap>,
    format: Arc<PromptFormat>,
    max_tokens: usize,
    detokenizer: Detokenizer,
    fed: usize,
    ended: bool,
}

impl std::fmt::Debug for TokenStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStream")
            .field("fed", &self.fed)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// The most sequences of departed clients left to run out at once.
const MAX_RUNNING_OUT: usize = 32;

/// Starts streaming one completion.
pub(crate) async fn stream(
    engine: &Engine,
    job: &Job,
) -> std::result::Result<TokenStream, ApiError> {
    let (rx, tap) = send(engine, job, true).await?;
    Ok(TokenStream {
        rx,
        tap,
        format: engine.format.clone(),
        max_tokens: job.max_tokens,
        detokenizer: Detokenizer::default(),
        fed: 0,
        ended: false,
    })
}

impl TokenStream {
    /// Lets the sequence run to its end with nobody reading it, on a task of its own. The
    /// engine of mistral.rs 0.8.1 fails every sequence of its batch when it cannot send to
    /// one of them, so the stream of a client that left is read to its end (at most its
    /// `max_tokens`) instead of dropped.
    /// At most [`MAX_RUNNING_OUT`] such sequences run at once; past them a stream is dropped,
    /// which cancels it (and may fail its batch), so that clients that open and leave streams
    /// in a loop cannot pile up work.
    pub(crate) fn abandon(mut self) {
        static RUNNING_OUT: tokio::sync::Semaphore =
            tokio::sync::Semaphore::const_new(MAX_RUNNING_OUT);
        if let Ok(permit) = RUNNING_OUT.try_acquire() {
            tokio::spawn(async move {
                let _permit = permit;
                while self.next().await.is_some() {}
            });
        }
    }

    /// Decodes the ids seen so far (up to `max_tokens`) that are not decoded yet.
    fn feed(&mut self, ids: &[u32]) -> String {
        let mut text = String::new();
        for &id in ids.iter().take(self.max_tokens).skip(self.fed) {
            text.push_str(&self.detokenizer.push(&self.format, id));
        }
        self.fed = self.fed.max(ids.len().min(self.max_tokens));
        text
    }

    /// The next step; `None` once the end has been returned.
    pub(crate) async fn next(&mut self) -> Option<std::result::Result<Step, ApiError>> {
        if self.ended {
            return None;
        }
        let response = self.rx.recv().await;
        let mut step = Step::default();
        let closed = response.is_none();
        let chunk = match response {
            Some(Response::CompletionChunk(chunk)) => Some(chunk),
            Some(other) => {
                return match engine_error(other) {
                    Some(error) => {
                        self.ended = true;
                        Some(Err(error))
                    }
                    None => Some(Ok(step)),
                };
            }
            None => None,
        };
        let known = self.tap.generated();
        step.text = self.feed(&known);
        let choice = chunk.and_then(|c| c.choices.into_iter().next());
        let finish = choice.as_ref().and_then(|c| c.finish_reason.clone());
        let entry = choice.and_then(|c| c.logprobs);
        if finish.is_none() && !closed {
            step.logprobs.extend(entry);
            return Some(Ok(step));
        }
        // The end: the engine finished (or closed the stream without a last chunk, when its
        // last token ended inside a UTF-8 character).
        self.ended = true;
        let (ids, tokens, finish) = if known.len() >= self.max_tokens {
            (
                Some(known[..self.max_tokens].to_vec()),
                self.max_tokens,
                "length".to_owned(),
            )
        } else {
            let last = entry.as_ref().and_then(|e| self.format.identify(e));
            let tokens = known.len() + 1;
            let finish = finish.unwrap_or_else(|| {
                if tokens >= self.max_tokens {
                    "length"
                } else {
                    "stop"
                }
                .to_owned()
            });
            step.logprobs.extend(entry);
            match last {
                Some(last) => {
                    if !self.format.is_end(last) {
                        step.text
                            .push_str(&self.detokenizer.push(&self.format, last));
                    }
                    let ids: Vec<u32> = known.iter().copied().chain([last]).collect();
                    (Some(ids), tokens, finish)
                }
                None => (None, tokens, finish),
            }
        };
        step.text.push_str(&self.detokenizer.finish(&self.format));
        step.end = Some((ids, tokens, finish));
        Some(Ok(step))
    }
}
