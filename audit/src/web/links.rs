//! The console's URLs, built in one place. Recorded values (trajectory, step and tenant ids,
//! tokens) are chosen by whoever sent the recorded calls: an agent names its trajectory in
//! `x-atdp-trajectory-id`. So no recorded value is ever a path segment: a path is one of the
//! fixed paths below, and every recorded value travels as a query value, percent-encoded
//! byte by byte except for the RFC 3986 unreserved characters (`A-Z a-z 0-9 - _ . ~`). The
//! router's `Query` extractor decodes each value exactly once. An id such as `../logout`,
//! `a/b?c#d`, `%2F` or one holding spaces, control or non-ASCII characters is therefore an
//! opaque value: it cannot change which path a form posts to, add a parameter, or be
//! normalised away by the browser (as a `..` path segment would be).

/// Opens a trajectory: `GET` shows the "Open" button, `POST` records the read and shows a
/// page of the transcript.
pub(crate) const TRAJECTORY: &str = "/trajectory";
/// Records an export and downloads the evidence bundle (`POST`).
pub(crate) const EXPORT: &str = "/trajectory/export";
/// Records a read and sends one message's full text, or one tool call's arguments (`POST`).
pub(crate) const TEXT: &str = "/trajectory/text";
/// The reveal form (`GET`) and the reveal (`POST`).
pub(crate) const REVEAL: &str = "/reveal";

/// Percent-encodes `value` for a query: every byte but the unreserved characters.
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `path?name=value&…`, each value encoded; empty values are left out.
fn url(path: &'static str, query: &[(&str, &str)]) -> String {
    let mut out = path.to_owned();
    let mut first = true;
    for (name, value) in query.iter().filter(|(_, v)| !v.is_empty()) {
        out.push(if first { '?' } else { '&' });
        first = false;
        out.push_str(name);
        out.push('=');
        out.push_str(&encode(value));
    }
    out
}

/// Page `page` (from 0) of trajectory `id` of `tenant`.
pub(crate) fn trajectory_page(id: &str, tenant: &str, page: usize) -> String {
    let page = page.to_string();
    let page = if page == "0" { "" } else { page.as_str() };
    url(
        TRAJECTORY,
        &[("id", id), ("tenant", tenant), ("page", page)],
    )
}

/// The page of trajectory `id` of `tenant` that shows step `step` (marked as the hit).
pub(crate) fn trajectory_step(id: &str, tenant: &str, step: &str) -> String {
    url(
        TRAJECTORY,
        &[("id", id), ("tenant", tenant), ("step", step)],
    )
}

/// The export of trajectory `id` of `tenant`.
pub(crate) fn export(id: &str, tenant: &str) -> String {
    url(EXPORT, &[("id", id), ("tenant", tenant)])
}

/// The full text of one message of step `step`: `message` is its index in the step's request
/// messages, or `reply`; with `call`, the arguments of that tool call of the message.
pub(crate) fn text(
    id: &str,
    tenant: &str,
    step: &str,
    message: &str,
    call: Option<usize>,
) -> String {
    let call = call.map(|c| c.to_string()).unwrap_or_default();
    url(
        TEXT,
        &[
            ("id", id),
            ("tenant", tenant),
            ("step", step),
            ("message", message),
            ("call", &call),
        ],
    )
}

/// The reveal form for `token` seen in trajectory `id` of `tenant`.
pub(crate) fn reveal(id: &str, tenant: &str, token: &str) -> String {
    url(
        REVEAL,
        &[("trajectory", id), ("tenant", tenant), ("token", token)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_values_are_opaque_query_values() {
        let hostile = "../logout?x=1&tenant=other#frag %2F ü\u{1}\u{7f}/.";
        let link = trajectory_page(hostile, "demo", 2);
        assert_eq!(
            link,
            "/trajectory?id=..%2Flogout%3Fx%3D1%26tenant%3Dother%23frag%20%252F%20%C3%BC%01%7F%2F.\
             &tenant=demo&page=2"
        );
        // What the router decodes (once) is the value again.
        let uri: axum::http::Uri = link.parse().unwrap();
        let axum::extract::Query(decoded) =
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri).unwrap();
        assert_eq!(
            decoded,
            [
                ("id".to_owned(), hostile.to_owned()),
                ("tenant".to_owned(), "demo".to_owned()),
                ("page".to_owned(), "2".to_owned()),
            ]
        );
        assert_eq!(trajectory_page("..", "", 0), "/trajectory?id=..");
        assert_eq!(
            text("t", "demo", "s/1", "reply", Some(3)),
            "/trajectory/text?id=t&tenant=demo&step=s%2F1&message=reply&call=3"
        );
        assert_eq!(
            reveal("a b", "demo", "<EMAIL_1>"),
            "/reveal?trajectory=a%20b&tenant=demo&token=%3CEMAIL_1%3E"
        );
        assert_eq!(encode("+ "), "%2B%20");
    }
}
