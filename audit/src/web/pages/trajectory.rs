//! A trajectory as a transcript, and its evidence bundle. Opening one is a read, and a read
//! is evidence: the transcript is shown only in answer to `POST /trajectories/{id}` (the
//! "open" button of a search hit), which records the `read` event first. `GET` of the same
//! URL shows only that button: it looks nothing up and records nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Frame, encode, failure, html, posted, session, text, time, to_login};
use crate::trail::{event, record_refusal};
use crate::trajectory::TrajectoryView;
use crate::web::Console;
use crate::web::throttle::client_key;

#[derive(Template)]
#[template(path = "trajectory.html")]
struct TrajectoryPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    view: &'a TrajectoryView,
}

#[derive(Template)]
#[template(path = "open.html")]
struct OpenPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    trajectory: String,
    tenant: String,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct TenantHint {
    tenant: String,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct TokenForm {
    csrf: String,
}

/// The "open" button for a trajectory; nothing is looked up or recorded.
pub(crate) async fn open(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(hint): Query<TenantHint>,
) -> Response {
    let Some((session, auditor)) = session(&console, &headers) else {
        return to_login();
    };
    let frame = Frame::new(Some((&auditor, &session)), None, &console);
    html(
        StatusCode::OK,
        OpenPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            trajectory: id,
            tenant: hint.tenant,
        }
        .render(),
    )
}

/// Records the read, then shows the transcript.
pub(crate) async fn read(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(hint): Query<TenantHint>,
    Form(form): Form<TokenForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "open").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let tenant = text(&hint.tenant);
    let loaded = crate::trajectory::load(
        &catalog,
        &console.policy().access,
        &auditor,
        &id,
        tenant.as_deref(),
    )
    .await;
    let (steps, rewards) = match loaded {
        Ok(found) => found,
        Err(e) => {
            record_refusal(&console.trail, "read", &auditor.actor(), &id, &e).await;
            return failure(&e, &frame);
        }
    };
    let view = crate::trajectory::view(
        &id,
        steps,
        rewards,
        catalog
            .versions()
            .iter()
            .map(|(t, v)| (t.name().to_owned(), *v))
            .collect(),
    );
    let mut record = event("read", &auditor.actor(), &view.tenant_id);
    record.subject = Some(id.clone());
    record.decision = Some("allow".into());
    if let Err(e) = console.trail.record(record).await {
        return failure(&e, &frame);
    }
    html(
        StatusCode::OK,
        TrajectoryPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            view: &view,
        }
        .render(),
    )
}

/// Makes, records and downloads the trajectory's evidence bundle.
pub(crate) async fn export(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(hint): Query<TenantHint>,
    Form(form): Form<TokenForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "export").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let tenant = text(&hint.tenant);
    let exported = crate::export::trajectory_bundle(
        &catalog,
        &console.policy().access,
        &console.trail,
        &auditor,
        &id,
        tenant.as_deref(),
    )
    .await;
    match exported {
        Ok(bundle) => {
            console.refresh().await;
            let body = serde_json::to_string_pretty(&bundle).unwrap_or_default();
            let disposition = format!("attachment; filename=\"evidence-{}.json\"", encode(&id));
            let mut response = (StatusCode::OK, body).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Ok(value) = HeaderValue::from_str(&disposition) {
                headers.insert(header::CONTENT_DISPOSITION, value);
            }
            response
        }
        Err(e) => failure(&e, &frame),
    }
}
