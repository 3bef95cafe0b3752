//! The console's pages.

use std::sync::Arc;
use std::time::Instant;

use askama::Template;
use atdp_schema::{AuditEvent, Table, audit_from_batch};
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, NaiveDate};
use deltalake::datafusion::prelude::{col, lit};
use serde::Deserialize;

use super::{COOKIE, Console};
use crate::access::Auditor;
use crate::catalog::{Catalog, rows};
use crate::error::{Error, Result};
use crate::reveal::RevealRequest;
use crate::search::{Page, Search};
use crate::trail::{SYSTEM_TENANT, event, record_refusal, redact};
use crate::trajectory::TrajectoryView;
use crate::verify::VerifyReport;

const STATUSES: [&str; 4] = ["ok", "upstream_error", "interrupted", "denied"];

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

/// What every page shows in its frame.
struct Frame {
    who: Option<String>,
    versions: String,
    started: Instant,
}

impl Frame {
    fn new(auditor: Option<&Auditor>, catalog: Option<&Catalog>) -> Frame {
        Frame {
            who: auditor.map(|a| {
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
        }
    }

    fn elapsed_ms(&self) -> String {
        format!("{:.1}", self.started.elapsed().as_secs_f64() * 1e3)
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    problem: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct SearchForm {
    tenant: String,
    agent: String,
    since: String,
    until: String,
    trajectory: String,
    model: String,
    status: String,
    entity: String,
    reward_min: String,
    reward_max: String,
    text: String,
    page: String,
}

#[derive(Template)]
#[template(path = "search.html")]
struct SearchPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    tenants: &'a [String],
    statuses: &'a [&'a str],
    form: &'a SearchForm,
    problem: Option<String>,
    page: Option<Page>,
    prev_link: Option<String>,
    next_link: Option<String>,
}

#[derive(Template)]
#[template(path = "trajectory.html")]
struct TrajectoryPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    view: &'a TrajectoryView,
}

#[derive(Template)]
#[template(path = "reveal.html")]
struct RevealPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    trajectory: String,
    tenant: String,
    token: String,
    problem: Option<String>,
    revealed: Option<String>,
    entity: String,
    event_id: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    report: &'a VerifyReport,
    events: Vec<AuditEvent>,
    prev_link: Option<String>,
    next_link: Option<String>,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
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
    let page = ErrorPage {
        who: frame.who.clone(),
        versions: frame.versions.clone(),
        elapsed_ms: frame.elapsed_ms(),
        title: title.to_owned(),
        message,
    };
    html(status, page.render())
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The logged-in auditor, if the request carries a live session.
fn require(console: &Console, headers: &HeaderMap) -> Option<Auditor> {
    session_id(headers).and_then(|id| console.auditor(&id))
}

fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

/// The logged-in auditor, the lake as of now, and the page frame; or the response to send
/// instead (the login page, or an error page when the lake cannot be read).
async fn signed_in(
    console: &Console,
    headers: &HeaderMap,
) -> std::result::Result<(Auditor, Arc<Catalog>, Frame), Box<Response>> {
    let Some(auditor) = require(console, headers) else {
        return Err(Box::new(to_login()));
    };
    match console.catalog().await {
        Ok(catalog) => {
            let frame = Frame::new(Some(&auditor), Some(&catalog));
            Ok((auditor, catalog, frame))
        }
        Err(e) => Err(Box::new(failure(&e, &Frame::new(Some(&auditor), None)))),
    }
}

pub(crate) async fn home(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    match require(&console, &headers) {
        Some(_) => Redirect::to("/search").into_response(),
        None => to_login(),
    }
}

pub(crate) async fn login_form() -> Response {
    let frame = Frame::new(None, None);
    html(
        StatusCode::OK,
        LoginPage {
            who: None,
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            problem: None,
        }
        .render(),
    )
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    key: String,
}

pub(crate) async fn login(
    State(console): State<Arc<Console>>,
    Form(form): Form<LoginForm>,
) -> Response {
    let frame = Frame::new(None, None);
    let auditor = Auditor::from_key(&console.policy.access, &form.key);
    let mut record = event(
        "login",
        &auditor
            .as_ref()
            .map_or_else(|| "unknown".to_owned(), Auditor::actor),
        SYSTEM_TENANT,
    );
    record.decision = Some(if auditor.is_some() { "allow" } else { "deny" }.to_owned());
    if let Err(e) = console.trail.record(record).await {
        return failure(&e, &frame);
    }
    let Some(auditor) = auditor else {
        return html(
            StatusCode::UNAUTHORIZED,
            LoginPage {
                who: None,
                versions: frame.versions.clone(),
                elapsed_ms: frame.elapsed_ms(),
                problem: Some("This key is not an auditor key.".to_owned()),
            }
            .render(),
        );
    };
    let session = console.login(&auditor);
    let secure = if console.config.secure_cookie {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict{secure}");
    let mut response = Redirect::to("/search").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

pub(crate) async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Some(id) = session_id(&headers) {
        console.logout(&id);
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("atdp_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}

fn text(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn day_start(value: &str, what: &str) -> Result<Option<i64>> {
    let Some(value) = text(value) else {
        return Ok(None);
    };
    let day = NaiveDate::parse_from_str(&value, "%Y-%m-%d")
        .map_err(|_| Error::Invalid(format!("{what}: expected a day as YYYY-MM-DD")))?;
    Ok(day
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_micros()))
}

fn number(value: &str, what: &str) -> Result<Option<f64>> {
    text(value)
        .map(|v| {
            v.parse::<f64>()
                .map_err(|_| Error::Invalid(format!("{what}: expected a number")))
        })
        .transpose()
}

impl SearchForm {
    fn page(&self) -> Result<usize> {
        text(&self.page).map_or(Ok(0), |p| {
            p.parse::<usize>()
                .ok()
                .filter(|p| *p <= 100_000)
                .ok_or_else(|| Error::Invalid("page: expected a page number".into()))
        })
    }

    fn to_search(&self, page_size: usize) -> Result<Search> {
        const DAY: i64 = 86_400_000_000;
        Ok(Search {
            tenant: text(&self.tenant),
            agent: text(&self.agent),
            since: day_start(&self.since, "from")?,
            until: day_start(&self.until, "to")?.map(|t| t + DAY),
            trajectory: text(&self.trajectory),
            model: text(&self.model),
            status: text(&self.status),
            entity: text(&self.entity),
            reward_min: number(&self.reward_min, "reward at least")?,
            reward_max: number(&self.reward_max, "reward at most")?,
            text: text(&self.text),
            offset: self.page()? * page_size,
            limit: page_size,
        })
    }

    /// This search's URL at another page.
    fn link(&self, page: usize) -> String {
        let pairs = [
            ("tenant", &self.tenant),
            ("agent", &self.agent),
            ("since", &self.since),
            ("until", &self.until),
            ("trajectory", &self.trajectory),
            ("model", &self.model),
            ("status", &self.status),
            ("entity", &self.entity),
            ("reward_min", &self.reward_min),
            ("reward_max", &self.reward_max),
            ("text", &self.text),
        ];
        let mut query: Vec<String> = pairs
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        query.push(format!("page={page}"));
        format!("/search?{}", query.join("&"))
    }
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What a search records in the audit trail: its filters, with personal data in the free
/// text replaced by its entity type (an auditor may type a customer's e-mail address).
fn search_detail(console: &Console, search: &Search, results: usize) -> String {
    let mut filters = serde_json::to_value(search).unwrap_or_default();
    if let (Some(text), Some(object)) = (&search.text, filters.as_object_mut()) {
        object.insert(
            "text".into(),
            serde_json::Value::String(redact(&console.policy.scanner, text)),
        );
    }
    serde_json::json!({ "filters": filters, "results": results }).to_string()
}

pub(crate) async fn search(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(form): Query<SearchForm>,
) -> Response {
    let (auditor, catalog, frame) = match signed_in(&console, &headers).await {
        Ok(session) => session,
        Err(response) => return *response,
    };
    let page_size = console.config.page_size;
    let searched = async {
        let search = form.to_search(page_size)?;
        let tenants = auditor.scope(search.tenant.as_deref())?;
        let mut page = crate::search::search(&catalog, &tenants, &search).await?;
        page.hits
            .retain(|h| auditor.may_read(&console.policy.access, &h.trajectory_id, &h.tenant_id));
        let tenant = match tenants.as_slice() {
            [one] => one.clone(),
            _ => SYSTEM_TENANT.to_owned(),
        };
        let mut record = event("query", &auditor.actor(), &tenant);
        record.decision = Some("allow".into());
        record.detail_json = Some(search_detail(&console, &search, page.hits.len()));
        console.trail.record(record).await?;
        Ok::<Page, Error>(page)
    };
    // A search with no filter at all is the landing page: it shows the newest steps.
    let (page, problem, status) = match searched.await {
        Ok(page) => (Some(page), None, StatusCode::OK),
        Err(e @ (Error::Invalid(_) | Error::Denied(_))) => {
            let status = if matches!(e, Error::Denied(_)) {
                StatusCode::FORBIDDEN
            } else {
                StatusCode::BAD_REQUEST
            };
            (None, Some(e.to_string()), status)
        }
        Err(e) => return failure(&e, &frame),
    };
    let current = form.page().unwrap_or(0);
    let prev_link = (current > 0).then(|| form.link(current - 1));
    let next_link = page
        .as_ref()
        .filter(|p| p.more)
        .map(|_| form.link(current + 1));
    html(
        status,
        SearchPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            tenants: &auditor.tenants,
            statuses: &STATUSES,
            form: &form,
            problem,
            page,
            prev_link,
            next_link,
        }
        .render(),
    )
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct TenantHint {
    tenant: String,
}

pub(crate) async fn trajectory(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(hint): Query<TenantHint>,
) -> Response {
    let (auditor, catalog, frame) = match signed_in(&console, &headers).await {
        Ok(session) => session,
        Err(response) => return *response,
    };
    let tenant = text(&hint.tenant);
    let loaded = crate::trajectory::load(
        &catalog,
        &console.policy.access,
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
            view: &view,
        }
        .render(),
    )
}

pub(crate) async fn export(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(hint): Query<TenantHint>,
) -> Response {
    let Some(auditor) = require(&console, &headers) else {
        return to_login();
    };
    let frame = Frame::new(Some(&auditor), None);
    let exported = async {
        let catalog = console.catalog().await?;
        let tenant = text(&hint.tenant);
        crate::export::trajectory_bundle(
            &catalog,
            &console.policy.access,
            &console.trail,
            &auditor,
            &id,
            tenant.as_deref(),
        )
        .await
    };
    match exported.await {
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

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct RevealForm {
    trajectory: String,
    tenant: String,
    token: String,
    reason: String,
}

fn reveal_page(frame: &Frame, form: &RevealForm) -> RevealPage {
    RevealPage {
        who: frame.who.clone(),
        versions: frame.versions.clone(),
        elapsed_ms: frame.elapsed_ms(),
        trajectory: form.trajectory.clone(),
        tenant: form.tenant.clone(),
        token: form.token.clone(),
        problem: None,
        revealed: None,
        entity: String::new(),
        event_id: String::new(),
    }
}

pub(crate) async fn reveal_form(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(form): Query<RevealForm>,
) -> Response {
    let Some(auditor) = require(&console, &headers) else {
        return to_login();
    };
    let frame = Frame::new(Some(&auditor), None);
    html(StatusCode::OK, reveal_page(&frame, &form).render())
}

pub(crate) async fn reveal(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<RevealForm>,
) -> Response {
    let (auditor, catalog, frame) = match signed_in(&console, &headers).await {
        Ok(session) => session,
        Err(response) => return *response,
    };
    let tenant = text(&form.tenant);
    let revealed = crate::reveal::reveal(
        &catalog,
        &console.policy,
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

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct AuditForm {
    page: String,
}

async fn audit_events(
    catalog: &Catalog,
    auditor: &Auditor,
    offset: usize,
    limit: usize,
) -> Result<(Vec<AuditEvent>, bool)> {
    // The auditor's tenants' events, its own, and system-wide policy changes; not other
    // auditors' logins and cross-tenant searches.
    let tenants: Vec<_> = auditor.tenants.iter().map(|t| lit(t.clone())).collect();
    let visible = col("tenant_id")
        .in_list(tenants, false)
        .or(col("actor").eq(lit(auditor.actor())))
        .or(col("tenant_id")
            .eq(lit(SYSTEM_TENANT))
            .and(col("kind").in_list(vec![lit("policy_reload"), lit("key_rotation")], false)));
    let mut events = rows(
        catalog
            .frame(Table::Audit)
            .await?
            .filter(visible)
            .and_then(|f| {
                f.sort(vec![
                    col("occurred_at").sort(false, false),
                    col("chain_seq").sort(false, false),
                ])?
                .limit(offset, Some(limit + 1))
            }),
        audit_from_batch,
    )
    .await?;
    let more = events.len() > limit;
    events.truncate(limit);
    Ok((events, more))
}

pub(crate) async fn audit(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(form): Query<AuditForm>,
) -> Response {
    let (auditor, catalog, frame) = match signed_in(&console, &headers).await {
        Ok(session) => session,
        Err(response) => return *response,
    };
    let page = text(&form.page)
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(0)
        .min(100_000);
    let size = console.config.page_size;
    let loaded = async {
        let report = console.verification(&catalog).await?;
        let (events, more) = audit_events(&catalog, &auditor, page * size, size).await?;
        Ok::<_, Error>((report, events, more))
    };
    let (report, events, more) = match loaded.await {
        Ok(found) => found,
        Err(e) => return failure(&e, &frame),
    };
    html(
        StatusCode::OK,
        AuditPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            report: &report,
            events,
            prev_link: (page > 0).then(|| format!("/audit?page={}", page - 1)),
            next_link: more.then(|| format!("/audit?page={}", page + 1)),
        }
        .render(),
    )
}
