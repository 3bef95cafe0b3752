//! Who sees what: tenant isolation in the library and over HTTP, a Cedar-denied reveal, and
//! search input that tries to be SQL.

use atdp_audit::{Error, RevealRequest, Search, search};
use reqwest::StatusCode;

use crate::client::{Client, form_encode};
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
        // An entity type is a name (as masking.toml's): anything else is refused outright.
        let refused = search(&catalog, &auditor.tenants, &entity(attempt)).await;
        assert!(
            matches!(refused, Err(Error::Invalid(_))),
            "{attempt}: {refused:?}"
        );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_keeps_tenants_apart_over_http() {
    let f = fixture().await;
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));

    // Nothing without a login; a key that is not an auditor's does not log in.
    assert_eq!(c.get("/search").await.status, StatusCode::SEE_OTHER);
    assert_eq!(
        c.login("sk-atdp-demo-agent").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(c.get("/search").await.status, StatusCode::SEE_OTHER);
    // A made-up session cookie is no session.
    c.cookie = Some(format!("atdp_session={}", "ab".repeat(32)));
    assert_eq!(c.get("/search").await.status, StatusCode::SEE_OTHER);
    assert_eq!(c.post("/search", "").await.status, StatusCode::SEE_OTHER);

    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let reply = c.post("/search", "").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(&f.demo_trajectory));
    assert!(!reply.body.contains(&f.other_trajectory));

    // URL guessing and query parameters do not reach the other tenant.
    let other = &f.other_trajectory;
    for path in [
        format!("/trajectory?id={other}"),
        format!("/trajectory?id={other}&tenant=other"),
        format!("/trajectory?id={other}&tenant=demo"),
        format!("/trajectory/export?id={other}&tenant=other"),
        format!("/trajectory/text?id={other}&tenant=other&step=x&message=0"),
    ] {
        let reply = c.post(&path, "").await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert!(!reply.body.contains(OTHER_EMAIL));
    }
    let reply = c.post("/search", "tenant=other").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(!reply.body.contains(other.as_str()));
    let reply = c
        .post(
            "/search",
            &format!("tenant={}", form_encode("demo' OR tenant_id='other")),
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(!reply.body.contains(other.as_str()));
    let other_token = atdp_policies::KeyRing::load(&f.keys)
        .unwrap()
        .token("other", "EMAIL_ADDRESS", OTHER_EMAIL)
        .unwrap();
    let reply = c
        .post(
            &format!(
                "/reveal?trajectory={other}&tenant=other&token={}",
                form_encode(&other_token)
            ),
            "reason=audit",
        )
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(!reply.body.contains(OTHER_EMAIL));

    // Markup typed into a search field comes back escaped.
    let reply = c
        .post(
            "/search",
            &format!("text={}", form_encode("<script>alert(1)</script>")),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(!reply.body.contains("<script>alert(1)"));
    assert!(
        reply
            .body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;")
    );
    assert_eq!(
        c.post("/search", "since=yesterday").await.status,
        StatusCode::BAD_REQUEST
    );

    // The trajectory page shows masked spans by entity type, never the value.
    let reply = c
        .post(&format!("/trajectory?id={}", f.demo_trajectory), "")
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.body;
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    assert!(body.contains("class=\"entity\"><bdi>EMAIL_ADDRESS</bdi>"));
    assert!(body.contains(&token.replace('<', "&#60;").replace('>', "&#62;")));
    assert!(body.contains("lookup_customer"));
    assert!(body.contains("task_success"));
    assert!(!body.contains(EMAIL));

    // A reveal with an empty reason is refused; with one it shows the value.
    let reveal_at = format!(
        "/reveal?trajectory={}&tenant=demo&token={}",
        f.demo_trajectory,
        form_encode(&token)
    );
    let reveal = |reason: &str| format!("reason={}", form_encode(reason));
    let reply = c.post(&reveal_at, &reveal("  ")).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(!reply.body.contains(EMAIL));
    let reply = c
        .post(&reveal_at, &reveal("Subject access request #4411"))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(EMAIL));

    // The analyst may read but not reveal.
    let mut analyst = Client::new(c.base.clone());
    assert_eq!(analyst.login(DEMO_ANALYST).await, StatusCode::SEE_OTHER);
    let reply = analyst.post(&reveal_at, &reveal("curious")).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(!reply.body.contains(EMAIL));

    let reply = c.get("/audit").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains("intact"), "{}", reply.body);
    // Probing for the other tenant's trajectory left a trace.
    let n = f.sql_table(&format!(
            "SELECT count(*) AS n FROM audit WHERE kind = 'read' AND decision = 'deny' AND subject = '{other}'"
        )).await;
    assert!(n.contains("| 4 "), "{n}");
    assert!(reply.body.contains("Subject access request #4411"));
    assert!(reply.body.contains("curious"));
    server.stop().await.unwrap();
}

/// What a searcher types into any filter is written to the audit trail with the personal data
/// the detectors find redacted; a status that is not one is refused; a search outside an
/// auditor's tenants is refused and recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audited_search_redacts_every_filter_and_records_refusals() {
    let f = fixture().await;
    let catalog = f.catalog().await;
    let trail = f.trail("audited-search").await;
    let search = Search {
        agent: Some("jane.doe@example.com".into()),
        model: Some("call +44 20 7946 0958".into()),
        limit: 10,
        ..Search::default()
    };
    let operator = atdp_audit::Searcher::Operator { actor: "cli:test" };
    atdp_audit::audited_search(&catalog, &f.policy, &trail, operator, &search)
        .await
        .unwrap();
    let bogus = Search {
        status: Some("ok' OR 1=1".into()),
        limit: 10,
        ..Search::default()
    };
    let refused = atdp_audit::audited_search(&catalog, &f.policy, &trail, operator, &bogus).await;
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    let auditor = f.auditor(DEMO_AUDITOR);
    let outside = Search {
        tenant: Some("globex".into()),
        limit: 10,
        ..Search::default()
    };
    let denied = atdp_audit::audited_search(
        &catalog,
        &f.policy,
        &trail,
        atdp_audit::Searcher::Auditor(&auditor),
        &outside,
    )
    .await;
    assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");
    trail.close().await.unwrap();

    let details = f
        .audit_details("kind = 'query' AND decision = 'allow'")
        .await;
    let written = serde_json::to_string(&details).unwrap();
    assert!(
        !written.contains("jane.doe@example.com") && !written.contains("7946"),
        "{written}"
    );
    assert!(written.contains("[EMAIL_ADDRESS]"), "{written}");
    assert_eq!(
        f.audit_rows("kind = 'query' AND decision = 'deny' AND subject = 'tenant:globex'")
            .await,
        1
    );
}

/// A reason made only of invisible characters (zero-width spaces, joiners, the byte-order
/// mark, fillers, bidirectional marks) looks empty in the audit trail, so it is refused like
/// an empty one: by the library that the console and the commands share, for a reveal, an
/// erasure and a key rotation, before anything is looked up, decided or recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_of_invisible_characters_is_refused_everywhere() {
    let f = fixture().await;
    let catalog = f.catalog().await;
    let officer = f.auditor(DEMO_AUDITOR);
    let trail = f.trail("invisible").await;
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let keys = std::fs::read(&f.keys).unwrap();
    let invisible = [
        "\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}",
        "\u{FEFF}\u{2060}\u{200C}\u{200D}\u{2061}\u{2063}\u{2064}\u{180E}",
        "\u{00A0}\u{3000}\u{2800}\u{3164}\u{115F}\u{FFA0}\u{2003}\u{205F}",
        "\u{200E}\u{200F}\u{061C}\u{202E}\u{2066}\u{2069}\u{FE0F}\u{E0020}",
        "ok\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}\u{200B}",
    ];
    let refused = |result: &dyn std::fmt::Debug, message: Option<String>, what: &str| {
        let message = message.unwrap_or_else(|| panic!("{what}: accepted: {result:?}"));
        assert!(
            message.contains("at least 5 visible characters"),
            "{what}: {message}"
        );
    };
    let invalid = |e: &Error| match e {
        Error::Invalid(m) => Some(m.clone()),
        _ => None,
    };
    for reason in invisible {
        let revealed = atdp_audit::reveal(
            &catalog,
            &f.policy,
            &f.keys,
            &trail,
            &officer,
            &RevealRequest {
                trajectory_id: &f.demo_trajectory,
                tenant: Some("demo"),
                token: &token,
                reason,
            },
        )
        .await;
        refused(
            &revealed,
            revealed.as_ref().err().and_then(invalid),
            "reveal",
        );
        let erased = atdp_audit::erase(
            &f.lake,
            &f.policy,
            &f.keys,
            &trail,
            &officer,
            "demo",
            Some(EMAIL),
            reason,
        )
        .await;
        refused(&erased, erased.as_ref().err().and_then(invalid), "erase");
        let rotated =
            atdp_audit::rotate_key(&f.policy, &f.keys, &trail, &officer, "demo", reason).await;
        refused(
            &rotated,
            rotated.as_ref().err().and_then(invalid),
            "rotate-key",
        );
    }
    trail.close().await.unwrap();

    // The console's reason form says why, and shows nothing.
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);
    let reveal_at = format!(
        "/reveal?trajectory={}&tenant=demo&token={}",
        f.demo_trajectory,
        form_encode(&token)
    );
    for reason in invisible {
        let reply = c
            .post(&reveal_at, &format!("reason={}", form_encode(reason)))
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert!(
            reply.body.contains("at least 5 visible characters"),
            "{}",
            reply.body
        );
        assert!(!reply.body.contains(EMAIL));
    }
    let reply = c
        .post(&reveal_at, &format!("reason={}", form_encode("SAR #4411")))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(EMAIL));
    server.stop().await.unwrap();

    // Nothing was decided or done for the invisible reasons.
    assert_eq!(f.audit_rows("kind = 'reveal'").await, 1);
    assert_eq!(f.audit_rows("kind IN ('erase', 'key_rotation')").await, 0);
    assert_eq!(
        std::fs::read(&f.keys).unwrap(),
        keys,
        "the key file is untouched"
    );
}
