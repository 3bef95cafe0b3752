//! A console client over raw HTTP that behaves like the console's own pages: it takes the
//! login form's token and nonce cookie, sends the console's origin, and puts the session's
//! token into every form it posts. Tests that attack the console switch those off one by one.

use std::net::IpAddr;

use reqwest::StatusCode;

/// A response, with the headers the tests look at.
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    }
}

/// What a post sends besides its body.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    /// `Origin: <the console's origin>`.
    Own,
    /// `Origin: <this>`.
    Other(&'a str),
    /// `Referer: <this>` and no `Origin`.
    RefererOnly(&'a str),
    /// Neither header.
    Neither,
}

/// The value of the first `name="csrf"` field of a page.
pub fn csrf_of(html: &str) -> Option<String> {
    let at = html.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    let end = at + html[at..].find('"')?;
    Some(html[at..end].to_owned())
}

/// Percent-encodes a form value.
pub fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `name=value` of the `Set-Cookie` whose name is `name`.
fn cookie_pair(reply: &Reply, name: &str) -> Option<String> {
    reply
        .set_cookies()
        .into_iter()
        .filter_map(|c| c.split(';').next().map(str::to_owned))
        .find(|pair| {
            pair.split_once('=')
                .is_some_and(|(n, v)| n == name && !v.is_empty())
        })
}

pub struct Client {
    http: reqwest::Client,
    pub base: String,
    /// The session cookie (`name=value`) after a login.
    pub cookie: Option<String>,
    /// The session's form token after a login.
    pub csrf: Option<String>,
    /// The login form's nonce cookie and token.
    pub login_form: Option<(String, String)>,
    /// Cookie names: `__Host-` prefixed for a console behind TLS.
    pub secure: bool,
}

impl Client {
    pub fn new(base: String) -> Client {
        Client::from_address(base, None)
    }

    /// A client whose connections come from `local` (any 127.0.0.0/8 address on loopback).
    pub fn from_address(base: String, local: Option<IpAddr>) -> Client {
        Client {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .local_address(local)
                .build()
                .unwrap(),
            base,
            cookie: None,
            csrf: None,
            login_form: None,
            secure: false,
        }
    }

    fn session_name(&self) -> &'static str {
        if self.secure {
            "__Host-atdp_session"
        } else {
            "atdp_session"
        }
    }

    fn login_name(&self) -> &'static str {
        if self.secure {
            "__Host-atdp_login"
        } else {
            "atdp_login"
        }
    }

    /// The origin the console's pages have.
    pub fn origin(&self) -> String {
        let host = self.base.split_once("://").map_or("", |(_, h)| h);
        format!("{}://{host}", if self.secure { "https" } else { "http" })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.unwrap();
        Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        self.send(request).await
    }

    /// Fetches the login page and keeps its nonce cookie and form token (empty when the
    /// page has none: the tests that need them assert on them).
    pub async fn login_page(&mut self) -> Reply {
        let reply = self.get("/login").await;
        let nonce = cookie_pair(&reply, self.login_name()).unwrap_or_default();
        let token = csrf_of(&reply.body).unwrap_or_default();
        self.login_form = Some((nonce, token));
        reply
    }

    /// Posts the login form (fetching it first when needed); keeps the session and its
    /// token when it succeeds.
    pub async fn login(&mut self, key: &str) -> StatusCode {
        if self.login_form.is_none() {
            self.login_page().await;
        }
        let reply = self.post_login(key, Origin::Own, true).await;
        if let Some(pair) = cookie_pair(&reply, self.session_name()) {
            self.cookie = Some(pair);
            let page = self.get("/search").await;
            self.csrf = csrf_of(&page.body);
        }
        reply.status
    }

    /// A login post with `origin`, with or without the login form's nonce cookie and token.
    /// Like a browser, it also sends the session cookie it holds.
    pub async fn post_login(&self, key: &str, origin: Origin<'_>, with_form: bool) -> Reply {
        let (nonce, token) = self.login_form.clone().unwrap_or_default();
        let mut body = format!("key={}", form_encode(key));
        let mut request = self.http.post(format!("{}/login", self.base));
        let mut cookies: Vec<String> = self.cookie.iter().cloned().collect();
        if with_form {
            body.push_str(&format!("&csrf={token}"));
            if !nonce.is_empty() {
                cookies.push(nonce);
            }
        }
        if !cookies.is_empty() {
            request = request.header("cookie", cookies.join("; "));
        }
        self.send(self.with_origin(request, origin).body(body))
            .await
    }

    fn with_origin(
        &self,
        request: reqwest::RequestBuilder,
        origin: Origin<'_>,
    ) -> reqwest::RequestBuilder {
        let request = request.header("content-type", "application/x-www-form-urlencoded");
        match origin {
            Origin::Own => request.header("origin", self.origin()),
            Origin::Other(o) => request.header("origin", o),
            Origin::RefererOnly(r) => request.header("referer", r),
            Origin::Neither => request,
        }
    }

    /// Posts `body` as a form from the console's origin with the session's token.
    pub async fn post(&self, path: &str, body: &str) -> Reply {
        let token = self.csrf.clone().unwrap_or_default();
        self.post_as(path, body, Some(&token), Origin::Own).await
    }

    /// Posts `body` with `token` (none: no `csrf` field) and `origin`.
    pub async fn post_as(
        &self,
        path: &str,
        body: &str,
        token: Option<&str>,
        origin: Origin<'_>,
    ) -> Reply {
        let body = match token {
            Some(t) if body.is_empty() => format!("csrf={t}"),
            Some(t) => format!("{body}&csrf={t}"),
            None => body.to_owned(),
        };
        let mut request = self.http.post(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        self.send(self.with_origin(request, origin).body(body))
            .await
    }
}
