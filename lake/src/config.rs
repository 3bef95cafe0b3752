//! Settings of the lake writer.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Settings of a [`LakeWriter`](crate::LakeWriter).
#[derive(Clone)]
pub struct WriterConfig {
    /// The lake: a local directory, or a `file://`, `s3://`, `gs://` or `az://` URL.
    pub lake: String,
    /// Object-store options (endpoint, region, credentials, `allow_http`, timeouts …);
    /// see `docs/lake.md`. Values are secrets and are never printed.
    pub storage_options: HashMap<String, String>,
    /// Directory of this writer instance's write-ahead log. Each writer process needs its
    /// own: its id (the Delta transaction app id) is kept there.
    pub wal_dir: PathBuf,
    /// A segment is sealed and committed once it holds this many bytes.
    pub segment_max_bytes: u64,
    /// … or once its first record is this old.
    pub segment_max_age: Duration,
    /// Most bytes the log may hold while object storage is slow or down; past this,
    /// appends fail with back-pressure.
    pub budget_bytes: u64,
    /// fsync each group commit (on by default; off only for benchmarks of the rest).
    pub fsync: bool,
    /// Shortest time between two group commits (default 2 ms). Records appended in between
    /// wait in memory and share one write and one fsync; `durable` answers up to this much
    /// later. Zero commits as soon as the previous commit ends.
    pub commit_interval: Duration,
    /// First pause before retrying a failed upload; doubles up to `retry_max`.
    pub retry_initial: Duration,
    /// Longest pause between upload retries.
    pub retry_max: Duration,
    /// Records of a table converted to Arrow and written to the data files at a time, at
    /// most (default 4,096) …
    pub chunk_rows: usize,
    /// … and fewer when they take this many bytes in the log (default 4 MiB). With
    /// [`open_files`](Self::open_files) they bound the uploader's memory, whatever the
    /// segment's size.
    pub chunk_bytes: usize,
    /// Data files open at once per table while a segment is written (default 32): one per
    /// partition (tenant, day) the segment holds. Past it the file written least recently is
    /// finished, and a partition written again gets another file.
    pub open_files: usize,
    /// A data file is finished and another started once it holds about this many bytes
    /// (default 128 MiB).
    pub target_file_bytes: u64,
}

impl std::fmt::Debug for WriterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut option_names: Vec<&String> = self.storage_options.keys().collect();
        option_names.sort();
        f.debug_struct("WriterConfig")
            .field("lake", &self.lake)
            .field("storage_options", &option_names)
            .field("wal_dir", &self.wal_dir)
            .field("segment_max_bytes", &self.segment_max_bytes)
            .field("segment_max_age", &self.segment_max_age)
            .field("budget_bytes", &self.budget_bytes)
            .field("fsync", &self.fsync)
            .field("commit_interval", &self.commit_interval)
            .field("retry_initial", &self.retry_initial)
            .field("retry_max", &self.retry_max)
            .field("chunk_rows", &self.chunk_rows)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("open_files", &self.open_files)
            .field("target_file_bytes", &self.target_file_bytes)
            .finish()
    }
}

impl WriterConfig {
    /// Defaults: 64 MiB or 10 s segments, an 8 GiB disk budget, fsync on at most every 2 ms,
    /// retries from 200 ms up to 30 s, segments written 4,096 records or 4 MiB at a time
    /// into at most 32 open files per table of up to 128 MiB.
    pub fn new(lake: impl Into<String>, wal_dir: impl Into<PathBuf>) -> Self {
        WriterConfig {
            lake: lake.into(),
            storage_options: HashMap::new(),
            wal_dir: wal_dir.into(),
            segment_max_bytes: 64 << 20,
            segment_max_age: Duration::from_secs(10),
            budget_bytes: 8 << 30,
            fsync: true,
            commit_interval: Duration::from_millis(2),
            retry_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            chunk_rows: 4096,
            chunk_bytes: 4 << 20,
            open_files: 32,
            target_file_bytes: 128 << 20,
        }
    }

    /// Checks the settings for values that cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.lake.trim().is_empty() {
            return Err(Error::Config("`lake` is empty".into()));
        }
        if self.segment_max_bytes < 4096 {
            return Err(Error::Config(
                "`segment_max_bytes` must be at least 4096".into(),
            ));
        }
        if self.budget_bytes < self.segment_max_bytes {
            return Err(Error::Config(
                "`budget_bytes` must be at least `segment_max_bytes`".into(),
            ));
        }
        if self.commit_interval > Duration::from_secs(1) {
            return Err(Error::Config(
                "`commit_interval` must be at most 1 s".into(),
            ));
        }
        if self.chunk_rows == 0 || self.chunk_bytes == 0 || self.open_files == 0 {
            return Err(Error::Config(
                "`chunk_rows`, `chunk_bytes` and `open_files` must be above zero".into(),
            ));
        }
        if self.target_file_bytes < 1 << 20 {
            return Err(Error::Config(
                "`target_file_bytes` must be at least 1 MiB".into(),
            ));
        }
        if self.segment_max_age.is_zero() {
            return Err(Error::Config("`segment_max_age` must be above zero".into()));
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            return Err(Error::Config(
                "`retry_initial` must be above zero and at most `retry_max`".into(),
            ));
        }
        Ok(())
    }
}
