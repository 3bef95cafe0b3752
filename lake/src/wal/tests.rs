//! The log's own tests: segment framing and damage, and the chain head across crashes.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::format::{FRAME_HEADER, MAGIC, frame, scan_bytes};
use super::*;
use atdp_schema::Reward;

fn reward(i: usize) -> Record {
    Record::Reward(Reward {
        reward_id: format!("r{i}"),
        trajectory_id: "t".into(),
        tenant_id: "acme".into(),
        name: "success".into(),
        value: i as f64,
        source: "api".into(),
        ..Reward::default()
    })
}

fn segment(records: &[Record]) -> Vec<u8> {
    let mut data = MAGIC.to_vec();
    for r in records {
        data.extend(frame(r).unwrap_or_default());
    }
    data
}

#[test]
fn frames_round_trip() {
    let records: Vec<Record> = (0..5).map(reward).collect();
    let scan = scan_bytes(Path::new("x"), &segment(&records));
    assert_eq!(scan.records, records);
    assert_eq!(scan.damage, None);
}

#[test]
fn torn_tail_keeps_intact_prefix() {
    let records: Vec<Record> = (0..3).map(reward).collect();
    let data = segment(&records);
    for cut in [data.len() - 1, data.len() - 5, MAGIC.len() + 3] {
        let scan = scan_bytes(Path::new("x"), &data[..cut]);
        let damage = scan.damage.clone();
        assert_eq!(
            damage.as_ref().map(|d| d.kind),
            Some(DamageKind::TornTail),
            "cut {cut}"
        );
        assert_eq!(damage.map(|d| d.intact_records), Some(scan.records.len()));
        assert_eq!(scan.records[..], records[..scan.records.len()]);
    }
}

#[test]
fn flipped_byte_is_corruption() {
    let records: Vec<Record> = (0..3).map(reward).collect();
    let mut data = segment(&records);
    let second = MAGIC.len() + frame(&records[0]).map(|f| f.len()).unwrap_or(0);
    data[second + FRAME_HEADER + 2] ^= 0x40;
    let scan = scan_bytes(Path::new("x"), &data);
    assert_eq!(scan.records, records[..1]);
    let damage = scan
        .damage
        .unwrap_or_else(|| unreachable!("damage expected"));
    assert_eq!(damage.kind, DamageKind::Corrupt);
    assert_eq!(damage.offset, second as u64);
    assert_eq!(damage.intact_records, 1);
}

#[test]
fn zero_filled_tail_is_a_torn_write() {
    let records: Vec<Record> = (0..2).map(reward).collect();
    let mut data = segment(&records);
    data.extend([0u8; 64]);
    let scan = scan_bytes(Path::new("x"), &data);
    assert_eq!(scan.records, records);
    assert_eq!(scan.damage.map(|d| d.kind), Some(DamageKind::TornTail));
}

#[test]
fn bad_magic_is_corruption() {
    let mut data = segment(&[reward(0)]);
    data[0] = b'X';
    let scan = scan_bytes(Path::new("x"), &data);
    assert!(scan.records.is_empty());
    assert_eq!(scan.damage.map(|d| d.kind), Some(DamageKind::Corrupt));
}

fn config() -> WalConfig {
    WalConfig {
        segment_max_bytes: 1 << 20,
        segment_max_age: Duration::from_secs(3600),
        budget_bytes: 1 << 30,
        fsync: true,
        commit_interval: Duration::from_millis(2),
    }
}

fn event(i: i64) -> AuditEvent {
    AuditEvent {
        event_id: format!("e{i}"),
        tenant_id: "acme".into(),
        occurred_at: i,
        kind: "request_allowed".into(),
        actor: "key-1".into(),
        ..AuditEvent::default()
    }
}

/// What a crash leaves: the files of the log as they are now (everything made durable
/// is in them), opened by a new log elsewhere.
fn crash_copy(from: &Path, to: &Path) -> Arc<Wal> {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
    Wal::open(to, config()).unwrap().wal
}

#[test]
fn chain_head_survives_a_crash_after_its_segment_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let Opened {
        wal, mut sealed_rx, ..
    } = Wal::open(&dir.path().join("log"), config()).unwrap();
    let sync = wal.clone();
    let thread = std::thread::spawn(move || sync.run_sync());
    let mut stored = Vec::new();
    for i in 0..3 {
        stored.push(wal.append_audit(event(i)).unwrap().1);
    }
    // Sealed, committed, deleted: its events are no longer in any segment.
    wal.roll().unwrap();
    let sealed = sealed_rx.try_recv().unwrap();
    wal.release(&sealed).unwrap();
    assert!(!sealed.path.exists());

    // Crash with only the (empty) next segment: the head file must hold event 3.
    let after_seal = crash_copy(wal.dir(), &dir.path().join("crash-1"));
    let (_, next) = after_seal.append_audit(event(3)).unwrap();
    assert_eq!(next.chain_seq, 4);
    assert_eq!(next.prev_hash, stored[2].hash);

    // Crash with later events only in the unsealed segment: they are read back from it.
    let mut ticket = 0;
    for i in 3..5 {
        let (t, event) = wal.append_audit(event(i)).unwrap();
        ticket = t;
        stored.push(event);
    }
    wal.wait_durable(ticket).unwrap();
    let unsealed = crash_copy(wal.dir(), &dir.path().join("crash-2"));
    let (_, next) = unsealed.append_audit(event(5)).unwrap();
    assert_eq!(next.chain_seq, 6);
    assert_eq!(next.prev_hash, stored[4].hash);

    wal.close();
    thread.join().unwrap();
}

#[test]
fn the_log_never_holds_more_than_its_budget_once_a_full_segment_is_sealed() {
    let dir = tempfile::tempdir().unwrap();
    // A budget that records of one size fill exactly, after the first segment's header.
    let size = frame(&reward(0)).unwrap().len() as u64;
    let budget = MAGIC.len() as u64 + 40 * size;
    let config = WalConfig {
        segment_max_bytes: budget,
        budget_bytes: budget,
        ..config()
    };
    let Opened { wal, .. } = Wal::open(&dir.path().join("log"), config).unwrap();
    let sync = wal.clone();
    let thread = std::thread::spawn(move || sync.run_sync());
    // Nothing is uploaded: the sealed segment stays held, and so does the next one's header.
    let mut appended = 0;
    while wal.append(&reward(0)).is_ok() {
        appended += 1;
        assert!(appended <= 40, "the budget was never enforced");
    }
    wal.roll().unwrap();
    assert!(appended >= 39);
    assert!(
        wal.held_bytes() <= budget,
        "{} held of {budget}",
        wal.held_bytes()
    );
    wal.close();
    thread.join().unwrap();
}
