//! The console's pages, one module per page, and what they share: the frame every page
//! shows, error pages, and the two ways in: [`signed_in`] for pages that only show (a `GET`
//! writes nothing), [`posted`] for forms that record or change something.

pub(crate) mod audit;
pub(crate) mod login;
pub(crate) mod metrics;
pub(crate) mod reveal;
pub(crate) mod runs;
pub(crate) mod search;
pub(crate) mod text;
pub(crate) mod trajectory;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::DateTime;

use super::Console;
use super::csrf::same_origin;
use super::evidence::FORGED;
use super::sessions::Cookies;
use crate::auditor::Auditor;
use crate::catalog::Catalog;
use crate::error::Error;
use crate::web::render::filters;

/// A UTC time for pages.
pub(crate) fn time(micros: &i64) -> String {
    let micros = *micros;
    DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| micros.to_string())
}

/// The first 20 characters of an id.
pub(crate) fn short(id: &str) -> &str {
    id.get(..20).unwrap_or(id)
}

/// A table version for pages.
pub(crate) fn version(v: &Option<u64>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

/// A posted form that carries only its CSRF token (reading a transcript, exporting
/// evidence, reading a message's text).
#[derive(Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct TokenForm {
    csrf: String,
}

impl TokenForm {
    /// The form's token.
    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// What every page shows in its frame, and the token its forms carry.
pub(crate) struct Frame {
    who: Option<String>,
    versions: String,
    started: Instant,
    /// The session's form token (empty before login).
    csrf: String,
}

impl Frame {
    fn new(
        signed: Option<(&Auditor, &str)>,
        catalog: Option<&Catalog>,
        console: &Console,
    ) -> Frame {
        Frame {
            who: signed.map(|(a, _)| {
                format!(
                    "auditor {} · tenants {}",
                    a.short_id(),
                    a.tenants.join(", ")
                )
            }),
            versions: catalog.map_or_else(String::new, |c| {
                c.versions()
                    .iter()
                    .map(|(t, v)| format!("{t}={}", version(v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            started: Instant::now(),
            csrf: signed.map_or_else(String::new, |(_, session)| {
                console.tokens.session_token(session)
            }),
        }
    }

    fn elapsed_ms(&self) -> String {
        format!("{:.1}", self.started.elapsed().as_secs_f64() * 1e3)
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    title: String,
    message: String,
}

fn html(status: StatusCode, rendered: askama::Result<String>) -> Response {
    match rendered {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "A page failed to render.");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render",
            )
                .into_response()
        }
    }
}

fn error_page(status: StatusCode, frame: &Frame, title: &str, message: String) -> Response {
    let page = ErrorPage {
        who: frame.who.clone(),
        versions: frame.versions.clone(),
        elapsed_ms: frame.elapsed_ms(),
        csrf: frame.csrf.clone(),
        title: title.to_owned(),
        message,
    };
    html(status, page.render())
}

/// The error page for `error`. Messages of input, policy and lookup errors are shown;
/// others are logged (without query text, which may hold what a user typed) and summarised.
fn failure(error: &Error, frame: &Frame) -> Response {
    let (status, title, message) = match error {
        Error::Invalid(m) => (StatusCode::BAD_REQUEST, "Invalid request", m.clone()),
        Error::Denied(_) => (StatusCode::FORBIDDEN, "Denied", error.to_string()),
        Error::NotFound(_) => (StatusCode::NOT_FOUND, "Not found", error.to_string()),
        Error::Trail(_) => {
            tracing::error!(error = %error, "The audit trail could not record an action.");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "Not done",
                "The audit trail could not record this action, so it was not done. Try again; if it persists, the lake or the local disk needs attention.".to_owned(),
            )
        }
        Error::Query(_) => {
            tracing::error!("A console query failed.");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Query failed",
                "The query over the lake failed; the server log says more.".to_owned(),
            )
        }
        other => {
            tracing::error!(error = %other, "A console request failed.");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Error",
                "The lake or the policy could not be read; the server log says more.".to_owned(),
            )
        }
    };
    error_page(status, frame, title, message)
}

/// The 403 page of a form whose token or origin is wrong: nothing was done.
fn refused(frame: &Frame) -> Response {
    error_page(
        StatusCode::FORBIDDEN,
        frame,
        "Refused",
        "This form did not come from a page of this console (its security token or its origin is missing or wrong), so nothing was done. Open the page again from the console and resubmit.".to_owned(),
    )
}

/// The session id and auditor of the request, if it carries a live session.
fn session(console: &Console, headers: &HeaderMap) -> Option<(String, Auditor)> {
    let cookies = Cookies {
        secure: console.config.secure_cookie,
    };
    let id = Cookies::get(headers, cookies.session_name())?;
    let auditor = console.sessions.auditor(&console.policy().access, &id)?;
    Some((id, auditor))
}

fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

type Signed = (Auditor, Arc<Catalog>, Frame);

/// The logged-in auditor, the lake as of now, and the page frame; or the response to send
/// instead (the login page, or an error page when the lake cannot be read).
async fn signed_in(console: &Console, headers: &HeaderMap) -> Result<Signed, Box<Response>> {
    let Some((id, auditor)) = session(console, headers) else {
        return Err(Box::new(to_login()));
    };
    with_catalog(console, auditor, &id).await
}

async fn with_catalog(
    console: &Console,
    auditor: Auditor,
    session: &str,
) -> Result<Signed, Box<Response>> {
    match console.catalog().await {
        Ok(catalog) => {
            let frame = Frame::new(Some((&auditor, session)), Some(&catalog), console);
            Ok((auditor, catalog, frame))
        }
        Err(e) => Err(Box::new(failure(
            &e,
            &Frame::new(Some((&auditor, session)), None, console),
        ))),
    }
}

/// The session of a form `POST`: it must carry a live session, come from this console's
/// origin, and carry the session's token. A failed check is counted as evidence (`form`
/// names which form) and answered 403; without a session the answer is the login page.
fn checked(
    console: &Console,
    headers: &HeaderMap,
    client: IpAddr,
    token: &str,
    form: &'static str,
) -> Result<(String, Auditor), Box<Response>> {
    let Some((id, auditor)) = session(console, headers) else {
        return Err(Box::new(to_login()));
    };
    if same_origin(headers, console.config.secure_cookie) && console.tokens.session_ok(&id, token) {
        return Ok((id, auditor));
    }
    console.note(FORGED, client, &auditor.actor(), form);
    let frame = Frame::new(Some((&auditor, &id)), None, console);
    Err(Box::new(refused(&frame)))
}

/// [`checked`], then the lake as of now and the page frame.
async fn posted(
    console: &Console,
    headers: &HeaderMap,
    client: IpAddr,
    token: &str,
    form: &'static str,
) -> Result<Signed, Box<Response>> {
    let (id, auditor) = checked(console, headers, client, token, form)?;
    with_catalog(console, auditor, &id).await
}

fn text(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

pub(crate) async fn home(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    match session(&console, &headers) {
        Some(_) => Redirect::to("/search").into_response(),
        None => to_login(),
    }
}
