//! The sync thread: writes pending records to the active segment, fsyncs them as one group
//! commit, seals segments by size, age or request, and hands sealed segments to the uploader.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::format::MAGIC;
use super::{CHAIN_HEAD_FILE, Sealed, SyncProgress, Wal, segment_path};
use crate::error::{Error, Result};
use atdp_schema::ChainHead;

pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename).
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
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

pub(super) struct Active {
    pub(super) seq: u64,
    pub(super) path: PathBuf,
    pub(super) file: File,
    pub(super) bytes: u64,
    pub(super) records: u64,
}

impl Active {
    pub(super) fn create(dir: &Path, seq: u64) -> Result<Active> {
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

impl Wal {
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
