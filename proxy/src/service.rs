//! The Pingora side: the `ProxyHttp` implementation.
//!
//! A client's request is handled whole in `request_filter` (see ARCHITECTURE.md, "Pingora and
//! request bodies"): the body is read (up to the limit), checked, masked, and then handed as
//! a new body to a Pingora subrequest, whose response is pumped back to the client through a
//! filter that restores placeholders and watches what the client receives. The subrequest
//! runs the same hooks with its own context ([`Dispatch`]), which routes it to the upstream.

use std::any::Any;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};

use crate::config::Upstream;
use crate::state::State;
use crate::wire::{ApiFamily, ApiKind, error_body};

/// What a subrequest needs to reach its upstream (passed through the subrequest's user ctx).
#[derive(Debug)]
pub struct Dispatch {
    /// The upstream.
    pub upstream: Upstream,
    /// Its resolved address.
    pub address: SocketAddr,
    /// The API (for the path and the error format).
    pub api: ApiKind,
    /// Length of the body the subrequest sends.
    pub body_len: usize,
    /// Path and query to send (with the upstream's prefix).
    pub path: String,
}

/// Per-request context.
#[derive(Debug, Default)]
pub struct Ctx {
    /// Set in a subrequest.
    pub dispatch: Option<Arc<Dispatch>>,
}

/// The proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Shared state.
    pub state: Arc<State>,
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
/// answering (one mapping for the subrequest and for the parent, which may see the failure
/// first).
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
        Ctx::default()
    }

    fn allow_spawning_subrequest(&self, session: &Session, _ctx: &Ctx) -> bool {
        session.subrequest_ctx.is_none()
    }

    async fn early_request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        let dispatch = session
            .subrequest_ctx
            .as_ref()
            .and_then(|sub| sub.user_ctx())
            .and_then(|user| {
                let any: &(dyn Any + Send + Sync) = &**user;
                any.downcast_ref::<Arc<Dispatch>>()
            })
            .cloned();
        if let Some(dispatch) = dispatch {
            // The subrequest starts from the client's original header: give it the length
            // of the body it really carries.
            let request = session.req_header_mut();
            request.remove_header(&header::TRANSFER_ENCODING);
            request.insert_header(header::CONTENT_LENGTH, dispatch.body_len)?;
            ctx.dispatch = Some(dispatch);
        }
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if ctx.dispatch.is_some() {
            return Ok(false);
        }
        crate::call::handle(&self.state, session).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let dispatch = ctx
            .dispatch
            .as_ref()
            .ok_or_else(|| internal("no upstream chosen for this request"))?;
        let upstream = &dispatch.upstream;
        let sni = if upstream.tls {
            upstream.host.clone()
        } else {
            String::new()
        };
        let mut peer = HttpPeer::new(dispatch.address, upstream.tls, sni);
        peer.options.connection_timeout = Some(upstream.connect_timeout);
        peer.options.read_timeout = Some(upstream.read_timeout);
        peer.options.idle_timeout = Some(std::time::Duration::from_secs(60));
        if upstream.tls {
            peer.options.set_http_version(2, 1);
        }
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        request: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let Some(dispatch) = ctx.dispatch.as_ref() else {
            return Ok(());
        };
        let upstream = &dispatch.upstream;
        let uri: http::Uri = dispatch
            .path
            .parse()
            .map_err(|_| internal("the upstream path is not a valid URI"))?;
        request.set_uri(uri);
        let default_port = if upstream.tls { 443 } else { 80 };
        let host = if upstream.port == default_port {
            upstream.host.clone()
        } else {
            format!("{}:{}", upstream.host, upstream.port)
        };
        request.insert_header(header::HOST, host)?;
        // The agent's key is ours, not the provider's; the provider's is injected below.
        for name in [
            "authorization",
            "x-api-key",
            "accept-encoding",
            "expect",
            "x-atdp-trajectory-id",
            "x-atdp-session-id",
            "proxy-authorization",
        ] {
            request.remove_header(name);
        }
        if let Some(key) = &upstream.api_key {
            match dispatch.api.family() {
                ApiFamily::Anthropic => request.insert_header("x-api-key", key.0.as_str())?,
                ApiFamily::OpenAi => {
                    request.insert_header(header::AUTHORIZATION, format!("Bearer {}", key.0))?
                }
            }
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let Some(dispatch) = ctx.dispatch.as_ref() else {
            // Outside a subrequest every response is written by `call::handle`; this is a
            // failure to even read the request.
            let code = match e.etype() {
                ErrorType::HTTPStatus(code) => *code,
                _ => 400,
            };
            if code > 0 {
                let _ = session.respond_error(code).await;
            }
            return FailToProxy {
                error_code: code,
                can_reuse_downstream: false,
            };
        };
        let (status, message) = upstream_failure(e.etype());
        tracing::warn!(upstream = %dispatch.upstream.name, error_kind = ?e.etype(), status, "Upstream call failed.");
        let family = dispatch.api.family();
        let body = error_body(family, status, "upstream_failed", message);
        let _ = respond(session, status, &[], "application/json", body).await;
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }
}
