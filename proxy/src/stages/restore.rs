//! Restore: every part of the upstream's response (header, body chunks, end) passes through
//! [`Pump::filter`] on its way to the client. It adds the `x-atdp-*` headers, restores
//! placeholders (in whole JSON replies and inside SSE streams), strips what the proxy asked
//! for on its own account, and keeps what the client was sent, so the step is
//! recorded from the bytes the client actually received. A streamed chunk is read for the
//! record only once it has been written ([`Pump::sent`]), so parsing its events does not
//! hold that chunk back, and a chunk whose write failed is not recorded.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use atdp_policies::{KeyRing, VaultItem};
use bytes::Bytes;
use http::header;
use pingora::protocols::http::HttpTask;
use pingora::{Error, ErrorType, Result};

use crate::stages::record::{StepEnd, StepStart};
use crate::wire::{
    Added, ApiKind, SseParser, SseRestorer, SseStripper, StreamAssembler, parse_response,
    restore_json,
};

/// Most bytes of a non-streamed reply held (to rewrite it) or kept for the record.
const MAX_RECORDED: usize = 32 << 20;
/// Most bytes of a streamed reply fed to the record. Streams are far larger on the wire than
/// the text they carry (a 2 MiB reply in small deltas is about 80 MB of events), and only
/// the assembled text is kept, so this bounds the work rather than the memory.
const MAX_RECORDED_STREAM: usize = 1 << 30;

/// State of one response on its way to the client.
pub struct Pump {
    api: ApiKind,
    step_id: String,
    trajectory_id: String,
    tenant: String,
    restore: Arc<HashMap<String, VaultItem>>,
    keys: Arc<KeyRing>,
    added: Added,
    recorded: bool,
    /// The upstream's status (0 until the header arrives).
    pub status: u16,
    /// When the header arrived.
    pub header_at: Option<Instant>,
    sse: bool,
    restorer: Option<SseRestorer>,
    stripper: Option<SseStripper>,
    /// A JSON reply (kept to record it; held whole when it must be rewritten).
    json: Vec<u8>,
    /// Whether the JSON reply is being held to be rewritten before it is sent.
    hold_json: bool,
    parser: SseParser,
    assembler: StreamAssembler,
    /// Bytes of the reply fed to the record so far.
    kept: usize,
    /// A streamed chunk (restored, not yet stripped) on its way to the client, fed to the
    /// record by [`Pump::sent`] once written; dropped if the write fails.
    unsent: Option<Bytes>,
    sent_end: bool,
    truncated: bool,
    policy_version: Option<String>,
    /// Whether this upstream may ask for a shadow copy of the call (`x-atdp-shadow`).
    shadow_allowed: bool,
    /// The version the upstream named to answer a copy of the call in shadow.
    shadow: Option<String>,
    /// Why the proxy itself cut the reply (a placeholder that would not restore, a reply
    /// too large to rewrite).
    proxy_failure: Option<&'static str>,
    /// A restored stream as the upstream wrote it (placeholders where the model wrote them),
    /// assembled to tell which placeholders the model glued to other text.
    raw: Option<Box<(SseParser, StreamAssembler)>>,
    /// Bytes of the stream fed to `raw`.
    raw_kept: usize,
    /// The originals the reply had restored glued to other text, with their entity.
    glued: Vec<(String, String)>,
}

/// The reply header by which an internal upstream names the version that is to answer a
/// copy of the call in shadow (`crate::shadow`).
pub const SHADOW_HEADER: &str = "x-atdp-shadow";

/// Whether `name` names a version the way `atdp-serve` does: `<policy>@v<N>`, the policy of
/// letters, digits, `.`, `_` and `-`, at most 128 bytes in all.
pub fn valid_shadow_name(name: &str) -> bool {
    let Some((policy, version)) = name.split_once('@') else {
        return false;
    };
    let number = version.strip_prefix('v').unwrap_or("");
    name.len() <= 128
        && !policy.is_empty()
        && policy
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !number.is_empty()
        && number.len() <= 10
        && number.bytes().all(|b| b.is_ascii_digit())
}

fn filter_error(what: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InternalError, what)
}

const RESTORE_FAILED: &str = "restoring placeholders in the reply failed";

impl Pump {
    /// A pump for one call: `restore` holds the placeholders sent upstream, `added` what the
    /// proxy asked the upstream for on its own account, `recorded` whether the call is
    /// recorded (else the reply says so in `x-atdp-recorded: false`).
    pub fn new(
        api: ApiKind,
        start: &StepStart,
        tenant: String,
        restore: Arc<HashMap<String, VaultItem>>,
        keys: Arc<KeyRing>,
        added: Added,
        recorded: bool,
    ) -> Pump {
        Pump {
            api,
            step_id: start.step_id.clone(),
            trajectory_id: start.trajectory_id.clone(),
            tenant,
            restore,
            keys,
            added,
            recorded,
            status: 0,
            header_at: None,
            sse: false,
            restorer: None,
            stripper: None,
            json: Vec::new(),
            hold_json: false,
            parser: SseParser::new(),
            assembler: StreamAssembler::new(api),
            kept: 0,
            unsent: None,
            sent_end: false,
            truncated: false,
            policy_version: None,
            shadow_allowed: false,
            shadow: None,
            proxy_failure: None,
            raw: None,
            raw_kept: 0,
            glued: Vec::new(),
        }
    }

    /// Lets the upstream ask for a shadow copy of the call (an upstream of internal trust:
    /// `atdp-serve`). The header is taken off every reply either way.
    pub fn allow_shadow(&mut self) {
        self.shadow_allowed = true;
    }

    /// The version the upstream named to answer a copy of the call in shadow, when it may.
    pub fn take_shadow(&mut self) -> Option<String> {
        self.shadow.take()
    }

    /// Feeds the record, up to [`MAX_RECORDED`] bytes.
    fn keep(&mut self, bytes: &[u8]) {
        let limit = if self.sse {
            MAX_RECORDED_STREAM
        } else {
            MAX_RECORDED
        };
        // Once over, stay over: a gap in the recorded bytes would misread the reply.
        if self.truncated || self.kept + bytes.len() > limit {
            self.truncated = true;
            return;
        }
        self.kept += bytes.len();
        if self.sse {
            for event in self.parser.push(bytes) {
                self.assembler.push_event(&event);
            }
        } else {
            self.json.extend_from_slice(bytes);
        }
    }

    fn fail(&mut self, why: &'static str) -> Box<Error> {
        self.proxy_failure = Some(why);
        filter_error(why)
    }

    /// The held JSON reply, restored (that is what is recorded) and stripped (that is what
    /// the client gets).
    fn rewrite_json(&mut self) -> Result<Bytes> {
        let Ok(mut document) = serde_json::from_slice::<serde_json::Value>(&self.json) else {
            // Not JSON (an upstream error page): nothing to rewrite.
            return Ok(Bytes::from(self.json.clone()));
        };
        self.glued = glued_originals(&document, &self.restore, &self.keys, &self.tenant);
        if restore_json(&mut document, &self.tenant, &self.restore, &self.keys).is_err() {
            return Err(self.fail(RESTORE_FAILED));
        }
        let encode = |d: &serde_json::Value| serde_json::to_vec(d);
        let Ok(restored) = encode(&document) else {
            return Err(self.fail("the restored reply could not be encoded"));
        };
        if self.added.strip(&mut document) {
            let Ok(stripped) = encode(&document) else {
                return Err(self.fail("the restored reply could not be encoded"));
            };
            self.json = restored;
            return Ok(Bytes::from(stripped));
        }
        self.json = restored.clone();
        Ok(Bytes::from(restored))
    }

    /// A streamed chunk: restored and stripped, with the end of the stream when `end`; the
    /// restored bytes wait in `unsent` for the record.
    fn stream_chunk(&mut self, bytes: Bytes, end: bool) -> Result<Bytes> {
        if self.raw_kept + bytes.len() > MAX_RECORDED_STREAM {
            // A gap would misread the stream: over the limit, it is read no further.
            self.raw = None;
        }
        if let Some(raw) = self.raw.as_mut() {
            self.raw_kept += bytes.len();
            let (parser, assembler) = &mut **raw;
            for event in parser.push(&bytes) {
                assembler.push_event(&event);
            }
        }
        let restored = match self.restorer.as_mut() {
            Some(restorer) => {
                let Ok(out) = restorer.push(&bytes) else {
                    return Err(self.fail(RESTORE_FAILED));
                };
                let mut out = out.to_vec();
                if end {
                    let Ok(rest) = restorer.finish() else {
                        return Err(self.fail(RESTORE_FAILED));
                    };
                    out.extend_from_slice(&rest);
                }
                Bytes::from(out)
            }
            None => bytes,
        };
        let out = match self.stripper.as_mut() {
            Some(stripper) => {
                let mut out = stripper.push(&restored).to_vec();
                if end {
                    out.extend_from_slice(&stripper.finish());
                }
                Bytes::from(out)
            }
            None => restored.clone(),
        };
        // A chunk is always followed by its write and `sent` (or by the end of the call), so
        // nothing is waiting here; should one be, it is kept first, in order.
        self.sent();
        self.unsent = Some(restored);
        Ok(out)
    }

    /// The last task returned by [`Pump::filter`] was written to the client's connection:
    /// its bytes count as received and are read for the record.
    pub fn sent(&mut self) {
        if let Some(bytes) = self.unsent.take() {
            self.keep(&bytes);
        }
    }

    /// Transforms one task on its way to the client.
    pub fn filter(&mut self, task: HttpTask) -> Result<Option<HttpTask>> {
        match task {
            HttpTask::Header(mut response, end) => {
                self.status = response.status.as_u16();
                self.header_at = Some(Instant::now());
                self.sse = response
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
                self.policy_version = response
                    .headers
                    .get("x-atdp-policy-version")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let shadow = response.remove_header(SHADOW_HEADER);
                self.shadow = shadow
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| self.shadow_allowed && valid_shadow_name(v))
                    .map(str::to_owned);
                response.insert_header("x-atdp-step-id", self.step_id.as_str())?;
                response.insert_header("x-atdp-trajectory-id", self.trajectory_id.as_str())?;
                if !self.recorded {
                    response.insert_header("x-atdp-recorded", "false")?;
                }
                let restoring = !self.restore.is_empty();
                if restoring || self.added.any() {
                    if self.sse {
                        self.restorer = restoring.then(|| {
                            SseRestorer::new(
                                self.api,
                                self.tenant.clone(),
                                self.restore.clone(),
                                self.keys.clone(),
                            )
                        });
                        self.raw = restoring
                            .then(|| Box::new((SseParser::new(), StreamAssembler::new(self.api))));
                        self.stripper = self.added.any().then(|| SseStripper::new(self.added));
                    } else {
                        self.hold_json = true;
                    }
                    // Rewriting changes the length.
                    response.remove_header(&header::CONTENT_LENGTH);
                    response.insert_header(header::TRANSFER_ENCODING, "chunked")?;
                }
                Ok(Some(HttpTask::Header(response, end)))
            }
            HttpTask::Body(Some(bytes), end) if self.hold_json => {
                if self.json.len() + bytes.len() > MAX_RECORDED {
                    return Err(self.fail("the reply is too large to restore"));
                }
                self.json.extend_from_slice(&bytes);
                if !end {
                    return Ok(Some(HttpTask::Body(Some(Bytes::new()), false)));
                }
                self.hold_json = false;
                self.sent_end = true;
                Ok(Some(HttpTask::Body(Some(self.rewrite_json()?), true)))
            }
            HttpTask::Body(Some(bytes), end) => {
                let out = self.stream_chunk(bytes, end)?;
                self.sent_end |= end;
                Ok(Some(HttpTask::Body(Some(out), end)))
            }
            HttpTask::Done if !self.sent_end => {
                self.sent_end = true;
                if self.hold_json {
                    self.hold_json = false;
                    return Ok(Some(HttpTask::Body(Some(self.rewrite_json()?), true)));
                }
                if self.restorer.is_some() || self.stripper.is_some() {
                    let rest = self.stream_chunk(Bytes::new(), true)?;
                    return Ok(Some(HttpTask::Body(Some(rest), true)));
                }
                Ok(Some(HttpTask::Done))
            }
            other => Ok(Some(other)),
        }
    }

    /// How the call ended, given the pipe's failure (whether it came from the upstream side,
    /// and its kind) if any.
    pub fn finish(&mut self, failure: Option<(bool, ErrorType)>) -> StepEnd {
        let response = if self.sse {
            let assembler = std::mem::replace(&mut self.assembler, StreamAssembler::new(self.api));
            Some(assembler.finish())
        } else {
            serde_json::from_slice::<serde_json::Value>(&self.json)
                .ok()
                .map(|document| parse_response(self.api, &document))
        };
        if let Some(raw) = self.raw.take() {
            let (_, assembler) = *raw;
            if let Ok(message) = serde_json::to_value(assembler.finish().message) {
                self.glued = glued_originals(&message, &self.restore, &self.keys, &self.tenant);
            }
        }
        let complete = response.as_ref().is_some_and(|r| r.complete);
        let started = (200..300).contains(&self.status);
        let (status, error) = match (self.proxy_failure, failure) {
            (Some(why), _) => (
                "interrupted",
                Some(format!("the proxy cut the reply: {why}")),
            ),
            // Cut after a successful start by the upstream: the client got part of a reply.
            (None, Some((true, kind))) if started => (
                "interrupted",
                Some(format!("the upstream cut the response ({kind:?})")),
            ),
            (None, Some((true, kind))) => (
                "upstream_error",
                Some(format!("the upstream failed ({kind:?})")),
            ),
            // The client went away, before or during the reply.
            (None, Some((false, kind))) => (
                "interrupted",
                Some(format!("the client went away before the end ({kind:?})")),
            ),
            (None, None) if self.status == 0 => (
                "upstream_error",
                Some("no response from the upstream".to_owned()),
            ),
            (None, None) if !started => (
                "upstream_error",
                Some(format!("upstream answered {}", self.status)),
            ),
            (None, None) if self.truncated => (
                "ok",
                Some("reply over the recording limit; recorded in part".to_owned()),
            ),
            (None, None) if self.sse && !complete => (
                "interrupted",
                Some("the stream ended before its final event".to_owned()),
            ),
            (None, None) => ("ok", None),
        };
        StepEnd {
            status,
            error,
            response: if started { response } else { None },
            policy_version: self.policy_version.clone(),
            restored_glued: std::mem::take(&mut self.glued),
        }
    }
}

/// The originals of the placeholders of `restore` that the strings of `reply` (as the
/// upstream wrote it) hold glued to a letter, a digit, `_` or another placeholder
/// (`report_<PERSON_…>.pdf`), with their entity, once each. Restored there, a name is no word
/// of its own, and the record must still find it (`record::mask_step`). A placeholder that
/// does not open is left out: restoring it fails the reply anyway.
fn glued_originals(
    reply: &serde_json::Value,
    restore: &HashMap<String, VaultItem>,
    keys: &KeyRing,
    tenant: &str,
) -> Vec<(String, String)> {
    // A placeholder is no longer than the longest of the call's: the search for its end
    // stops there, so a text of many `<` costs time linear in its length.
    let longest = restore.keys().map(String::len).max().unwrap_or(0);
    let glues = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    // Another placeholder right before or after glues too (`<PERSON_…><PERSON_…>` restores as
    // `JaneDoe`); a tag does not (`<b><PERSON_…></b>`).
    let token_ends = |before: &str| {
        let from = before.len().saturating_sub(longest);
        before.ends_with('>')
            && before.as_bytes()[from..]
                .iter()
                .rposition(|b| *b == b'<')
                .and_then(|open| before.get(from + open..))
                .is_some_and(|token| restore.contains_key(token))
    };
    let token_starts = |after: &str| {
        after.starts_with('<')
            && after.as_bytes()[..after.len().min(longest)]
                .iter()
                .position(|b| *b == b'>')
                .and_then(|close| after.get(..=close))
                .is_some_and(|token| restore.contains_key(token))
    };
    let mut tokens: HashSet<&str> = HashSet::new();
    let mut pending = vec![reply];
    while let Some(value) = pending.pop() {
        match value {
            serde_json::Value::String(text) => {
                let bytes = text.as_bytes();
                for (open, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'<') {
                    let window = bytes.get(open..bytes.len().min(open + longest));
                    let Some(close) = window
                        .and_then(|w| w.iter().position(|b| *b == b'>'))
                        .map(|at| open + at)
                    else {
                        continue;
                    };
                    // `<` and `>` are ASCII: both ends are character boundaries.
                    let (Some(token), Some(before), Some(after)) = (
                        text.get(open..=close),
                        text.get(..open),
                        text.get(close + 1..),
                    ) else {
                        continue;
                    };
                    if restore.contains_key(token)
                        && (glues(before.chars().next_back())
                            || glues(after.chars().next())
                            || token_ends(before)
                            || token_starts(after))
                    {
                        tokens.insert(token);
                    }
                }
            }
            serde_json::Value::Array(items) => pending.extend(items),
            serde_json::Value::Object(members) => pending.extend(members.values()),
            _ => {}
        }
    }
    let mut found: Vec<(String, String)> = Vec::new();
    for token in tokens {
        if let Some(item) = restore.get(token)
            && let Ok(original) = keys.open(tenant, &item.entity, &item.sealed)
        {
            found.push((original, item.entity.clone()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use pingora::http::ResponseHeader;

    use super::*;

    #[test]
    fn only_a_policy_version_is_a_shadow_name() {
        for good in ["support@v8", "a.b_c-d@v0", "quickstart@v4294967295"] {
            assert!(valid_shadow_name(good), "{good}");
        }
        let long = format!("{}@v1", "p".repeat(126));
        for bad in [
            "support",
            "support@base",
            "support@v",
            "support@8",
            "@v1",
            "sup port@v1",
            "support@v1x",
            "support@v1@v2",
            "support@v12345678901",
            "a/b@v1",
            long.as_str(),
        ] {
            assert!(!valid_shadow_name(bad), "{bad}");
        }
    }

    const FIRST: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    const LAST: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

    fn pump() -> Pump {
        let start = StepStart {
            step_id: "s1".to_owned(),
            trajectory_id: "t1".to_owned(),
            parent_step_id: None,
            turn_index: 0,
            tenant_id: "demo".to_owned(),
            agent_id: "agent".to_owned(),
            started_at: 0,
            api: "openai.chat",
            upstream: "provider".to_owned(),
            upstream_trust: crate::config::Trust::External,
            consent: None,
            model_requested: "gpt-4o".to_owned(),
            tags: BTreeMap::new(),
            sent_masked: Default::default(),
        };
        Pump::new(
            ApiKind::OpenAiChat,
            &start,
            "demo".to_owned(),
            Arc::new(HashMap::new()),
            Arc::new(KeyRing::default()),
            Added::default(),
            true,
        )
    }

    /// Passes the SSE header and `chunks` through the pump, each written (`sent`) when its
    /// flag says so, and returns the bytes the pump let out.
    fn stream(pump: &mut Pump, chunks: &[(&'static [u8], bool)]) -> Vec<u8> {
        let mut header = ResponseHeader::build(200, None).unwrap();
        header
            .insert_header("content-type", "text/event-stream")
            .unwrap();
        pump.filter(HttpTask::Header(Box::new(header), false))
            .unwrap();
        pump.sent();
        let mut out = Vec::new();
        for (i, (chunk, written)) in chunks.iter().enumerate() {
            let end = i + 1 == chunks.len();
            let task = pump
                .filter(HttpTask::Body(Some(Bytes::from_static(chunk)), end))
                .unwrap();
            let Some(HttpTask::Body(Some(bytes), _)) = task else {
                panic!("a body chunk came out as another task");
            };
            out.extend_from_slice(&bytes);
            if *written {
                pump.sent();
            }
        }
        out
    }

    /// A pump for a call that sent `value` (of `entity`) masked: its placeholder, and the pump.
    fn restoring(entity: &str, value: &str) -> (String, Pump) {
        let mut keys = KeyRing::default();
        keys.generate("demo");
        let token = keys.token("demo", entity, value).unwrap();
        let item = VaultItem {
            token: token.clone(),
            entity: entity.to_owned(),
            sealed: keys.seal("demo", entity, value).unwrap(),
        };
        let mut pump = pump();
        pump.restore = Arc::new(HashMap::from([(token.clone(), item)]));
        pump.keys = Arc::new(keys);
        (token, pump)
    }

    fn json_reply(pump: &mut Pump, content: &str) -> (Vec<u8>, StepEnd) {
        let header = ResponseHeader::build(200, None).unwrap();
        pump.filter(HttpTask::Header(Box::new(header), false))
            .unwrap();
        let body = serde_json::json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}]
        });
        let task = pump
            .filter(HttpTask::Body(Some(Bytes::from(body.to_string())), true))
            .unwrap();
        let Some(HttpTask::Body(Some(out), _)) = task else {
            panic!("the reply came out as another task");
        };
        pump.sent();
        (out.to_vec(), pump.finish(None))
    }

    #[test]
    fn the_originals_a_reply_has_restored_glued_to_other_text_are_noted_for_the_record() {
        let glued = vec![("Jane".to_owned(), "PERSON".to_owned())];
        // Whole replies: glued to `_`, to letters, to another placeholder; and apart.
        for (written, noted) in [
            ("report_{}.pdf", true),
            ("x{}", true),
            ("{}{}", true),
            ("see {} now", false),
            ("({})", false),
            ("<b>{}</b>", false),
        ] {
            let (token, mut pump) = restoring("PERSON", "Jane");
            let content = written.replace("{}", &token);
            let (out, end) = json_reply(&mut pump, &content);
            let out = String::from_utf8(out).unwrap();
            assert!(out.contains("Jane") && !out.contains(&token), "{out}");
            let expected = if noted { glued.clone() } else { Vec::new() };
            assert_eq!(end.restored_glued, expected, "{written}");
        }
        // A stream, the placeholder cut across two deltas.
        let (token, mut pump) = restoring("PERSON", "Jane");
        let (head, tail) = token.split_at(5);
        let chunk = |text: &str, finish: Option<&str>| {
            let data = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text},
                                                       "finish_reason": finish}]});
            Bytes::from(format!("data: {data}\n\n"))
        };
        let first = chunk(&format!("report_{head}"), None);
        let last = [
            chunk(&format!("{tail}.pdf"), Some("stop")),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ]
        .concat();
        let first: &'static [u8] = Box::leak(first.to_vec().into_boxed_slice());
        let last: &'static [u8] = Box::leak(last.into_boxed_slice());
        let out = stream(&mut pump, &[(first, true), (last, true)]);
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("Jane") && !out.contains(tail), "{out}");
        let end = pump.finish(None);
        assert_eq!(text(&end).as_deref(), Some("report_Jane.pdf"));
        assert_eq!(end.restored_glued, glued);
    }

    fn text(end: &StepEnd) -> Option<String> {
        end.response.as_ref()?.message.as_ref()?.content.clone()
    }

    #[test]
    fn a_streamed_chunk_is_recorded_once_written_and_not_when_its_write_failed() {
        let mut whole = pump();
        let out = stream(&mut whole, &[(FIRST, true), (LAST, true)]);
        assert_eq!(
            out,
            [FIRST, LAST].concat(),
            "the bytes pass through unchanged"
        );
        let end = whole.finish(None);
        assert_eq!(end.status, "ok");
        assert_eq!(text(&end).as_deref(), Some("Hello"));

        // The client's connection failed while the last chunk was written: the record holds
        // what was written before it, and says the client went away.
        let mut cut = pump();
        stream(&mut cut, &[(FIRST, true), (LAST, false)]);
        let end = cut.finish(Some((false, ErrorType::WriteError)));
        assert_eq!(end.status, "interrupted");
        assert_eq!(text(&end).as_deref(), Some("Hel"));
    }
}
