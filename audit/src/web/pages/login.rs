//! Logging in and out. The login form carries a token bound to a nonce cookie (there is no
//! session yet), tries are throttled per client address and per auditor before and after
//! the key is looked up, and failed or throttled tries are counted, not written one by one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use askama::Template;
use axum::extract::{ConnectInfo, Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{Frame, checked, failure, html, to_login};
use crate::auditor::Auditor;
use crate::trail::{SYSTEM_TENANT, event};
use crate::web::csrf::{LOGIN_FORM_TTL_SECS, Tokens, same_origin};
use crate::web::evidence::{FORGED, LOGIN};
use crate::web::sessions::Cookies;
use crate::web::throttle::{client_key, retry_after_secs};
use crate::web::{Console, Throttled};

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    problem: Option<String>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn cookies(console: &Console) -> Cookies {
    Cookies {
        secure: console.config.secure_cookie,
    }
}

fn set_cookie(response: &mut Response, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// The login page, its form bound to the request's nonce cookie while that has at least
/// half its life left, else to a new nonce set as the cookie.
fn page(
    console: &Console,
    headers: &HeaderMap,
    status: StatusCode,
    problem: Option<&str>,
) -> Response {
    let cookies = cookies(console);
    let now = unix_now();
    let kept = Cookies::get(headers, cookies.login_name())
        .filter(|n| Tokens::nonce_fresh(n, now + LOGIN_FORM_TTL_SECS / 2));
    let (nonce, new) = match kept {
        Some(nonce) => (nonce, false),
        None => (Tokens::login_nonce(now), true),
    };
    let frame = Frame::new(None, None, console);
    let mut response = html(
        status,
        LoginPage {
            who: None,
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: console.tokens.login_token(&nonce),
            problem: problem.map(str::to_owned),
        }
        .render(),
    );
    if new {
        let cookie = cookies.set(cookies.login_name(), &nonce, Some(LOGIN_FORM_TTL_SECS));
        set_cookie(&mut response, &cookie);
    }
    response
}

pub(crate) async fn form(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    page(&console, &headers, StatusCode::OK, None)
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct LoginForm {
    key: String,
    csrf: String,
}

/// 429 with `Retry-After`; the key was not looked at.
fn throttled(console: &Console, headers: &HeaderMap, Throttled(wait): Throttled) -> Response {
    let secs = retry_after_secs(wait);
    let mut response = page(
        console,
        headers,
        StatusCode::TOO_MANY_REQUESTS,
        Some(&format!(
            "Too many login attempts. Try again in {secs} seconds."
        )),
    );
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

pub(crate) async fn login(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let client = client_key(peer.ip());
    let cookies = cookies(&console);
    let genuine = same_origin(&headers, console.config.secure_cookie)
        && Cookies::get(&headers, cookies.login_name())
            .is_some_and(|nonce| console.tokens.login_ok(&nonce, &form.csrf, unix_now()));
    if !genuine {
        console.note(FORGED, client, "unknown", "login");
        return page(
            &console,
            &headers,
            StatusCode::FORBIDDEN,
            Some(
                "This login form has expired or did not come from this console. Enter the key again.",
            ),
        );
    }
    if let Err(wait) = console.throttle_client(client) {
        console.note(LOGIN, client, "unknown", "throttled");
        return throttled(&console, &headers, wait);
    }
    let Some(auditor) = Auditor::from_key(&console.policy().access, &form.key) else {
        console.note(LOGIN, client, "unknown", "wrong_key");
        return page(
            &console,
            &headers,
            StatusCode::UNAUTHORIZED,
            Some("This key is not an auditor key."),
        );
    };
    if let Err(wait) = console.throttle_auditor(&auditor.id) {
        console.note(LOGIN, client, &auditor.actor(), "throttled");
        return throttled(&console, &headers, wait);
    }
    // The login ends this browser's earlier session and the auditor's other sessions; the
    // event is written first, so a login the trail cannot record ends nothing.
    let presented = Cookies::get(&headers, cookies.session_name());
    let mut record = event("login", &auditor.actor(), SYSTEM_TENANT);
    record.decision = Some("allow".into());
    record.detail_json = Some(
        serde_json::json!({
            "client": client.to_string(),
            "ends_sessions": console.sessions.ended_by(&auditor, presented.as_deref()),
        })
        .to_string(),
    );
    if let Err(e) = console.trail.record(record).await {
        return failure(&e, &Frame::new(None, None, &console));
    }
    let (session, _) = console.sessions.login(&auditor, presented.as_deref());
    let mut response = Redirect::to("/search").into_response();
    set_cookie(
        &mut response,
        &cookies.set(cookies.session_name(), &session, None),
    );
    set_cookie(
        &mut response,
        &cookies.set(cookies.login_name(), "", Some(0)),
    );
    response
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct LogoutForm {
    csrf: String,
}

pub(crate) async fn logout(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    let (id, _) = match checked(
        &console,
        &headers,
        client_key(peer.ip()),
        &form.csrf,
        "logout",
    ) {
        Ok(session) => session,
        Err(response) => return *response,
    };
    console.sessions.logout(&id);
    let cookies = cookies(&console);
    let mut response = to_login();
    set_cookie(
        &mut response,
        &cookies.set(cookies.session_name(), "", Some(0)),
    );
    response
}
