//! A segment's records written straight to the Parquet data files of the Delta tables.
//!
//! The uploader converts a sealed segment's records to Arrow a chunk at a time and streams
//! each chunk into the open data file of its partition (`tenant_id`, `date`) with delta-rs's
//! own file writer: the Parquet settings of [`writer_properties`], and the statistics,
//! partition values and paths of a delta-rs write, without DataFusion's write plan (whose
//! repartitioning copies, validation and buffers cost most of the writer's CPU and memory).
//! The segment is never held decoded whole: memory is a chunk of decoded records and its Arrow
//! batch, plus at most `open_files` data files per table, each holding its row group in
//! progress and the part of the file not yet uploaded (`docs/lake.md` §4). What comes out is
//! each table's `Add` actions, which [`Committer`](crate::tables::Committer) commits in one
//! transaction.
//!
//! Everything here runs on a blocking thread: encoding is CPU work, kept off the async
//! runtime's workers. The writer's futures are driven with [`Handle::block_on`]; its uploads
//! run as tasks of the runtime.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU64;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::Date32Type;
use delta_kernel::expressions::Scalar;
use delta_kernel::table_properties::DataSkippingNumIndexedCols;
use deltalake::datafile::writer::{DeltaWriter as FileWriter, WriterConfig as FileConfig};
use deltalake::logstore::ObjectStoreRef;
use indexmap::IndexMap;
use tokio::runtime::Handle;

use crate::error::{Error, Result};
use crate::tables::{Lake, TableOutput, stats_columns, writer_properties};
use atdp_schema::Table;
use atdp_schema::{PARTITION_COLUMNS, arrow_schema};

/// How the data files of a segment are cut; see [`WriterConfig`](crate::WriterConfig).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileLimits {
    /// Records converted to Arrow and written at a time, at most …
    pub chunk_rows: usize,
    /// … and fewer when they take this many bytes in the write-ahead log.
    pub chunk_bytes: usize,
    /// Data files open at once per table; past it, the one written least recently is
    /// finished (a partition written again later gets another file).
    pub open_files: usize,
    /// A data file is finished and another started once it holds about this many bytes.
    pub target_file_bytes: u64,
}

/// A data file being written: one partition of one table.
struct OpenFile {
    tenant: String,
    date: i32,
    values: IndexMap<String, Scalar>,
    writer: FileWriter,
    /// When it was last written to, in writes of this table (for finishing the oldest).
    last_write: u64,
}

/// The data files of one table for one segment.
pub(crate) struct TableFiles {
    table: Table,
    handle: Handle,
    store: ObjectStoreRef,
    config: FileConfig,
    open_files: usize,
    open: Vec<OpenFile>,
    output: TableOutput,
    partitions: HashSet<(String, i32)>,
    writes: u64,
}

impl TableFiles {
    /// Files of `table` in `lake`, cut by `limits`. Creates a local table's directory.
    pub(crate) fn new(
        lake: &Lake,
        table: Table,
        limits: FileLimits,
        handle: Handle,
    ) -> Result<Self> {
        let store = lake.table_store(table)?;
        let stats = stats_columns(table).split(',').map(str::to_owned).collect();
        let config = FileConfig::new(
            arrow_schema(table),
            PARTITION_COLUMNS.map(str::to_owned).to_vec(),
            Some(writer_properties(table)),
            NonZeroU64::new(limits.target_file_bytes),
            None,
            // Unused while the statistics columns are named; the protocol's default.
            DataSkippingNumIndexedCols::NumColumns(32),
            Some(stats),
        );
        Ok(TableFiles {
            table,
            handle,
            store,
            config,
            open_files: limits.open_files.max(1),
            open: Vec::new(),
            output: TableOutput::default(),
            partitions: HashSet::new(),
            writes: 0,
        })
    }

    /// Writes a batch of the table's rows (partition columns included) into the files of
    /// their partitions.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.output.rows += batch.num_rows() as u64;
        for (tenant, date, rows) in split_by_partition(self.table, batch)? {
            let index = match self
                .open
                .iter()
                .position(|file| file.date == date && file.tenant == tenant)
            {
                Some(index) => index,
                None => self.open_file(tenant, date)?,
            };
            self.writes += 1;
            let file = &mut self.open[index];
            file.last_write = self.writes;
            self.handle
                .block_on(file.writer.write_partition(rows, &file.values))
                .map_err(|e| Error::delta(self.table.name(), e))?;
        }
        Ok(())
    }

    /// Opens the file of a partition, finishing the least recently written one first when
    /// `open_files` are open; returns its index in `open`.
    fn open_file(&mut self, tenant: String, date: i32) -> Result<usize> {
        if self.open.len() >= self.open_files
            && let Some(oldest) = self
                .open
                .iter()
                .enumerate()
                .min_by_key(|(_, file)| file.last_write)
                .map(|(index, _)| index)
        {
            let file = self.open.swap_remove(oldest);
            self.finish(file)?;
        }
        let mut values = IndexMap::new();
        values.insert(
            PARTITION_COLUMNS[0].to_owned(),
            Scalar::String(tenant.clone()),
        );
        values.insert(PARTITION_COLUMNS[1].to_owned(), Scalar::Date(date));
        self.partitions.insert((tenant.clone(), date));
        self.open.push(OpenFile {
            tenant,
            date,
            values,
            writer: FileWriter::new(self.store.clone(), self.config.clone()),
            last_write: 0,
        });
        Ok(self.open.len() - 1)
    }

    fn finish(&mut self, file: OpenFile) -> Result<()> {
        let adds = self
            .handle
            .block_on(file.writer.close())
            .map_err(|e| Error::delta(self.table.name(), e))?;
        self.output.adds.extend(adds);
        Ok(())
    }

    /// Finishes every open file; the table's files and rows. On an error the files that were
    /// finished stay in storage unreferenced, for `vacuum`.
    /// The files are finished together, their last parts uploading at once.
    pub(crate) fn close(mut self) -> Result<TableOutput> {
        let closing = std::mem::take(&mut self.open)
            .into_iter()
            .map(|file| file.writer.close());
        let closed = self.handle.block_on(futures::future::join_all(closing));
        for result in closed {
            let adds = result.map_err(|e| Error::delta(self.table.name(), e))?;
            self.output.adds.extend(adds);
        }
        self.output.partitions = self.partitions.len();
        Ok(self.output)
    }

    /// Abandons the open files, aborting their uploads. Files already finished stay in
    /// storage unreferenced, for `vacuum`.
    pub(crate) fn abort(mut self) {
        for file in std::mem::take(&mut self.open) {
            self.abandon(file);
        }
    }

    fn abandon(&self, file: OpenFile) {
        if let Err(error) = self.handle.block_on(file.writer.abort()) {
            tracing::debug!(table = %self.table, error = %error, "Aborting a data file's upload failed; vacuum removes what is left.");
        }
    }
}

/// The data files of a segment, table by table, opened as the table's first rows arrive.
pub(crate) struct SegmentFiles {
    lake: Lake,
    limits: FileLimits,
    handle: Handle,
    files: [Option<TableFiles>; 4],
}

impl SegmentFiles {
    pub(crate) fn new(lake: Lake, limits: FileLimits, handle: Handle) -> Self {
        SegmentFiles {
            lake,
            limits,
            handle,
            files: [None, None, None, None],
        }
    }

    /// Writes a batch of `table`'s rows.
    pub(crate) fn write(&mut self, table: Table, batch: &RecordBatch) -> Result<()> {
        let slot = &mut self.files[table_index(table)];
        let files = match slot {
            Some(files) => files,
            None => slot.insert(TableFiles::new(
                &self.lake,
                table,
                self.limits,
                self.handle.clone(),
            )?),
        };
        files.write(batch)
    }

    /// Finishes every file: what each table that had rows became, tables in
    /// [`TABLE_ORDER`]. On an error the files still open are abandoned.
    pub(crate) fn close(self) -> Result<Vec<(Table, TableOutput)>> {
        let mut outputs = Vec::new();
        let mut files = self.files.into_iter();
        for (table, slot) in TABLE_ORDER.into_iter().zip(files.by_ref()) {
            let Some(table_files) = slot else { continue };
            match table_files.close() {
                Ok(output) => outputs.push((table, output)),
                Err(error) => {
                    files.flatten().for_each(TableFiles::abort);
                    return Err(error);
                }
            }
        }
        Ok(outputs)
    }

    /// Abandons every file (after an error reading or writing the segment).
    pub(crate) fn abort(self) {
        self.files.into_iter().flatten().for_each(TableFiles::abort);
    }
}

/// The order in which a segment's tables are committed.
pub(crate) const TABLE_ORDER: [Table; 4] =
    [Table::Steps, Table::Rewards, Table::Audit, Table::PiiVault];

/// The position of `table` in [`TABLE_ORDER`].
pub(crate) fn table_index(table: Table) -> usize {
    match table {
        Table::Steps => 0,
        Table::Rewards => 1,
        Table::Audit => 2,
        Table::PiiVault => 3,
    }
}

/// Splits a batch by partition (`tenant_id`, `date`), partitions in the order they first
/// appear and rows in their order. A batch of one partition comes back whole, uncopied.
fn split_by_partition(
    table: Table,
    batch: &RecordBatch,
) -> Result<Vec<(String, i32, RecordBatch)>> {
    let missing = |column: &str| Error::Arrow {
        table: table.name(),
        message: format!("the batch has no {column} column of the expected type"),
    };
    let tenants = batch
        .column_by_name(PARTITION_COLUMNS[0])
        .and_then(|column| column.as_string_opt::<i32>())
        .ok_or_else(|| missing(PARTITION_COLUMNS[0]))?;
    let dates = batch
        .column_by_name(PARTITION_COLUMNS[1])
        .and_then(|column| column.as_primitive_opt::<Date32Type>())
        .ok_or_else(|| missing(PARTITION_COLUMNS[1]))?;
    let rows = batch.num_rows();
    if rows == 0 {
        return Ok(Vec::new());
    }
    let first = (tenants.value(0), dates.value(0));
    if (1..rows).all(|row| (tenants.value(row), dates.value(row)) == first) {
        return Ok(vec![(first.0.to_owned(), first.1, batch.clone())]);
    }
    let mut groups: Vec<((&str, i32), Vec<u32>)> = Vec::new();
    let mut index: HashMap<(&str, i32), usize> = HashMap::new();
    for row in 0..rows {
        let key = (tenants.value(row), dates.value(row));
        let group = *index.entry(key).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        let row = u32::try_from(row).map_err(|_| Error::Arrow {
            table: table.name(),
            message: "a batch of more than 2^32 rows".into(),
        })?;
        groups[group].1.push(row);
    }
    groups
        .into_iter()
        .map(|((tenant, date), rows)| {
            let part =
                take_record_batch(batch, &UInt32Array::from(rows)).map_err(|e| Error::Arrow {
                    table: table.name(),
                    message: e.to_string(),
                })?;
            Ok((tenant.to_owned(), date, part))
        })
        .collect()
}

#[cfg(test)]
#[cfg(feature = "query")]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::catalog::Catalog;
    use crate::synth::{SynthConfig, generate};
    use crate::tables::{Committed, Committer};
    use atdp_schema::rewards_to_batch;
    use atdp_schema::{Record, Reward};

    fn rewards(keys: &[(&str, &str)]) -> RecordBatch {
        let rows: Vec<Reward> = keys
            .iter()
            .enumerate()
            .map(|(i, (tenant, day))| Reward {
                reward_id: format!("r{i}"),
                tenant_id: (*tenant).to_owned(),
                created_at: chrono::DateTime::parse_from_rfc3339(&format!("{day}T12:00:00Z"))
                    .unwrap()
                    .timestamp_micros(),
                ..Reward::default()
            })
            .collect();
        rewards_to_batch(&rows).unwrap()
    }

    #[test]
    fn a_batch_splits_by_tenant_and_day_in_order() {
        let batch = rewards(&[
            ("a", "2026-12-01"),
            ("b", "2026-12-01"),
            ("a", "2026-12-01"),
            ("a", "2026-12-02"),
        ]);
        let parts = split_by_partition(Table::Rewards, &batch).unwrap();
        let shape: Vec<(String, usize)> = parts
            .iter()
            .map(|(tenant, _, part)| (tenant.clone(), part.num_rows()))
            .collect();
        assert_eq!(
            shape,
            vec![("a".into(), 2), ("b".into(), 1), ("a".into(), 1)]
        );
        assert_ne!(parts[0].1, parts[2].1, "two days are two partitions");
        let ids = atdp_schema::rewards_from_batch(&parts[0].2).unwrap();
        assert_eq!(ids[0].reward_id, "r0");
        assert_eq!(ids[1].reward_id, "r2");
    }

    #[test]
    fn a_batch_of_one_partition_is_not_copied() {
        let batch = rewards(&[("a", "2026-12-01"), ("a", "2026-12-01")]);
        let parts = split_by_partition(Table::Rewards, &batch).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(
            parts[0].2.column(0).to_data().buffers()[0].as_ptr(),
            batch.column(0).to_data().buffers()[0].as_ptr()
        );
    }

    /// The records of a synthetic lake (steps, rewards, audit events, vault entries over
    /// three tenants and three days), as batches of each table, `chunk` rows at a time (as the
    /// writer converts them).
    fn synthetic_batches(chunk: usize) -> Vec<(Table, Vec<RecordBatch>)> {
        let mut records: Vec<Record> = Vec::new();
        generate(
            &SynthConfig {
                steps: 600,
                ..SynthConfig::default()
            },
            |record| {
                records.push(record);
                Ok(())
            },
        )
        .unwrap();
        let (mut steps, mut rewards, mut audit, mut vault) = (vec![], vec![], vec![], vec![]);
        for record in records {
            match record {
                Record::Step(step) => steps.push(step),
                Record::Reward(reward) => rewards.push(reward),
                Record::Audit(event) => audit.push(event),
                Record::Vault(entry) => vault.push(entry),
            }
        }
        let mut out: Vec<(Table, Vec<RecordBatch>)> =
            TABLE_ORDER.iter().map(|t| (*t, Vec::new())).collect();
        let at = |table| table_index(table);
        out[at(Table::Steps)].1 = steps
            .chunks(chunk)
            .map(|rows| atdp_schema::steps_to_batch(rows).unwrap())
            .collect();
        out[at(Table::Rewards)].1 = rewards
            .chunks(chunk)
            .map(|rows| atdp_schema::rewards_to_batch(rows).unwrap())
            .collect();
        out[at(Table::Audit)].1 = audit
            .chunks(chunk)
            .map(|rows| atdp_schema::audit_to_batch(rows).unwrap())
            .collect();
        out[at(Table::PiiVault)].1 = vault
            .chunks(chunk)
            .map(|rows| atdp_schema::vault_to_batch(rows).unwrap())
            .collect();
        out
    }

    /// `value` with every object's keys in order: the log's maps (partition values,
    /// statistics) are written in no particular order.
    fn canonical(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let sorted: BTreeMap<&String, serde_json::Value> =
                    map.iter().map(|(k, v)| (k, canonical(v))).collect();
                serde_json::Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(canonical).collect())
            }
            other => other.clone(),
        }
    }

    /// Each `add` action of a table's log: partition values and the parsed statistics,
    /// sorted; with the log's commit operations and application transactions.
    fn log_of(lake: &Lake, table: Table) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
        let log = lake
            .table_url(table)
            .unwrap()
            .to_file_path()
            .unwrap()
            .join("_delta_log");
        let mut adds = Vec::new();
        let mut commits = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        names.sort();
        for path in names {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let action: serde_json::Value = serde_json::from_str(line).unwrap();
                if let Some(add) = action.get("add") {
                    let stats: serde_json::Value =
                        serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                    assert!(
                        add["path"].as_str().unwrap().ends_with(".zstd.parquet"),
                        "{add}"
                    );
                    assert_eq!(add["dataChange"], true);
                    adds.push(canonical(&serde_json::json!({
                        "partitionValues": add["partitionValues"],
                        "stats": stats,
                        "hivePath": add["path"].as_str().unwrap().rsplit_once('/').unwrap().0,
                    })));
                }
                if let Some(info) = action.get("commitInfo") {
                    commits.push(serde_json::json!({
                        "operation": info["operation"],
                        "mode": info["operationParameters"]["mode"],
                        "partitionBy": info["operationParameters"]["partitionBy"],
                        "isBlindAppend": info["isBlindAppend"],
                    }));
                }
                if let Some(txn) = action.get("txn") {
                    commits
                        .push(serde_json::json!({"txn": txn["appId"], "version": txn["version"]}));
                }
            }
        }
        adds.sort_by_key(|a| a.to_string());
        (adds, commits)
    }

    /// A lake for our write path and one for delta-rs's, under `dir`.
    fn two_lakes(dir: &tempfile::TempDir) -> (Lake, Lake) {
        let lake = |name: &str| {
            Lake::new(dir.path().join(name).to_str().unwrap(), HashMap::new()).unwrap()
        };
        (lake("ours"), lake("delta-rs"))
    }

    /// `batches` of `table` written as one segment's files, as the uploader's encoder does.
    async fn write_segment(
        lake: &Lake,
        limits: FileLimits,
        table: Table,
        batches: &[RecordBatch],
    ) -> Vec<(Table, TableOutput)> {
        let lake = lake.clone();
        let batches = batches.to_vec();
        let handle = Handle::current();
        tokio::task::spawn_blocking(move || {
            let mut files = SegmentFiles::new(lake, limits, handle);
            for batch in &batches {
                files.write(table, batch)?;
            }
            files.close()
        })
        .await
        .unwrap()
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_and_log_read_back_as_a_delta_rs_write_of_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = two_lakes(&dir);
        // Small chunks and two open files per table: partitions are written, finished and
        // opened again within the segment, as a busy segment of many tenants would be.
        let limits = FileLimits {
            chunk_rows: 64,
            chunk_bytes: usize::MAX,
            open_files: 2,
            target_file_bytes: 128 << 20,
        };
        let batches = synthetic_batches(limits.chunk_rows);
        for (table, table_batches) in batches {
            assert!(!table_batches.is_empty(), "{table} has rows");
            let output = write_segment(&ours, limits, table, &table_batches).await;
            assert_eq!(output.len(), 1);
            let (_, output) = &output[0];
            let rows: usize = table_batches.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(output.rows, rows as u64);
            let mut committer = Committer::new(ours.clone(), table, "writer-1");
            assert_eq!(
                committer.commit(1, output).await.unwrap(),
                Committed::Now(1)
            );
            // The same transaction again is a replay: nothing is committed.
            assert_eq!(
                committer.commit(1, output).await.unwrap(),
                Committed::Already
            );
            assert!(
                Committer::new(ours.clone(), table, "writer-1")
                    .holds(1)
                    .await
                    .unwrap()
            );

            Committer::new(theirs.clone(), table, "writer-1")
                .commit_with_delta_rs(1, table_batches)
                .await
                .unwrap();

            // With two files open, a partition's file can be finished early and the
            // partition continued in another: rows and paths are compared per partition here,
            // the statistics file by file in the test below, where each partition is one file.
            let (our_adds, our_commits) = log_of(&ours, table);
            let (their_adds, their_commits) = log_of(&theirs, table);
            assert_eq!(
                our_commits, their_commits,
                "{table}: commit operations and txn"
            );
            let partitions = |adds: &[serde_json::Value]| {
                let mut by: BTreeMap<String, (i64, String)> = BTreeMap::new();
                for add in adds {
                    let key = add["partitionValues"].to_string();
                    let entry = by.entry(key).or_insert((0, add["hivePath"].to_string()));
                    entry.0 += add["stats"]["numRecords"].as_i64().unwrap();
                    assert_eq!(entry.1, add["hivePath"].to_string());
                }
                by
            };
            assert_eq!(partitions(&our_adds), partitions(&their_adds), "{table}");
            if table == Table::Steps {
                assert!(
                    our_adds.len() > partitions(&our_adds).len(),
                    "files were finished early"
                );
            }

            let read = |lake: Lake| async move {
                let catalog = Catalog::open(&lake, &BTreeMap::new()).await.unwrap();
                let key = match table {
                    Table::Steps => "step_id",
                    Table::Rewards => "reward_id",
                    Table::Audit => "event_id",
                    Table::PiiVault => "token",
                };
                let batches = catalog
                    .sql(&format!("SELECT * FROM {} ORDER BY {key}", table.name()))
                    .await
                    .unwrap();
                arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
            };
            assert_eq!(
                read(ours.clone()).await,
                read(theirs.clone()).await,
                "{table}: rows"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_file_per_partition_has_the_statistics_of_a_delta_rs_write() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = two_lakes(&dir);
        let limits = FileLimits {
            chunk_rows: 4096,
            chunk_bytes: usize::MAX,
            open_files: 16,
            target_file_bytes: 128 << 20,
        };
        for (table, table_batches) in synthetic_batches(limits.chunk_rows) {
            let outputs = write_segment(&ours, limits, table, &table_batches).await;
            let mut committer = Committer::new(ours.clone(), table, "writer-1");
            committer.commit(1, &outputs[0].1).await.unwrap();
            Committer::new(theirs.clone(), table, "writer-1")
                .commit_with_delta_rs(1, table_batches)
                .await
                .unwrap();
            let (our_adds, _) = log_of(&ours, table);
            let (their_adds, _) = log_of(&theirs, table);
            assert_eq!(
                our_adds, their_adds,
                "{table}: partitions and statistics of each file"
            );
        }
    }
}
