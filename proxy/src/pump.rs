//! The response path: every task the subrequest produces passes through [`Pump::filter`] on
//! its way to the client. It adds the `x-atdp-*` headers, restores placeholders (in whole
//! JSON replies and inside SSE streams), and keeps what the client was sent, so the step is
//! recorded from the bytes the client actually received.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use http::header;
use pingora::protocols::http::HttpTask;
use pingora::{Error, ErrorType, Result};
use policies::{KeyRing, VaultItem};

use crate::record::{StepEnd, StepStart, build_step, mask_step, vault_entries};
use crate::state::State;
use crate::wire::{
    ApiKind, RequestView, ResponseView, SseParser, SseRestorer, StreamAssembler, parse_response,
    restore_json,
};

/// Most reply bytes kept for the record; a longer non-streamed reply is recorded without
/// its message (and says so in `error`).
const MAX_RECORDED: usize = 32 << 20;

/// State of one response on its way to the client.
pub struct Pump {
    api: ApiKind,
    step_id: String,
    trajectory_id: String,
    tenant: String,
    restore: Arc<HashMap<String, VaultItem>>,
    keys: Arc<KeyRing>,
    /// The upstream's status (0 until the header arrives).
    pub status: u16,
    /// When the header arrived.
    pub header_at: Option<Instant>,
    sse: bool,
    restorer: Option<SseRestorer>,
    /// A JSON reply being collected (to restore it whole, and to record it).
    json: Vec<u8>,
    /// Whether the JSON reply must be restored before it is sent.
    hold_json: bool,
    parser: SseParser,
    assembler: StreamAssembler,
    sent_end: bool,
    truncated: bool,
    policy_version: Option<String>,
    failed: Option<String>,
}

fn filter_error(what: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InternalError, what)
}

impl Pump {
    /// A pump for one call.
    pub fn new(
        api: ApiKind,
        start: &StepStart,
        tenant: String,
        restore: Arc<HashMap<String, VaultItem>>,
        keys: Arc<KeyRing>,
    ) -> Pump {
        Pump {
            api,
            step_id: start.step_id.clone(),
            trajectory_id: start.trajectory_id.clone(),
            tenant,
            restore,
            keys,
            status: 0,
            header_at: None,
            sse: false,
            restorer: None,
            json: Vec::new(),
            hold_json: false,
            parser: SseParser::new(),
            assembler: StreamAssembler::new(api),
            sent_end: false,
            truncated: false,
            policy_version: None,
            failed: None,
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.sse {
            for event in self.parser.push(bytes) {
                self.assembler.push_event(&event);
            }
        } else if self.json.len() + bytes.len() <= MAX_RECORDED {
            self.json.extend_from_slice(bytes);
        } else {
            self.truncated = true;
        }
    }

    fn restored_json(&mut self) -> Result<Bytes> {
        let body = std::mem::take(&mut self.json);
        let Ok(mut document) = serde_json::from_slice::<serde_json::Value>(&body) else {
            // Not JSON (an upstream error page): nothing to restore.
            self.json = body.clone();
            return Ok(Bytes::from(body));
        };
        restore_json(&mut document, &self.tenant, &self.restore, &self.keys)
            .map_err(|_| filter_error("restoring placeholders in the reply failed"))?;
        let restored = serde_json::to_vec(&document)
            .map_err(|_| filter_error("the restored reply could not be encoded"))?;
        self.json = restored.clone();
        Ok(Bytes::from(restored))
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
                response.insert_header("x-atdp-step-id", self.step_id.as_str())?;
                response.insert_header("x-atdp-trajectory-id", self.trajectory_id.as_str())?;
                if !self.restore.is_empty() {
                    if self.sse {
                        self.restorer = Some(SseRestorer::new(
                            self.api,
                            self.tenant.clone(),
                            self.restore.clone(),
                            self.keys.clone(),
                        ));
                    } else {
                        self.hold_json = true;
                    }
                    // Restoring changes the length.
                    response.remove_header(&header::CONTENT_LENGTH);
                    response.insert_header(header::TRANSFER_ENCODING, "chunked")?;
                }
                Ok(Some(HttpTask::Header(response, end)))
            }
            HttpTask::Body(Some(bytes), end) => {
                let out = if let Some(restorer) = self.restorer.as_mut() {
                    let mut out = restorer
                        .push(&bytes)
                        .map_err(|_| filter_error("restoring placeholders in the stream failed"))?;
                    if end {
                        let rest = restorer.finish().map_err(|_| {
                            filter_error("restoring placeholders in the stream failed")
                        })?;
                        out = [out, rest].concat().into();
                    }
                    out
                } else if self.hold_json {
                    self.json.extend_from_slice(&bytes);
                    if !end {
                        return Ok(Some(HttpTask::Body(Some(Bytes::new()), false)));
                    }
                    self.hold_json = false;
                    let restored = self.restored_json()?;
                    self.sent_end = true;
                    return Ok(Some(HttpTask::Body(Some(restored), true)));
                } else {
                    bytes
                };
                self.keep(&out);
                self.sent_end |= end;
                Ok(Some(HttpTask::Body(Some(out), end)))
            }
            HttpTask::Done if !self.sent_end => {
                self.sent_end = true;
                if self.hold_json {
                    self.hold_json = false;
                    let restored = self.restored_json()?;
                    return Ok(Some(HttpTask::Body(Some(restored), true)));
                }
                if let Some(restorer) = self.restorer.as_mut() {
                    let rest = restorer
                        .finish()
                        .map_err(|_| filter_error("restoring placeholders in the stream failed"))?;
                    self.keep(&rest);
                    return Ok(Some(HttpTask::Body(Some(rest), true)));
                }
                Ok(Some(HttpTask::Done))
            }
            HttpTask::Failed(error) => {
                self.failed = Some(format!("{:?}", error.etype()));
                Ok(Some(HttpTask::Failed(error)))
            }
            other => Ok(Some(other)),
        }
    }

    /// How the call ended, given the pipe's failure (whether it came from the upstream side,
    /// and its kind) if any.
    pub fn finish(&mut self, failure: Option<(bool, ErrorType)>) -> StepEnd {
        let response = if self.sse {
            let assembler = std::mem::replace(&mut self.assembler, StreamAssembler::new(self.api));
            let view = assembler.finish();
            let complete = view.complete;
            Some((view, complete))
        } else {
            serde_json::from_slice::<serde_json::Value>(&self.json)
                .ok()
                .map(|document| (parse_response(self.api, &document), true))
        };
        let (view, complete) = match response {
            Some((view, complete)) => (Some(view), complete),
            None => (None, false),
        };
        let streaming_ok = (200..300).contains(&self.status);
        let (status, error) = match (failure, self.status) {
            // Cut after a successful start, by either side: the client got part of a reply.
            (Some((true, kind)), _) if streaming_ok => (
                "interrupted",
                Some(format!("the upstream cut the response ({kind:?})")),
            ),
            (Some((false, kind)), _) if streaming_ok => (
                "interrupted",
                Some(format!("the client went away before the end ({kind:?})")),
            ),
            (Some((_, kind)), _) => (
                "upstream_error",
                Some(format!("the upstream failed ({kind:?})")),
            ),
            (None, 0) => (
                "upstream_error",
                Some("no response from the upstream".to_owned()),
            ),
            (None, code) if !(200..300).contains(&code) => {
                ("upstream_error", Some(format!("upstream answered {code}")))
            }
            (None, _) if self.sse && !complete => (
                "interrupted",
                Some("the stream ended before its final event".to_owned()),
            ),
            (None, _) if self.truncated => (
                "ok",
                Some("reply over the recording limit; message not recorded".to_owned()),
            ),
            (None, _) => ("ok", None),
        };
        let response = if self.status >= 200 && self.status < 300 {
            view
        } else {
            None
        };
        StepEnd {
            status,
            error: error.or_else(|| self.failed.clone()),
            response: response.map(|r: ResponseView| r),
            policy_version: self.policy_version.clone(),
        }
    }
}

/// Masks the step for storage and hands it (with its vault entries) to the lake writer. A
/// masking failure stores nothing and is counted; it never reaches the client, which already
/// has its response.
pub fn store_step(state: &State, start: &StepStart, request: &RequestView, end: StepEnd) {
    let mut step = build_step(start, request, end);
    let (_, policy) = state.policy.current();
    let keys = state.keys();
    let vault = match mask_step(&mut step, &policy.scanner, &policy.masking.storage, &keys) {
        Ok(vault) => vault,
        Err(error) => {
            state.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(step_id = %start.step_id, error = %error, "Masking the step for storage failed; it is not recorded.");
            return;
        }
    };
    for entry in vault_entries(&start.tenant_id, vault) {
        if let Err(error) = state.writer.append(entry) {
            state.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(step_id = %start.step_id, error = %error, "Could not record a vault entry.");
        }
    }
    if let Err(error) = state.writer.append(step) {
        state.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(step_id = %start.step_id, error = %error, "Could not record the step.");
    }
}
