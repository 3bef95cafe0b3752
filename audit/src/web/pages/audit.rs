//! The audit trail page: the chain status of the `audit` table and the events this auditor
//! may see, newest first. Reading it records nothing.

use std::sync::Arc;

use askama::Template;
use atdp_schema::{AuditEvent, Table, audit_from_batch};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use deltalake::datafusion::prelude::col;
use serde::Deserialize;

use super::{failure, html, short, signed_in, text, time, version};
use crate::auditor::Auditor;
use crate::catalog::{Catalog, rows};
use crate::error::{Error, Result};
use crate::verify::VerifyReport;
use crate::web::Console;
use crate::web::render::filters;

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage<'a> {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    report: &'a VerifyReport,
    events: Vec<AuditEvent>,
    prev_link: Option<String>,
    next_link: Option<String>,
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
    let visible = auditor.visible_rows(Table::Audit);
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
            csrf: frame.csrf.clone(),
            report: &report,
            events,
            prev_link: (page > 0).then(|| format!("/audit?page={}", page - 1)),
            next_link: more.then(|| format!("/audit?page={}", page + 1)),
        }
        .render(),
    )
}
