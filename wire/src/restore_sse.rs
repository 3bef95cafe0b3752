//! Restoring placeholders in a streamed reply, whose chunk boundaries (of bytes, and of the
//! text deltas in its events) may cut a placeholder anywhere.

mod events;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use atdp_policies::{KeyRing, VaultItem};
use bytes::Bytes;
use serde_json::Value;

use self::events::{FieldKey, anthropic_flush_event, chat_flush_chunk, responses_flush_event};
use super::restore::{FieldStream, Originals, TextMode, entity_types, restore_value};
use super::sse::{RawBlock, Splitter, line_end, replace_data, terminate, write_event};
use super::{ApiKind, WireError};

/// Rewrites an SSE reply so that the client sees originals where the upstream wrote
/// placeholders.
///
/// Each event's text-carrying fields go through a per-field [`FieldStream`]: OpenAI chat
/// `choices[i].delta.content` and `choices[i].delta.tool_calls[j].function.arguments`;
/// responses `response.output_text.delta` and `response.function_call_arguments.delta`
/// (by item and output / content index); Anthropic `text_delta.text` and
/// `input_json_delta.partial_json` (by block index). Text held back because it may be a
/// cut placeholder is written out before the event that ends its field: as an extra delta
/// chunk before an OpenAI chat chunk with a `finish_reason` (or before `[DONE]`), as a
/// delta event before `response.output_text.done` / `response.function_call_arguments.done`
/// (or the end of its item or response), and as a `content_block_delta` before Anthropic's
/// `content_block_stop` (or `message_delta`). Other events are restored whole (full texts
/// in `*.done` and `response.completed`, for instance). Anthropic thinking is never
/// touched: it is signed.
///
/// An event that needs no change is passed on byte for byte; a changed one is written
/// with serde_json (field order kept), its other lines (`event:`, `id:`) as they were.
pub struct SseRestorer {
    api: ApiKind,
    tenant: String,
    vault: Arc<HashMap<String, VaultItem>>,
    /// The vault's entity types, for telling held text that may become a placeholder.
    entities: Vec<String>,
    keys: Arc<KeyRing>,
    splitter: Splitter,
    state: State,
}

impl std::fmt::Debug for SseRestorer {
    // Neither vault contents nor held text: counts only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseRestorer")
            .field("api", &self.api)
            .field("tenant", &self.tenant)
            .field("vault_entries", &self.vault.len())
            .field("open_fields", &self.state.fields.open.len())
            .finish_non_exhaustive()
    }
}

/// The rewriting state, apart from what it needs to read (so both can be borrowed).
#[derive(Debug)]
struct State {
    api: ApiKind,
    fields: Fields,
    /// OpenAI chat: the last chunk read, the model for chunks written at `[DONE]`.
    last_chunk: Option<Value>,
    /// The stream's line end and whether it names its events, for events written at the
    /// end.
    frame: Frame,
}

/// The open text fields, by the choice, output item or block they belong to first, so that
/// the fields of one group are a range; and how many of them hold text back. A stream may
/// open thousands of choices or blocks and end them one by one: ending a group, and asking
/// whether anything is held, cost no more than the fields involved.
#[derive(Debug, Default)]
struct Fields {
    open: BTreeMap<(u64, FieldKey), FieldStream>,
    holding: usize,
}

/// Which open fields an event ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// Every field.
    All,
    /// The fields of one choice, output item or block.
    Group(u64),
    /// One field.
    Field(FieldKey),
}

impl Fields {
    /// Takes `fragment` of the field `key`; with `ends`, the field ends with it. Returns the
    /// restored text now safe to emit.
    fn push(
        &mut self,
        key: FieldKey,
        fragment: &str,
        ends: bool,
        originals: Originals<'_>,
    ) -> Result<String, WireError> {
        let slot = (key.group(), key);
        let mode = slot.1.mode();
        let field = self
            .open
            .entry(slot.clone())
            .or_insert_with(|| FieldStream::new(mode));
        let was_holding = field.is_holding();
        let mut restored = field.push(fragment, originals)?;
        let holding = if ends {
            restored.push_str(&field.finish(originals)?);
            self.open.remove(&slot);
            false
        } else {
            field.is_holding()
        };
        match (was_holding, holding) {
            (false, true) => self.holding += 1,
            (true, false) => self.holding = self.holding.saturating_sub(1),
            _ => {}
        }
        Ok(restored)
    }

    /// Removes the fields `ending` names, in key order (grouped by choice, item or block).
    fn take(&mut self, ending: &Ending) -> Vec<(FieldKey, FieldStream)> {
        let keys: Vec<(u64, FieldKey)> = match ending {
            Ending::All => self.open.keys().cloned().collect(),
            Ending::Group(group) => self
                .open
                .range((*group, FieldKey::LEAST)..)
                .take_while(|((g, _), _)| g == group)
                .map(|(slot, _)| slot.clone())
                .collect(),
            Ending::Field(key) => vec![(key.group(), key.clone())],
        };
        let mut taken = Vec::with_capacity(keys.len());
        for slot in keys {
            if let Some(field) = self.open.remove(&slot) {
                if field.is_holding() {
                    self.holding = self.holding.saturating_sub(1);
                }
                taken.push((slot.1, field));
            }
        }
        taken
    }

    fn holding(&self) -> bool {
        self.holding > 0
    }
}

/// How written events look: their line end, and whether they carry an `event:` line.
#[derive(Debug, Clone, Copy)]
struct Frame {
    eol: &'static [u8],
    named: bool,
}

impl SseRestorer {
    /// A restorer for a stream of `api`, with `tenant`'s vault entries (token → entry) and
    /// keys.
    pub fn new(
        api: ApiKind,
        tenant: String,
        vault: Arc<HashMap<String, VaultItem>>,
        keys: Arc<KeyRing>,
    ) -> Self {
        SseRestorer {
            api,
            tenant,
            entities: entity_types(&vault),
            vault,
            keys,
            splitter: Splitter::default(),
            state: State {
                api,
                fields: Fields::default(),
                last_chunk: None,
                frame: Frame {
                    eol: b"\n",
                    named: api != ApiKind::OpenAiChat,
                },
            },
        }
    }

    /// Takes the next chunk of the upstream's bytes; returns the bytes to send on (the
    /// events it completes, restored). An incomplete event waits for the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Bytes, WireError> {
        if self.vault.is_empty() {
            return Ok(Bytes::copy_from_slice(chunk));
        }
        let originals = Originals {
            tenant: &self.tenant,
            vault: &self.vault,
            entities: &self.entities,
            keys: &self.keys,
        };
        let mut out = Vec::with_capacity(chunk.len());
        for block in self.splitter.push(chunk) {
            self.state.process(block, originals, &mut out)?;
        }
        Ok(Bytes::from(out))
    }

    /// Ends the stream: returns an unterminated last event, and any text still held back,
    /// written as delta events.
    pub fn finish(&mut self) -> Result<Bytes, WireError> {
        if self.vault.is_empty() {
            return Ok(Bytes::new());
        }
        let originals = Originals {
            tenant: &self.tenant,
            vault: &self.vault,
            entities: &self.entities,
            keys: &self.keys,
        };
        let mut out = Vec::new();
        if let Some(block) = self.splitter.finish() {
            self.state.process(block, originals, &mut out)?;
        }
        if self.state.holding() {
            terminate(&mut out, self.state.frame.eol);
            let frame = self.state.frame;
            self.state
                .flush(&Ending::All, None, originals, frame, &mut out)?;
        }
        Ok(Bytes::from(out))
    }

    /// Whether bytes of an incomplete event are buffered.
    pub fn has_pending(&self) -> bool {
        !self.splitter.is_empty()
    }
}

impl State {
    fn holding(&self) -> bool {
        self.fields.holding()
    }

    /// Writes one block, restored, to `out`, preceded by any held text the block's event
    /// ends.
    fn process(
        &mut self,
        block: RawBlock,
        originals: Originals<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let Some(event) = &block.event else {
            out.extend_from_slice(&block.bytes);
            return Ok(());
        };
        let frame = Frame {
            eol: line_end(&block.bytes).unwrap_or(self.frame.eol),
            named: event.event.is_some(),
        };
        self.frame = frame;
        if event.is_done() {
            self.flush(&Ending::All, None, originals, frame, out)?;
            out.extend_from_slice(&block.bytes);
            return Ok(());
        }
        // Nothing held and no placeholder possible: the event goes on untouched.
        if !self.holding() && !may_hold_placeholder(&event.data) {
            out.extend_from_slice(&block.bytes);
            return Ok(());
        }
        let Ok(mut data) = serde_json::from_str::<Value>(&event.data) else {
            out.extend_from_slice(&block.bytes);
            return Ok(());
        };
        let changed = match self.api {
            ApiKind::OpenAiChat => self.chat(&mut data, originals, frame, out)?,
            ApiKind::OpenAiResponses => self.responses(&mut data, originals, frame, out)?,
            ApiKind::AnthropicMessages => self.anthropic(&mut data, originals, frame, out)?,
        };
        if changed {
            out.extend_from_slice(&replace_data(&block.bytes, &data.to_string()));
        } else {
            out.extend_from_slice(&block.bytes);
        }
        Ok(())
    }

    /// Restores the string in `slot` through the field `key`; when `ends` is set, the
    /// field ends with this fragment and everything it held goes in too. Returns whether
    /// the string changed.
    fn rewrite(
        &mut self,
        slot: Option<&mut Value>,
        key: FieldKey,
        ends: bool,
        originals: Originals<'_>,
    ) -> Result<bool, WireError> {
        let Some(Value::String(text)) = slot else {
            return Ok(false);
        };
        let restored = self.fields.push(key, text, ends, originals)?;
        if restored == *text {
            return Ok(false);
        }
        *text = restored;
        Ok(true)
    }

    /// Ends the fields `ending` names and writes what they held as delta events, modelled
    /// on `current` (the event being processed) where there is one.
    fn flush(
        &mut self,
        ending: &Ending,
        current: Option<&Value>,
        originals: Originals<'_>,
        frame: Frame,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let mut held: Vec<(FieldKey, String)> = Vec::new();
        for (key, mut field) in self.fields.take(ending) {
            let text = field.finish(originals)?;
            if !text.is_empty() {
                held.push((key, text));
            }
        }
        if held.is_empty() {
            return Ok(());
        }
        match self.api {
            ApiKind::OpenAiChat => {
                // One chunk per choice; `held` is in order of choice.
                let template = current.or(self.last_chunk.as_ref()).map(chunk_template);
                for of_choice in held.chunk_by(|a, b| a.0.group() == b.0.group()) {
                    let choice = of_choice[0].0.group();
                    let chunk = chat_flush_chunk(template.as_ref(), choice, of_choice);
                    write_event(out, None, &chunk.to_string(), frame.eol);
                }
            }
            ApiKind::OpenAiResponses => {
                for (key, text) in &held {
                    if let Some((name, event)) = responses_flush_event(key, text, current) {
                        let name = frame.named.then_some(name);
                        write_event(out, name, &event.to_string(), frame.eol);
                    }
                }
            }
            ApiKind::AnthropicMessages => {
                for (key, text) in &held {
                    if let Some((name, event)) = anthropic_flush_event(key, text) {
                        let name = frame.named.then_some(name);
                        write_event(out, name, &event.to_string(), frame.eol);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The members of a chat chunk that a chunk of held text repeats: all but its choices, which
/// can be many.
fn chunk_template(chunk: &Value) -> Value {
    match chunk {
        Value::Object(members) => Value::Object(
            members
                .iter()
                .filter(|(name, _)| name.as_str() != "choices")
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// Whether an event's data may hold a placeholder (also written `\u003c`, as some JSON
/// writers escape `<`).
fn may_hold_placeholder(data: &str) -> bool {
    data.contains('<') || data.contains("\\u003c") || data.contains("\\u003C")
}

/// Restores every string of an event whole (events that end or repeat a text).
fn restore_whole(event: &mut Value, originals: Originals<'_>) -> Result<bool, WireError> {
    Ok(restore_value(event, TextMode::Plain, originals)? > 0)
}
