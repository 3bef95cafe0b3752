//! The full text of one message, or of one tool call's arguments, as `text/plain`:
//! `POST /trajectory/text?id=…&tenant=…&step=…&message=…[&call=…]`. A transcript page shows
//! only the start of a long message (see `transcript.rs`); this is the rest, on demand.
//! It is a read like opening the page: the same form token and origin check, the same
//! tenant and Cedar decision (the trajectory is loaded exactly as for its page), a refused
//! attempt recorded as one, and a `read` event naming the step and message before a byte is
//! sent. The text goes out as it is stored (masked), in chunks, with
//! `X-Content-Type-Options: nosniff` so that no browser takes it for markup.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use super::{TokenForm, failure, posted, text as trimmed};
use crate::error::Error;
use crate::trail::{event, record_refusal};
use crate::transcript::{MessageAt, Transcript};
use crate::web::Console;
use crate::web::throttle::client_key;

/// Bytes per chunk of the response body.
const CHUNK: usize = 64 * 1024;

/// Which text: a message of a step of a trajectory, or one of its tool calls' arguments.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct TextTarget {
    id: String,
    tenant: String,
    step: String,
    message: String,
    call: String,
}

/// Records the read, then sends the text.
pub(crate) async fn text(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(target): Query<TextTarget>,
    Form(form): Form<TokenForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, form.csrf(), "text").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let Some(at) = MessageAt::parse(&target.message) else {
        let e = Error::Invalid("message: expected a message number or `reply`".into());
        return failure(&e, &frame);
    };
    let call = match trimmed(&target.call)
        .map(|c| c.parse::<usize>())
        .transpose()
    {
        Ok(call) => call,
        Err(_) => {
            let e = Error::Invalid("call: expected a tool call number".into());
            return failure(&e, &frame);
        }
    };
    let id = target.id.as_str();
    let loaded = crate::trajectory::load(
        &catalog,
        &console.policy().access,
        &auditor,
        id,
        trimmed(&target.tenant).as_deref(),
    )
    .await;
    let found = loaded.and_then(|(steps, rewards)| {
        let transcript = Transcript::new(id, &steps, &rewards);
        let not_found = || {
            Error::NotFound(format!(
                "message {} of step {} of this trajectory",
                at.param(),
                target.step
            ))
        };
        let (_, step) = transcript.step(&target.step).ok_or_else(not_found)?;
        let message = at.of(step).ok_or_else(not_found)?;
        let text = match call {
            None => message.content.clone().unwrap_or_default(),
            Some(k) => message
                .tool_calls
                .get(k)
                .map(|c| c.arguments.clone())
                .ok_or_else(not_found)?,
        };
        Ok((step.tenant_id.clone(), text))
    });
    let (tenant, text) = match found {
        Ok(found) => found,
        Err(e) => {
            record_refusal(&console.trail, "read", &auditor.actor(), id, &e).await;
            return failure(&e, &frame);
        }
    };
    let mut record = event("read", &auditor.actor(), &tenant);
    record.subject = Some(id.to_owned());
    record.decision = Some("allow".into());
    record.detail_json = Some(
        serde_json::json!({
            "step_id": target.step,
            "message": at.param(),
            "call": call,
            "bytes": text.len(),
        })
        .to_string(),
    );
    if let Err(e) = console.trail.record(record).await {
        return failure(&e, &frame);
    }
    plain_text(text)
}

/// `text` as a `text/plain` response, sent in [`CHUNK`]-byte pieces of one buffer.
fn plain_text(text: String) -> Response {
    let whole = Bytes::from(text);
    let chunks = (0..whole.len())
        .step_by(CHUNK)
        .map(move |at| Ok::<_, Infallible>(whole.slice(at..(at + CHUNK).min(whole.len()))))
        .collect::<Vec<_>>();
    let mut response = (
        StatusCode::OK,
        Body::from_stream(futures::stream::iter(chunks)),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("inline"),
    );
    response
}
