//! A trajectory as a transcript, a page at a time, and its evidence bundle. Opening one is a
//! read, and a read is evidence: a page of the transcript is shown only in answer to
//! `POST /trajectory?id=…` (the "open" button of a search hit, the page buttons), which
//! records the `read` event first. `GET` of the same URL shows only that button: it looks
//! nothing up and records nothing. The trajectory's id and tenant travel as query values
//! (see `links.rs`), never as a path segment.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Frame, TokenForm, failure, html, posted, session, text, time, to_login};
use crate::error::Error;
use crate::segments::Segment;
use crate::trail::{event, record_refusal};
use crate::transcript::{CallView, MessageView, StepView, Transcript, TranscriptPage};
use crate::web::Console;
use crate::web::links;
use crate::web::render::{filters, role_class};
use crate::web::throttle::client_key;

#[derive(Template)]
#[template(path = "trajectory.html")]
struct TrajectoryPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    view: &'a TranscriptPage<'a>,
    export: String,
    prev_page: Option<String>,
    next_page: Option<String>,
}

impl TrajectoryPage<'_> {
    /// The form target that sends message `m`'s full content.
    fn text_url(&self, step: &StepView<'_>, m: &MessageView<'_>) -> String {
        links::text(
            self.view.trajectory_id,
            self.view.tenant_id,
            &step.step.step_id,
            &m.at.param(),
            None,
        )
    }

    /// The form target that sends the full arguments of `call` of message `m`.
    fn call_url(&self, step: &StepView<'_>, m: &MessageView<'_>, call: &CallView<'_>) -> String {
        links::text(
            self.view.trajectory_id,
            self.view.tenant_id,
            &step.step.step_id,
            &m.at.param(),
            Some(call.index),
        )
    }

    /// The reveal form of a masked span.
    fn reveal_url(&self, seg: &Segment) -> String {
        links::reveal(self.view.trajectory_id, self.view.tenant_id, &seg.text)
    }
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
    target: String,
}

/// The query of the trajectory URLs: which trajectory, and which page of it (a page number,
/// or the page that shows a step).
#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct Target {
    id: String,
    tenant: String,
    page: String,
    step: String,
}

/// A "KiB"/"MiB" size for buttons.
fn size(bytes: &usize) -> String {
    let bytes = *bytes as f64;
    if bytes >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    } else {
        format!("{:.1} KiB", bytes / 1024.0)
    }
}

/// The "Open" button for a trajectory; nothing is looked up or recorded.
pub(crate) async fn open(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(target): Query<Target>,
) -> Response {
    let Some((session, auditor)) = session(&console, &headers) else {
        return to_login();
    };
    let frame = Frame::new(Some((&auditor, &session)), None, &console);
    let link = if target.step.is_empty() {
        links::trajectory_page(&target.id, &target.tenant, 0)
    } else {
        links::trajectory_step(&target.id, &target.tenant, &target.step)
    };
    html(
        StatusCode::OK,
        OpenPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            trajectory: target.id,
            tenant: target.tenant,
            target: link,
        }
        .render(),
    )
}

/// Records the read, then shows one page of the transcript.
pub(crate) async fn read(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(target): Query<Target>,
    Form(form): Form<TokenForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "open").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let id = target.id.as_str();
    let asked_page = match text(&target.page).map(|p| p.parse::<usize>()).transpose() {
        Ok(page) => page,
        Err(_) => {
            return failure(
                &Error::Invalid("page: expected a page number".into()),
                &frame,
            );
        }
    };
    let loaded = crate::trajectory::load(
        &catalog,
        &console.policy().access,
        &auditor,
        id,
        text(&target.tenant).as_deref(),
    )
    .await;
    let (steps, rewards) = match loaded {
        Ok(found) => found,
        Err(e) => {
            record_refusal(&console.trail, "read", &auditor.actor(), id, &e).await;
            return failure(&e, &frame);
        }
    };
    let transcript = Transcript::new(id, &steps, &rewards);
    let hit = text(&target.step);
    let number = asked_page
        .or_else(|| hit.as_deref().and_then(|h| transcript.page_of(h)))
        .unwrap_or(0);
    let Some(view) = transcript.page(number, hit.as_deref()) else {
        return failure(
            &Error::NotFound(format!(
                "page {} of this trajectory (it has {})",
                number + 1,
                transcript.pages()
            )),
            &frame,
        );
    };
    let mut record = event("read", &auditor.actor(), view.tenant_id);
    record.subject = Some(id.to_owned());
    record.decision = Some("allow".into());
    record.detail_json = Some(serde_json::json!({ "page": number }).to_string());
    if let Err(e) = console.trail.record(record).await {
        return failure(&e, &frame);
    }
    let tenant = view.tenant_id;
    html(
        StatusCode::OK,
        TrajectoryPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            export: links::export(id, tenant),
            prev_page: number
                .checked_sub(1)
                .map(|p| links::trajectory_page(id, tenant, p)),
            next_page: (number + 1 < view.pages)
                .then(|| links::trajectory_page(id, tenant, number + 1)),
            view: &view,
        }
        .render(),
    )
}

/// A file name for an evidence bundle: the id's letters, digits, `-` and `_`, others as `_`.
fn bundle_name(id: &str) -> String {
    let stem: String = id
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("evidence-{stem}.json")
}

/// Makes, records and downloads the trajectory's evidence bundle.
pub(crate) async fn export(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(target): Query<Target>,
    Form(form): Form<TokenForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "export").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let exported = crate::export::trajectory_bundle(
        &catalog,
        &console.policy().access,
        &console.trail,
        &auditor,
        &target.id,
        text(&target.tenant).as_deref(),
    )
    .await;
    match exported {
        Ok(bundle) => {
            console.refresh().await;
            let body = serde_json::to_string_pretty(&bundle).unwrap_or_default();
            let disposition = format!("attachment; filename=\"{}\"", bundle_name(&target.id));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_names_keep_only_safe_characters() {
        assert_eq!(bundle_name("../logout"), "evidence-___logout.json");
        assert_eq!(bundle_name("a\"b;c\r\n"), "evidence-a_b_c__.json");
    }
}
