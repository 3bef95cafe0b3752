//! The local write-ahead log: records are framed, checksummed and group-committed to segment
//! files; sealed segments wait on disk until their Delta commits are confirmed.
//!
//! Segment file: the magic `ATDPWAL2`, then records, each `[len: u32 LE][crc32: u32 LE]
//! [payload: len bytes]` where the payload is the postcard encoding of a [`Record`] and the
//! CRC (IEEE) covers the payload. Segments are named by a sequence number that only grows;
//! that number is the Delta transaction version of the segment's commits. Segments of the
//! first format (`ATDPWAL1`, protocol version 1 records) are still read ([`legacy`]).

//!
//! The log is in four parts: [`format`] (framing and reading segments back), [`recovery`]
//! (opening a log a crashed run left), [`sync`] (the group-commit thread) and this module
//! (appending, and the state they share).

mod format;
mod legacy;
mod recovery;
mod sync;
#[cfg(test)]
mod tests;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::error::{Error, Result};
use atdp_schema::ChainHead;
use atdp_schema::{AuditEvent, Record};

pub(crate) use format::scan_segment_with;
pub use format::{Damage, DamageKind};
use format::{frame, frame_into};
use sync::Active;

const SEGMENT_SUFFIX: &str = ".seg";
const WRITER_ID_FILE: &str = "writer_id";
const CHAIN_HEAD_FILE: &str = "chain_head.json";
const LOCK_FILE: &str = "LOCK";
/// Where segments with corrupt records are kept for inspection once their intact records
/// are committed.
pub const DAMAGED_DIR: &str = "damaged";

/// The file of segment `seq` in the log directory `dir`.
fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SEGMENT_SUFFIX}"))
}

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

/// How far the log has made records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SyncProgress {
    /// Tickets up to this value are on disk.
    pub synced: u64,
    /// The log failed to write; nothing after `synced` will become durable.
    pub failed: bool,
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

impl Wal {
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
        // Room is kept for the header of the segment that sealing this one opens, which the
        // sync thread counts without asking: the log never holds more than its budget.
        let needed = state.held_bytes + len as u64 + format::MAGIC.len() as u64;
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
}
