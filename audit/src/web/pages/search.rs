//! The search page. `GET /search` shows the form (filled from the URL, so a search can be
//! bookmarked) and runs nothing; a search runs on `POST /search`, which records it.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::NaiveDate;
use serde::Deserialize;

use super::{failure, html, posted, signed_in, text, time};
use crate::error::{Error, Result};
use crate::search::{Hit, Page, Search, Searcher};
use crate::web::Console;
use crate::web::links;
use crate::web::render::filters;
use crate::web::throttle::client_key;

const STATUSES: [&str; 4] = ["ok", "upstream_error", "interrupted", "denied"];

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
    csrf: String,
}

#[derive(Template)]
#[template(path = "search.html")]
struct SearchPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    tenants: &'a [String],
    statuses: &'a [&'a str],
    form: &'a SearchForm,
    problem: Option<String>,
    page: Option<Page>,
    /// The filters, for the "newer" and "older" forms.
    filters: Vec<(&'static str, String)>,
    prev_page: Option<usize>,
    next_page: Option<usize>,
}

/// The "open" button of a hit: the page of its trajectory that shows its step.
fn open_url(hit: &Hit) -> String {
    format!(
        "{}#hit",
        links::trajectory_step(&hit.trajectory_id, &hit.tenant_id, &hit.step_id)
    )
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

    /// The filters that are set, as form fields.
    fn filters(&self) -> Vec<(&'static str, String)> {
        [
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
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, v.clone()))
        .collect()
    }
}

/// What a search records in the audit trail: its filters, with personal data in the free
/// text replaced by its entity type (an auditor may type a customer's e-mail address).
/// The search form, filled from the URL; nothing is searched or recorded.
pub(crate) async fn form(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(form): Query<SearchForm>,
) -> Response {
    let (auditor, _, frame) = match signed_in(&console, &headers).await {
        Ok(session) => session,
        Err(response) => return *response,
    };
    html(
        StatusCode::OK,
        SearchPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            tenants: &auditor.tenants,
            statuses: &STATUSES,
            form: &form,
            problem: None,
            page: None,
            filters: Vec::new(),
            prev_page: None,
            next_page: None,
        }
        .render(),
    )
}

/// Runs and records a search. With no filter at all it shows the newest steps.
pub(crate) async fn search(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<SearchForm>,
) -> Response {
    let client = client_key(peer.ip());
    let (auditor, catalog, frame) =
        match posted(&console, &headers, client, &form.csrf, "search").await {
            Ok(session) => session,
            Err(response) => return *response,
        };
    let page_size = console.config.page_size;
    let searched = async {
        let search = form.to_search(page_size)?;
        crate::search::audited_search(
            &catalog,
            &console.policy(),
            &console.trail,
            Searcher::Auditor(&auditor),
            &search,
        )
        .await
    };
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
    let prev_page = current.checked_sub(1);
    let next_page = page.as_ref().filter(|p| p.more).map(|_| current + 1);
    html(
        status,
        SearchPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            tenants: &auditor.tenants,
            statuses: &STATUSES,
            form: &form,
            problem,
            page,
            filters: form.filters(),
            prev_page,
            next_page,
        }
        .render(),
    )
}
