//! `atdp-audit` as a command: query formats, read-only SQL, export, and an evidence bundle
//! checked by an independent script (`tests/python/check_evidence.py`), tampered and not.

use atdp_testkit::python;
use std::process::{Command, Output};

use crate::common::*;

fn cli(f: &Fixture, wal: &str, args: &[&str]) -> Output {
    f.command(wal).args(args).output().unwrap()
}

fn check_evidence(path: &std::path::Path) -> Output {
    Command::new(python())
        .arg(atdp_testkit::repo_root().join("tests/python/check_evidence.py"))
        .arg(path)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_sql_export_and_an_independently_checked_bundle() {
    let f = fixture().await;

    // query, as the demo auditor: JSON lines of the demo steps only.
    let out = stdout(&cli(
        &f,
        "wal-q",
        &[
            "query",
            "--auditor-key",
            DEMO_AUDITOR,
            "--entity",
            "EMAIL_ADDRESS",
            "--format",
            "json",
        ],
    ));
    let hits: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(hits.len(), 2, "{out}");
    assert!(hits.iter().all(|h| h["tenant_id"] == "demo"));
    // CSV has a header and one line per hit; an auditor cannot ask for another tenant.
    let csv = stdout(&cli(
        &f,
        "wal-q",
        &["query", "--auditor-key", DEMO_AUDITOR, "--format", "csv"],
    ));
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("started_at,tenant,agent,trajectory_id"));
    let denied = cli(
        &f,
        "wal-q",
        &["query", "--auditor-key", DEMO_AUDITOR, "--tenant", "other"],
    );
    assert_eq!(denied.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("denied"));

    // sql: reads, never writes.
    let counted = stdout(&cli(
        &f,
        "wal-q",
        &[
            "sql",
            "SELECT tenant_id, count(*) AS n FROM steps GROUP BY tenant_id ORDER BY tenant_id",
            "--format",
            "csv",
        ],
    ));
    assert_eq!(counted.trim(), "tenant_id,n\ndemo,2\nother,1", "{counted}");
    let refused = cli(&f, "wal-q", &["sql", "DELETE FROM steps"]);
    assert_eq!(refused.status.code(), Some(2));
    // Recorded text is printed inert: no spreadsheet formula in CSV (strings read from the
    // lake come as views), no terminal escape in a table.
    let cells = stdout(&cli(
        &f,
        "wal-q",
        &[
            "sql",
            "SELECT arrow_cast('=HYPERLINK(1)', 'Utf8View') AS a, '+1' AS b, 'plain' AS c",
            "--format",
            "csv",
        ],
    ));
    assert_eq!(cells.trim(), "a,b,c\n'=HYPERLINK(1),'+1,plain", "{cells}");
    let table = stdout(&cli(
        &f,
        "wal-q",
        &["sql", "SELECT chr(27) || '[2J' || chr(8238) AS t"],
    ));
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{202e}'),
        "{table}"
    );
    assert!(table.contains("\\u{1b}[2J\\u{202e}"), "{table}");

    // export, then check the bundle with a script that knows nothing of atdp.
    let bundle_path = f.dir.path().join("evidence.json");
    stdout(&cli(
        &f,
        "wal-q",
        &[
            "export",
            "--auditor-key",
            DEMO_AUDITOR,
            "--trajectory",
            &f.demo_trajectory,
            "--out",
            bundle_path.to_str().unwrap(),
        ],
    ));
    let bundle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bundle_path).unwrap()).unwrap();
    assert_eq!(
        bundle["rows"].as_array().unwrap().len(),
        4,
        "2 steps, 2 rewards"
    );
    let checked = check_evidence(&bundle_path);
    let report: serde_json::Value = serde_json::from_str(&stdout(&checked)).unwrap();
    // The anchor is in the lake, in an intact chain.
    let anchor_hash = stdout(&cli(
        &f,
        "wal-q",
        &[
            "sql",
            &format!(
                "SELECT hash FROM audit WHERE event_id = '{}'",
                report["event_id"].as_str().unwrap()
            ),
            "--format",
            "csv",
        ],
    ));
    assert_eq!(
        anchor_hash.lines().nth(1),
        report["hash"].as_str(),
        "{anchor_hash}"
    );
    let verified = atdp_audit::verify(&f.lake, None).await.unwrap();
    assert!(verified.ok(), "{:?}", verified.first_problem());

    // One changed character in a row, or a dropped row, is caught.
    let text = std::fs::read_to_string(&bundle_path).unwrap();
    let tampered = f.dir.path().join("tampered.json");
    std::fs::write(&tampered, text.replacen("demo-agent", "demo-agenT", 1)).unwrap();
    let caught = check_evidence(&tampered);
    assert_eq!(caught.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&caught.stdout).contains("altered"));
    let mut dropped = bundle.clone();
    dropped["rows"].as_array_mut().unwrap().pop();
    std::fs::write(&tampered, serde_json::to_string(&dropped).unwrap()).unwrap();
    assert_eq!(check_evidence(&tampered).status.code(), Some(1));

    // The other tenant's trajectory does not export.
    let other = cli(
        &f,
        "wal-q",
        &[
            "export",
            "--auditor-key",
            DEMO_AUDITOR,
            "--trajectory",
            &f.other_trajectory,
        ],
    );
    assert_eq!(other.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&other.stdout).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_announces_its_address_and_commits_its_events_on_sigterm() {
    use std::io::BufRead;

    let f = fixture().await;
    let mut child = f
        .command("wal-serve")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let listen: serde_json::Value = serde_json::from_str(&line).unwrap();
    let base = format!("http://{}", listen["listen"].as_str().unwrap());
    let mut client = crate::client::Client::new(base);
    assert_eq!(client.get("/healthz").await.status, reqwest::StatusCode::OK);
    assert_eq!(
        client.login(DEMO_AUDITOR).await,
        reqwest::StatusCode::SEE_OTHER
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    // The login event reached the lake before the process exited.
    let text = f
        .sql_table("SELECT count(*) AS n FROM audit WHERE kind = 'login' AND decision = 'allow'")
        .await;
    assert!(text.contains("| 1 "), "{text}");
}
