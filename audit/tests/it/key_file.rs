//! Rotation and erasure change the key file under its lock: a change another process makes
//! meanwhile (a proxy adding a tenant, another rotation) is never lost, also when a rotation
//! that cannot be recorded is undone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use atdp_audit::Error;
use atdp_policies::KeyFile;

use crate::common::*;

/// Rotates tenant `other` in a loop on another thread until stopped; returns the key ids it
/// made.
fn rotate_other_meanwhile(
    keys: &std::path::Path,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<Vec<String>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (file, stopped) = (KeyFile::new(keys), stop.clone());
    let rotator = std::thread::spawn(move || {
        let mut ids = Vec::new();
        while !stopped.load(Ordering::Relaxed) {
            ids.push(file.update(|ring| ring.rotate("other")).unwrap());
        }
        ids
    });
    (stop, rotator)
}

fn stop((stop, rotator): (Arc<AtomicBool>, std::thread::JoinHandle<Vec<String>>)) -> Vec<String> {
    stop.store(true, Ordering::Relaxed);
    let ids = rotator.join().unwrap();
    assert!(!ids.is_empty(), "the other writer never ran");
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undone_rotation_keeps_what_others_changed_meanwhile() {
    let f = fixture().await;
    let officer = f.auditor(DEMO_AUDITOR);
    // A trail that records nothing: every rotation is made, then undone.
    let trail = f.trail("closed").await;
    trail.close().await.unwrap();
    let other = rotate_other_meanwhile(&f.keys);
    for _ in 0..20 {
        let rotated =
            atdp_audit::rotate_key(&f.policy, &f.keys, &trail, &officer, "demo", "routine").await;
        assert!(matches!(rotated, Err(Error::Trail(_))), "{rotated:?}");
    }
    let made = stop(other);
    let ring = KeyFile::new(&f.keys).load().unwrap();
    assert_eq!(ring.key_ids("demo"), ["k1"]);
    assert_eq!(ring.current_key_id("demo"), Some("k1"));
    let mut expected: Vec<&str> = made.iter().map(String::as_str).collect();
    expected.push("k1");
    expected.sort();
    let mut found = ring.key_ids("other");
    found.sort();
    assert_eq!(found, expected, "rotations of another tenant were lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_rotation_and_a_tenant_erasure_keep_what_others_changed_meanwhile() {
    let f = fixture().await;
    let officer = f.auditor(DEMO_AUDITOR);
    let trail = f.trail("officer").await;
    let other = rotate_other_meanwhile(&f.keys);
    let rotated = atdp_audit::rotate_key(&f.policy, &f.keys, &trail, &officer, "demo", "routine")
        .await
        .unwrap();
    assert_eq!(rotated.key_id, "k2");
    let erased = atdp_audit::erase(
        &f.lake,
        &f.policy,
        &f.keys,
        &trail,
        &officer,
        "demo",
        None,
        "Tenant offboarded",
    )
    .await
    .unwrap();
    assert!(erased.keys_erased);
    let made = stop(other);
    trail.close().await.unwrap();
    let ring = KeyFile::new(&f.keys).load().unwrap();
    assert!(!ring.has_tenant("demo"));
    assert_eq!(ring.key_ids("other").len(), made.len() + 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f.keys).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
