//! Cross-site request forgery defences: every form that changes state carries a token that
//! only this console's own pages know, and its request must come from this console's origin.
//!
//! Tokens are HMAC-SHA256 values under a random secret drawn when the console starts (a
//! restart invalidates every form, as it ends every session). A session's token is the HMAC
//! of its session id. Before login there is no session: the login form's token is the HMAC of
//! a nonce that the login page also sets as a cookie (a signed double-submit), so another
//! site can neither read the token nor make one for the nonce in the victim's browser.
//! Tokens are checked with the `hmac` crate's constant-time comparison.

use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// How long a login form stays valid, in seconds.
pub(crate) const LOGIN_FORM_TTL_SECS: u64 = 3600;

type HmacSha256 = Hmac<Sha256>;

/// The console's token secret.
pub(crate) struct Tokens {
    secret: [u8; 32],
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(..)")
    }
}

impl Tokens {
    /// A fresh random secret.
    pub(crate) fn new() -> Tokens {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        Tokens { secret }
    }

    fn mac(&self, purpose: &str, value: &str) -> Option<HmacSha256> {
        // HMAC takes keys of any length, so this never fails; a failure would only make
        // every token invalid (fail closed).
        let mut mac = HmacSha256::new_from_slice(&self.secret).ok()?;
        mac.update(purpose.as_bytes());
        mac.update(&[0]);
        mac.update(value.as_bytes());
        Some(mac)
    }

    fn token(&self, purpose: &str, value: &str) -> String {
        self.mac(purpose, value)
            .map(|m| hex::encode(m.finalize().into_bytes()))
            .unwrap_or_default()
    }

    fn verify(&self, purpose: &str, value: &str, token: &str) -> bool {
        let Ok(given) = hex::decode(token.trim()) else {
            return false;
        };
        self.mac(purpose, value)
            .is_some_and(|m| m.verify_slice(&given).is_ok())
    }

    /// The token of the forms of session `session`.
    pub(crate) fn session_token(&self, session: &str) -> String {
        self.token("session", session)
    }

    /// Whether `token` is session `session`'s.
    pub(crate) fn session_ok(&self, session: &str, token: &str) -> bool {
        self.verify("session", session, token)
    }

    /// A new login nonce (`<unix seconds>.<random>`), for the login page's cookie.
    pub(crate) fn login_nonce(now_secs: u64) -> String {
        let mut random = [0u8; 16];
        rand::rng().fill_bytes(&mut random);
        format!("{now_secs}.{}", hex::encode(random))
    }

    /// Whether `nonce` is one this console could have issued and is not older than
    /// [`LOGIN_FORM_TTL_SECS`] at `now_secs`.
    pub(crate) fn nonce_fresh(nonce: &str, now_secs: u64) -> bool {
        let Some((issued, random)) = nonce.split_once('.') else {
            return false;
        };
        let Ok(issued) = issued.parse::<u64>() else {
            return false;
        };
        random.len() == 32
            && random.bytes().all(|b| b.is_ascii_hexdigit())
            && issued <= now_secs + 60
            && now_secs.saturating_sub(issued) <= LOGIN_FORM_TTL_SECS
    }

    /// The login form's token for `nonce`.
    pub(crate) fn login_token(&self, nonce: &str) -> String {
        self.token("login", nonce)
    }

    /// Whether `token` is the login token of a fresh `nonce`.
    pub(crate) fn login_ok(&self, nonce: &str, token: &str, now_secs: u64) -> bool {
        Tokens::nonce_fresh(nonce, now_secs) && self.verify("login", nonce, token)
    }
}

/// Whether a request comes from a page of this console: its `Origin` header, or without
/// one its `Referer`, names the origin the request was sent to (`https` behind TLS, else
/// `http`, with the `Host` it names). `Origin: null` (a sandboxed or privacy-stripped
/// context) and a request with neither header are refused.
pub(crate) fn same_origin(headers: &HeaderMap, https: bool) -> bool {
    let single = |name| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    let Some(host) = single(header::HOST).filter(|h| !h.is_empty()) else {
        return false;
    };
    let own = format!("{}://{host}", if https { "https" } else { "http" });
    if headers.contains_key(header::ORIGIN) {
        return single(header::ORIGIN).is_some_and(|origin| origin.eq_ignore_ascii_case(&own));
    }
    single(header::REFERER).is_some_and(|referer| {
        referer
            .get(..own.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(&own))
            && referer
                .get(own.len()..)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn session_tokens_are_bound_to_their_session_and_secret() {
        let tokens = Tokens::new();
        let token = tokens.session_token("s1");
        assert_eq!(token.len(), 64);
        assert!(tokens.session_ok("s1", &token));
        assert!(!tokens.session_ok("s2", &token));
        assert!(!tokens.session_ok("s1", ""));
        assert!(!tokens.session_ok("s1", &token[..62]));
        assert!(!tokens.session_ok("s1", "not hex"));
        assert!(!Tokens::new().session_ok("s1", &token));
        // A login token is no session token, even for the same value.
        assert!(!tokens.session_ok("s1", &tokens.login_token("s1")));
    }

    #[test]
    fn login_tokens_need_a_fresh_nonce() {
        let tokens = Tokens::new();
        let now = 1_800_000_000;
        let nonce = Tokens::login_nonce(now);
        let token = tokens.login_token(&nonce);
        assert!(tokens.login_ok(&nonce, &token, now));
        assert!(tokens.login_ok(&nonce, &token, now + LOGIN_FORM_TTL_SECS));
        assert!(!tokens.login_ok(&nonce, &token, now + LOGIN_FORM_TTL_SECS + 1));
        let other = Tokens::login_nonce(now);
        assert!(!tokens.login_ok(&other, &token, now));
        let forged = format!("{}.{}", now + 10_000, "a".repeat(32));
        assert!(!tokens.login_ok(&forged, &tokens.login_token(&forged), now));
        assert!(!tokens.login_ok("", &tokens.login_token(""), now));
    }

    #[test]
    fn hmac_is_rfc_4231_hmac_sha256() {
        // RFC 4231 test case 2, through the same crate and construction.
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn only_the_consoles_own_origin_passes() {
        let host = ("host", "127.0.0.1:8710");
        assert!(same_origin(
            &headers(&[host, ("origin", "http://127.0.0.1:8710")]),
            false
        ));
        assert!(!same_origin(
            &headers(&[host, ("origin", "http://127.0.0.1:8710")]),
            true
        ));
        assert!(same_origin(
            &headers(&[host, ("origin", "https://127.0.0.1:8710")]),
            true
        ));
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:8711",
            "http://127.0.0.1:87100",
            "null",
            "",
        ] {
            let mut h = headers(&[host]);
            h.insert("origin", HeaderValue::from_str(origin).unwrap());
            assert!(!same_origin(&h, false), "{origin}");
        }
        // Two Origin headers, or none and no Referer, are refused.
        assert!(!same_origin(
            &headers(&[
                host,
                ("origin", "http://127.0.0.1:8710"),
                ("origin", "http://evil.example")
            ]),
            false
        ));
        assert!(!same_origin(&headers(&[host]), false));
        // Without Origin, the Referer decides.
        assert!(same_origin(
            &headers(&[host, ("referer", "http://127.0.0.1:8710/reveal?token=x")]),
            false
        ));
        assert!(!same_origin(
            &headers(&[host, ("referer", "http://127.0.0.1:8710.evil.example/")]),
            false
        ));
        assert!(!same_origin(
            &headers(&[
                host,
                ("referer", "http://evil.example/http://127.0.0.1:8710/")
            ]),
            false
        ));
        // A foreign Origin is not excused by a matching Referer.
        assert!(!same_origin(
            &headers(&[
                host,
                ("origin", "http://evil.example"),
                ("referer", "http://127.0.0.1:8710/")
            ]),
            false
        ));
        assert!(!same_origin(
            &headers(&[("origin", "http://127.0.0.1:8710")]),
            false
        ));
    }
}
