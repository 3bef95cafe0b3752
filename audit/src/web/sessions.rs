//! Logins: random 256-bit session ids kept in memory, and the cookies that carry them.
//!
//! One live session per auditor, and one per browser: a login ends every earlier session of
//! the same auditor (whichever browser holds it) and the session whose cookie the logging-in
//! browser presents (whichever auditor it belongs to). A stolen or forgotten session cookie
//! therefore stops working as soon as its auditor logs in again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use atdp_policies::AccessPolicy;
use axum::http::{HeaderMap, header};
use rand::RngCore;

use crate::auditor::Auditor;

/// How long a login lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

struct Session {
    auditor_id: String,
    expires: Instant,
}

/// The live sessions.
#[derive(Default)]
pub(crate) struct Sessions {
    live: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session of `auditor`, logging in from a browser that presents the session
    /// cookie `presented` (if any). Ends that session and every other session of the same
    /// auditor; returns the new session's id and how many live sessions it ended.
    pub(crate) fn login(&self, auditor: &Auditor, presented: Option<&str>) -> (String, usize) {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        live.retain(|_, s| s.expires > now);
        let before = live.len();
        if let Some(presented) = presented {
            live.remove(presented);
        }
        live.retain(|_, s| s.auditor_id != auditor.id);
        let ended = before - live.len();
        live.insert(
            id.clone(),
            Session {
                auditor_id: auditor.id.clone(),
                expires: now + SESSION_TTL,
            },
        );
        (id, ended)
    }

    /// How many live sessions a login of `auditor` presenting `presented` would end.
    pub(crate) fn ended_by(&self, auditor: &Auditor, presented: Option<&str>) -> usize {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        live.iter()
            .filter(|(id, s)| {
                s.expires > now && (s.auditor_id == auditor.id || Some(id.as_str()) == presented)
            })
            .count()
    }

    pub(crate) fn logout(&self, session: &str) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    /// The auditor of a live session; its tenants are decided again by `policy` on every
    /// request by the policy in force (read again when its files change).
    pub(crate) fn auditor(&self, policy: &AccessPolicy, session: &str) -> Option<Auditor> {
        // The lock is held only to read the session, not while Cedar decides.
        let auditor_id = {
            let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let s = live.get(session).filter(|s| s.expires > Instant::now())?;
            s.auditor_id.clone()
        };
        Auditor::from_id(policy, &auditor_id)
    }
}

/// The cookies the console sets: behind TLS they are `Secure` and `__Host-` named, which
/// also keeps a sibling subdomain from planting them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cookies {
    pub(crate) secure: bool,
}

impl Cookies {
    /// The session cookie's name.
    pub(crate) fn session_name(self) -> &'static str {
        if self.secure {
            "__Host-atdp_session"
        } else {
            "atdp_session"
        }
    }

    /// The login form's nonce cookie's name.
    pub(crate) fn login_name(self) -> &'static str {
        if self.secure {
            "__Host-atdp_login"
        } else {
            "atdp_login"
        }
    }

    /// A `Set-Cookie` value: `name=value`, for `max_age` seconds (`None`: the browser
    /// session), `HttpOnly`, `SameSite=Strict`, `Path=/`, and `Secure` behind TLS.
    pub(crate) fn set(self, name: &str, value: &str, max_age: Option<u64>) -> String {
        let mut cookie = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
        if let Some(age) = max_age {
            cookie.push_str(&format!("; Max-Age={age}"));
        }
        if self.secure {
            cookie.push_str("; Secure");
        }
        cookie
    }

    /// The value of cookie `name` in the request, if it is there once.
    pub(crate) fn get(headers: &HeaderMap, name: &str) -> Option<String> {
        let mut found = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(n, _)| *n == name)
            .map(|(_, value)| value.to_owned());
        match (found.next(), found.next()) {
            (Some(value), None) => Some(value),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn cookies_are_httponly_strict_and_secure_behind_tls() {
        let plain = Cookies { secure: false };
        assert_eq!(
            plain.set(plain.session_name(), "abc", None),
            "atdp_session=abc; Path=/; HttpOnly; SameSite=Strict"
        );
        let tls = Cookies { secure: true };
        assert_eq!(
            tls.set(tls.login_name(), "n", Some(3600)),
            "__Host-atdp_login=n; Path=/; HttpOnly; SameSite=Strict; Max-Age=3600; Secure"
        );
    }

    fn live(sessions: &Sessions, id: &str) -> Option<String> {
        let live = sessions.live.lock().unwrap();
        live.get(id).map(|s| s.auditor_id.clone())
    }

    #[test]
    fn a_login_ends_the_auditors_and_the_browsers_earlier_sessions() {
        let auditor = |id: &str| Auditor {
            id: id.into(),
            tenants: vec!["demo".into()],
        };
        let sessions = Sessions::default();
        let (first, ended) = sessions.login(&auditor("ana"), None);
        assert_eq!(ended, 0);
        let (bob, _) = sessions.login(&auditor("bob"), None);
        // Ana again, from another browser: her first session ends, Bob's stays.
        assert_eq!(sessions.ended_by(&auditor("ana"), None), 1);
        let (second, ended) = sessions.login(&auditor("ana"), None);
        assert_eq!(ended, 1);
        assert_eq!(live(&sessions, &first), None);
        assert_eq!(live(&sessions, &second).as_deref(), Some("ana"));
        assert_eq!(live(&sessions, &bob).as_deref(), Some("bob"));
        // Carol logs in from the browser that holds Bob's session: it ends too.
        let (carol, ended) = sessions.login(&auditor("carol"), Some(&bob));
        assert_eq!(ended, 1);
        assert_eq!(live(&sessions, &bob), None);
        assert_eq!(live(&sessions, &carol).as_deref(), Some("carol"));
        assert_eq!(live(&sessions, &second).as_deref(), Some("ana"));
    }

    #[test]
    fn a_cookie_sent_twice_is_not_trusted() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; atdp_login=x"),
        );
        assert_eq!(Cookies::get(&h, "atdp_login").as_deref(), Some("x"));
        h.append(header::COOKIE, HeaderValue::from_static("atdp_login=y"));
        assert_eq!(Cookies::get(&h, "atdp_login"), None);
    }
}
