//! Read: the request's framing and body, and one reading of it. JSON only (415), no
//! content encoding (415: the proxy must read what it forwards), no query string but the
//! SDKs' `beta=true` (400: nothing else rides past the proxy), the trajectory and consent
//! headers well formed (400), the body within its size (413) and time (408) limits, and the body parsed by
//! [`crate::wire::parse_json_body`], which refuses a repeated key anywhere (400).

use std::time::Duration;

use atdp_policies::{CONSENT_HEADER, Consent};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Uri, header};
use pingora::proxy::Session;
use serde_json::Value;

use crate::refusal::Refusal;
use crate::wire::{ApiKind, RequestView, parse_json_body, parse_request};

/// The most buffer reserved up front for a body, whatever its declared length: memory grows
/// with what arrives, not with what a header claims.
const INITIAL_BODY_BUFFER: usize = 64 << 10;

/// The one query string the official SDKs send on these APIs (their beta surfaces), passed
/// on as it is.
pub const BETA_QUERY: &str = "beta=true";

/// Checks what the header says about the body and the URI: JSON, not encoded, no query but
/// [`BETA_QUERY`]. Returns the query to forward.
pub fn check_framing(headers: &HeaderMap, uri: &Uri) -> Result<Option<&'static str>, Refusal> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or_default())
        .unwrap_or("application/json");
    if !content_type
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("application/json")
    {
        return Err(Refusal::UnsupportedContentType);
    }
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let identity = value.to_str().is_ok_and(|v| {
            v.split(',')
                .all(|c| c.trim().eq_ignore_ascii_case("identity"))
        });
        if !identity {
            return Err(Refusal::UnsupportedEncoding);
        }
    }
    match uri.query() {
        None => Ok(None),
        Some(BETA_QUERY) => Ok(Some(BETA_QUERY)),
        Some(_) => Err(Refusal::QueryNotAccepted),
    }
}

/// An id the client names in a header (`x-atdp-trajectory-id`, `x-atdp-session-id`).
pub fn header_id(headers: &HeaderMap, name: &'static str) -> Result<Option<String>, Refusal> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = Refusal::InvalidHeader {
        name,
        rule: "sent once, 1 to 200 visible ASCII characters",
    };
    if values.next().is_some() {
        return Err(invalid);
    }
    let text = value.to_str().unwrap_or_default().trim();
    if text.is_empty() || text.len() > 200 || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid);
    }
    Ok(Some(text.to_owned()))
}

/// The end user's consent to training that the caller states for this call
/// ([`CONSENT_HEADER`]: `granted` or `withdrawn`, sent once). Anything else is refused rather
/// than guessed at: a misspelt withdrawal must not record the call as trainable.
pub fn consent(headers: &HeaderMap) -> Result<Option<Consent>, Refusal> {
    let mut values = headers.get_all(CONSENT_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let consent = value.to_str().ok().and_then(Consent::from_header);
    match (consent, values.next()) {
        (Some(consent), None) => Ok(Some(consent)),
        _ => Err(Refusal::InvalidHeader {
            name: CONSENT_HEADER,
            rule: "sent once, granted or withdrawn",
        }),
    }
}

/// Reads the whole body, up to `limit` bytes and within `timeout`; answers
/// `Expect: 100-continue` first.
pub async fn read_body(
    session: &mut Session,
    limit: usize,
    timeout: Duration,
) -> pingora::Result<Result<Bytes, Refusal>> {
    let declared = session
        .req_header()
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Ok(Err(Refusal::RequestTooLarge { limit }));
    }
    let expects = session
        .req_header()
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects {
        session.write_continue_response().await?;
    }
    let read = async {
        let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(INITIAL_BODY_BUFFER));
        while let Some(chunk) = session.read_request_body().await? {
            if body.len() + chunk.len() > limit {
                return Ok(Err(Refusal::RequestTooLarge { limit }));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Ok(body.freeze()))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(result) => result,
        Err(_) => Ok(Err(Refusal::BodyTimeout {
            seconds: timeout.as_secs(),
        })),
    }
}

/// The one reading of a body: the document (forwarded after masking, as the proxy
/// serialises it) and its normalised view.
pub fn canonical(api: ApiKind, raw: &[u8]) -> Result<(Value, RequestView), Refusal> {
    let document = parse_json_body(raw).map_err(|e| Refusal::InvalidJson {
        message: e.to_string(),
    })?;
    let request = parse_request(api, &document).map_err(|e| Refusal::InvalidRequest {
        message: e.to_string(),
    })?;
    Ok((document, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stages::test_headers as headers;

    #[test]
    fn framing_must_be_plain_json_without_a_query() {
        let uri: Uri = "/v1/chat/completions".parse().unwrap();
        assert_eq!(check_framing(&headers(&[]), &uri), Ok(None));
        assert!(
            check_framing(
                &headers(&[("content-type", "application/json; charset=utf-8")]),
                &uri
            )
            .is_ok()
        );
        assert_eq!(
            check_framing(&headers(&[("content-type", "text/plain")]), &uri),
            Err(Refusal::UnsupportedContentType)
        );
        assert_eq!(
            check_framing(&headers(&[("content-encoding", "gzip")]), &uri),
            Err(Refusal::UnsupportedEncoding)
        );
        assert!(check_framing(&headers(&[("content-encoding", "identity")]), &uri).is_ok());
        for query in [
            "api-version=1",
            "beta=true&x=1",
            "beta=false",
            "beta=true&beta=true",
        ] {
            let with_query: Uri = format!("/v1/chat/completions?{query}").parse().unwrap();
            assert_eq!(
                check_framing(&headers(&[]), &with_query),
                Err(Refusal::QueryNotAccepted),
                "{query}"
            );
        }
        let beta: Uri = "/v1/responses?beta=true".parse().unwrap();
        assert_eq!(check_framing(&headers(&[]), &beta), Ok(Some("beta=true")));
    }

    #[test]
    fn consent_is_granted_or_withdrawn_sent_once() {
        assert_eq!(consent(&headers(&[])), Ok(None));
        assert_eq!(
            consent(&headers(&[(CONSENT_HEADER, "withdrawn")])),
            Ok(Some(Consent::Withdrawn))
        );
        assert_eq!(
            consent(&headers(&[(CONSENT_HEADER, "Granted")])),
            Ok(Some(Consent::Granted))
        );
        for bad in [
            headers(&[(CONSENT_HEADER, "withdrawm")]),
            headers(&[(CONSENT_HEADER, "")]),
            headers(&[(CONSENT_HEADER, "granted"), (CONSENT_HEADER, "withdrawn")]),
        ] {
            assert!(consent(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids_in_headers_are_sent_once_and_visible_ascii() {
        let name = "x-atdp-trajectory-id";
        assert_eq!(header_id(&headers(&[]), name), Ok(None));
        assert_eq!(
            header_id(&headers(&[(name, " t-1 ")]), name),
            Ok(Some("t-1".into()))
        );
        for bad in [
            headers(&[(name, "a b")]),
            headers(&[(name, "")]),
            headers(&[(name, &"x".repeat(201))]),
            headers(&[(name, "a"), (name, "b")]),
        ] {
            assert!(header_id(&bad, name).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_body_that_two_readers_could_read_differently_is_refused() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi","content":"jane@example.com"}]}"#;
        let refusal = canonical(ApiKind::OpenAiChat, body).unwrap_err();
        assert_eq!(refusal.code(), "invalid_json");
        assert!(
            refusal.message().contains("repeats a key"),
            "{}",
            refusal.message()
        );
        let (document, view) = canonical(
            ApiKind::OpenAiChat,
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap();
        assert_eq!(view.model, "m");
        assert_eq!(document["messages"][0]["content"], "hi");
    }
}
