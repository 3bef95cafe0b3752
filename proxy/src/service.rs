//! The Pingora side: the `ProxyHttp` implementation.
//!
//! A client's request is handled whole in `request_filter` (see ARCHITECTURE.md, "Pingora and
//! request bodies"): the body is read (up to the limit), checked, masked, and then sent to
//! the upstream on a pooled connection from the same task ([`crate::upstream`]); the
//! response is pumped back to the client through a filter that restores placeholders and
//! watches what the client receives. Pingora's own upstream phase is never reached.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header;
use pingora::http::ResponseHeader;
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};

use crate::config::Upstream;
use crate::state::State;
use crate::upstream::Upstreams;
use crate::wire::{ApiFamily, error_body};

/// Per-request context (everything lives in `call::handle`).
#[derive(Debug, Default)]
pub struct Ctx;

/// The proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Shared state.
    pub state: Arc<State>,
    /// Connections to the upstreams.
    pub upstreams: Arc<Upstreams>,
}

fn internal(what: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InternalError, what)
}

/// Resolves an upstream's address without blocking (Pingora's `HttpPeer::new` would resolve
/// synchronously and panic on failure).
pub async fn resolve(upstream: &Upstream) -> std::io::Result<SocketAddr> {
    if let Ok(ip) = upstream.host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, upstream.port));
    }
    tokio::net::lookup_host((upstream.host.as_str(), upstream.port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other("the name resolves to no address"))
}

/// The status and message a client gets when the upstream fails with `kind` before
/// answering.
pub fn upstream_failure(kind: &ErrorType) -> (u16, &'static str) {
    match kind {
        ErrorType::ConnectTimedout => (504, "the upstream did not accept the connection in time"),
        ErrorType::ReadTimedout => (504, "the upstream did not answer in time"),
        ErrorType::HTTPStatus(code) if *code >= 400 => (*code, "the upstream failed"),
        _ => (502, "the upstream could not be reached or failed"),
    }
}

/// Writes a complete response.
pub async fn respond(
    session: &mut Session,
    status: u16,
    headers: &[(&'static str, String)],
    content_type: &str,
    body: Bytes,
) -> Result<()> {
    let mut response = ResponseHeader::build(status, Some(headers.len() + 2))?;
    response.insert_header(header::CONTENT_TYPE, content_type)?;
    response.insert_header(header::CONTENT_LENGTH, body.len())?;
    for (name, value) in headers {
        response.insert_header(*name, value.as_str())?;
    }
    session
        .write_response_header(Box::new(response), false)
        .await?;
    session.write_response_body(Some(body), true).await
}

/// Writes an error in the API's own JSON format; `code` is the proxy's machine-readable
/// reason (OpenAI's `code`).
pub async fn respond_error(
    session: &mut Session,
    family: ApiFamily,
    status: u16,
    code: &str,
    message: &str,
    headers: &[(&'static str, String)],
) -> Result<()> {
    let body = error_body(family, status, code, message);
    respond(session, status, headers, "application/json", body).await
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx
    }

    async fn request_filter(&self, session: &mut Session, _ctx: &mut Ctx) -> Result<bool> {
        crate::call::handle(&self.state, &self.upstreams, session).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        // `request_filter` answers every request, so Pingora never asks for a peer.
        Err(internal("the proxy answers every request itself"))
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, error: &Error) -> bool {
        // Already logged, without request content, where it happened.
        *error.etype() == ErrorType::Custom(crate::call::REPLY_CUT)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, _ctx: &mut Ctx) -> FailToProxy {
        // Every response is written by `call::handle`; this is a failure to even read the
        // request, or one `call::handle` returned after the response began.
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::Custom(crate::call::REPLY_CUT) => 0,
            _ => 400,
        };
        if code > 0 && session.response_written().is_none() {
            let _ = session.respond_error(code).await;
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }
}
