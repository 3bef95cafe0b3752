//! Where the lake is, and committing batches to its Delta tables idempotently.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Once;

use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TableReference};
use deltalake::kernel::{Action, Add, Transaction};
use deltalake::logstore::{LogStoreRef, ObjectStoreRef};
use deltalake::parquet::basic::{Compression, ZstdLevel};
use deltalake::parquet::file::properties::{EnabledStatistics, WriterProperties};
use deltalake::parquet::schema::types::ColumnPath;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::table::state::DeltaTableState;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use url::Url;

use deltalake::kernel::StructType;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;

use crate::error::{Error, Result};
use atdp_schema::{PARTITION_COLUMNS, arrow_schema};
use atdp_schema::{PROTOCOL_VERSION, READABLE_VERSIONS, Table};

/// The table configuration key holding the ATDP protocol version.
pub const PROTOCOL_VERSION_KEY: &str = "atdp.protocolVersion";

/// Path of the tables under the lake root.
const TABLES_PREFIX: &str = "atdp/v1";

/// Columns whose min/max statistics Delta keeps in its log, for file skipping (the
/// message text columns would only bloat the log).
pub(crate) fn stats_columns(table: Table) -> &'static str {
    match table {
        Table::Steps => {
            "step_id,trajectory_id,parent_step_id,turn_index,agent_id,started_at,ended_at,api,upstream,model_requested,model_served,policy_version,finish_reason,status,prompt_tokens,completion_tokens,training_eligible,retention_until"
        }
        Table::Rewards => {
            "reward_id,trajectory_id,step_id,name,value,source,reward_fn_version,terminal,created_at"
        }
        Table::Audit => "event_id,chain_id,chain_seq,occurred_at,kind,actor,subject,decision",
        Table::PiiVault => "token,entity,key_id,created_at",
    }
}

static REGISTER_STORES: Once = Once::new();

fn register_object_stores() {
    REGISTER_STORES.call_once(|| {
        deltalake::aws::register_handlers(None);
        deltalake::gcp::register_handlers(None);
        deltalake::azure::register_handlers(None);
    });
}

/// A lake location: a root URL (`file://`, `s3://`, `gs://`, `az://`/`abfss://`) or a local
/// path, and the object-store options it needs (endpoint, region, credentials, …).
#[derive(Clone)]
pub struct Lake {
    root: Url,
    options: HashMap<String, String>,
}

impl std::fmt::Debug for Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Options hold credentials: print only their names.
        let mut keys: Vec<&String> = self.options.keys().collect();
        keys.sort();
        f.debug_struct("Lake")
            .field("root", &self.root.as_str())
            .field("options", &keys)
            .finish()
    }
}

impl Lake {
    /// A lake at `location` (a URL, or a local directory that is created if missing).
    pub fn new(location: &str, options: HashMap<String, String>) -> Result<Lake> {
        register_object_stores();
        let bad = |message: String| Error::Location {
            url: location.to_owned(),
            message,
        };
        let root = match Url::parse(location) {
            Ok(url) if url.scheme().len() > 1 => url,
            _ => {
                let path = Path::new(location);
                std::fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
                let absolute = path.canonicalize().map_err(|e| Error::io(path, e))?;
                Url::from_directory_path(&absolute)
                    .map_err(|()| bad("not an absolute local path".into()))?
            }
        };
        if root.scheme() == "file" {
            let path = root
                .to_file_path()
                .map_err(|()| bad("not a local path".into()))?;
            std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
        let mut root = root;
        if !root.path().ends_with('/') {
            let path = format!("{}/", root.path());
            root.set_path(&path);
        }
        Ok(Lake { root, options })
    }

    /// The root URL.
    pub fn root(&self) -> &Url {
        &self.root
    }

    /// The object-store options.
    pub fn options(&self) -> &HashMap<String, String> {
        &self.options
    }

    /// The URL of a table: `<root>/atdp/v1/<table>/`.
    pub fn table_url(&self, table: Table) -> Result<Url> {
        self.root
            .join(&format!("{TABLES_PREFIX}/{}/", table.name()))
            .map_err(|e| Error::Location {
                url: self.root.to_string(),
                message: e.to_string(),
            })
    }

    /// The table as it is now; `Ok(None)` when it has not been created yet. A table of a
    /// protocol version this reader does not know is an error.
    pub async fn open_table(&self, table: Table) -> Result<Option<DeltaTable>> {
        let url = self.table_url(table)?;
        if let Ok(path) = url.to_file_path()
            && !path.exists()
        {
            return Ok(None);
        }
        let delta = self.load(table).await?;
        if delta.version().is_none() {
            return Ok(None);
        }
        check_version(table, &delta)?;
        Ok(Some(delta))
    }

    /// Creates a local table's directory (delta-rs needs it to exist); object stores have
    /// no directories.
    pub(crate) fn prepare(&self, table: Table) -> Result<()> {
        if let Ok(path) = self.table_url(table)?.to_file_path() {
            std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }

    /// The object store of a table's files (paths relative to the table), without reading
    /// its log; creates a local table's directory.
    pub(crate) fn table_store(&self, table: Table) -> Result<ObjectStoreRef> {
        self.prepare(table)?;
        let url = self.table_url(table)?;
        let handle = DeltaTableBuilder::from_url(url)
            .and_then(|builder| builder.with_storage_options(self.options.clone()).build())
            .map_err(|e| Error::delta(table.name(), e))?;
        Ok(handle.object_store())
    }

    /// The table handle, loaded when the table exists (a write creates it otherwise).
    pub(crate) async fn load(&self, table: Table) -> Result<DeltaTable> {
        let url = self.table_url(table)?;
        DeltaTable::try_from_url_with_storage_options(url, self.options.clone())
            .await
            .map_err(|e| Error::delta(table.name(), e))
    }

    /// The table at a given version, for repeatable reads.
    pub async fn open_table_at(&self, table: Table, version: u64) -> Result<DeltaTable> {
        let mut delta = self.load(table).await?;
        delta
            .load_version(version)
            .await
            .map_err(|e| Error::delta(table.name(), e))?;
        check_version(table, &delta)?;
        Ok(delta)
    }
}

/// The protocol version a table's configuration states; a table without the key (written by
/// a producer that did not set it) is taken as version `1`.
pub fn table_version(delta: &DeltaTable) -> Option<String> {
    let snapshot = delta.snapshot().ok()?;
    Some(
        snapshot
            .metadata()
            .configuration()
            .get(PROTOCOL_VERSION_KEY)
            .cloned()
            .unwrap_or_else(|| "1".to_owned()),
    )
}

/// Refuses a table whose protocol version is not one of [`READABLE_VERSIONS`].
fn check_version(table: Table, delta: &DeltaTable) -> Result<()> {
    match table_version(delta) {
        Some(version) if !READABLE_VERSIONS.contains(&version.as_str()) => Err(Error::Version {
            table: table.name(),
            found: version,
        }),
        _ => Ok(()),
    }
}

/// Object-store options from `KEY=VALUE` pairs (command-line flags, or an environment
/// variable split on commas). Errors name the pair's position, never its text: values are
/// credentials.
pub fn parse_storage_options<S: AsRef<str>>(
    pairs: impl IntoIterator<Item = S>,
) -> Result<HashMap<String, String>> {
    let mut options = HashMap::new();
    for (index, pair) in pairs.into_iter().enumerate() {
        let pair = pair.as_ref();
        if pair.trim().is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            Error::Config(format!("storage option #{} is not KEY=VALUE", index + 1))
        })?;
        options.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    Ok(options)
}

/// Encoded bytes of a row group, at most (the row counts of [`writer_properties`] bound it
/// too, whichever comes first).
const ROW_GROUP_BYTES: usize = 1 << 20;

/// Parquet settings of the lake's data files.
pub(crate) fn writer_properties(table: Table) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_statistics_truncate_length(Some(64))
        .set_column_index_truncate_length(Some(64))
        .set_max_row_group_row_count(Some(match table {
            Table::Steps => 16_384,
            _ => 131_072,
        }))
        // A data file holds its row group in progress in memory, several times its encoded
        // size: bounding the row group bounds what each open file holds.
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES));
    // Ids are looked up one at a time: a Bloom filter lets readers skip row groups.
    let lookups: &[&str] = match table {
        Table::Steps => &["step_id", "trajectory_id"],
        Table::Rewards => &["trajectory_id"],
        Table::Audit => &[],
        Table::PiiVault => &["token"],
    };
    for column in lookups {
        builder = builder
            .set_column_bloom_filter_enabled(ColumnPath::from(*column), true)
            .set_column_bloom_filter_fpp(ColumnPath::from(*column), 0.01);
    }
    builder.build()
}

/// What one table's part of a segment became (`files`), for [`Committer::commit`].
#[derive(Debug, Default)]
pub(crate) struct TableOutput {
    /// The data files written, as `Add` actions to commit.
    pub adds: Vec<Add>,
    /// Rows in those files.
    pub rows: u64,
    /// Distinct partitions among them.
    pub partitions: usize,
}

/// What a commit attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// This call committed the files at the given table version.
    Now(u64),
    /// The table already holds this transaction (a replay): nothing was committed.
    Already,
}

/// A table as the committer last read or wrote it.
#[derive(Debug)]
struct Known {
    /// The table's handle: its log store, and the builder of its creation.
    handle: DeltaTable,
    /// The state after the last commit read or made; `None` while the table does not exist.
    state: Option<DeltaTableState>,
    /// The last sequence number committed under the committer's app id.
    committed_seq: Option<i64>,
}

/// Commits data files of one table, each segment's under a Delta application transaction
/// `(app_id, seq)`, so that a replayed sequence number is never committed twice.
#[derive(Debug)]
pub(crate) struct Committer {
    table: Table,
    lake: Lake,
    app_id: String,
    known: Option<Known>,
}

/// How many times a commit is retried at once after a conflict, before the error goes to the
/// caller (which backs off).
const CONFLICT_RETRIES: usize = 8;

impl Committer {
    pub(crate) fn new(lake: Lake, table: Table, app_id: impl Into<String>) -> Self {
        Committer {
            table,
            lake,
            app_id: app_id.into(),
            known: None,
        }
    }

    fn delta_error(&self, error: DeltaTableError) -> Error {
        Error::delta(self.table.name(), error)
    }

    /// Reads the table's log again (after a start, or a commit whose outcome is unknown).
    async fn fresh(&mut self) -> Result<&Known> {
        self.lake.prepare(self.table)?;
        let handle = self.lake.load(self.table).await?;
        let (state, committed_seq) = match handle.version() {
            Some(_) => {
                let state = handle.snapshot().map_err(|e| self.delta_error(e))?.clone();
                let seq = state
                    .transaction_version(handle.log_store().as_ref(), &self.app_id)
                    .await
                    .map_err(|e| self.delta_error(e))?;
                (Some(state), seq)
            }
            None => (None, None),
        };
        Ok(self.known.insert(Known {
            handle,
            state,
            committed_seq,
        }))
    }

    /// Whether the table holds transaction `seq` already. A local table that does not
    /// exist holds nothing, and is not created by asking.
    pub(crate) async fn holds(&mut self, seq: i64) -> Result<bool> {
        if self.known.is_none()
            && let Ok(path) = self.lake.table_url(self.table)?.to_file_path()
            && !path.exists()
        {
            return Ok(false);
        }
        let known = match &self.known {
            Some(known) => known,
            None => self.fresh().await?,
        };
        Ok(known.committed_seq.is_some_and(|done| done >= seq))
    }

    /// Commits the data files of `output` as transaction `seq` (one Delta commit), unless
    /// the table already has it; creates the table first if needed.
    pub(crate) async fn commit(&mut self, seq: i64, output: &TableOutput) -> Result<Committed> {
        let mut last_error = None;
        for attempt in 0..CONFLICT_RETRIES {
            let known = match self.known.take() {
                Some(known) => known,
                None => {
                    self.fresh().await?;
                    match self.known.take() {
                        Some(known) => known,
                        None => continue,
                    }
                }
            };
            if known.committed_seq.is_some_and(|done| done >= seq) {
                self.known = Some(known);
                tracing::debug!(table = %self.table, seq, files = output.adds.len(), "The table already holds this segment; the files written again are left for vacuum.");
                return Ok(Committed::Already);
            }
            let created = match known.state {
                Some(state) => self.upgrade(known.handle, state).await,
                None => self.create(known.handle).await,
            };
            let committed = match created {
                Ok((handle, state)) => self
                    .append(&state, handle.log_store(), seq, output)
                    .await
                    .map(|(version, state)| (handle, version, state)),
                Err(error) => Err(error),
            };
            match committed {
                Ok((handle, version, state)) => {
                    self.known = Some(Known {
                        handle,
                        state: Some(state),
                        committed_seq: Some(seq),
                    });
                    return Ok(Committed::Now(version));
                }
                Err(error) => {
                    // The commit may or may not have landed (a timeout after the put, a
                    // conflict): forget what we knew and read the table again.
                    tracing::debug!(table = %self.table, seq, attempt, error = %error, "Commit attempt failed; reloading the table.");
                    last_error = Some(error);
                }
            }
        }
        Err(self.delta_error(
            last_error.unwrap_or_else(|| DeltaTableError::Generic("commit not attempted".into())),
        ))
    }

    /// Creates the table with the protocol's schema, partitioning and metadata (a writer
    /// that races another to create it finds the table there and reloads).
    async fn create(
        &self,
        delta: DeltaTable,
    ) -> std::result::Result<(DeltaTable, DeltaTableState), DeltaTableError> {
        let schema: StructType = arrow_schema(self.table).as_ref().try_into_kernel()?;
        let created = delta
            .create()
            .with_columns(schema.fields().cloned())
            .with_partition_columns(PARTITION_COLUMNS)
            .with_configuration([
                (PROTOCOL_VERSION_KEY, Some(PROTOCOL_VERSION)),
                (
                    "delta.dataSkippingStatsColumns",
                    Some(stats_columns(self.table)),
                ),
            ])
            // `atdp.*` is not a Delta key; Delta keeps unknown keys when told to.
            .with_raise_if_key_not_exists(false)
            .with_table_name(self.table.name())
            .with_comment(format!(
                "ATDP v{PROTOCOL_VERSION} {} table",
                self.table.name()
            ))
            .with_save_mode(SaveMode::ErrorIfExists)
            .await?;
        let state = created.snapshot()?.clone();
        Ok((created, state))
    }

    /// Brings a table written by an earlier protocol version to this one before appending to
    /// it: the columns it lacks are added (all are nullable; rows written before read them as
    /// null), then its `atdp.protocolVersion` is set. A table already at this version is
    /// left as it is; one of a version this writer does not know is refused.
    async fn upgrade(
        &self,
        delta: DeltaTable,
        state: DeltaTableState,
    ) -> std::result::Result<(DeltaTable, DeltaTableState), DeltaTableError> {
        let version = state
            .metadata()
            .configuration()
            .get(PROTOCOL_VERSION_KEY)
            .cloned()
            .unwrap_or_else(|| "1".to_owned());
        if version == PROTOCOL_VERSION {
            return Ok((delta, state));
        }
        if !READABLE_VERSIONS.contains(&version.as_str()) {
            return Err(DeltaTableError::Generic(format!(
                "the table is ATDP protocol version {version}, which this writer ({PROTOCOL_VERSION}) does not know; upgrade the writer"
            )));
        }
        let schema: StructType = arrow_schema(self.table).as_ref().try_into_kernel()?;
        let present = state.schema();
        let missing: Vec<_> = schema
            .fields()
            .filter(|field| present.field(field.name()).is_none())
            .cloned()
            .collect();
        let mut delta = delta;
        if !missing.is_empty() {
            tracing::info!(table = %self.table, from = %version, to = PROTOCOL_VERSION, columns = missing.len(), "Adding the protocol's new columns to the table.");
            delta = delta.add_columns().with_fields(missing).await?;
        }
        delta = delta
            .set_tbl_properties()
            .with_properties(HashMap::from([(
                PROTOCOL_VERSION_KEY.to_owned(),
                PROTOCOL_VERSION.to_owned(),
            )]))
            .with_raise_if_not_exists(false)
            .await?;
        let state = delta.snapshot()?.clone();
        Ok((delta, state))
    }

    /// One append commit of the files, as delta-rs's write operation makes it: the `Add`
    /// actions, the application transaction, and the operation's metrics.
    async fn append(
        &self,
        state: &DeltaTableState,
        log_store: LogStoreRef,
        seq: i64,
        output: &TableOutput,
    ) -> std::result::Result<(u64, DeltaTableState), DeltaTableError> {
        let metrics = serde_json::json!({
            "num_added_files": output.adds.len(),
            "num_removed_files": 0,
            "num_partitions": output.partitions,
            "num_added_rows": output.rows,
            "execution_time_ms": 0,
            "num_retries": 0,
        });
        let properties = CommitProperties::default()
            .with_application_transaction(Transaction::new(&self.app_id, seq))
            .with_metadata([("operationMetrics".to_owned(), metrics)]);
        let actions = output.adds.iter().cloned().map(Action::Add).collect();
        let operation = DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: Some(PARTITION_COLUMNS.map(str::to_owned).to_vec()),
            predicate: None,
        };
        let finalized = CommitBuilder::from(properties)
            .with_actions(actions)
            .build(Some(state as &dyn TableReference), log_store, operation)
            .await?;
        Ok((finalized.version(), finalized.snapshot))
    }
}

/// delta-rs's own write of the same batches, for the tests that compare the files and the log
/// of both.
#[cfg(test)]
impl Committer {
    pub(crate) async fn commit_with_delta_rs(
        &mut self,
        seq: i64,
        batches: Vec<arrow::array::RecordBatch>,
    ) -> Result<u64> {
        let known = match self.known.take() {
            Some(known) => known,
            None => {
                self.fresh().await?;
                self.known
                    .take()
                    .ok_or_else(|| Error::Config("the table was not read".into()))?
            }
        };
        let delta = match known.state {
            Some(_) => known.handle,
            None => {
                self.create(known.handle)
                    .await
                    .map_err(|e| self.delta_error(e))?
                    .0
            }
        };
        let written = delta
            .write(batches)
            .with_save_mode(SaveMode::Append)
            .with_partition_columns(PARTITION_COLUMNS)
            .with_writer_properties(writer_properties(self.table))
            .with_commit_properties(
                CommitProperties::default()
                    .with_application_transaction(Transaction::new(&self.app_id, seq)),
            )
            .await
            .map_err(|e| self.delta_error(e))?;
        Ok(written.version().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_options_parse_without_leaking_values() {
        let options = parse_storage_options(["aws_region=us-east-1", " ", "k = v=w"]).unwrap();
        assert_eq!(
            options.get("aws_region").map(String::as_str),
            Some("us-east-1")
        );
        assert_eq!(options.get("k").map(String::as_str), Some("v=w"));
        let error = parse_storage_options(["a=b", "sk-secret-without-equals"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("#2"), "{error}");
        assert!(!error.contains("sk-secret"), "{error}");
    }

    #[test]
    fn table_urls_are_under_atdp_v1() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(dir.path().to_str().unwrap(), HashMap::new()).unwrap();
        let url = lake.table_url(Table::PiiVault).unwrap();
        assert!(url.as_str().ends_with("/atdp/v1/pii_vault/"), "{url}");
        let s3 = Lake::new("s3://bucket/prefix", HashMap::new()).unwrap();
        assert_eq!(
            s3.table_url(Table::Steps).unwrap().as_str(),
            "s3://bucket/prefix/atdp/v1/steps/"
        );
    }
}
