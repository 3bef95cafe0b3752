//! The Pingora side: the `ProxyHttp` implementation, and which handler a request goes to.
//!
//! A client's request is handled whole in `request_filter` (see `docs/architecture.md`,
//! "Pingora and request bodies"): a model call runs the stages of [`crate::call`] and goes to
//! the upstream on a pooled connection from the same task ([`crate::upstream`]). Pingora's
//! own upstream phase is never reached.

use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};

use crate::refusal::Refusal;
use crate::respond::refuse;
use crate::state::{InFlightCall, State};
use crate::upstream::Upstreams;
use crate::wire::{ApiFamily, ApiKind};

/// Per-request context (everything lives in the handlers).
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

/// Sends a request to its handler by path and method.
async fn dispatch(
    state: &Arc<State>,
    upstreams: &Arc<Upstreams>,
    session: &mut Session,
) -> Result<()> {
    let _in_flight = InFlightCall::enter(&state.in_flight);
    let path = session.req_header().uri.path().to_owned();
    let method = session.req_header().method.clone();
    let family = ApiFamily::from_path(&path);
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return refuse(
            &state.metrics,
            session,
            family,
            "other",
            &Refusal::ShuttingDown,
        )
        .await;
    }
    if let Some(api) = ApiKind::from_path(&path) {
        if method != Method::POST {
            let refusal = Refusal::MethodNotAllowed { path };
            return refuse(&state.metrics, session, family, api.name(), &refusal).await;
        }
        return crate::call::call(state, upstreams, session, api).await;
    }
    match (method.as_str(), path.as_str()) {
        ("GET", "/v1/models") => crate::models::models(state, session).await,
        ("POST", "/v1/atdp/rewards") => crate::reward_api::handle(state, session).await,
        _ => {
            let refusal = Refusal::UnknownPath {
                request: format!("{method} {path}"),
            };
            refuse(&state.metrics, session, family, "other", &refusal).await
        }
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx
    }

    async fn request_filter(&self, session: &mut Session, _ctx: &mut Ctx) -> Result<bool> {
        dispatch(&self.state, &self.upstreams, session).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        // `request_filter` answers every request, so Pingora never asks for a peer.
        Err(Error::explain(
            ErrorType::InternalError,
            "the proxy answers every request itself",
        ))
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, error: &Error) -> bool {
        // Already logged, without request content, where it happened.
        *error.etype() == ErrorType::Custom(crate::call::REPLY_CUT)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, _ctx: &mut Ctx) -> FailToProxy {
        // Every response is written by the handlers; this is a failure to even read the
        // request, or one a handler returned after the response began.
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
