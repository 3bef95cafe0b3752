//! The console against a hostile client, over raw HTTP: the headers of every response,
//! forms refused without the session's token or from another origin, no audit event on
//! any `GET`, and login floods that are throttled and leave a bounded audit trail.

use std::net::IpAddr;

use reqwest::StatusCode;

use crate::client::{Client, Origin, Reply, form_encode};
use crate::common::*;

/// The fixture's own audit rows (the proxy's `request_allowed` events).
const FIXTURE_ROWS: u64 = 2;

fn assert_hardened(reply: &Reply, what: &str) {
    assert_eq!(reply.header("cache-control"), Some("no-store"), "{what}");
    let csp = reply
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"));
    assert!(csp.starts_with("default-src 'none'"), "{what}: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
    assert!(csp.contains("form-action 'self'"), "{what}: {csp}");
    assert!(
        !csp.contains("script-src"),
        "{what}: no script at all: {csp}"
    );
    for directive in csp.split(';').map(str::trim) {
        if directive.contains("'unsafe-inline'") {
            assert!(directive.starts_with("style-src-attr "), "{what}: {csp}");
        }
    }
    assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(
        reply.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(
        reply.header("referrer-policy"),
        Some("same-origin"),
        "{what}"
    );
}

fn assert_cookie(cookie: &str, name: &str, secure: bool) {
    assert!(cookie.starts_with(&format!("{name}=")), "{cookie}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(
            cookie.split("; ").any(|a| a == attribute),
            "{cookie}: {attribute}"
        );
    }
    assert_eq!(
        cookie.split("; ").any(|a| a == "Secure"),
        secure,
        "{cookie}"
    );
}

fn loopback(a: u8, b: u8, c: u8) -> Option<IpAddr> {
    Some(IpAddr::from([127, a, b, c]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers() {
    let f = fixture().await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);
    let mut c = Client::new(base.clone());
    let id = &f.demo_trajectory;

    let login = c.login_page().await;
    assert_hardened(&login, "GET /login");
    let cookies = login.set_cookies();
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    assert_cookie(&cookies[0], "atdp_login", false);
    assert_hardened(&c.get("/healthz").await, "GET /healthz");
    assert_hardened(&c.get("/").await, "GET / (to login)");
    let wrong = c.post_login("sk-not-a-key", Origin::Own, true).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_hardened(&wrong, "failed login");
    let forged = c.post_login(DEMO_AUDITOR, Origin::Neither, true).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_hardened(&forged, "refused login");

    let signed = c.post_login(DEMO_AUDITOR, Origin::Own, true).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER);
    assert_hardened(&signed, "login");
    let session = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("atdp_session="))
        .unwrap();
    assert_cookie(&session, "atdp_session", false);
    assert!(
        signed
            .set_cookies()
            .iter()
            .any(|c| c.starts_with("atdp_login=;") && c.contains("Max-Age=0")),
        "the login nonce is dropped: {:?}",
        signed.set_cookies()
    );
    c.login(DEMO_AUDITOR).await;

    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let reveal_at = format!(
        "/reveal?trajectory={id}&tenant=demo&token={}",
        form_encode(&token)
    );
    let reveal = format!("reason={}", form_encode("Subject access request #4411"));
    let step = &f.demo_steps[1];
    for (what, reply) in [
        ("GET /search", c.get("/search?entity=EMAIL_ADDRESS").await),
        (
            "POST /search",
            c.post("/search", "entity=EMAIL_ADDRESS").await,
        ),
        ("GET open", c.get(&format!("/trajectory?id={id}")).await),
        (
            "POST open",
            c.post(&format!("/trajectory?id={id}&tenant=demo"), "")
                .await,
        ),
        (
            "POST export",
            c.post(&format!("/trajectory/export?id={id}&tenant=demo"), "")
                .await,
        ),
        (
            "GET export",
            c.get(&format!("/trajectory/export?id={id}")).await,
        ),
        (
            "POST text",
            c.post(
                &format!("/trajectory/text?id={id}&tenant=demo&step={step}&message=reply"),
                "",
            )
            .await,
        ),
        ("GET /reveal", c.get(&reveal_at).await),
        ("POST /reveal", c.post(&reveal_at, &reveal).await),
        ("GET /audit", c.get("/audit").await),
        ("GET unknown path", c.get("/nothing-here").await),
        (
            "refused post",
            c.post_as(&reveal_at, &reveal, None, Origin::Own).await,
        ),
    ] {
        assert_hardened(&reply, what);
        if what == "POST /reveal" {
            assert_eq!(reply.status, StatusCode::OK);
            assert!(reply.body.contains(EMAIL), "the page shows plaintext");
        }
        if what == "POST export" {
            assert_eq!(reply.status, StatusCode::OK);
            assert!(reply.body.contains("atdp-evidence/1"));
        }
        if what == "GET export" {
            assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
        }
        if what == "POST text" {
            assert_eq!(reply.status, StatusCode::OK);
            assert_eq!(
                reply.header("content-type"),
                Some("text/plain; charset=utf-8")
            );
        }
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_tls_cookies_are_secure_host_cookies_and_the_origin_is_https() {
    let f = fixture().await;
    let server = f.console_with(true).await;
    let mut c = Client::new(format!("http://{}", server.addr));
    c.secure = true;
    let login = c.login_page().await;
    assert_cookie(&login.set_cookies()[0], "__Host-atdp_login", true);
    // The plain-HTTP origin is not the console's origin behind TLS.
    let http = format!("http://{}", server.addr);
    let refused = c.post_login(DEMO_AUDITOR, Origin::Other(&http), true).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let signed = c.post_login(DEMO_AUDITOR, Origin::Own, true).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER);
    let session = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("__Host-atdp_session="))
        .unwrap();
    assert_cookie(&session, "__Host-atdp_session", true);
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let reply = c.post("/search", "").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(&f.demo_trajectory));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_without_the_sessions_token_or_from_another_origin_are_refused() {
    let f = fixture().await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);
    let mut c = Client::new(base.clone());
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let mut other_session = Client::new(base.clone());
    assert_eq!(
        other_session.login(DEMO_ANALYST).await,
        StatusCode::SEE_OTHER
    );
    let own = c.csrf.clone().unwrap_or_default();
    let foreign = other_session.csrf.clone().unwrap_or_default();
    let id = &f.demo_trajectory;
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let reveal_at = format!(
        "/reveal?trajectory={id}&tenant=demo&token={}",
        form_encode(&token)
    );
    let reveal = format!("reason={}", form_encode("Subject access request #4411"));
    let step = &f.demo_steps[1];
    let forms = [
        ("reveal", reveal_at.clone(), reveal.clone()),
        (
            "search",
            "/search".to_owned(),
            "entity=EMAIL_ADDRESS".to_owned(),
        ),
        (
            "open",
            format!("/trajectory?id={id}&tenant=demo"),
            String::new(),
        ),
        (
            "export",
            format!("/trajectory/export?id={id}&tenant=demo"),
            String::new(),
        ),
        (
            "text",
            format!("/trajectory/text?id={id}&tenant=demo&step={step}&message=1"),
            String::new(),
        ),
        ("logout", "/logout".to_owned(), String::new()),
    ];
    let zeros = "00".repeat(32);
    let attacks: [(&str, Option<&str>, Origin); 7] = [
        ("no token", None, Origin::Own),
        ("another session's token", Some(&foreign), Origin::Own),
        ("a made-up token", Some(&zeros), Origin::Own),
        (
            "a foreign origin",
            Some(&own),
            Origin::Other("http://evil.example"),
        ),
        ("origin null", Some(&own), Origin::Other("null")),
        ("no origin, no referer", Some(&own), Origin::Neither),
        (
            "a foreign referer",
            Some(&own),
            Origin::RefererOnly("http://evil.example/page"),
        ),
    ];
    for (form, path, body) in &forms {
        for (attack, csrf, origin) in attacks {
            let reply = c.post_as(path, body, csrf, origin).await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{form}, {attack}");
            assert!(reply.body.contains("Refused"), "{form}, {attack}");
            for secret in [EMAIL, "lookup_customer", "atdp-evidence", id.as_str()] {
                assert!(!reply.body.contains(secret), "{form}, {attack}");
            }
        }
    }
    assert_ne!(own, foreign, "each session has its own token");
    // The refused logout left the session alive; the genuine forms work, also with only a
    // Referer of the console's own origin.
    let reply = c.post("/search", "entity=EMAIL_ADDRESS").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(id.as_str()));
    let referer = format!("{}/search", c.origin());
    let reply = c
        .post_as("/search", "", Some(&own), Origin::RefererOnly(&referer))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let reply = c.post(&reveal_at, &reveal).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(EMAIL));

    // Login forgery: no nonce cookie and token, a foreign origin, none, a token of another
    // login form. None of them logs in, and none counts against the login throttle.
    let mut e = Client::new(base.clone());
    e.login_page().await;
    let mut g = Client::new(base.clone());
    g.login_page().await;
    let refusals = [
        e.post_login(DEMO_AUDITOR, Origin::Own, false).await,
        e.post_login(DEMO_AUDITOR, Origin::Other("http://evil.example"), true)
            .await,
        e.post_login(DEMO_AUDITOR, Origin::Neither, true).await,
        {
            let mut mixed = Client::new(base.clone());
            let (nonce, _) = e.login_form.clone().unwrap();
            let (_, token) = g.login_form.clone().unwrap();
            mixed.login_form = Some((nonce, token));
            mixed.post_login(DEMO_AUDITOR, Origin::Own, true).await
        },
        {
            let mut stale = Client::new(base.clone());
            stale.login_form = Some((format!("atdp_login=1.{}", "ab".repeat(16)), zeros.clone()));
            stale.post_login(DEMO_AUDITOR, Origin::Own, true).await
        },
    ];
    for (i, reply) in refusals.iter().enumerate() {
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "login forgery {i}");
        assert!(
            !reply
                .set_cookies()
                .iter()
                .any(|c| c.starts_with("atdp_session=")),
            "login forgery {i}"
        );
    }
    // Two logins so far from this address; the forgeries did not use up the other three.
    for _ in 0..3 {
        let mut fresh = Client::new(base.clone());
        assert_eq!(fresh.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    }
    server.stop().await.unwrap();

    // Nothing refused was done; the refusals are counted, in a few rows.
    assert_eq!(f.audit_rows("kind = 'reveal'").await, 1);
    assert_eq!(f.audit_rows("kind IN ('read', 'export')").await, 0);
    assert_eq!(f.audit_rows("kind = 'query'").await, 2);
    let counted = f.audit_details("kind = 'forged_request'").await;
    assert!(counted.len() <= 4, "{counted:?}");
    let total: u64 = counted.iter().map(|d| d["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 6 * 7 + 5, "{counted:?}");
    for (form, _, _) in &forms {
        let n: u64 = counted
            .iter()
            .filter_map(|d| d["outcomes"][form].as_u64())
            .sum();
        assert_eq!(n, 7, "{form}: {counted:?}");
    }
    assert!(counted.iter().all(|d| d["client"] == "127.0.0.1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_get_writes_to_the_audit_trail() {
    let f = fixture().await;
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let id = &f.demo_trajectory;
    let other = &f.other_trajectory;
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let mut shown_on_get = Vec::new();
    for path in [
        "/".to_owned(),
        "/login".to_owned(),
        "/healthz".to_owned(),
        "/search".to_owned(),
        "/search?entity=EMAIL_ADDRESS&text=refund".to_owned(),
        format!("/trajectory?id={id}"),
        format!("/trajectory?id={id}&tenant=demo"),
        format!("/trajectory?id={other}&tenant=other"),
        format!("/trajectory/export?id={id}&tenant=demo"),
        format!(
            "/trajectory/text?id={id}&tenant=demo&step={}&message=1",
            f.demo_steps[0]
        ),
        format!(
            "/reveal?trajectory={id}&tenant=demo&token={}&reason=x",
            form_encode(&token)
        ),
        "/audit".to_owned(),
        "/audit?page=1".to_owned(),
        "/nothing-here".to_owned(),
    ] {
        let reply = c.get(&path).await;
        assert!(
            reply.status.is_success()
                || reply.status == StatusCode::METHOD_NOT_ALLOWED
                || reply.status == StatusCode::NOT_FOUND
                || reply.status == StatusCode::SEE_OTHER,
            "{path}: {}",
            reply.status
        );
        // A GET shows no transcript and no search result either.
        for shown in ["lookup_customer", EMAIL] {
            if reply.body.contains(shown) {
                shown_on_get.push(format!("{path} shows {shown}"));
            }
        }
    }
    server.stop().await.unwrap();
    // The login is the only event.
    assert_eq!(f.audit_rows("true").await, FIXTURE_ROWS + 1);
    assert_eq!(
        f.audit_rows("kind = 'login' AND decision = 'allow'").await,
        1
    );
    assert_eq!(shown_on_get, Vec::<String>::new());

    // The open form is what records a read.
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let reply = c
        .post(&format!("/trajectory?id={id}&tenant=demo"), "")
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains("lookup_customer"));
    server.stop().await.unwrap();
    assert_eq!(
        f.audit_rows(&format!(
            "kind = 'read' AND decision = 'allow' AND subject = '{id}'"
        ))
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_flood_is_throttled_and_leaves_a_bounded_trail() {
    let f = fixture().await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);

    // One client, 3,000 wrong keys: five are checked, the rest wait.
    let mut flood = Client::new(base.clone());
    flood.login_page().await;
    let (mut wrong, mut throttled) = (0u64, 0u64);
    let started = std::time::Instant::now();
    for i in 0..3_000 {
        let reply = flood
            .post_login(&format!("sk-guess-{i}"), Origin::Own, true)
            .await;
        match reply.status {
            StatusCode::UNAUTHORIZED => wrong += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                throttled += 1;
                let wait: u64 = reply.header("retry-after").unwrap().parse().unwrap();
                assert!((1..=12).contains(&wait), "Retry-After {wait}");
                if throttled == 1 {
                    assert_hardened(&reply, "429");
                }
            }
            other => panic!("a wrong key got {other}"),
        }
    }
    // Five tries, plus one for every 12 s the flood took (on a slow machine).
    let regained = started.elapsed().as_secs() / 12;
    assert!(
        (5..=5 + regained).contains(&wrong),
        "{wrong} keys were checked"
    );
    assert_eq!(wrong + throttled, 3_000);
    // While it waits, even the right key is not looked at.
    let reply = flood.post_login(DEMO_AUDITOR, Origin::Own, true).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        !reply
            .set_cookies()
            .iter()
            .any(|c| c.starts_with("atdp_session="))
    );

    // 100 more client addresses, 20 wrong keys each.
    let clients = 100u8;
    for n in 1..=clients {
        let mut each = Client::from_address(base.clone(), loopback(0, 1, n));
        each.login_form = flood.login_form.clone();
        let mut refused = 0;
        for i in 0..20 {
            let reply = each
                .post_login(&format!("sk-guess-{n}-{i}"), Origin::Own, true)
                .await;
            assert!(
                reply.status == StatusCode::UNAUTHORIZED
                    || reply.status == StatusCode::TOO_MANY_REQUESTS,
                "{}",
                reply.status
            );
            refused += u32::from(reply.status == StatusCode::TOO_MANY_REQUESTS);
        }
        assert_eq!(refused, 15);
    }

    // A legitimate auditor from another address logs in and works.
    let mut auditor = Client::from_address(base.clone(), loopback(0, 2, 1));
    assert_eq!(auditor.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let reply = auditor.post("/search", "").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(&f.demo_trajectory));
    server.stop().await.unwrap();

    // 5,001 refused logins are a few rows (one per client per minute), with every try counted.
    let sent = 3_001 + u64::from(clients) * 20;
    let rows = f.audit_rows("true").await - FIXTURE_ROWS;
    let bound = 2 * (u64::from(clients) + 1) + 1;
    assert!(rows <= bound, "{rows} rows for {sent} refused logins");
    assert_eq!(
        f.audit_rows("kind = 'login' AND decision = 'allow'").await,
        1
    );
    assert_eq!(f.audit_rows("kind = 'query'").await, 1);
    let counted = f
        .audit_details("kind = 'login' AND decision = 'deny'")
        .await;
    let total: u64 = counted.iter().map(|d| d["count"].as_u64().unwrap()).sum();
    assert_eq!(total, sent, "every refused try is counted");
    let first: Vec<_> = counted
        .iter()
        .filter(|d| d["client"] == "127.0.0.1")
        .collect();
    let outcome = |name: &str| -> u64 {
        first
            .iter()
            .filter_map(|d| d["outcomes"][name].as_u64())
            .sum()
    };
    assert_eq!(outcome("wrong_key"), wrong);
    assert_eq!(outcome("throttled"), throttled + 1);
    assert_eq!(
        counted
            .iter()
            .filter(|d| d["client"] == "127.0.1.7")
            .map(|d| d["count"].as_u64().unwrap())
            .sum::<u64>(),
        20
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_auditor_key_is_throttled_across_addresses() {
    let f = fixture().await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);
    for n in 1..=5 {
        let mut c = Client::from_address(base.clone(), loopback(0, 3, n));
        assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER, "{n}");
    }
    let mut sixth = Client::from_address(base.clone(), loopback(0, 3, 6));
    sixth.login_page().await;
    let reply = sixth.post_login(DEMO_AUDITOR, Origin::Own, true).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(reply.header("retry-after").is_some());
    // Another auditor is not held back by it.
    assert_eq!(sixth.login(DEMO_ANALYST).await, StatusCode::SEE_OTHER);
    server.stop().await.unwrap();
    let counted = f
        .audit_details("kind = 'login' AND decision = 'deny'")
        .await;
    assert_eq!(counted.len(), 1, "{counted:?}");
    assert_eq!(counted[0]["outcomes"]["throttled"], 1);
    assert_eq!(
        f.audit_rows("kind = 'login' AND decision = 'allow'").await,
        6
    );
}

/// An auditor removed from the policy directory while signed in (`atdp-policy key revoke`)
/// loses the session within seconds, without a restart; a new auditor can sign in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_auditor_is_signed_out_without_a_restart() {
    let f = fixture().await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);
    let mut c = Client::new(base.clone());
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    assert_eq!(c.get("/search").await.status, StatusCode::OK);

    let id = atdp_policies::hash_api_key(DEMO_AUDITOR);
    let revoked = atdp_policies::principals::revoke(&f.policy_dir, &id).unwrap();
    assert_eq!(revoked.id, id);
    let added = atdp_policies::principals::add_auditor(
        &f.policy_dir,
        "compliance_officer",
        &["demo".to_owned()],
    )
    .unwrap();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let page = c.get("/search").await;
        if page.status == StatusCode::SEE_OTHER && page.header("location") == Some("/login") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the revoked auditor is still signed in"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let mut fresh = Client::new(base);
    assert_ne!(fresh.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let mut fresh = Client::new(format!("http://{}", server.addr));
    assert_eq!(fresh.login(&added.key).await, StatusCode::SEE_OTHER);
    server.stop().await.unwrap();
}

/// Whether `c`'s session cookie and form token still work (on a page and on a form).
async fn signed_in(c: &Client) -> bool {
    let page = c.get("/search").await;
    let search = c.post("/search", "").await;
    match (page.status, search.status) {
        (StatusCode::OK, StatusCode::OK) => true,
        (StatusCode::SEE_OTHER, StatusCode::SEE_OTHER) => {
            assert_eq!(page.header("location"), Some("/login"));
            false
        }
        other => panic!("{other:?}"),
    }
}

/// One live session per auditor and per browser: logging in again ends the session whose
/// cookie the browser presents and every other session of the same auditor, so an old or
/// stolen cookie stops working; another auditor's sessions in other browsers stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_ends_the_earlier_sessions_of_its_browser_and_of_its_auditor() {
    let f = fixture().await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);
    let browser = |n: u8| Client::from_address(base.clone(), loopback(0, 4, n));

    // The same browser logs in again: its old cookie is dead, the new one works.
    let mut a = browser(1);
    assert_eq!(a.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let mut old = browser(1);
    old.cookie = a.cookie.clone();
    old.csrf = a.csrf.clone();
    a.login_form = None;
    assert_eq!(a.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    assert_ne!(a.cookie, old.cookie);
    assert!(!signed_in(&old).await, "the old cookie still works");
    assert!(signed_in(&a).await);

    // The same auditor in another browser: the first browser's session ends.
    let mut b = browser(2);
    assert_eq!(b.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    assert!(!signed_in(&a).await, "two sessions of one auditor");
    assert!(signed_in(&b).await);

    // Another auditor, in a third browser, which then logs in as the first auditor: the
    // session it presents ends (whoever it belonged to), and so does the auditor's in b.
    let mut c = browser(3);
    assert_eq!(c.login(DEMO_ANALYST).await, StatusCode::SEE_OTHER);
    let analyst = (c.cookie.clone(), c.csrf.clone());
    c.login_form = None;
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let mut gone = browser(3);
    (gone.cookie, gone.csrf) = analyst;
    assert!(!signed_in(&gone).await, "the presented session ended");
    assert!(!signed_in(&b).await, "the auditor's other session ended");
    assert!(signed_in(&c).await);
    // The analyst in a fourth browser is not held back.
    let mut d = browser(4);
    assert_eq!(d.login(DEMO_ANALYST).await, StatusCode::SEE_OTHER);
    assert!(signed_in(&d).await);
    assert!(signed_in(&c).await);
    server.stop().await.unwrap();

    // Each login says how many sessions it ended.
    let mut ended: Vec<u64> = f
        .audit_details("kind = 'login' AND decision = 'allow'")
        .await
        .iter()
        .map(|d| d["ends_sessions"].as_u64().unwrap())
        .collect();
    ended.sort();
    assert_eq!(ended, [0, 0, 0, 1, 1, 2]);
}
