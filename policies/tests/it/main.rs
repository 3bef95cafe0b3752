//! Integration tests of the policies crate: the `atdp-policy` command.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod examples;
mod json_masking;
mod keyfile;
mod principals;
mod robustness;

use std::io::Write;
use std::process::{Command, Stdio};

fn run(args: &[&str], input: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_atdp-policy"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses its arguments exits before reading: ignore a broken pipe.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn scan_reports_byte_offsets_and_survives_bad_lines() {
    let input = concat!(
        r#"{"id": 1, "text": "é — mail jane@example.com"}"#,
        "\n",
        "{not json, secret sk-proj-should-not-echo}\n",
        r#"{"id": "b", "text": "nothing here"}"#,
        "\n",
        r#"{"id": 3}"#,
        "\n",
    );
    let output = run(&["scan"], input);
    assert_eq!(
        output.status.code(),
        Some(1),
        "malformed lines make the exit non-zero"
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["id"], 1);
    let span = &lines[0]["spans"][0];
    assert_eq!(span["entity"], "EMAIL_ADDRESS");
    // "é — mail " is 2 + 1 + 3 + 1 + 5 bytes in UTF-8.
    assert_eq!(span["start"], 12);
    assert_eq!(span["end"], 12 + "jane@example.com".len());
    assert_eq!(lines[1]["id"], "b");
    assert_eq!(lines[1]["spans"].as_array().map(Vec::len), Some(0));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("line 4"), "{stderr}");
    assert!(
        !stderr.contains("sk-proj"),
        "input text must not be echoed: {stderr}"
    );
}

#[test]
fn scan_filters_entities_and_rejects_unknown_ones() {
    let input = r#"{"id": 1, "text": "a@example.com 4111 1111 1111 1111"}"#;
    let output = run(&["scan", "--entities", "CREDIT_CARD"], input);
    assert!(output.status.success());
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let spans = line["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0]["entity"], "CREDIT_CARD");

    let output = run(&["scan", "--entities", "NOPE"], input);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown entity type"));
}

#[test]
fn keygen_then_mask() {
    let dir = std::env::temp_dir().join(format!("atdp-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.json");
    let _ = std::fs::remove_file(&keys);
    let out = run(
        &[
            "keygen",
            "--out",
            keys.to_str().unwrap(),
            "--tenant",
            "acme",
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&keys).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Existing keys are never replaced: a second keygen for the tenant leaves the file as is.
    let first = std::fs::read(&keys).unwrap();
    let again = run(
        &[
            "keygen",
            "--out",
            keys.to_str().unwrap(),
            "--tenant",
            "acme",
        ],
        "",
    );
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(std::fs::read(&keys).unwrap(), first);

    let input = r#"{"id": 7, "text": "mail jane@example.com twice: jane@example.com"}"#;
    let out = run(
        &["mask", "--keys", keys.to_str().unwrap(), "--tenant", "acme"],
        input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = line["text"].as_str().unwrap();
    assert!(!text.contains("jane@example.com"), "{text}");
    let token = line["spans"][0]["token"].as_str().unwrap();
    assert_eq!(text, format!("mail {token} twice: {token}"));
    assert_eq!(line["vault"].as_array().map(Vec::len), Some(1));
    assert_eq!(line["vault"][0]["key_id"], "k1");

    let redacted = run(
        &[
            "mask",
            "--keys",
            keys.to_str().unwrap(),
            "--tenant",
            "acme",
            "--action",
            "redact",
        ],
        input,
    );
    let line: serde_json::Value = serde_json::from_slice(&redacted.stdout).unwrap();
    assert_eq!(line["text"], "mail [EMAIL_ADDRESS] twice: [EMAIL_ADDRESS]");

    // A tenant without keys: refused, nothing written unmasked.
    let refused = run(
        &[
            "mask",
            "--keys",
            keys.to_str().unwrap(),
            "--tenant",
            "globex",
        ],
        input,
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stdout.is_empty());
    assert!(!String::from_utf8_lossy(&refused.stderr).contains("jane@"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn quickstart() -> std::path::PathBuf {
    atdp_testkit::repo_root().join("policies/examples/quickstart")
}

#[test]
fn check_accepts_the_quickstart_and_locates_every_problem() {
    let ok = run(&["check", quickstart().to_str().unwrap()], "");
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(ok.stdout.is_empty());

    let dir = tempfile::tempdir().unwrap();
    for name in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(quickstart().join(name), dir.path().join(name)).unwrap();
    }
    // Line 3: an attribute the schema lacks; line 6: a syntax error.
    std::fs::write(
        dir.path().join("policies.cedar"),
        "@id(\"a\")\npermit (principal, action == Atdp::Action::\"invoke_model\", resource)\nwhen { principal.activ };\n\n@id(\"b\")\npermit (principal, action, resource) when { ;\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("masking.toml"),
        "[[detection.entity]]\nname = \"ORDER\"\npattern = '(unclosed'\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("training.toml"),
        "[[rule]]\nname = \"r\"\nupstream_trust = [\"partner\"]\neligible = false\n",
    )
    .unwrap();
    let bad = run(&["check", dir.path().to_str().unwrap()], "");
    assert_eq!(bad.status.code(), Some(1));
    let stdout = String::from_utf8(bad.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("policies.cedar:6:")),
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("masking.toml:3:11:") && l.contains("ORDER")),
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("training.toml: rule 1") && l.contains("\"partner\"")),
        "{stdout}"
    );

    // Once the syntax error is gone, validation reports the unknown attribute on line 3.
    std::fs::write(
        dir.path().join("policies.cedar"),
        "@id(\"a\")\npermit (principal, action == Atdp::Action::\"invoke_model\", resource)\nwhen { principal.activ };\n",
    )
    .unwrap();
    let bad = run(&["check", dir.path().to_str().unwrap()], "");
    let stdout = String::from_utf8(bad.stdout).unwrap();
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("policies.cedar:3:") && l.contains("activ")),
        "{stdout}"
    );
    let missing = run(&["check", "/nonexistent/policy"], "");
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn scan_and_mask_use_the_policy_files_custom_entities() {
    let dir = quickstart();
    let input = concat!(
        r#"{"id": 1, "text": "Project bluebird ships with customer CUST-004211. Unrelated: the build log mentions ref CUST-000001."}"#,
        "\n"
    );
    let output = run(&["scan", "--policy", dir.to_str().unwrap()], input);
    assert_eq!(output.status.code(), Some(0));
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let found: Vec<(&str, u64)> = line["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["entity"].as_str().unwrap(), s["start"].as_u64().unwrap()))
        .collect();
    // The second customer id has no context word nearby: 0.4 is under the threshold.
    assert_eq!(found, [("PROJECT_CODENAME", 8), ("CUSTOMER_ID", 37)]);

    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("keys.json");
    let made = run(
        &[
            "keygen",
            "--out",
            key_file.to_str().unwrap(),
            "--tenant",
            "acme",
        ],
        "",
    );
    assert!(made.status.success());
    let input = concat!(
        r#"{"id": 1, "text": "Bluebird key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789, account CUST-123456"}"#,
        "\n"
    );
    let output = run(
        &[
            "mask",
            "--keys",
            key_file.to_str().unwrap(),
            "--tenant",
            "acme",
            "--policy",
            dir.to_str().unwrap(),
        ],
        input,
    );
    assert_eq!(output.status.code(), Some(0));
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let text = line["text"].as_str().unwrap();
    // Storage actions of the quickstart: secrets redacted, everything else tokenized.
    assert!(text.contains("[SECRET]"), "{text}");
    assert!(text.starts_with("<PROJECT_CODENAME_"), "{text}");
    assert!(text.contains("account <CUSTOMER_ID_"), "{text}");
    assert_eq!(line["vault"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_missing_policy_directory_is_an_error() {
    let output = run(
        &["scan", "--policy", "/nonexistent/policy"],
        "{\"id\":1,\"text\":\"x\"}\n",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not exist"));
}
