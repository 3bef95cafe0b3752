//! Reveal with a reason: `GET /reveal?trajectory=…&tenant=…&token=…` shows the reason form
//! for one token (no value, no event); the form posts to the same URL with the reason, and
//! `POST /reveal` asks Cedar, records the reveal and only then shows the value. What is
//! revealed is named by the URL's query (see `links.rs`); the body carries only the reason
//! and the form token.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::{Frame, failure, html, posted, session, text, to_login};
use crate::error::Error;
use crate::reason::MIN_REASON_VISIBLE;
use crate::reveal::RevealRequest;
use crate::web::Console;
use crate::web::links;
use crate::web::render::filters;
use crate::web::throttle::client_key;

#[derive(Template)]
#[template(path = "reveal.html")]
struct RevealPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    trajectory: String,
    token: String,
    /// Where the reason form posts (this page's own URL).
    target: String,
    /// The trajectory's first page.
    back: String,
    min_reason: usize,
    problem: Option<String>,
    revealed: Option<String>,
    entity: String,
    event_id: String,
}

/// What to reveal: a token seen in a trajectory.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct RevealTarget {
    trajectory: String,
    tenant: String,
    token: String,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct ReasonForm {
    reason: String,
    csrf: String,
}

fn reveal_page(frame: &Frame, target: &RevealTarget) -> RevealPage {
    RevealPage {
        who: frame.who.clone(),
        versions: frame.versions.clone(),
        elapsed_ms: frame.elapsed_ms(),
        csrf: frame.csrf.clone(),
        trajectory: target.trajectory.clone(),
        token: target.token.clone(),
        target: links::reveal(&target.trajectory, &target.tenant, &target.token),
        back: links::trajectory_page(&target.trajectory, &target.tenant, 0),
        min_reason: MIN_REASON_VISIBLE,
        problem: None,
        revealed: None,
        entity: String::new(),
        event_id: String::new(),
    }
}

pub(crate) async fn form(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(target): Query<RevealTarget>,
) -> Response {
    let Some((session, auditor)) = session(&console, &headers) else {
        return to_login();
    };
    let frame = Frame::new(Some((&auditor, &session)), None, &console);
    html(StatusCode::OK, reveal_page(&frame, &target).render())
}

pub(crate) async fn reveal(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(target): Query<RevealTarget>,
    Form(form): Form<ReasonForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "reveal").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let tenant = text(&target.tenant);
    let revealed = crate::reveal::reveal(
        &catalog,
        &console.policy(),
        &console.config.keys,
        &console.trail,
        &auditor,
        &RevealRequest {
            trajectory_id: &target.trajectory,
            tenant: tenant.as_deref(),
            token: &target.token,
            reason: &form.reason,
        },
    )
    .await;
    // Whatever the outcome, an event may have been written: the audit page must show it.
    console.refresh().await;
    let mut page = reveal_page(&frame, &target);
    match revealed {
        Ok(r) => {
            page.revealed = Some(r.value);
            page.entity = r.entity;
            page.event_id = r.event_id;
            html(StatusCode::OK, page.render())
        }
        Err(e @ Error::Invalid(_)) => {
            page.problem = Some(e.to_string());
            html(StatusCode::BAD_REQUEST, page.render())
        }
        Err(e) => failure(&e, &frame),
    }
}
