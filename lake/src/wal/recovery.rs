//! Opening a log: the writer's identity, the segments an earlier run left (queued for upload),
//! and the audit chain head as the last durable event left it.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::format::scan_segment_with;
use super::sync::{Active, sync_dir, write_atomic};
use super::{
    CHAIN_HEAD_FILE, LOCK_FILE, Opened, SEGMENT_SUFFIX, Sealed, State, SyncProgress,
    WRITER_ID_FILE, Wal, WalConfig,
};
use crate::error::{Error, Result};
use atdp_schema::ChainHead;
use atdp_schema::Record;

fn read_or_create_writer_id(dir: &Path) -> Result<String> {
    let path = dir.join(WRITER_ID_FILE);
    match fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        Ok(_) => Err(Error::Config(format!(
            "{} is empty; restore it or remove the whole log directory",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = atdp_schema::new_id();
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
        scan_segment_with(newest, &mut Vec::new(), |record, _| {
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
}
