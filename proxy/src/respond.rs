//! Writing the responses the proxy gives itself: complete bodies, errors in the API's own
//! JSON format, and refusals from the table in [`crate::refusal`].

use bytes::Bytes;
use http::header;
use pingora::Result;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::metrics::Metrics;
use crate::refusal::Refusal;
use crate::wire::{ApiFamily, error_body};

/// Writes a complete response.
pub async fn respond(
    session: &mut Session,
    status: u16,
    headers: &[(&'static str, String)],
    content_type: &str,
    body: Bytes,
) -> Result<()> {
    let mut response = ResponseHeader::build(status, Some(headers.len() + 2))?;
    response.insert_header(header::CONTENT_TYPE, content_type)?;
    response.insert_header(header::CONTENT_LENGTH, body.len())?;
    for (name, value) in headers {
        response.insert_header(*name, value.as_str())?;
    }
    session
        .write_response_header(Box::new(response), false)
        .await?;
    session.write_response_body(Some(body), true).await
}

/// Writes an error in the API's own JSON format; `code` is the proxy's machine-readable
/// reason (OpenAI's `code`).
pub async fn respond_error(
    session: &mut Session,
    family: ApiFamily,
    status: u16,
    code: &str,
    message: &str,
    headers: &[(&'static str, String)],
) -> Result<()> {
    let body = error_body(family, status, code, message);
    respond(session, status, headers, "application/json", body).await
}

/// Writes a refusal and counts it under `api`.
pub async fn refuse(
    metrics: &Metrics,
    session: &mut Session,
    family: ApiFamily,
    api: &str,
    refusal: &Refusal,
) -> Result<()> {
    let status = refusal.status();
    metrics.request(api, status);
    metrics.denied(refusal.code());
    let headers: Vec<(&'static str, String)> = refusal
        .retry_after()
        .map(|s| vec![("retry-after", s.to_string())])
        .unwrap_or_default();
    if matches!(
        refusal,
        Refusal::RequestTooLarge { .. } | Refusal::BodyTimeout { .. } | Refusal::ShuttingDown
    ) {
        // The rest of the body (if any) is not read: the connection cannot be reused.
        session.set_keepalive(None);
    }
    respond_error(
        session,
        family,
        status,
        refusal.code(),
        &refusal.message(),
        &headers,
    )
    .await
}
