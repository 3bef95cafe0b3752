//! End to end in a real browser: Debian's Chromium, headless, driven through chromedriver by
//! `tests/python/console_browser.py` (selenium), against the console serving the fixture lake.
//! The browser goes through the console's token-carrying forms, and a page of another origin
//! tries to post them, to log the browser in as someone else, and to frame the console: only
//! a browser shows which cookies and headers it really sends, and what it really renders.
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
    let script = atdp_testkit::repo_root().join("tests/python/console_browser.py");
    let reason = "Subject access request #4411";
    let base = format!("http://{}", server.addr);
    let shot = screenshot.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(["--base", &base, "--key", DEMO_AUDITOR, "--reason", reason])
            .args(["--attacker-key", DEMO_ANALYST])
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
    // The base style block ran under the Content-Security-Policy, and nothing was refused.
    assert_eq!(seen["header_background"], "rgb(29, 35, 48)", "{seen}");
    assert_eq!(seen["csp_violations"], serde_json::json!([]), "{seen}");
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
        serde_json::json!(["CREDIT_CARD", "EMAIL_ADDRESS", "ORGANIZATION", "PERSON"]),
        "{seen}"
    );
    assert_eq!(seen["page_text_has_names"], serde_json::json!([]), "{seen}");
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
    assert_eq!(seen["audit_rows_forged"], serde_json::json!([]), "{seen}");

    // Another site's posts reach the console with the session cookie, and are refused.
    let refused = serde_json::json!({ "heading": "Refused", "revealed": false });
    assert_eq!(seen["forged_reveal"], refused, "{seen}");
    assert_eq!(seen["forged_reveal_with_leaked_token"], refused, "{seen}");
    assert_eq!(
        seen["forged_login"],
        serde_json::json!({ "heading": "Log in", "revealed": false }),
        "{seen}"
    );
    assert_eq!(seen["same_auditor_after_forged_login"], true, "{seen}");
    assert_eq!(seen["framed_console_shown"], false, "{seen}");
    assert_eq!(seen["framing_refused_by_csp"], true, "{seen}");

    let png = std::fs::read(&screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
    server.stop().await.unwrap();

    // One reveal happened; the three forged posts are counted evidence, not actions.
    assert_eq!(f.audit_rows("kind = 'reveal'").await, 1);
    let forged = f.audit_details("kind = 'forged_request'").await;
    let outcome = |form: &str| -> u64 {
        forged
            .iter()
            .filter_map(|d| d["outcomes"][form].as_u64())
            .sum()
    };
    assert_eq!((outcome("reveal"), outcome("login")), (2, 1), "{forged:?}");
}

/// A hostile agent's recorded data in a real browser: the "Open" buttons of ids that look
/// like paths land on those trajectories (not on `/logout`, not on another trajectory's
/// export), a long message's full text opens as plain text, and on a trajectory whose every
/// field holds bidirectional overrides and isolates Chromium draws every word of the
/// console's own text in order, and no recorded role styles a message as the console's
/// banner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_recorded_data_cannot_move_the_consoles_buttons_or_words() {
    let f = fixture().await;
    let masked = crate::hostile::write_hostile(&f).await;
    crate::hostile::write_probe(&f).await;
    let server = f.console().await;
    let python = std::env::var("ATDP_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = atdp_testkit::repo_root().join("tests/python/console_hostile.py");
    let base = format!("http://{}", server.addr);
    let ids = ["../logout", "a/b?c=1&tenant=other#d"];
    let output = tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(python);
        command.arg(script).args([
            "--base",
            &base,
            "--key",
            DEMO_AUDITOR,
            "--probe-marker",
            "ZQ-",
        ]);
        for id in ids {
            command.args(["--id", id]);
        }
        command.output().unwrap()
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
    for id in ids {
        assert_eq!(
            seen["opened"][id],
            serde_json::json!({
                "path": "/trajectory",
                "heading": format!("Trajectory {id}"),
                "signed_in": true,
            }),
            "{seen}"
        );
    }
    assert_eq!(seen["full_text"]["content_type"], "text/plain", "{seen}");
    assert_eq!(seen["full_text"]["starts"], "My e-mail is ", "{seen}");
    let length = seen["full_text"]["length"].as_u64().unwrap() as usize;
    assert!(
        (masked.len() - 2..=masked.len()).contains(&length),
        "{length} of {} characters: {seen}",
        masked.len()
    );
    assert_eq!(seen["probe_shown"], true, "{seen}");
    assert_eq!(seen["probe_overrides_shown"], true, "{seen}");
    assert!(seen["probe_isolates"].as_u64().unwrap() >= 20, "{seen}");
    assert_eq!(seen["probe_misordered"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["probe_banners"], 0, "{seen}");
    assert_eq!(seen["probe_hit_marked"], 1, "{seen}");
    server.stop().await.unwrap();
}
