//! A transcript page is bounded whatever the trajectory holds: a hostile agent's 2 MiB
//! message and 12 MiB of `<` (which once made a 126 MB page) show as short previews, steps
//! come a page at a time, and the full text of a message is one audited request away.

use atdp_audit::{MESSAGES_PER_PAGE, STEPS_PER_PAGE};
use atdp_schema::{Message, now_micros};
use reqwest::StatusCode;

use crate::client::{Client, Origin};
use crate::common::*;
use crate::html::*;

/// The most bytes of HTML a transcript page may take.
const PAGE_BOUND: usize = 400 * 1024;

struct Huge {
    id: String,
    /// Step ids in start order.
    steps: Vec<String>,
    two_mib: String,
    twelve_mib: String,
}

/// One trajectory of 32 root steps: a 2 MiB message, 12 MiB of `<`, then 30 steps of four
/// 20 KiB messages full of characters that HTML escapes.
async fn write_huge(f: &Fixture) -> Huge {
    let id = "huge-trajectory".to_owned();
    let two_mib: String = "All work and no play. ".repeat(2 * 1024 * 1024 / 22 + 1);
    let twelve_mib = "<".repeat(12 * 1024 * 1024);
    let noisy = "<&\"'>".repeat(4 * 1024);
    let start = now_micros();
    let mut steps = Vec::new();
    for n in 0..32 {
        let mut s = step("demo", "huge-agent", &id, None, n);
        s.started_at = start + i64::from(n) * 1_000_000;
        s.request_messages = match n {
            0 => vec![message("user", &two_mib)],
            1 => vec![message("tool", &twelve_mib)],
            _ => (0..4).map(|_| message("user", &noisy)).collect(),
        };
        s.response_message = None;
        steps.push(s);
    }
    let ids = steps.iter().map(|s| s.step_id.clone()).collect();
    f.append("wal-huge", steps, Vec::new(), Vec::new()).await;
    Huge {
        id,
        steps: ids,
        two_mib,
        twelve_mib,
    }
}

fn message(role: &str, text: &str) -> Message {
    Message {
        role: role.into(),
        content: Some(text.to_owned()),
        ..Message::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_trajectory_is_paged_and_its_full_text_is_one_request_away() {
    let f = fixture().await;
    let huge = write_huge(&f).await;
    let server = f.console().await;
    let base = format!("http://{}", server.addr);
    let mut c = Client::new(base.clone());
    assert_eq!(c.login(DEMO_AUDITOR).await, StatusCode::SEE_OTHER);

    // Page through it with the pages' own buttons.
    let mut url = format!("/trajectory?id={}&tenant=demo", huge.id);
    let mut pages = Vec::new();
    loop {
        let page = c.post(&url, "").await;
        assert_eq!(
            page.status,
            StatusCode::OK,
            "{url}: {}",
            &page.body[..500.min(page.body.len())]
        );
        assert!(
            page.body.len() < PAGE_BOUND,
            "{url}: a page of {} bytes",
            page.body.len()
        );
        let steps = page.body.matches("<section class=\"step").count();
        assert!(
            (1..=STEPS_PER_PAGE).contains(&steps),
            "{url}: {steps} steps"
        );
        let messages = page.body.matches("<div class=\"msg ").count();
        assert!(messages <= MESSAGES_PER_PAGE, "{url}: {messages} messages");
        let next: Vec<String> = targets(&page.body, "/trajectory")
            .into_iter()
            .filter(|u| {
                query_value(u, "page").map(|p| p.parse::<usize>().unwrap()) == Some(pages.len() + 1)
            })
            .collect();
        pages.push(page.body);
        match next.first() {
            Some(next) => url = next.clone(),
            None => break,
        }
    }
    assert_eq!(pages.len(), 32_usize.div_ceil(STEPS_PER_PAGE));
    // Every step is shown, on exactly one page, in order.
    for (n, step_id) in huge.steps.iter().enumerate() {
        let on: Vec<usize> = (0..pages.len())
            .filter(|p| pages[*p].contains(step_id.as_str()))
            .collect();
        assert_eq!(on, [n / STEPS_PER_PAGE], "step {n}");
    }
    assert!(pages[0].contains("page 1 of 4"));
    assert!(pages[3].contains("← previous page"));

    // The long messages' full text, through their own buttons: all of it, as plain text.
    let texts = targets(&pages[0], "/trajectory/text");
    let button = |step: &str| {
        texts
            .iter()
            .find(|u| query_value(u, "step").as_deref() == Some(step))
            .unwrap_or_else(|| panic!("no full-text button for step {step}: {texts:?}"))
            .clone()
    };
    for (step, expected) in [
        (&huge.steps[0], &huge.two_mib),
        (&huge.steps[1], &huge.twelve_mib),
    ] {
        let target = button(step);
        let reply = c.post(&target, "").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(reply.body.len(), expected.len());
        assert!(reply.body == *expected, "the whole text, unchanged");

        // Under the same rules as the page: the session's form, the trajectory's tenant.
        let forged = c.post_as(&target, "", None, Origin::Own).await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN);
        let elsewhere = c
            .post(&target.replace("tenant=demo", "tenant=other"), "")
            .await;
        assert_eq!(elsewhere.status, StatusCode::NOT_FOUND);
        assert!(!elsewhere.body.contains("All work"));
        let anonymous = Client::new(base.clone()).post(&target, "").await;
        assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    }
    // A message that is not there.
    let missing = c
        .post(
            &format!(
                "/trajectory/text?id={}&tenant=demo&step={}&message=7",
                huge.id, huge.steps[0]
            ),
            "",
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    // A search hit opens the page that holds its step, marked.
    let last = &huge.steps[31];
    let hit = c
        .post(
            &format!("/trajectory?id={}&tenant=demo&step={last}", huge.id),
            "",
        )
        .await;
    assert_eq!(hit.status, StatusCode::OK);
    assert!(hit.body.contains("page 4 of 4"));
    assert_eq!(hit.body.matches("id=\"hit\"").count(), 1);
    let past = c
        .post(
            &format!("/trajectory?id={}&tenant=demo&page=4", huge.id),
            "",
        )
        .await;
    assert_eq!(past.status, StatusCode::NOT_FOUND);
    server.stop().await.unwrap();

    // Each full text read is recorded, naming its step and size.
    let reads = f
        .audit_details(&format!(
            "kind = 'read' AND decision = 'allow' AND subject = '{}'",
            huge.id
        ))
        .await;
    let mut texts: Vec<(String, u64)> = reads
        .iter()
        .filter(|d| d.get("bytes").is_some())
        .map(|d| {
            (
                d["step_id"].as_str().unwrap().to_owned(),
                d["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    texts.sort();
    let mut expected = vec![
        (huge.steps[0].clone(), huge.two_mib.len() as u64),
        (huge.steps[1].clone(), huge.twelve_mib.len() as u64),
    ];
    expected.sort();
    assert_eq!(texts, expected);
    assert_eq!(
        reads.len(),
        4 + 2 + 1,
        "four pages, two texts, the hit's page"
    );
}
