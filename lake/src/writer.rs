//! The lake writer: the component the proxy calls on its hot path.
//!
//! `append` frames the record into the write-ahead log's memory buffer and returns at once;
//! a sync thread group-commits the buffer to the current segment with one fsync; sealed
//! segments are converted to Arrow and committed to the Delta tables by an uploader task,
//! each under the transaction `(writer id, segment number)`, and deleted only after the
//! commit is confirmed. Object storage being slow or down never blocks `append`: records
//! accumulate on disk up to the budget, then `append` reports back-pressure.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::RecordBatch;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::WriterConfig;
use crate::error::{Error, Result};
use crate::files::{FileLimits, SegmentFiles, TABLE_ORDER, table_index};
use crate::tables::{Committed, Committer, Lake, TableOutput};
use crate::wal::{Damage, DamageKind, Sealed, Wal, WalConfig, scan_segment_with};
use atdp_schema::{AuditEvent, Record, Reward, Step, Table, VaultEntry};

/// Proof that a record was appended; await [`LakeWriter::durable`] for it to be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Appended(u64);

/// A snapshot of the writer's counters, for metrics and health checks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriterStats {
    /// Records appended since open.
    pub appended_records: u64,
    /// Records on local disk (fsynced) since open.
    pub durable_records: u64,
    /// Bytes held in the write-ahead log (not yet committed to the lake).
    pub held_bytes: u64,
    /// The disk budget.
    pub budget_bytes: u64,
    /// Segments committed to the lake (or found already committed) since open.
    pub committed_segments: u64,
    /// Rows committed to the lake since open.
    pub committed_rows: u64,
    /// Upload attempts that failed since open.
    pub upload_failures: u64,
    /// Whether the last upload attempt failed (object storage unreachable or refusing).
    pub store_down: bool,
    /// The last upload error.
    pub last_error: Option<String>,
    /// Damaged segments found since open.
    pub damage: Vec<Damage>,
    /// Segments set aside because their records can never be committed (they do not
    /// convert to the table's schema); kept under `<wal>/damaged/`.
    pub rejected_segments: u64,
    /// Why the write-ahead log stopped writing (disk full, I/O error): appends are refused.
    pub log_failure: Option<String>,
}

#[derive(Debug, Default)]
struct UploadStats {
    rejected_segments: u64,
    committed_segments: u64,
    committed_rows: u64,
    upload_failures: u64,
    store_down: bool,
    last_error: Option<String>,
    damage: Vec<Damage>,
}

#[derive(Debug)]
struct Shared {
    stats: Mutex<UploadStats>,
    /// The highest segment number whose commits are confirmed (all lower ones are too).
    committed_tx: watch::Sender<u64>,
    /// The uploader has been stopped: nothing more will be confirmed.
    stopped: AtomicBool,
}

impl Shared {
    fn stats(&self) -> std::sync::MutexGuard<'_, UploadStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until segment `seq` is confirmed; `Err(Closed)` once the uploader is stopped.
    async fn confirmed(&self, seq: u64) -> Result<()> {
        let mut committed = self.committed_tx.subscribe();
        committed
            .wait_for(|done| *done >= seq || self.stopped.load(Ordering::Acquire))
            .await
            .map_err(|_| Error::Closed)?;
        if *committed.borrow() >= seq {
            Ok(())
        } else {
            Err(Error::Closed)
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        // Wake the waiters so that they see `stopped`.
        self.committed_tx.send_modify(|_| {});
    }
}

/// Appends ATDP records to the lake through a local write-ahead log.
#[derive(Debug)]
pub struct LakeWriter {
    wal: Arc<Wal>,
    lake: Lake,
    config: WriterConfig,
    shared: Arc<Shared>,
    sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    uploader: Mutex<Option<JoinHandle<()>>>,
}

impl LakeWriter {
    /// Opens the writer: recovers the log (segments left by an earlier run are committed
    /// first, skipping those the lake already holds) and starts the sync thread and the
    /// uploader task. Must be called inside a Tokio runtime.
    pub async fn open(config: WriterConfig) -> Result<LakeWriter> {
        config.validate()?;
        let lake = Lake::new(&config.lake, config.storage_options.clone())?;
        let wal_config = WalConfig {
            segment_max_bytes: config.segment_max_bytes,
            segment_max_age: config.segment_max_age,
            budget_bytes: config.budget_bytes,
            fsync: config.fsync,
            commit_interval: config.commit_interval,
        };
        let dir = config.wal_dir.clone();
        let opened = tokio::task::spawn_blocking(move || Wal::open(&dir, wal_config))
            .await
            .map_err(|e| Error::Config(format!("log recovery task failed: {e}")))??;
        if !opened.recovered.is_empty() {
            tracing::info!(
                segments = opened.recovered.len(),
                wal_dir = %config.wal_dir.display(),
                "Recovering write-ahead log segments left by an earlier run."
            );
        }
        let wal = opened.wal;
        let start = opened
            .recovered
            .first()
            .map_or(0, |s| s.seq.saturating_sub(1));
        let (committed_tx, _) = watch::channel(start);
        let shared = Arc::new(Shared {
            stats: Mutex::new(UploadStats::default()),
            committed_tx,
            stopped: AtomicBool::new(false),
        });
        // Only the segment that was being written when the last run stopped can end inside
        // a record; a cut anywhere else is corruption.
        let torn_allowed = opened.recovered.last().map(|s| s.seq);
        let sync_wal = wal.clone();
        let sync_thread = std::thread::Builder::new()
            .name("atdp-wal-sync".into())
            .spawn(move || sync_wal.run_sync())
            .map_err(|e| Error::io(&config.wal_dir, e))?;
        let uploader = tokio::spawn(upload_loop(
            wal.clone(),
            lake.clone(),
            opened.sealed_rx,
            shared.clone(),
            Retry {
                initial: config.retry_initial,
                max: config.retry_max,
            },
            FileLimits {
                chunk_rows: config.chunk_rows,
                chunk_bytes: config.chunk_bytes,
                open_files: config.open_files,
                target_file_bytes: config.target_file_bytes,
            },
            torn_allowed,
        ));
        Ok(LakeWriter {
            wal,
            lake,
            config,
            shared,
            sync_thread: Mutex::new(Some(sync_thread)),
            uploader: Mutex::new(Some(uploader)),
        })
    }

    /// This writer instance's id: the Delta transaction app id of its commits and the id of
    /// its audit chain.
    pub fn writer_id(&self) -> &str {
        self.wal.writer_id()
    }

    /// The lake written to.
    pub fn lake(&self) -> &Lake {
        &self.lake
    }

    /// Appends a record. Never waits on disk or object storage; fails with
    /// [`Error::Backpressure`] when the log is over its budget.
    pub fn append(&self, record: impl Into<Record>) -> Result<Appended> {
        let record = record.into();
        if let Record::Audit(event) = record {
            return self.append_audit(event).map(|(appended, _)| appended);
        }
        self.wal.append(&record).map(Appended)
    }

    /// [`LakeWriter::append`] without giving up the record, so that a caller can retry it
    /// after back-pressure.
    pub fn append_record(&self, record: &Record) -> Result<Appended> {
        if let Record::Audit(event) = record {
            return self
                .append_audit(event.clone())
                .map(|(appended, _)| appended);
        }
        self.wal.append(record).map(Appended)
    }

    /// Appends an audit event, linking it into this writer's hash chain; returns the event
    /// as stored (with `chain_id`, `chain_seq`, `prev_hash` and `hash` set).
    pub fn append_audit(&self, event: AuditEvent) -> Result<(Appended, AuditEvent)> {
        self.wal
            .append_audit(event)
            .map(|(ticket, event)| (Appended(ticket), event))
    }

    /// Waits until the record is on local disk (fsynced): from then on a crash cannot lose it.
    pub async fn durable(&self, appended: Appended) -> Result<()> {
        let mut progress = self.wal.synced();
        loop {
            let now = *progress.borrow_and_update();
            if now.synced >= appended.0 {
                return Ok(());
            }
            if now.failed {
                return Err(Error::io(
                    self.wal.dir(),
                    std::io::Error::other("the write-ahead log failed to write"),
                ));
            }
            progress.changed().await.map_err(|_| Error::Closed)?;
        }
    }

    /// Blocking form of [`LakeWriter::durable`], for threads outside the runtime.
    pub fn durable_blocking(&self, appended: Appended) -> Result<()> {
        self.wal.wait_durable(appended.0)
    }

    /// Seals the current segment and waits until everything appended before the call is
    /// committed to the lake. Waits through outages; wrap it in a timeout if needed.
    pub async fn flush(&self) -> Result<()> {
        let wal = self.wal.clone();
        let sealed = tokio::task::spawn_blocking(move || wal.roll())
            .await
            .map_err(|_| Error::Closed)??;
        self.shared.confirmed(sealed).await
    }

    /// Whether the log failed or holds its whole budget (`stats().log_failure.is_some() ||
    /// held_bytes >= budget_bytes`), cheaply: for a check on every request.
    pub fn backlogged(&self) -> bool {
        self.wal.backlogged(self.config.budget_bytes)
    }

    /// Counters for metrics and health checks.
    pub fn stats(&self) -> WriterStats {
        let (appended, durable) = self.wal.counts();
        let uploads = self.shared.stats();
        WriterStats {
            appended_records: appended,
            durable_records: durable,
            held_bytes: self.wal.held_bytes(),
            budget_bytes: self.config.budget_bytes,
            committed_segments: uploads.committed_segments,
            committed_rows: uploads.committed_rows,
            upload_failures: uploads.upload_failures,
            store_down: uploads.store_down,
            last_error: uploads.last_error.clone(),
            damage: uploads.damage.clone(),
            rejected_segments: uploads.rejected_segments,
            log_failure: self.wal.failure(),
        }
    }

    /// Graceful shutdown: stops accepting records (appends fail with [`Error::Closed`]),
    /// writes and seals what is pending, and waits up to `grace` for the lake to confirm.
    /// Returns whether everything was committed; what was not stays in the log, durable,
    /// and is committed by the next start.
    pub async fn shutdown(&self, grace: Duration) -> Result<bool> {
        self.wal.close();
        let thread = self
            .sync_thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(thread) = thread {
            tokio::task::spawn_blocking(move || thread.join())
                .await
                .map_err(|_| Error::Closed)?
                .map_err(|_| Error::Closed)?;
        }
        let last = self.wal.last_sealed();
        let confirmed = tokio::time::timeout(grace, self.shared.confirmed(last)).await;
        let uploader = self
            .uploader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(uploader) = uploader {
            uploader.abort();
            let _ = uploader.await;
        }
        self.shared.stop();
        if let Some(failure) = self.wal.failure() {
            // Records acknowledged before the failure may sit in a segment that was never
            // sealed: they are on disk and the next start commits them, but not now.
            tracing::error!(failure = %failure, "Shutdown after a write-ahead log failure; records stay in the log for the next start.");
            return Ok(false);
        }
        if self.wal.active_has_records() {
            return Ok(false);
        }
        match confirmed {
            Ok(result) => result.map(|()| true),
            Err(_) => {
                tracing::warn!(
                    held_bytes = self.wal.held_bytes(),
                    "Shutdown grace period ended before the lake confirmed every commit; the rest stays in the write-ahead log."
                );
                Ok(false)
            }
        }
    }
}

impl Drop for LakeWriter {
    fn drop(&mut self) {
        self.wal.close();
        if let Some(uploader) = self.uploader.get_mut().ok().and_then(Option::take) {
            uploader.abort();
        }
        self.shared.stop();
    }
}

/// Backoff between upload attempts.
#[derive(Debug, Clone, Copy)]
struct Retry {
    initial: Duration,
    max: Duration,
}

async fn upload_loop(
    wal: Arc<Wal>,
    lake: Lake,
    mut sealed_rx: mpsc::UnboundedReceiver<Sealed>,
    shared: Arc<Shared>,
    retry: Retry,
    limits: FileLimits,
    torn_allowed: Option<u64>,
) {
    let mut committers: BTreeMap<Table, Committer> = BTreeMap::new();
    // The buffer of one record read from a segment, kept between segments.
    let mut buffer = Vec::new();
    while let Some(sealed) = sealed_rx.recv().await {
        let mut backoff = retry.initial;
        let torn_ok = torn_allowed == Some(sealed.seq);
        loop {
            let upload = Upload {
                wal: &wal,
                lake: &lake,
                limits,
                sealed: &sealed,
                torn_ok,
            };
            match upload.run(&mut committers, &mut buffer).await {
                Ok((rows, damage)) => {
                    let mut stats = shared.stats();
                    stats.damage.extend(damage);
                    if stats.store_down {
                        tracing::info!(
                            failures = stats.upload_failures,
                            "Object storage accepts commits again; catching up."
                        );
                    }
                    stats.store_down = false;
                    stats.committed_segments += 1;
                    stats.committed_rows += rows;
                    break;
                }
                Err(error) if error.is_permanent() => {
                    // Retrying cannot help; set the segment aside so the ones behind it flow.
                    match wal.quarantine(&sealed) {
                        Ok(kept) => {
                            tracing::error!(
                                segment = sealed.seq,
                                error = %error,
                                kept = %kept.display(),
                                "Write-ahead log segment can never be committed; it is set aside for inspection."
                            );
                            shared.stats().rejected_segments += 1;
                            break;
                        }
                        Err(move_error) => {
                            tracing::error!(segment = sealed.seq, error = %error, move_error = %move_error, "Write-ahead log segment can never be committed and could not be set aside; retrying.");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(retry.max);
                        }
                    }
                }
                Err(error) => {
                    let held = wal.held_bytes();
                    {
                        let mut stats = shared.stats();
                        stats.upload_failures += 1;
                        stats.last_error = Some(error.to_string());
                        if !stats.store_down {
                            tracing::warn!(
                                segment = sealed.seq,
                                held_bytes = held,
                                error = %error,
                                "Lake commit failed; records stay in the write-ahead log and the upload is retried with backoff."
                            );
                        }
                        stats.store_down = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(retry.max);
                }
            }
        }
        shared.committed_tx.send_replace(sealed.seq);
    }
}

/// One attempt at committing a sealed segment.
struct Upload<'a> {
    wal: &'a Arc<Wal>,
    lake: &'a Lake,
    limits: FileLimits,
    sealed: &'a Sealed,
    /// The segment may end inside a record (it was being written when a run stopped).
    torn_ok: bool,
}

impl Upload<'_> {
    /// Writes the segment's records to data files and commits them, one Delta commit per
    /// table, then releases the segment. Returns the rows committed by this call and the
    /// damage found in the segment, if any.
    async fn run(
        &self,
        committers: &mut BTreeMap<Table, Committer>,
        buffer: &mut Vec<u8>,
    ) -> Result<(u64, Option<Damage>)> {
        let seq = i64::try_from(self.sealed.seq).map_err(|_| {
            Error::Config(format!(
                "segment number {} is out of range",
                self.sealed.seq
            ))
        })?;
        // A replay finds some tables, or all, holding the segment already: their records
        // are not written again.
        let mut wanted = [false; 4];
        for table in TABLE_ORDER {
            let committer = committers
                .entry(table)
                .or_insert_with(|| Committer::new(self.lake.clone(), table, self.wal.writer_id()));
            wanted[table_index(table)] = !committer.holds(seq).await?;
        }
        let (outputs, damage) = self.write_files(wanted, buffer).await?;
        let damage = damage.map(|mut damage| {
            if !self.torn_ok {
                damage.kind = DamageKind::Corrupt;
            }
            damage
        });
        let mut rows = 0;
        for (table, output) in outputs {
            let committer = committers
                .entry(table)
                .or_insert_with(|| Committer::new(self.lake.clone(), table, self.wal.writer_id()));
            if let Committed::Now(version) = committer.commit(seq, &output).await? {
                tracing::debug!(table = %table, segment = self.sealed.seq, version, rows = output.rows, files = output.adds.len(), "Committed segment.");
                rows += output.rows;
            }
        }
        let sealed = self.sealed;
        match damage {
            Some(damage) if damage.kind == DamageKind::Corrupt => {
                let kept = self.wal.quarantine(sealed)?;
                tracing::error!(
                    damage = %damage,
                    kept = %kept.display(),
                    "Write-ahead log segment is corrupt: its intact records were committed, the rest is lost; the file is kept for inspection."
                );
                Ok((rows, Some(damage)))
            }
            Some(damage) => {
                tracing::warn!(damage = %damage, "Write-ahead log segment ends inside a record (a write cut by a crash); the intact records were committed.");
                self.wal.release(sealed)?;
                Ok((rows, Some(damage)))
            }
            None => {
                self.wal.release(sealed)?;
                Ok((rows, None))
            }
        }
    }

    /// Reads the segment and streams the records of the `wanted` tables into data files.
    /// Reading and converting, and encoding, are CPU work: they run on two blocking threads,
    /// a pipeline with one batch between them, off the runtime's workers, which serve the
    /// proxy. The record buffer comes back for the next segment, also when reading failed (a
    /// task that panicked loses it; the next read allocates anew).
    async fn write_files(
        &self,
        wanted: [bool; 4],
        buffer: &mut Vec<u8>,
    ) -> Result<(Vec<(Table, TableOutput)>, Option<Damage>)> {
        let path = self.sealed.path.clone();
        let mut buf = std::mem::take(buffer);
        let files = SegmentFiles::new(self.lake.clone(), self.limits, Handle::current());
        let limits = self.limits;
        let (batches, received) = std::sync::mpsc::sync_channel::<(Table, RecordBatch)>(1);
        let encoder = tokio::task::spawn_blocking(move || {
            let mut files = files;
            for (table, batch) in received {
                if let Err(error) = files.write(table, &batch) {
                    files.abort();
                    return Err(error);
                }
            }
            Ok(files)
        });
        let reader = tokio::task::spawn_blocking(move || {
            let mut tables = ByTable::new(limits, wanted, |table, batch: &RecordBatch| {
                // The encoder stopped on an error of its own, which it reports.
                batches
                    .send((table, batch.clone()))
                    .map_err(|_| Error::Closed)
            });
            let scanned =
                scan_segment_with(&path, &mut buf, |record, size| tables.push(record, size));
            let converted = tables.finish();
            (scanned.and_then(|damage| converted.map(|()| damage)), buf)
        });
        let failed =
            |e: tokio::task::JoinError| Error::Config(format!("segment write task failed: {e}"));
        let (read, buf) = reader.await.map_err(failed)?;
        *buffer = buf;
        let files = encoder.await.map_err(failed)?;
        match (read, files) {
            (Ok(damage), Ok(files)) => {
                let outputs = tokio::task::spawn_blocking(move || files.close())
                    .await
                    .map_err(failed)??;
                Ok((outputs, damage))
            }
            (Err(error), Ok(files)) => {
                tokio::task::spawn_blocking(move || files.abort())
                    .await
                    .map_err(failed)?;
                Err(error)
            }
            (_, Err(error)) => Err(error),
        }
    }
}

/// A segment's records by table, as they are read, converted to Arrow a chunk at a time
/// (`chunk_rows` records of a table, or fewer that take `chunk_bytes` encoded) and handed to
/// `sink`: at most one chunk per table is held decoded, whatever the segment's size. A segment holds up to `segment_max_bytes` of
/// records, or `segment_max_age` of them (80,000 calls in 10 s at 8,000 calls/s). Steps stay
/// boxed as they are decoded, so that the vector moves pointers rather than whole steps when
/// it grows.
pub(crate) struct ByTable<F> {
    // Boxed on purpose: a record decodes a step into a box, and a Vec of whole steps would
    // copy each one.
    #[allow(clippy::vec_box)]
    steps: Vec<Box<Step>>,
    rewards: Vec<Reward>,
    audit: Vec<AuditEvent>,
    vault: Vec<VaultEntry>,
    /// Tables whose records are converted, in [`TABLE_ORDER`]; the others' are dropped.
    wanted: [bool; 4],
    /// Encoded bytes of each table's pending records, in [`TABLE_ORDER`].
    pending_bytes: [usize; 4],
    chunk_rows: usize,
    chunk_bytes: usize,
    sink: F,
    /// The first error converting or writing; the records after it are dropped.
    error: Option<Error>,
}

/// `rows` as a batch, and emptied; `None` when there are none.
fn drain_into_batch<T>(
    rows: &mut Vec<T>,
    to_batch: impl FnOnce(&[T]) -> std::result::Result<RecordBatch, atdp_schema::ConversionError>,
) -> Option<Result<RecordBatch>> {
    if rows.is_empty() {
        return None;
    }
    let converted = to_batch(rows).map_err(Error::from);
    rows.clear();
    Some(converted)
}

impl<F: FnMut(Table, &RecordBatch) -> Result<()>> ByTable<F> {
    pub(crate) fn new(limits: FileLimits, wanted: [bool; 4], sink: F) -> Self {
        ByTable {
            steps: Vec::new(),
            rewards: Vec::new(),
            audit: Vec::new(),
            vault: Vec::new(),
            wanted,
            pending_bytes: [0; 4],
            chunk_rows: limits.chunk_rows.max(1),
            chunk_bytes: limits.chunk_bytes.max(1),
            sink,
            error: None,
        }
    }

    /// Takes a record, `size` bytes encoded.
    pub(crate) fn push(&mut self, record: Record, size: usize) {
        let index = table_index(record.table());
        if self.error.is_some() || !self.wanted[index] {
            return;
        }
        self.pending_bytes[index] += size;
        let (table, pending) = match record {
            Record::Step(step) => {
                self.steps.push(step);
                (Table::Steps, self.steps.len())
            }
            Record::Reward(reward) => {
                self.rewards.push(reward);
                (Table::Rewards, self.rewards.len())
            }
            Record::Audit(event) => {
                self.audit.push(event);
                (Table::Audit, self.audit.len())
            }
            Record::Vault(entry) => {
                self.vault.push(entry);
                (Table::PiiVault, self.vault.len())
            }
        };
        if pending >= self.chunk_rows || self.pending_bytes[index] >= self.chunk_bytes {
            self.convert(table);
        }
    }

    /// Converts the pending records of `table` to a batch, drops them and hands the batch on.
    fn convert(&mut self, table: Table) {
        self.pending_bytes[table_index(table)] = 0;
        let converted = match table {
            Table::Steps => drain_into_batch(&mut self.steps, atdp_schema::steps_to_batch),
            Table::Rewards => drain_into_batch(&mut self.rewards, atdp_schema::rewards_to_batch),
            Table::Audit => drain_into_batch(&mut self.audit, atdp_schema::audit_to_batch),
            Table::PiiVault => drain_into_batch(&mut self.vault, atdp_schema::vault_to_batch),
        };
        let handed = match converted {
            Some(Ok(batch)) => (self.sink)(table, &batch),
            Some(Err(error)) => Err(error),
            None => Ok(()),
        };
        if let Err(error) = handed {
            self.error = Some(error);
        }
    }

    /// Converts and hands on what is pending, tables in [`TABLE_ORDER`]; the first error.
    pub(crate) fn finish(mut self) -> Result<()> {
        for table in TABLE_ORDER {
            if self.error.is_none() {
                self.convert(table);
            }
        }
        match self.error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_convert_in_chunks_and_unwanted_tables_are_dropped() {
        const CHUNK: usize = 16;
        let mut shape: Vec<(Table, usize)> = Vec::new();
        let mut first_ids: Vec<String> = Vec::new();
        let limits = FileLimits {
            chunk_rows: CHUNK,
            chunk_bytes: 1 << 20,
            open_files: 1,
            target_file_bytes: 1 << 20,
        };
        let mut tables = ByTable::new(limits, [true, true, false, true], |table, batch| {
            shape.push((table, batch.num_rows()));
            if table == Table::Rewards {
                first_ids.push(atdp_schema::rewards_from_batch(batch)?[0].reward_id.clone());
            }
            Ok(())
        });
        for i in 0..2 * CHUNK + 1 {
            tables.push(
                Record::Reward(Reward {
                    reward_id: format!("r{i}"),
                    ..Reward::default()
                }),
                10,
            );
            tables.push(Record::Audit(AuditEvent::default()), 10);
            if i == CHUNK - 1 {
                // The rewards were converted as the chunk filled; the step is not yet.
                assert!(tables.rewards.is_empty());
                tables.push(Record::Step(Box::default()), 10);
            }
        }
        tables.push(Record::Step(Box::default()), 10);
        assert!(tables.audit.is_empty(), "audit is not wanted");
        tables.finish().unwrap();
        assert_eq!(
            shape,
            vec![
                (Table::Rewards, CHUNK),
                (Table::Rewards, CHUNK),
                (Table::Steps, 2),
                (Table::Rewards, 1),
            ]
        );
        assert_eq!(
            first_ids,
            [
                "r0",
                format!("r{CHUNK}").as_str(),
                format!("r{}", 2 * CHUNK).as_str()
            ]
        );
    }

    #[test]
    fn a_chunk_ends_at_its_bytes_before_its_rows() {
        let limits = FileLimits {
            chunk_rows: 1000,
            chunk_bytes: 100,
            open_files: 1,
            target_file_bytes: 1 << 20,
        };
        let mut sizes = Vec::new();
        let mut tables = ByTable::new(limits, [true; 4], |_, batch| {
            sizes.push(batch.num_rows());
            Ok(())
        });
        for size in [40, 40, 40, 150, 10] {
            tables.push(Record::Reward(Reward::default()), size);
        }
        tables.finish().unwrap();
        assert_eq!(sizes, [3, 1, 1]);
    }

    #[test]
    fn the_first_error_stops_the_conversion() {
        let mut calls = 0;
        let limits = FileLimits {
            chunk_rows: 1,
            chunk_bytes: 1 << 20,
            open_files: 1,
            target_file_bytes: 1 << 20,
        };
        let mut tables = ByTable::new(limits, [true; 4], |_, _| {
            calls += 1;
            Err(Error::Closed)
        });
        tables.push(Record::Reward(Reward::default()), 10);
        tables.push(Record::Reward(Reward::default()), 10);
        assert!(matches!(tables.finish(), Err(Error::Closed)));
        assert_eq!(calls, 1);
    }
}
