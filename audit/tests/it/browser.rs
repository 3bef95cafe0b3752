//! End to end in a real browser: Debian's Chromium, headless, driven through chromedriver by
//! `tests/python/console_browser.py` (selenium), against the console serving the fixture lake.
//! With `ATDP_SCREENSHOT_DIR` set, the trajectory page's screenshot is kept there (that is
//! how `docs/console-trajectory.png` is made).

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_finds_reads_reveals_and_sees_the_reveal_audited() {
    let f = fixture().await;
    let server = f.console().await;
    let screenshot = match std::env::var_os("ATDP_SCREENSHOT_DIR") {
        Some(dir) => std::path::PathBuf::from(dir).join("console-trajectory.png"),
        None => f.dir.path().join("trajectory.png"),
    };
    let python = std::env::var("ATDP_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = crate::common::manifest_dir().join("../tests/python/console_browser.py");
    let reason = "Subject access request #4411";
    let base = format!("http://{}", server.addr);
    let shot = screenshot.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(["--base", &base, "--key", DEMO_AUDITOR, "--reason", reason])
            .arg("--screenshot")
            .arg(&shot)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "browser run failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(seen["after_login"], "/search", "{seen}");
    assert_eq!(seen["search_hits"], 2, "{seen}");
    assert!(
        seen["trajectory_title"]
            .as_str()
            .unwrap()
            .contains(&f.demo_trajectory),
        "{seen}"
    );
    assert_eq!(
        seen["masked_entities"],
        serde_json::json!(["CREDIT_CARD", "EMAIL_ADDRESS"]),
        "{seen}"
    );
    // system, user, tool call, tool result, reply: every message is on the page, masked.
    assert_eq!(seen["messages"], 5, "{seen}");
    assert_eq!(seen["page_text_has_at_sign"], false, "{seen}");
    assert_eq!(seen["revealed"], EMAIL, "{seen}");
    assert!(
        seen["chain_status"].as_str().unwrap().contains("intact"),
        "{seen}"
    );
    let rows = seen["audit_rows_with_reason"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{seen}");
    let row = rows[0].as_str().unwrap();
    assert!(row.contains("reveal") && row.contains("allow"), "{row}");
    let png = std::fs::read(&screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
    server.stop().await.unwrap();
}
