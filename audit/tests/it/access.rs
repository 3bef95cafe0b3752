//! Who sees what: tenant isolation in the library and over HTTP, a Cedar-denied reveal, and
//! search input that tries to be SQL.

use atdp_audit::{Error, RevealRequest, Search, search};

use crate::common::*;

fn all(limit: usize) -> Search {
    Search {
        limit,
        ..Search::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_and_search_input_is_inert() {
    let f = fixture().await;
    let catalog = f.catalog().await;
    let auditor = f.auditor(DEMO_AUDITOR);
    assert_eq!(auditor.tenants, ["demo"]);

    let page = search(&catalog, &auditor.tenants, &all(50)).await.unwrap();
    let mut ids: Vec<&str> = page.hits.iter().map(|h| h.step_id.as_str()).collect();
    ids.sort();
    let mut want: Vec<&str> = f.demo_steps.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(ids, want);
    assert!(page.hits.iter().all(|h| h.tenant_id == "demo"));
    // Newest first.
    assert_eq!(page.hits[0].step_id, f.demo_steps[1]);

    let by = |s: Search| {
        let catalog = catalog.clone();
        let tenants = auditor.tenants.clone();
        async move { search(&catalog, &tenants, &s).await.unwrap().hits.len() }
    };
    let entity = |e: &str| Search {
        entity: Some(e.into()),
        ..all(50)
    };
    assert_eq!(by(entity("EMAIL_ADDRESS")).await, 2);
    assert_eq!(by(entity("CREDIT_CARD")).await, 2);
    assert_eq!(by(entity("US_SSN")).await, 0);
    let text = |t: &str| Search {
        text: Some(t.into()),
        ..all(50)
    };
    // "refund" is in both demo steps and in the other tenant's step, which is not visible.
    assert_eq!(by(text("REFUND")).await, 2);
    assert_eq!(by(text("receipt went")).await, 1);
    // Masked content is searched: the e-mail address itself is not in the lake.
    assert_eq!(by(text(EMAIL)).await, 0);
    assert_eq!(by(text("<EMAIL_ADDRESS_")).await, 2);
    assert_eq!(
        by(Search {
            reward_min: Some(0.9),
            ..all(50)
        })
        .await,
        2
    );
    assert_eq!(
        by(Search {
            reward_min: Some(1.5),
            ..all(50)
        })
        .await,
        0
    );
    assert_eq!(
        by(Search {
            status: Some("interrupted".into()),
            ..all(50)
        })
        .await,
        0
    );
    let paged = search(&catalog, &auditor.tenants, &all(1)).await.unwrap();
    assert_eq!(paged.hits.len(), 1);
    assert!(paged.more);

    // Input shaped like SQL is only ever a value compared against.
    for attempt in [
        "' OR '1'='1",
        "refund' OR 1=1 --",
        "'); DROP TABLE steps; --",
        "%",
        "%_%",
        "\\",
        "\" OR \"\"=\"",
    ] {
        assert_eq!(by(text(attempt)).await, 0, "{attempt}");
        assert_eq!(
            by(Search {
                agent: Some(format!("demo-agent{attempt}")),
                ..all(50)
            })
            .await,
            0,
            "{attempt}"
        );
        assert_eq!(by(entity(attempt)).await, 0, "{attempt}");
    }
    assert!(matches!(
        auditor.scope(Some("demo' OR tenant_id='other")),
        Err(Error::Denied(_))
    ));
    assert!(matches!(
        auditor.scope(Some("other")),
        Err(Error::Denied(_))
    ));
    // Analysts' SQL reads; it does not define, write or set anything.
    for statement in [
        "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/tmp/x'",
        "INSERT INTO steps SELECT * FROM steps",
        "COPY (SELECT * FROM steps) TO '/tmp/atdp-copy-test.parquet'",
        "SET datafusion.execution.batch_size = 1",
        "DROP TABLE steps",
    ] {
        assert!(catalog.sql(statement).await.is_err(), "{statement}");
    }
    assert!(!std::path::Path::new("/tmp/atdp-copy-test.parquet").exists());
    // The tables are intact afterwards.
    let again = f.catalog().await;
    assert_eq!(
        search(&again, &auditor.tenants, &all(50))
            .await
            .unwrap()
            .hits
            .len(),
        2
    );

    // Another tenant's trajectory is not found, with or without a tenant hint.
    for hint in [None, Some("other"), Some("demo")] {
        let loaded = atdp_audit::load(
            &catalog,
            &f.policy.access,
            &auditor,
            &f.other_trajectory,
            hint,
        )
        .await;
        assert!(matches!(loaded, Err(Error::NotFound(_))), "{hint:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_analyst_reads_but_cedar_denies_the_reveal() {
    let f = fixture().await;
    let catalog = f.catalog().await;
    let analyst = f.auditor(DEMO_ANALYST);
    assert_eq!(analyst.tenants, ["demo"]);
    let trail = f.trail("analyst").await;
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let (steps, rewards) = atdp_audit::load(
        &catalog,
        &f.policy.access,
        &analyst,
        &f.demo_trajectory,
        None,
    )
    .await
    .unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(rewards.len(), 2);
    let denied = atdp_audit::reveal(
        &catalog,
        &f.policy,
        &f.keys,
        &trail,
        &analyst,
        &RevealRequest {
            trajectory_id: &f.demo_trajectory,
            tenant: None,
            token: &token,
            reason: "curious",
        },
    )
    .await;
    assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");
    trail.close().await.unwrap();

    let text = f
        .sql_table("SELECT kind, decision, actor, subject, reason FROM audit WHERE kind = 'reveal'")
        .await;
    assert!(text.contains("deny"), "{text}");
    assert!(text.contains(&token), "{text}");
    assert!(text.contains("curious"), "{text}");
    assert!(!text.contains(EMAIL), "{text}");
}

struct Client {
    http: reqwest::Client,
    base: String,
    cookie: Option<String>,
}

impl Client {
    fn new(base: String) -> Client {
        Client {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base,
            cookie: None,
        }
    }

    async fn login(&mut self, key: &str) -> reqwest::StatusCode {
        let response = self
            .http
            .post(format!("{}/login", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("key={key}"))
            .send()
            .await
            .unwrap();
        self.cookie = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::to_owned);
        response.status()
    }

    async fn get(&self, path: &str) -> (reqwest::StatusCode, String) {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    }

    async fn post(&self, path: &str, body: String) -> (reqwest::StatusCode, String) {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    }
}

fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_keeps_tenants_apart_over_http() {
    let f = fixture().await;
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));

    // Nothing without a login; a key that is not an auditor's does not log in.
    let (status, _) = c.get("/search").await;
    assert_eq!(status, reqwest::StatusCode::SEE_OTHER);
    assert_eq!(
        c.login("sk-atdp-demo-agent").await,
        reqwest::StatusCode::UNAUTHORIZED
    );
    assert_eq!(c.get("/search").await.0, reqwest::StatusCode::SEE_OTHER);
    // A made-up session cookie is no session.
    c.cookie = Some(format!("atdp_session={}", "ab".repeat(32)));
    assert_eq!(c.get("/search").await.0, reqwest::StatusCode::SEE_OTHER);

    assert_eq!(c.login(DEMO_AUDITOR).await, reqwest::StatusCode::SEE_OTHER);
    let (status, body) = c.get("/search").await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(body.contains(&f.demo_trajectory));
    assert!(!body.contains(&f.other_trajectory));

    // URL guessing and query parameters do not reach the other tenant.
    let other = &f.other_trajectory;
    for path in [
        format!("/trajectories/{other}"),
        format!("/trajectories/{other}?tenant=other"),
        format!("/trajectories/{other}?tenant=demo"),
        format!("/trajectories/{other}/export?tenant=other"),
    ] {
        let (status, body) = c.get(&path).await;
        assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{path}");
        assert!(!body.contains(OTHER_EMAIL));
    }
    let (status, body) = c.get("/search?tenant=other").await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN);
    assert!(!body.contains(other.as_str()));
    let (status, body) = c
        .get(&format!(
            "/search?tenant={}",
            form_encode("demo' OR tenant_id='other")
        ))
        .await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN);
    assert!(!body.contains(other.as_str()));
    let other_token = policies::KeyRing::load(&f.keys)
        .unwrap()
        .token("other", "EMAIL_ADDRESS", OTHER_EMAIL)
        .unwrap();
    let (status, body) = c
        .post(
            "/reveal",
            format!(
                "trajectory={other}&tenant=other&token={}&reason=audit",
                form_encode(&other_token)
            ),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    assert!(!body.contains(OTHER_EMAIL));

    // Markup typed into a search field comes back escaped.
    let (status, body) = c
        .get(&format!(
            "/search?text={}",
            form_encode("<script>alert(1)</script>")
        ))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(!body.contains("<script>alert(1)"));
    assert!(body.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
    let (status, _) = c.get("/search?since=yesterday").await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);

    // The trajectory page shows masked spans by entity type, never the value.
    let (status, body) = c.get(&format!("/trajectories/{}", f.demo_trajectory)).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    assert!(body.contains("class=\"entity\">EMAIL_ADDRESS"));
    assert!(body.contains(&token.replace('<', "&#60;").replace('>', "&#62;")));
    assert!(body.contains("lookup_customer"));
    assert!(body.contains("task_success"));
    assert!(!body.contains(EMAIL));

    // A reveal with an empty reason is refused; with one it shows the value.
    let reveal = |reason: &str| {
        format!(
            "trajectory={}&tenant=demo&token={}&reason={}",
            f.demo_trajectory,
            form_encode(&token),
            form_encode(reason)
        )
    };
    let (status, body) = c.post("/reveal", reveal("  ")).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
    assert!(!body.contains(EMAIL));
    let (status, body) = c
        .post("/reveal", reveal("Subject access request #4411"))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(body.contains(EMAIL));

    // The analyst may read but not reveal.
    let mut analyst = Client::new(c.base.clone());
    assert_eq!(
        analyst.login(DEMO_ANALYST).await,
        reqwest::StatusCode::SEE_OTHER
    );
    let (status, body) = analyst.post("/reveal", reveal("curious")).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN);
    assert!(!body.contains(EMAIL));

    let (status, body) = c.get("/audit").await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(body.contains("intact"), "{body}");
    // Probing for the other tenant's trajectory left a trace.
    let n = f.sql_table(&format!(
            "SELECT count(*) AS n FROM audit WHERE kind = 'read' AND decision = 'deny' AND subject = '{other}'"
        )).await;
    assert!(n.contains("| 3 "), "{n}");
    assert!(body.contains("Subject access request #4411"));
    assert!(body.contains("curious"));
    server.stop().await.unwrap();
}
