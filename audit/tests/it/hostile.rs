//! What a hostile agent records cannot steer the console. An agent chooses its trajectory id
//! (`x-atdp-trajectory-id`) and everything in its messages: ids made of `/`, `..`, `?`, `#`,
//! `%`, spaces, control and non-ASCII characters still open, export, reveal and show their
//! full text, through the console's own buttons, and are recorded as exactly themselves;
//! recorded roles, names and ids never reach an attribute or a class name, and every piece
//! of recorded text is isolated in `<bdi>` with its bidirectional controls made visible.

use atdp_schema::{Message, PiiSpan, Reward, ToolCall, new_id, now_micros};
use reqwest::StatusCode;

use crate::client::{Client, form_encode};
use crate::common::*;
use crate::html::*;

/// The agent of the hostile trajectories.
pub const HOSTILE_AGENT: &str = "hostile-agent";

/// Trajectory ids a client can choose (and imported data can hold).
pub fn hostile_ids(f: &Fixture) -> Vec<String> {
    vec![
        "../logout".into(),
        "a/b?c=1&tenant=other#d".into(),
        "..".into(),
        ".".into(),
        "/".into(),
        "100% %2F%2e%2E%00 done".into(),
        "ünï cødé ☃ +plus".into(),
        "ctl\u{1}\u{7f}\ttab".into(),
        format!("{}/export", f.demo_trajectory),
    ]
}

/// What the hostile trajectories' user message says: an e-mail address (masked, revealable),
/// then more than a page shows.
pub fn long_text() -> String {
    format!("My e-mail is {EMAIL}. {}", "lorem ipsum ".repeat(600))
}

/// Writes one trajectory of one step per hostile id into `demo`; returns the stored (masked)
/// user message.
pub async fn write_hostile(f: &Fixture) -> String {
    let (masked, spans, _) = f.mask("demo", "request_messages[0].content", &long_text());
    let steps = hostile_ids(f)
        .into_iter()
        .map(|id| {
            let mut s = step("demo", HOSTILE_AGENT, &id, None, 0);
            s.request_messages = vec![Message {
                role: "user".into(),
                content: Some(masked.clone()),
                ..Message::default()
            }];
            s.response_message = Some(Message {
                role: "assistant".into(),
                content: Some("Noted.".into()),
                ..Message::default()
            });
            s.pii = spans.clone();
            s
        })
        .collect();
    f.append("wal-hostile", steps, Vec::new(), Vec::new()).await;
    masked
}

/// A recorded value holding the marker `ZQ-<name>`, a space, bidirectional controls, a
/// paragraph separator and markup.
pub fn marked(name: &str) -> String {
    format!("ZQ-{name} \u{202E}evil\u{2067}x\u{2029}y\u{200F}<b>")
}

/// Writes a trajectory whose every recorded text field is [`marked`] (its role is
/// `banner ok`, the class of the console's own status banner), started a day from now so
/// that it is the newest step; returns its id.
pub async fn write_probe(f: &Fixture) -> String {
    let id = marked("trajectory");
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let mut s = step("demo", &marked("agent"), &id, None, 0);
    s.step_id = marked("step");
    s.started_at = now_micros() + 86_400_000_000;
    s.api = marked("api");
    s.model_requested = marked("model");
    s.upstream = marked("upstream");
    s.status = marked("status");
    s.error = Some(marked("error"));
    s.finish_reason = Some(marked("finish"));
    s.request_messages = vec![
        Message {
            role: "banner ok ZQ-role".into(),
            name: Some(marked("name")),
            tool_call_id: Some(marked("tool_call_id")),
            content: Some(format!("{} {token} {}", marked("content"), marked("after"))),
            ..Message::default()
        },
        Message {
            role: marked("role"),
            content: Some(marked("second")),
            ..Message::default()
        },
    ];
    s.response_message = Some(Message {
        role: "assistant".into(),
        content: Some(marked("reply")),
        tool_calls: vec![ToolCall {
            id: marked("call_id"),
            name: marked("tool"),
            arguments: marked("arguments"),
        }],
        ..Message::default()
    });
    s.pii = vec![PiiSpan {
        field: "request_messages[0].content".into(),
        entity: marked("entity"),
        token,
        action: "tokenize".into(),
    }];
    let reward = |step_id: Option<String>| Reward {
        reward_id: new_id(),
        trajectory_id: id.clone(),
        step_id,
        tenant_id: "demo".into(),
        name: marked("reward"),
        value: 1.0,
        source: marked("source"),
        created_at: now_micros(),
        ..Reward::default()
    };
    let rewards = vec![reward(None), reward(Some(s.step_id.clone()))];
    f.append("wal-probe", vec![s], Vec::new(), rewards).await;
    id
}

/// Every link and form target of `html` is strict; no other attribute holds recorded text;
/// every class is one of the console's.
fn assert_no_recorded_attribute(html: &str, what: &str) {
    for (tag, key, value) in attributes(html) {
        if key == "href" || key == "action" {
            assert_strict(&value);
            continue;
        }
        assert!(
            !value.contains("ZQ-"),
            "{what}: <{tag} {key}={value:?}> holds recorded text"
        );
        if key == "class" {
            for class in value.split_whitespace() {
                assert!(
                    CLASSES.contains(&class),
                    "{what}: <{tag} class={value:?}>: {class:?} is not a class of the console"
                );
            }
        }
    }
}

/// The page's recorded text is isolated, its controls visible, its markup escaped.
fn assert_recorded_text_isolated(html: &str, what: &str) {
    assert_isolated(html, "ZQ-", what);
    for c in ['\u{202E}', '\u{2067}', '\u{2029}', '\u{200F}'] {
        assert!(!html.contains(c), "{what}: a raw {c:?} is on the page");
    }
    assert!(html.contains("[U+202E]"), "{what}: the override is shown");
    assert!(!html.contains("<b>"), "{what}: recorded markup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_trajectory_ids_open_export_reveal_and_are_recorded_exactly() {
    let f = fixture().await;
    let masked = write_hostile(&f).await;
    let ids = hostile_ids(&f);
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);

    let search = c
        .post("/search", &format!("agent={}", form_encode(HOSTILE_AGENT)))
        .await;
    assert_eq!(search.status, StatusCode::OK);
    links(&search.body).iter().for_each(|u| assert_strict(u));
    let opens = targets(&search.body, "/trajectory");
    assert_eq!(opens.len(), ids.len(), "one open button per hit");

    let mut opened = Vec::new();
    for open in &opens {
        // The button posts to the trajectory URL with the id as one query value.
        assert!(open.starts_with("/trajectory?id="), "{open}");
        let page = c.post(open, "").await;
        assert_eq!(page.status, StatusCode::OK, "{open}: {}", page.body);
        let id = heading_id(&page.body).unwrap();
        assert_eq!(query_value(open, "id").as_deref(), Some(id.as_str()));
        for link in links(&page.body) {
            assert_strict(&link);
        }
        // The GET of the same URL shows an "Open" button that posts to it.
        let button = c.get(open.split('#').next().unwrap()).await;
        assert_eq!(button.status, StatusCode::OK);
        assert_eq!(
            targets(&button.body, "/trajectory"),
            [open.split('#').next().unwrap().to_owned()]
        );

        // Export, full text and reveal, through the page's own buttons.
        let export = targets(&page.body, "/trajectory/export");
        assert_eq!(export.len(), 1, "{id:?}");
        let bundle = c.post(&export[0], "").await;
        assert_eq!(bundle.status, StatusCode::OK, "{id:?}: {}", bundle.body);
        let bundle: serde_json::Value = serde_json::from_str(&bundle.body).unwrap();
        let row: serde_json::Value =
            serde_json::from_str(bundle["rows"][0]["row_json"].as_str().unwrap()).unwrap();
        assert_eq!(row["trajectory_id"], id.as_str());

        let text = targets(&page.body, "/trajectory/text");
        assert_eq!(
            text.len(),
            1,
            "{id:?}: the long message has a full-text button"
        );
        let full = c.post(&text[0], "").await;
        assert_eq!(full.status, StatusCode::OK, "{id:?}: {}", full.body);
        assert_eq!(full.body, masked, "{id:?}");

        let reveals = targets(&page.body, "/reveal");
        assert!(!reveals.is_empty(), "{id:?}: a revealable span");
        let form = c.get(&reveals[0]).await;
        assert_eq!(form.status, StatusCode::OK);
        links(&form.body).iter().for_each(|u| assert_strict(u));
        let post = targets(&form.body, "/reveal");
        assert_eq!(
            post,
            [reveals[0].clone()],
            "the reason form posts to its own URL"
        );
        let revealed = c
            .post(
                &post[0],
                &format!("reason={}", form_encode("Hostile id review")),
            )
            .await;
        assert_eq!(revealed.status, StatusCode::OK, "{id:?}: {}", revealed.body);
        assert!(revealed.body.contains(EMAIL), "{id:?}");
        opened.push(id);
    }
    let mut expected = ids.clone();
    expected.sort();
    opened.sort();
    assert_eq!(opened, expected);
    // Still logged in: no button posted to /logout.
    assert_eq!(c.get("/search").await.status, StatusCode::OK);
    server.stop().await.unwrap();

    // Each id was recorded as itself: a read of its page and of its full text, an export, a
    // reveal in it.
    let mut reads = f
        .audit_column("subject", "kind = 'read' AND decision = 'allow'")
        .await;
    reads.sort();
    let twice: Vec<String> = expected
        .iter()
        .flat_map(|id| [id.clone(), id.clone()])
        .collect();
    assert_eq!(reads, twice);
    let mut exports = f.audit_column("subject", "kind = 'export'").await;
    exports.sort();
    assert_eq!(exports, expected);
    let mut revealed_in: Vec<String> = f
        .audit_details("kind = 'reveal' AND decision = 'allow'")
        .await
        .iter()
        .map(|d| d["trajectory_id"].as_str().unwrap().to_owned())
        .collect();
    revealed_in.sort();
    assert_eq!(revealed_in, expected);
    assert_eq!(f.audit_rows("decision = 'deny'").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_fields_are_isolated_text_never_attributes_or_classes() {
    let f = fixture().await;
    let id = write_probe(&f).await;
    let server = f.console().await;
    let mut c = Client::new(format!("http://{}", server.addr));
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);

    let search = c.post("/search", "").await;
    assert_eq!(search.status, StatusCode::OK);
    assert_no_recorded_attribute(&search.body, "search");
    assert_recorded_text_isolated(&search.body, "search");
    let open = targets(&search.body, "/trajectory")[0].clone();
    assert_eq!(query_value(&open, "id").as_deref(), Some(id.as_str()));

    let page = c.post(&open, "").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_no_recorded_attribute(&page.body, "trajectory");
    assert_recorded_text_isolated(&page.body, "trajectory");
    for name in [
        "trajectory",
        "step",
        "agent",
        "api",
        "model",
        "upstream",
        "status",
        "error",
        "finish",
        "name",
        "tool_call_id",
        "content",
        "after",
        "role",
        "second",
        "reply",
        "call_id",
        "tool",
        "arguments",
        "entity",
        "reward",
        "source",
    ] {
        assert!(
            page.body.contains(&format!("ZQ-{name} ")),
            "{name} is shown"
        );
    }
    // The role `banner ok` is shown as text, its message styled as an unknown role.
    assert!(page.body.contains("<bdi>banner ok ZQ-role</bdi>"));
    assert_eq!(page.body.matches("class=\"msg role-other\"").count(), 2);
    assert!(!page.body.contains("class=\"banner"));
    // The hit is marked by the console's own anchor.
    assert_eq!(page.body.matches("id=\"hit\"").count(), 1);

    let reveal = targets(&page.body, "/reveal")[0].clone();
    let form = c.get(&reveal).await;
    assert_no_recorded_attribute(&form.body, "reveal form");
    assert_recorded_text_isolated(&form.body, "reveal form");

    // An export is committed at once: the audit page lists it, with the id as its subject.
    let export = targets(&page.body, "/trajectory/export")[0].clone();
    assert_eq!(c.post(&export, "").await.status, StatusCode::OK);
    let audit = c.get("/audit").await;
    assert_no_recorded_attribute(&audit.body, "audit");
    assert_recorded_text_isolated(&audit.body, "audit");

    // An error page that quotes the id shows its controls instead of obeying them.
    let missing = c
        .post(
            &format!("/trajectory?id={}", form_encode(&format!("{id}-gone"))),
            "",
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(!missing.body.contains('\u{202E}'));
    assert!(missing.body.contains("[U+202E]"));
    server.stop().await.unwrap();
}
