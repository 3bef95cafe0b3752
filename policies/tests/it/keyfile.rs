//! `atdp-policy keygen` on a key file that other processes change at the same time.

use std::process::{Command, Output, Stdio};

use atdp_policies::KeyFile;

fn keygen(out: &std::path::Path, tenants: &[&str]) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atdp-policy"));
    command.arg("keygen").arg("--out").arg(out);
    for tenant in tenants {
        command.args(["--tenant", tenant]);
    }
    command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finished(child: std::process::Child) -> Output {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn keygen_processes_racing_on_one_file_keep_every_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.json");
    let names: Vec<[String; 2]> = (0..12)
        .map(|i| [format!("p{i}-a"), format!("p{i}-b")])
        .collect();
    let children: Vec<_> = names.iter().map(|[a, b]| keygen(&keys, &[a, b])).collect();
    for child in children {
        finished(child);
    }
    let ring = KeyFile::new(&keys).load().unwrap();
    let mut expected: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
    expected.sort();
    assert_eq!(ring.tenants().collect::<Vec<_>>(), expected);
}

#[test]
fn keygen_adds_tenants_and_leaves_existing_keys_alone() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.json");
    finished(keygen(&keys, &["acme"]));
    let token = |tenant: &str| {
        KeyFile::new(&keys)
            .load()
            .unwrap()
            .token(tenant, "PERSON", "Ana")
            .unwrap()
    };
    let before = token("acme");
    let output = finished(keygen(&keys, &["globex", "acme"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("1 new tenant(s)") && stderr.contains("1 already had keys"),
        "{stderr}"
    );
    assert_eq!(token("acme"), before);
    assert_ne!(token("globex"), before);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&keys).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
