//! A corrupted or truncated segment: CRC finds the damage, the intact records before it are
//! committed, the damage is reported, and the writer carries on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use atdp_lake::*;

use crate::common::*;

/// Appends `n` rewards with the lake unreachable, so they stay in one log segment; returns
/// the ids in append order and the segment's path.
async fn stranded_segment(wal: &Path, n: usize) -> (Vec<String>, PathBuf) {
    let mut config = test_config("s3://nowhere/lake", wal);
    config.storage_options = s3_options(free_port());
    config.segment_max_age = Duration::from_secs(3600);
    config.segment_max_bytes = 16 << 20;
    let writer = LakeWriter::open(config).await.unwrap();
    let ids = append_rewards(&writer, "acme", n).await;
    assert!(!writer.shutdown(Duration::from_millis(100)).await.unwrap());
    drop(writer);
    let mut segments: Vec<PathBuf> = std::fs::read_dir(wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        // Past the 8-byte magic: holds records (the empty last segment only carries the number).
        .filter(|p| std::fs::metadata(p).unwrap().len() > 8)
        .collect();
    segments.sort();
    assert_eq!(
        segments.len(),
        1,
        "expected one segment with records, found {segments:?}"
    );
    (ids, segments.remove(0))
}

/// The segment was moved to the log's `damaged/` folder, kept for inspection.
fn assert_quarantined(segment: &Path) {
    let wal = segment.parent().unwrap();
    let kept = wal.join(DAMAGED_DIR).join(segment.file_name().unwrap());
    assert!(kept.is_file(), "the damaged segment is kept for inspection");
}

async fn recover(dir: &Path) -> (LakeWriter, Vec<String>) {
    let writer = LakeWriter::open(test_config(
        dir.join("lake").to_str().unwrap(),
        &dir.join("wal"),
    ))
    .await
    .unwrap();
    writer.flush().await.unwrap();
    let found = reward_ids(writer.lake()).await;
    (writer, found)
}

#[tokio::test]
async fn corrupt_record_keeps_the_prefix_and_quarantines_the_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segment) = stranded_segment(&dir.path().join("wal"), 40).await;
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&segment, &bytes).unwrap();

    let (writer, found) = recover(dir.path()).await;
    let damage = writer.stats().damage;
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert_eq!(damage[0].kind, DamageKind::Corrupt);
    let kept = damage[0].intact_records;
    assert!(kept > 0 && kept < ids.len(), "kept {kept}");
    assert!(damage[0].offset <= middle as u64);
    assert_eq!(
        found,
        ids[..kept].to_vec(),
        "exactly the records before the damage"
    );
    assert_quarantined(&segment);
    assert!(!segment.exists());

    // The writer carries on.
    let more = append_rewards(&writer, "acme", 5).await;
    writer.flush().await.unwrap();
    let all = reward_ids(writer.lake()).await;
    let expected: Vec<String> = ids[..kept].iter().chain(&more).cloned().collect();
    assert_exactly_once(&all, &expected);
    assert_eq!(all.len(), expected.len());
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}

/// The empty segments after `segment` (the one a clean shutdown leaves to carry the number).
fn later_segments(segment: &Path) -> Vec<PathBuf> {
    let dir = segment.parent().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg") && p.as_path() > segment)
        .collect()
}

fn truncate(segment: &Path, by: u64) {
    let len = std::fs::metadata(segment).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.set_len(len - by).unwrap();
}

#[tokio::test]
async fn torn_tail_of_the_last_segment_keeps_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segment) = stranded_segment(&dir.path().join("wal"), 40).await;
    // As if the run had been killed while writing this segment: it is the newest one.
    for later in later_segments(&segment) {
        std::fs::remove_file(later).unwrap();
    }
    truncate(&segment, 7);

    let (writer, found) = recover(dir.path()).await;
    let damage = writer.stats().damage;
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert_eq!(damage[0].kind, DamageKind::TornTail);
    assert_eq!(damage[0].intact_records, ids.len() - 1);
    assert_eq!(found, ids[..ids.len() - 1].to_vec());
    assert!(
        !segment.exists(),
        "a torn tail is not corruption: the segment is released"
    );
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}

#[tokio::test]
async fn cut_in_an_older_segment_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segment) = stranded_segment(&dir.path().join("wal"), 40).await;
    assert!(!later_segments(&segment).is_empty());
    // A sealed segment was complete when sealed: a cut end means damage, not a crash.
    truncate(&segment, 7);

    let (writer, found) = recover(dir.path()).await;
    let damage = writer.stats().damage;
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert_eq!(damage[0].kind, DamageKind::Corrupt);
    assert_eq!(found, ids[..ids.len() - 1].to_vec());
    assert_quarantined(&segment);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}

/// The moment between a segment's commit and its deletion: a crash there leaves a committed
/// segment on disk. Replaying it must find the Delta transaction and write nothing.
#[tokio::test]
async fn replaying_a_committed_segment_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("wal");
    let (ids, _) = stranded_segment(&wal, 25).await;
    // A copy of the log as it was before the commit (same writer id, same segment).
    let copy = dir.path().join("wal-copy");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&wal).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
        }
    }

    let (writer, found) = recover(dir.path()).await;
    assert_eq!(found, ids);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
    drop(writer);

    let lake = dir.path().join("lake");
    let replay = LakeWriter::open(test_config(lake.to_str().unwrap(), &copy))
        .await
        .unwrap();
    replay.flush().await.unwrap();
    let stats = replay.stats();
    assert_eq!(stats.committed_rows, 0, "the replay committed rows again");
    assert!(
        stats.committed_segments >= 1,
        "the replayed segment was processed"
    );
    let again = reward_ids(replay.lake()).await;
    assert_exactly_once(&again, &ids);
    assert_eq!(again.len(), ids.len());
    assert!(replay.shutdown(Duration::from_secs(10)).await.unwrap());
}
