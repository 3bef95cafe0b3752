//! The local write-ahead log: records are framed, checksummed and group-committed to segment
//! files; sealed segments wait on disk until their Delta commits are confirmed.
//!
//! Segment file: the magic `ATDPWAL1`, then records, each `[len: u32 LE][crc32: u32 LE]
//! [payload: len bytes]` where the payload is the postcard encoding of a [`Record`] and the
//! CRC (IEEE) covers the payload. Segments are named by a sequence number that only grows;
//! that number is the Delta transaction version of the segment's commits.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::chain::ChainHead;
use crate::error::{Error, Result};
use crate::record::{AuditEvent, Record};

const MAGIC: &[u8; 8] = b"ATDPWAL1";
const FRAME_HEADER: usize = 8;
/// Larger frames are taken as corruption of the length field.
const MAX_RECORD_BYTES: usize = 256 << 20;
const SEGMENT_SUFFIX: &str = ".seg";
const WRITER_ID_FILE: &str = "writer_id";
const CHAIN_HEAD_FILE: &str = "chain_head.json";
const LOCK_FILE: &str = "LOCK";
/// Where segments with corrupt records are kept for inspection once their intact records
/// are committed.
pub const DAMAGED_DIR: &str = "damaged";

/// Settings of the write-ahead log.
#[derive(Debug, Clone)]
pub(crate) struct WalConfig {
    pub segment_max_bytes: u64,
    pub segment_max_age: Duration,
    pub budget_bytes: u64,
    pub fsync: bool,
    pub commit_interval: Duration,
}

/// A segment that is complete and waits to be committed to the lake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sealed {
    pub seq: u64,
    pub path: PathBuf,
    pub bytes: u64,
}

/// What is wrong with a segment, found while reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub path: PathBuf,
    /// Byte offset of the first unreadable record.
    pub offset: u64,
    /// Whether the file just ends inside a record (a write cut by a crash) or holds bytes
    /// that fail their checksum or decoding (corruption).
    pub kind: DamageKind,
    /// Records read intact before the damage.
    pub intact_records: usize,
    /// Bytes after the last intact record, which are lost.
    pub lost_bytes: u64,
}

/// The two kinds of segment damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// The file ends inside a record: the write was cut (crash); the record was never acknowledged.
    TornTail,
    /// A record fails its CRC, has an impossible length, or does not decode.
    Corrupt,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            DamageKind::TornTail => "ends inside a record",
            DamageKind::Corrupt => "has a corrupt record",
        };
        write!(
            f,
            "{} {what} at byte {}: {} records before it kept, {} bytes after it lost",
            self.path.display(),
            self.offset,
            self.intact_records,
            self.lost_bytes
        )
    }
}

/// How far the log has made records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SyncProgress {
    /// Tickets up to this value are on disk.
    pub synced: u64,
    /// The log failed to write; nothing after `synced` will become durable.
    pub failed: bool,
}

/// The records of one segment, up to the first damage.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct SegmentScan {
    pub records: Vec<Record>,
    pub damage: Option<Damage>,
}

/// Frames one record: header then payload.
pub(crate) fn frame(record: &Record) -> Result<Vec<u8>> {
    frame_into(record, Vec::new())
}

/// Frames one record into `buf` (cleared first), reusing its allocation.
fn frame_into(record: &Record, mut buf: Vec<u8>) -> Result<Vec<u8>> {
    buf.clear();
    buf.extend_from_slice(&[0u8; FRAME_HEADER]);
    let framed = postcard::to_extend(record, buf).map_err(|e| Error::Encode(e.to_string()))?;
    let payload_len = framed.len() - FRAME_HEADER;
    if payload_len > MAX_RECORD_BYTES {
        return Err(Error::Encode(format!(
            "record of {payload_len} bytes is over the {MAX_RECORD_BYTES}-byte limit"
        )));
    }
    let mut framed = framed;
    let crc = crc32fast::hash(&framed[FRAME_HEADER..]);
    // The length fits: it was checked against MAX_RECORD_BYTES above.
    framed[0..4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    framed[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(framed)
}

/// Reads a segment into `buf` (cleared first; its allocation is reused, so a writer that
/// scans segment after segment does not fault in fresh memory for each) and hands each
/// record to `each`, up to the first damage, which it returns.
pub(crate) fn scan_segment_with(
    path: &Path,
    buf: &mut Vec<u8>,
    each: impl FnMut(Record),
) -> Result<Option<Damage>> {
    use std::io::Read;
    buf.clear();
    File::open(path)
        .and_then(|mut file| file.read_to_end(buf))
        .map_err(|e| Error::io(path, e))?;
    Ok(scan_bytes_with(path, buf, each))
}

#[cfg(test)]
fn scan_bytes(path: &Path, data: &[u8]) -> SegmentScan {
    let mut records = Vec::new();
    let damage = scan_bytes_with(path, data, |record| records.push(record));
    SegmentScan { records, damage }
}

/// Hands each intact record of a segment's bytes to `each`, up to the first damage, which it
/// returns.
fn scan_bytes_with(path: &Path, data: &[u8], mut each: impl FnMut(Record)) -> Option<Damage> {
    let damage = |offset: usize, kind, intact| Damage {
        path: path.to_owned(),
        offset: offset as u64,
        kind,
        intact_records: intact,
        lost_bytes: (data.len() - offset) as u64,
    };
    if data.len() < MAGIC.len() {
        // A segment created but cut before its magic was written holds nothing.
        let kind = if MAGIC.starts_with(data) {
            DamageKind::TornTail
        } else {
            DamageKind::Corrupt
        };
        return (!data.is_empty()).then(|| damage(0, kind, 0));
    }
    if &data[..MAGIC.len()] != MAGIC {
        return Some(damage(0, DamageKind::Corrupt, 0));
    }
    let mut offset = MAGIC.len();
    let mut intact = 0;
    while offset < data.len() {
        let rest = &data[offset..];
        if rest.len() < FRAME_HEADER {
            return Some(damage(offset, DamageKind::TornTail, intact));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_RECORD_BYTES {
            return Some(damage(offset, DamageKind::Corrupt, intact));
        }
        if rest.len() - FRAME_HEADER < len {
            return Some(damage(offset, DamageKind::TornTail, intact));
        }
        let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
        let decoded = (crc32fast::hash(payload) == crc)
            .then(|| postcard::from_bytes::<Record>(payload).ok())
            .flatten();
        match decoded {
            Some(record) => {
                each(record);
                intact += 1;
            }
            None => {
                // File systems may leave a crashed write's tail zero-filled: a torn write,
                // not corruption.
                let kind = if rest.iter().all(|b| *b == 0) {
                    DamageKind::TornTail
                } else {
                    DamageKind::Corrupt
                };
                return Some(damage(offset, kind, intact));
            }
        }
        offset += FRAME_HEADER + len;
    }
    None
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SEGMENT_SUFFIX}"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    file.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    file.sync_all().map_err(|e| Error::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

struct Active {
    seq: u64,
    path: PathBuf,
    file: File,
    bytes: u64,
    records: u64,
}

impl Active {
    fn create(dir: &Path, seq: u64) -> Result<Active> {
        let path = segment_path(dir, seq);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        file.write_all(MAGIC).map_err(|e| Error::io(&path, e))?;
        file.sync_all().map_err(|e| Error::io(&path, e))?;
        sync_dir(dir)?;
        Ok(Active {
            seq,
            path,
            file,
            bytes: MAGIC.len() as u64,
            records: 0,
        })
    }
}

struct State {
    /// Framed records not yet written.
    pending: Vec<u8>,
    /// The buffer the sync thread last wrote, cleared, kept to become the next `pending`
    /// (reusing its memory spares the page faults of a fresh allocation every round).
    spare: Vec<u8>,
    pending_records: u64,
    /// When the oldest record not yet in a sealed segment was appended (segment age).
    oldest_unsealed: Option<Instant>,
    /// Records appended / made durable since open.
    appended: u64,
    synced: u64,
    /// The segment being written; `None` while the sync thread has it.
    active: Option<Active>,
    next_seq: u64,
    /// Bytes in the log not yet released by a confirmed commit (pending included).
    held_bytes: u64,
    /// Roll requests made / served: a request is served by the first sync round that
    /// starts after it (that round takes every record appended before the request).
    roll_requests: u64,
    rolls_done: u64,
    /// The sync thread has exited (closed and drained, or failed).
    sync_exited: bool,
    /// Highest sealed segment so far.
    last_sealed: u64,
    /// When the last group commit began (commits are at least `commit_interval` apart).
    last_commit: Instant,
    closed: bool,
    failed: Option<String>,
    chain: ChainHead,
    /// `seq` of the chain head last written to the head file. The file is written when a
    /// segment is sealed, not every sync round: until then the newest segment holds the
    /// events after it, and opening the log reads them back from there ([`recover_chain`]).
    head_on_disk: i64,
}

/// The write-ahead log of one writer instance.
pub(crate) struct Wal {
    dir: PathBuf,
    /// Held (advisory lock) for the log's lifetime: one writer per directory.
    _lock: File,
    config: WalConfig,
    writer_id: String,
    state: Mutex<State>,
    /// Wakes the sync thread.
    work: Condvar,
    /// Wakes threads waiting for durability or a roll.
    progress: Condvar,
    synced_tx: watch::Sender<SyncProgress>,
    sealed_tx: mpsc::UnboundedSender<Sealed>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// What opening a log found on disk.
#[derive(Debug)]
pub(crate) struct Opened {
    pub wal: Arc<Wal>,
    /// Segments left by an earlier run, oldest first; they are already queued for upload.
    pub recovered: Vec<Sealed>,
    pub sealed_rx: mpsc::UnboundedReceiver<Sealed>,
}

fn read_or_create_writer_id(dir: &Path) -> Result<String> {
    let path = dir.join(WRITER_ID_FILE);
    match fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        Ok(_) => Err(Error::Config(format!(
            "{} is empty; restore it or remove the whole log directory",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = crate::record::new_id();
            write_atomic(&path, id.as_bytes())?;
            sync_dir(dir)?;
            Ok(id)
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}

fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(seq) = name
            .to_str()
            .and_then(|n| n.strip_suffix(SEGMENT_SUFFIX))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        segments.push((seq, entry.path()));
    }
    segments.sort();
    Ok(segments)
}

/// The chain head: the head file, unless the newest segment holds later audit events. The
/// file is written when a segment is sealed, before the next one is created, so only the
/// newest segment can hold events after it.
fn recover_chain(dir: &Path, writer_id: &str, newest: Option<&Path>) -> Result<ChainHead> {
    let path = dir.join(CHAIN_HEAD_FILE);
    let mut head = match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<ChainHead>(&bytes)
            .map_err(|e| Error::Config(format!("{} is unreadable: {e}", path.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ChainHead::genesis(writer_id),
        Err(e) => return Err(Error::io(&path, e)),
    };
    if let Some(newest) = newest {
        let from_file = head.seq;
        scan_segment_with(newest, &mut Vec::new(), |record| {
            if let Record::Audit(event) = record
                && event.chain_id == head.chain_id
                && event.chain_seq > head.seq
            {
                head.seq = event.chain_seq;
                head.hash = event.hash;
            }
        })?;
        if head.seq > from_file {
            // Write it back now: the segment it came from is deleted once committed.
            let bytes = serde_json::to_vec(&head).map_err(|e| Error::Encode(e.to_string()))?;
            write_atomic(&path, &bytes)?;
        }
    }
    Ok(head)
}

impl Wal {
    /// Opens (or creates) the log in `dir`: every segment found is queued for upload, and a
    /// fresh segment is started after them.
    pub(crate) fn open(dir: &Path, config: WalConfig) -> Result<Opened> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
        lock.try_lock().map_err(|_| {
            Error::Config(format!(
                "the write-ahead log {} is in use by another writer; give each writer process its own directory",
                dir.display()
            ))
        })?;
        let writer_id = read_or_create_writer_id(dir)?;
        let found = list_segments(dir)?;
        if let Some((seq, path)) = found.last()
            && *seq >= i64::MAX as u64
        {
            return Err(Error::Config(format!(
                "segment number of {} is out of range; the log directory is not one of ours",
                path.display()
            )));
        }
        // What a crashed run wrote may still be only in the page cache: make it durable
        // before anything is built on it (commits, the chain head).
        for (_, path) in &found {
            File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(path, e))?;
        }
        let chain = recover_chain(dir, &writer_id, found.last().map(|(_, p)| p.as_path()))?;
        let (sealed_tx, sealed_rx) = mpsc::unbounded_channel();
        let mut recovered = Vec::new();
        let mut held_bytes = 0;
        for (seq, path) in &found {
            let bytes = fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
            held_bytes += bytes;
            let sealed = Sealed {
                seq: *seq,
                path: path.clone(),
                bytes,
            };
            // The receiver is alive: it is returned below.
            let _ = sealed_tx.send(sealed.clone());
            recovered.push(sealed);
        }
        let last_sealed = found.last().map_or(0, |(seq, _)| *seq);
        let active = Active::create(dir, last_sealed + 1)?;
        held_bytes += active.bytes;
        let (synced_tx, _) = watch::channel(SyncProgress::default());
        let wal = Arc::new(Wal {
            dir: dir.to_owned(),
            _lock: lock,
            config,
            writer_id,
            state: Mutex::new(State {
                pending: Vec::new(),
                spare: Vec::new(),
                pending_records: 0,
                oldest_unsealed: None,
                appended: 0,
                synced: 0,
                active: Some(active),
                next_seq: last_sealed + 2,
                held_bytes,
                roll_requests: 0,
                rolls_done: 0,
                sync_exited: false,
                last_sealed,
                last_commit: Instant::now(),
                closed: false,
                failed: None,
                head_on_disk: chain.seq,
                chain,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            synced_tx,
            sealed_tx,
        });
        Ok(Opened {
            wal,
            recovered,
            sealed_rx,
        })
    }

    pub(crate) fn writer_id(&self) -> &str {
        &self.writer_id
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way
        // that matters more than refusing service would; keep going with the data.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn admit(&self, state: &State, len: usize) -> Result<()> {
        if state.closed {
            return Err(Error::Closed);
        }
        if let Some(failure) = &state.failed {
            return Err(Error::io(&self.dir, std::io::Error::other(failure.clone())));
        }
        // Unwritten records live in memory: a stalled disk must not grow it without bound.
        let pending_cap = (2 * self.config.segment_max_bytes).max(64 << 20);
        let in_memory = (state.pending.len() + len) as u64;
        if in_memory > pending_cap {
            return Err(Error::Backpressure {
                pending_bytes: state.pending.len() as u64,
                budget_bytes: pending_cap,
            });
        }
        let needed = state.held_bytes + len as u64;
        if needed > self.config.budget_bytes {
            return Err(Error::Backpressure {
                pending_bytes: state.held_bytes,
                budget_bytes: self.config.budget_bytes,
            });
        }
        Ok(())
    }

    fn push(&self, mut state: MutexGuard<'_, State>, framed: &[u8]) -> u64 {
        // Only the first record of a batch wakes the sync thread: it waits for records
        // only while none are pending, and it takes all of them at once.
        let first = state.pending.is_empty();
        state.pending.extend_from_slice(framed);
        state.pending_records += 1;
        state.oldest_unsealed.get_or_insert_with(Instant::now);
        state.held_bytes += framed.len() as u64;
        state.appended += 1;
        let ticket = state.appended;
        drop(state);
        if first {
            self.work.notify_one();
        }
        ticket
    }

    /// Appends a record; returns its ticket (durable once [`Wal::synced`] reaches it).
    pub(crate) fn append(&self, record: &Record) -> Result<u64> {
        thread_local! {
            // Encoding happens outside the lock, into a buffer each thread reuses.
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let framed = frame_into(record, SCRATCH.with_borrow_mut(std::mem::take))?;
        let state = self.lock();
        let ticket = self
            .admit(&state, framed.len())
            .map(|()| self.push(state, &framed));
        SCRATCH.with_borrow_mut(|scratch| *scratch = framed);
        ticket
    }

    /// Appends an audit event linked into this writer's chain, in log order.
    pub(crate) fn append_audit(&self, mut event: AuditEvent) -> Result<(u64, AuditEvent)> {
        let mut state = self.lock();
        let mut head = state.chain.clone();
        head.link(&mut event);
        let record = Record::Audit(event);
        let framed = frame(&record)?;
        self.admit(&state, framed.len())?;
        state.chain = head;
        let ticket = self.push(state, &framed);
        let Record::Audit(event) = record else {
            return Err(Error::Encode("audit record changed kind".into()));
        };
        Ok((ticket, event))
    }

    /// Records made durable so far (tickets up to this value are on disk).
    pub(crate) fn synced(&self) -> watch::Receiver<SyncProgress> {
        self.synced_tx.subscribe()
    }

    /// Blocks until `ticket` is durable.
    pub(crate) fn wait_durable(&self, ticket: u64) -> Result<()> {
        let mut state = self.lock();
        while state.synced < ticket {
            if let Some(failure) = &state.failed {
                return Err(Error::io(&self.dir, std::io::Error::other(failure.clone())));
            }
            state = self
                .progress
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(())
    }

    /// Seals the active segment (if it holds records) once everything appended so far is
    /// written; returns the highest sealed sequence number.
    pub(crate) fn roll(&self) -> Result<u64> {
        let mut state = self.lock();
        state.roll_requests += 1;
        let mine = state.roll_requests;
        self.work.notify_one();
        while state.rolls_done < mine {
            if let Some(failure) = &state.failed {
                return Err(Error::io(&self.dir, std::io::Error::other(failure.clone())));
            }
            if state.sync_exited {
                return Err(Error::Closed);
            }
            state = self
                .progress
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(state.last_sealed)
    }

    /// Deletes a segment whose commits are confirmed.
    pub(crate) fn release(&self, sealed: &Sealed) -> Result<()> {
        match fs::remove_file(&sealed.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&sealed.path, e)),
        }
        let mut state = self.lock();
        state.held_bytes = state.held_bytes.saturating_sub(sealed.bytes);
        Ok(())
    }

    /// Moves a segment with corrupt records aside, for inspection.
    pub(crate) fn quarantine(&self, sealed: &Sealed) -> Result<PathBuf> {
        let damaged = self.dir.join(DAMAGED_DIR);
        fs::create_dir_all(&damaged).map_err(|e| Error::io(&damaged, e))?;
        let target = damaged.join(sealed.path.file_name().unwrap_or_default());
        fs::rename(&sealed.path, &target).map_err(|e| Error::io(&target, e))?;
        let mut state = self.lock();
        state.held_bytes = state.held_bytes.saturating_sub(sealed.bytes);
        Ok(target)
    }

    /// The highest sealed segment so far.
    pub(crate) fn last_sealed(&self) -> u64 {
        self.lock().last_sealed
    }

    /// Bytes held in the log (appended, not yet released).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.lock().held_bytes
    }

    /// Whether appends would fail now: the log failed, or holds `budget` bytes or more. One
    /// lock, for callers that ask on every request.
    pub(crate) fn backlogged(&self, budget: u64) -> bool {
        let state = self.lock();
        state.failed.is_some() || state.held_bytes >= budget
    }

    /// Why the log stopped writing, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Whether the active segment holds records (none are left behind after a clean close).
    pub(crate) fn active_has_records(&self) -> bool {
        self.lock().active.as_ref().is_some_and(|a| a.records > 0)
    }

    /// Records appended and made durable since open.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let state = self.lock();
        (state.appended, state.synced)
    }

    /// Stops accepting records; the sync thread writes what is pending, seals the last
    /// segment and exits.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        drop(state);
        self.work.notify_all();
        self.progress.notify_all();
    }

    /// The sync thread: writes pending records, fsyncs (group commit), seals segments by
    /// size, age or request, and hands sealed segments to the uploader.
    pub(crate) fn run_sync(self: &Arc<Self>) {
        while self.sync_once() {}
    }

    /// One round of the sync thread; false once closed and drained.
    fn sync_once(&self) -> bool {
        let mut state = self.lock();
        let mut age_roll = false;
        loop {
            let has_records = state.active.as_ref().is_some_and(|a| a.records > 0);
            let roll_pending = state.roll_requests > state.rolls_done;
            if !state.pending.is_empty() || roll_pending || (state.closed && has_records) {
                break;
            }
            if state.closed {
                // Nothing left. The empty active segment stays on disk: it carries the
                // sequence number to the next start (numbers must only grow, or a new
                // segment would be taken for one the lake already holds).
                state.sync_exited = true;
                drop(state);
                self.progress.notify_all();
                return false;
            }
            let age_left = state
                .oldest_unsealed
                .map(|oldest| self.config.segment_max_age.saturating_sub(oldest.elapsed()));
            match age_left {
                Some(left) if left.is_zero() => {
                    age_roll = true;
                    break;
                }
                Some(left) => {
                    state = self
                        .work
                        .wait_timeout(state, left)
                        .map(|(s, _)| s)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0);
                }
                None => {
                    state = self
                        .work
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            }
        }
        // Group commit: the records of the next `commit_interval` after the last commit
        // share its write and fsync. A roll request or closing does not wait.
        loop {
            if state.roll_requests > state.rolls_done || state.closed {
                break;
            }
            let left = self
                .config
                .commit_interval
                .saturating_sub(state.last_commit.elapsed());
            if left.is_zero() {
                break;
            }
            state = self
                .work
                .wait_timeout(state, left)
                .map(|(s, _)| s)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
        state.last_commit = Instant::now();
        let spare = std::mem::take(&mut state.spare);
        let mut buf = std::mem::replace(&mut state.pending, spare);
        let records = std::mem::take(&mut state.pending_records);
        let upto = state.appended;
        // Under a steady stream the loop breaks on pending records before it looks at the
        // age: check it here too, so segments also seal by age then.
        let age_roll = age_roll
            || state
                .oldest_unsealed
                .is_some_and(|oldest| oldest.elapsed() >= self.config.segment_max_age);
        let requested = state.roll_requests;
        let roll = requested > state.rolls_done || age_roll || state.closed;
        // The chain as of the last record in `buf`, when the head file is behind it.
        let head = (state.chain.seq != state.head_on_disk).then(|| state.chain.clone());
        let next_seq = state.next_seq;
        let Some(mut active) = state.active.take() else {
            state.sync_exited = true;
            return false;
        };
        drop(state);

        let outcome = self.write_batch(&mut active, &buf, records);
        let outcome = outcome.and_then(|()| {
            let full = active.bytes >= self.config.segment_max_bytes;
            if (roll || full) && active.records > 0 {
                // The head file catches up before the segment is handed on (once committed
                // it is deleted, and its events with it) and before a fresh segment becomes
                // the newest (the one read back on open).
                if let Some(head) = &head {
                    self.write_head(head)?;
                }
                let fresh = Active::create(&self.dir, next_seq)?;
                let old = std::mem::replace(&mut active, fresh);
                Ok(Some(Sealed {
                    seq: old.seq,
                    path: old.path,
                    bytes: old.bytes,
                }))
            } else {
                Ok(None)
            }
        });

        let mut state = self.lock();
        buf.clear();
        state.spare = buf;
        let failed = outcome.is_err();
        let keep_going = match outcome {
            Ok(sealed) => {
                state.synced = upto;
                if let Some(sealed) = sealed {
                    if let Some(head) = &head {
                        state.head_on_disk = head.seq;
                    }
                    // Records appended while this round wrote are in `pending`, for the
                    // next segment: its age starts now.
                    state.oldest_unsealed = (!state.pending.is_empty()).then(Instant::now);
                    state.last_sealed = sealed.seq;
                    state.next_seq += 1;
                    state.held_bytes += active.bytes;
                    // A closed receiver means the writer is gone; the segment stays on disk.
                    let _ = self.sealed_tx.send(sealed);
                }
                state.rolls_done = state.rolls_done.max(requested);
                state.active = Some(active);
                true
            }
            Err(error) => {
                tracing::error!(error = %error, dir = %self.dir.display(), "Write-ahead log write failed; refusing further appends.");
                state.failed = Some(error.to_string());
                state.sync_exited = true;
                false
            }
        };
        let synced = state.synced;
        drop(state);
        self.synced_tx.send_replace(SyncProgress { synced, failed });
        self.progress.notify_all();
        keep_going
    }

    fn write_batch(&self, active: &mut Active, buf: &[u8], records: u64) -> Result<()> {
        if !buf.is_empty() {
            active
                .file
                .write_all(buf)
                .map_err(|e| Error::io(&active.path, e))?;
            if self.config.fsync {
                active
                    .file
                    .sync_data()
                    .map_err(|e| Error::io(&active.path, e))?;
            }
            active.bytes += buf.len() as u64;
            active.records += records;
        }
        Ok(())
    }

    fn write_head(&self, head: &ChainHead) -> Result<()> {
        let bytes = serde_json::to_vec(head).map_err(|e| Error::Encode(e.to_string()))?;
        write_atomic(&self.dir.join(CHAIN_HEAD_FILE), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Reward;

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
}
