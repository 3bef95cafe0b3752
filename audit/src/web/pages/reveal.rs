//! Reveal with a reason: `GET /reveal` shows the reason form for one token (no value, no
//! event); `POST /reveal` asks Cedar, records the reveal and only then shows the value.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::{Frame, failure, html, posted, session, text, to_login};
use crate::error::Error;
use crate::reveal::RevealRequest;
use crate::web::Console;
use crate::web::throttle::client_key;

#[derive(Template)]
#[template(path = "reveal.html")]
struct RevealPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    trajectory: String,
    tenant: String,
    token: String,
    problem: Option<String>,
    revealed: Option<String>,
    entity: String,
    event_id: String,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct RevealForm {
    trajectory: String,
    tenant: String,
    token: String,
    reason: String,
    csrf: String,
}

fn reveal_page(frame: &Frame, form: &RevealForm) -> RevealPage {
    RevealPage {
        who: frame.who.clone(),
        versions: frame.versions.clone(),
        elapsed_ms: frame.elapsed_ms(),
        csrf: frame.csrf.clone(),
        trajectory: form.trajectory.clone(),
        tenant: form.tenant.clone(),
        token: form.token.clone(),
        problem: None,
        revealed: None,
        entity: String::new(),
        event_id: String::new(),
    }
}

pub(crate) async fn form(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(form): Query<RevealForm>,
) -> Response {
    let Some((session, auditor)) = session(&console, &headers) else {
        return to_login();
    };
    let frame = Frame::new(Some((&auditor, &session)), None, &console);
    html(StatusCode::OK, reveal_page(&frame, &form).render())
}

pub(crate) async fn reveal(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<RevealForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "reveal").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let tenant = text(&form.tenant);
    let revealed = crate::reveal::reveal(
        &catalog,
        &console.policy(),
        &console.config.keys,
        &console.trail,
        &auditor,
        &RevealRequest {
            trajectory_id: &form.trajectory,
            tenant: tenant.as_deref(),
            token: &form.token,
            reason: &form.reason,
        },
    )
    .await;
    // Whatever the outcome, an event may have been written: the audit page must show it.
    console.refresh().await;
    let mut page = reveal_page(&frame, &form);
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
