//! The Arrow schema of each ATDP table, and conversion of records to and from `RecordBatch`.
//!
//! The schemas are written out by hand (they are the protocol); `serde_arrow` moves the
//! records in and out of them. Every table carries a `date` column (days since the epoch,
//! UTC) derived from the row's event time, used with `tenant_id` as the partition key.

use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, Date32Array, RecordBatch, new_null_array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

use crate::record::{AuditEvent, Reward, Step, Table, VaultEntry, date_of_micros};

/// The partition columns of every table, in order.
pub const PARTITION_COLUMNS: [&str; 2] = ["tenant_id", "date"];

/// Name of the item field inside list columns (the name Delta Lake and Parquet use).
const LIST_ITEM: &str = "element";

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn timestamp(name: &str, nullable: bool) -> Field {
    Field::new(
        name,
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        nullable,
    )
}

fn list_of(name: &str, item: DataType, nullable: bool) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new(LIST_ITEM, item, false))),
        nullable,
    )
}

fn string_map(name: &str) -> Field {
    let entries = Field::new(
        "key_value",
        DataType::Struct(Fields::from(vec![utf8("key", false), utf8("value", true)])),
        false,
    );
    Field::new(name, DataType::Map(Arc::new(entries), false), false)
}

fn date_field() -> Field {
    Field::new("date", DataType::Date32, false)
}

fn tool_call_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        utf8("id", false),
        utf8("name", false),
        utf8("arguments", false),
    ]))
}

fn message_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        utf8("role", false),
        utf8("content", true),
        utf8("name", true),
        utf8("tool_call_id", true),
        list_of("tool_calls", tool_call_type(), false),
    ]))
}

fn tool_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        utf8("kind", false),
        utf8("name", false),
        utf8("description", true),
        utf8("parameters", true),
    ]))
}

fn pii_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        utf8("field", false),
        utf8("entity", false),
        utf8("token", false),
        utf8("action", false),
    ]))
}

fn steps_fields() -> Vec<Field> {
    vec![
        utf8("step_id", false),
        utf8("trajectory_id", false),
        utf8("parent_step_id", true),
        Field::new("turn_index", DataType::Int32, false),
        utf8("tenant_id", false),
        utf8("agent_id", false),
        timestamp("started_at", false),
        timestamp("ended_at", true),
        utf8("api", false),
        utf8("upstream", false),
        utf8("model_requested", false),
        utf8("model_served", true),
        utf8("policy_version", true),
        list_of("request_messages", message_type(), false),
        list_of("tools", tool_type(), false),
        utf8("params", true),
        Field::new("response_message", message_type(), true),
        utf8("finish_reason", true),
        utf8("status", false),
        utf8("error", true),
        Field::new("prompt_tokens", DataType::Int64, true),
        Field::new("completion_tokens", DataType::Int64, true),
        list_of("completion_token_ids", DataType::Int32, true),
        list_of("completion_logprobs", DataType::Float32, true),
        list_of("pii", pii_type(), false),
        string_map("tags"),
        utf8("extra_json", true),
        Field::new("training_eligible", DataType::Boolean, true),
        utf8("legal_basis", true),
        timestamp("retention_until", true),
        utf8("consent_source", true),
    ]
}

fn rewards_fields() -> Vec<Field> {
    vec![
        utf8("reward_id", false),
        utf8("trajectory_id", false),
        utf8("step_id", true),
        utf8("tenant_id", false),
        utf8("name", false),
        Field::new("value", DataType::Float64, false),
        utf8("source", false),
        utf8("reward_fn_version", true),
        Field::new("terminal", DataType::Boolean, false),
        timestamp("created_at", false),
        string_map("tags"),
    ]
}

fn audit_fields() -> Vec<Field> {
    vec![
        utf8("event_id", false),
        utf8("tenant_id", false),
        utf8("chain_id", false),
        Field::new("chain_seq", DataType::Int64, false),
        timestamp("occurred_at", false),
        utf8("kind", false),
        utf8("actor", false),
        utf8("subject", true),
        utf8("decision", true),
        utf8("policy_id", true),
        utf8("reason", true),
        utf8("detail_json", true),
        utf8("prev_hash", false),
        utf8("hash", false),
    ]
}

fn vault_fields() -> Vec<Field> {
    vec![
        utf8("tenant_id", false),
        utf8("token", false),
        utf8("entity", false),
        utf8("key_id", false),
        Field::new("nonce", DataType::Binary, false),
        Field::new("ciphertext", DataType::Binary, false),
        timestamp("created_at", false),
    ]
}

struct TableSchema {
    /// The record's own fields, as `serde_arrow` sees them.
    record_fields: Vec<FieldRef>,
    /// The same fields with 64-bit offsets for strings and bytes, for reading: a batch that
    /// an engine hands back (a join's output, string views) may hold more than 2 GiB of text
    /// in one column, which 32-bit offsets cannot address.
    read_fields: Vec<FieldRef>,
    /// The full table schema: record fields then `date`.
    schema: SchemaRef,
}

fn table_schema(fields: Vec<Field>) -> TableSchema {
    let record_fields: Vec<FieldRef> = fields.into_iter().map(Arc::new).collect();
    let read_fields = record_fields.iter().map(|f| Arc::new(large(f))).collect();
    let mut all = record_fields.clone();
    all.push(Arc::new(date_field()));
    TableSchema {
        record_fields,
        read_fields,
        schema: Arc::new(Schema::new(all)),
    }
}

/// `field` with `Utf8` → `LargeUtf8` and `Binary` → `LargeBinary`, at any depth.
fn large(field: &FieldRef) -> Field {
    let data_type = match field.data_type() {
        DataType::Utf8 => DataType::LargeUtf8,
        DataType::Binary => DataType::LargeBinary,
        DataType::List(item) => DataType::List(Arc::new(large(item))),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Arc::new(large(f)))
                .collect::<Fields>(),
        ),
        DataType::Map(entries, sorted) => DataType::Map(Arc::new(large(entries)), *sorted),
        other => other.clone(),
    };
    field.as_ref().clone().with_data_type(data_type)
}

static SCHEMAS: LazyLock<[TableSchema; 4]> = LazyLock::new(|| {
    [
        table_schema(steps_fields()),
        table_schema(rewards_fields()),
        table_schema(audit_fields()),
        table_schema(vault_fields()),
    ]
});

fn schemas(table: Table) -> &'static TableSchema {
    let index = match table {
        Table::Steps => 0,
        Table::Rewards => 1,
        Table::Audit => 2,
        Table::PiiVault => 3,
    };
    &SCHEMAS[index]
}

/// The Arrow schema of `table`, `date` included.
pub fn arrow_schema(table: Table) -> SchemaRef {
    schemas(table).schema.clone()
}

/// Records that could not be converted to or from Arrow: the data does not fit the protocol's
/// schema, so retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionError {
    /// The ATDP table.
    pub table: &'static str,
    /// What failed.
    pub message: String,
}

impl std::fmt::Display for ConversionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Arrow conversion failed for table {}: {}",
            self.table, self.message
        )
    }
}

impl std::error::Error for ConversionError {}

/// The result of a conversion.
type Result<T> = std::result::Result<T, ConversionError>;

fn arrow_error(table: Table, error: impl std::fmt::Display) -> ConversionError {
    ConversionError {
        table: table.name(),
        message: error.to_string(),
    }
}

fn to_batch<T: serde::Serialize>(table: Table, rows: &[T], times: &[i64]) -> Result<RecordBatch> {
    let s = schemas(table);
    let mut columns: Vec<ArrayRef> =
        serde_arrow::to_arrow(&s.record_fields, rows).map_err(|e| arrow_error(table, e))?;
    let dates: Date32Array = times.iter().map(|t| Some(date_of_micros(*t))).collect();
    columns.push(Arc::new(dates));
    RecordBatch::try_new(s.schema.clone(), columns).map_err(|e| arrow_error(table, e))
}

/// Rows of `steps` as a batch (`rows` of `Step` or of `Box<Step>`).
pub fn steps_to_batch<S>(rows: &[S]) -> Result<RecordBatch>
where
    S: std::borrow::Borrow<Step> + serde::Serialize,
{
    let times: Vec<i64> = rows.iter().map(|r| r.borrow().started_at).collect();
    to_batch(Table::Steps, rows, &times)
}

/// Rows of `rewards` as a batch.
pub fn rewards_to_batch(rows: &[Reward]) -> Result<RecordBatch> {
    let times: Vec<i64> = rows.iter().map(|r| r.created_at).collect();
    to_batch(Table::Rewards, rows, &times)
}

/// Rows of `audit` as a batch.
pub fn audit_to_batch(rows: &[AuditEvent]) -> Result<RecordBatch> {
    let times: Vec<i64> = rows.iter().map(|r| r.occurred_at).collect();
    to_batch(Table::Audit, rows, &times)
}

/// Rows of `pii_vault` as a batch.
pub fn vault_to_batch(rows: &[VaultEntry]) -> Result<RecordBatch> {
    let times: Vec<i64> = rows.iter().map(|r| r.created_at).collect();
    to_batch(Table::PiiVault, rows, &times)
}

/// Brings a batch read from the lake to the record's own fields: columns are found by
/// name (order and extra columns do not matter: readers ignore unknown columns), cast to the
/// protocol's types (engines return partition columns and lists in their own encodings),
/// and absent nullable columns (written before they existed) read as nulls.
fn normalise(table: Table, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    let s = schemas(table);
    let rows = batch.num_rows();
    s.read_fields
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
            Some(column) => cast(column, field.data_type())
                .map_err(|e| arrow_error(table, format!("column {}: {e}", field.name()))),
            None if field.is_nullable() => Ok(new_null_array(field.data_type(), rows)),
            None => Err(arrow_error(
                table,
                format!("required column {} is missing", field.name()),
            )),
        })
        .collect()
}

fn from_batch<T: serde::de::DeserializeOwned>(table: Table, batch: &RecordBatch) -> Result<Vec<T>> {
    let columns = normalise(table, batch)?;
    serde_arrow::from_arrow(&schemas(table).read_fields, &columns)
        .map_err(|e| arrow_error(table, e))
}

/// Rows of `steps` from a batch.
pub fn steps_from_batch(batch: &RecordBatch) -> Result<Vec<Step>> {
    from_batch(Table::Steps, batch)
}

/// Rows of `rewards` from a batch.
pub fn rewards_from_batch(batch: &RecordBatch) -> Result<Vec<Reward>> {
    from_batch(Table::Rewards, batch)
}

/// Rows of `audit` from a batch.
pub fn audit_from_batch(batch: &RecordBatch) -> Result<Vec<AuditEvent>> {
    from_batch(Table::Audit, batch)
}

/// Rows of `pii_vault` from a batch.
pub fn vault_from_batch(batch: &RecordBatch) -> Result<Vec<VaultEntry>> {
    from_batch(Table::PiiVault, batch)
}
