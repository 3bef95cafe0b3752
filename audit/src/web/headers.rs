//! The headers every console response carries: nothing is stored by browsers or proxies
//! (pages show transcripts and revealed values), the page may not be framed or sniffed,
//! and it may load nothing but its own stylesheet block.

use std::sync::LazyLock;

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::Response;
use sha2::{Digest, Sha256};

/// The base template: its `<style>` block is the only style element the pages have, and the
/// policy allows exactly it by hash.
const BASE_TEMPLATE: &str = include_str!("../../templates/base.html");

/// The `Content-Security-Policy` of every response: no script at all, no frame ancestors,
/// forms that post only here, the base template's style block by its hash, and style
/// attributes (layout only; what a page shows is HTML-escaped, so no attribute is input).
pub(crate) static CONTENT_SECURITY_POLICY: LazyLock<String> = LazyLock::new(|| {
    let style = style_hash(BASE_TEMPLATE).unwrap_or_default();
    format!(
        "default-src 'none'; style-src '{style}'; style-src-elem '{style}'; \
         style-src-attr 'unsafe-inline'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'"
    )
});

/// `sha256-<base64>` of the text of the first `<style>` element of `html`.
fn style_hash(html: &str) -> Option<String> {
    let start = html.find("<style>")? + "<style>".len();
    let end = start + html.get(start..)?.find("</style>")?;
    let css = html.get(start..end)?;
    Some(format!(
        "sha256-{}",
        base64(&Sha256::digest(css.as_bytes()))
    ))
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let index = ((n >> (18 - 6 * i)) & 63) as usize;
                out.push(char::from(ALPHABET.get(index).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Adds the security headers to `response` (a middleware over every route and fallback).
pub(crate) async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let fixed: [(HeaderName, &'static str); 4] = [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it browsers send `Origin: null` on the console's own
        // form posts, and the origin check needs the origin. Nothing leaves for other sites.
        (header::REFERRER_POLICY, "same-origin"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if let Ok(value) = HeaderValue::from_str(&CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "{input}");
        }
    }

    #[test]
    fn the_policy_allows_the_base_style_block_by_its_hash() {
        // The hash of "a{}" computed independently (openssl dgst -sha256 -binary | base64).
        assert_eq!(
            style_hash("<style>a{}</style>").as_deref(),
            Some("sha256-X1RutGBrXCt9KkSaXMK7tHftWiRscFHOhxsS8tv8hBk=")
        );
        let hash = style_hash(BASE_TEMPLATE).unwrap();
        assert!(
            CONTENT_SECURITY_POLICY.contains(&format!("style-src-elem '{hash}'")),
            "{}",
            *CONTENT_SECURITY_POLICY
        );
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
        assert!(!CONTENT_SECURITY_POLICY.contains("script-src"));
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'none'"));
    }
}
