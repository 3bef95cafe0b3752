//! `atdp-audit verify`: reads every file of the `audit` table one by one, checks each
//! writer's hash chain from its first event, and names the first problem of each chain and
//! every file that is missing or does not read (a flipped byte in a Parquet file, a deleted
//! file). Events are read per file, not through one table scan, so that a damaged file is
//! named instead of failing the whole read.
//!
//! Readers do not read the files alone: they take a file's tenant and date from the Delta
//! log's partition values and skip files by the log's statistics. So the log's word on each
//! file is checked against the events the file holds (whose tenant is hashed into the
//! chain): partition values that name another tenant or day, or statistics that leave out a
//! value the file holds (which would hide its events from a filtered read, an erasure
//! lookup for one), are a problem of that file.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use atdp_lake::Lake;
use atdp_schema::{AuditEvent, ChainBreak, Table, audit_from_batch, verify_chain};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Serialize;

use crate::error::{Error, Result};

/// The state of one chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainReport {
    /// The chain (writer instance) id.
    pub chain_id: String,
    /// Events read.
    pub events: usize,
    /// Last position and hash, when the chain is whole.
    pub head: Option<(i64, String)>,
    /// The first break, in words; `None` when the chain is whole.
    pub problem: Option<String>,
    /// The file holding the event where the chain breaks, when one is known.
    pub file: Option<String>,
}

/// A file of the table that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileProblem {
    /// Its path in the table.
    pub file: String,
    /// Missing, or why it does not read.
    pub problem: String,
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The `audit` table version checked; `None` when there is no table yet.
    pub version: Option<u64>,
    /// Data files the version references.
    pub files: usize,
    /// Events read.
    pub events: usize,
    /// Every chain, sorted by id.
    pub chains: Vec<ChainReport>,
    /// Files that are missing or do not read.
    pub file_problems: Vec<FileProblem>,
}

impl VerifyReport {
    /// Whether every file read and every chain is whole.
    pub fn ok(&self) -> bool {
        self.file_problems.is_empty() && self.chains.iter().all(|c| c.problem.is_none())
    }

    /// The first problem, in words: a file first, then a chain.
    pub fn first_problem(&self) -> Option<String> {
        if let Some(f) = self.file_problems.first() {
            return Some(format!("file {}: {}", f.file, f.problem));
        }
        self.chains.iter().find_map(|c| {
            c.problem.as_ref().map(|p| match &c.file {
                Some(file) => format!("chain {}: {p} (in file {file})", c.chain_id),
                None => format!("chain {}: {p}", c.chain_id),
            })
        })
    }
}

/// Partition values from a Hive-style path (`tenant_id=acme/date=2026-11-29/part-….parquet`).
fn partition_values(path: &str) -> HashMap<String, String> {
    path.split('/')
        .filter_map(|segment| segment.split_once('='))
        .map(|(k, v)| (k.to_owned(), percent_decode(v)))
        .collect()
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A file's batch with the `tenant_id` partition column added from its path (Delta keeps
/// partition values in the log and the path, not in the file).
fn with_tenant(batch: RecordBatch, tenant: Option<&str>) -> Result<RecordBatch> {
    if batch.column_by_name("tenant_id").is_some() {
        return Ok(batch);
    }
    let tenant = tenant.ok_or_else(|| {
        Error::Invalid("the file has no tenant_id column and its path no tenant_id=".into())
    })?;
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("tenant_id", DataType::Utf8, false));
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.push(Arc::new(StringArray::from(vec![tenant; batch.num_rows()])));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(Error::query)
}

fn decode(bytes: bytes::Bytes, tenant: Option<&str>) -> Result<Vec<AuditEvent>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(Error::query)?;
    let mut events = Vec::new();
    for batch in reader {
        let batch = with_tenant(batch.map_err(Error::query)?, tenant)?;
        events.extend(audit_from_batch(&batch)?);
    }
    Ok(events)
}

/// What the Delta log says of one data file.
struct LogEntry {
    partitions: HashMap<String, Option<String>>,
    stats: Option<String>,
}

/// A statistic's value, as a reader compares it.
#[derive(Debug, PartialEq, PartialOrd)]
enum Stat {
    Text(String),
    Int(i64),
}

/// The value of the statistics column `column` of `event`, `Some(None)` for a null, `None`
/// for a column the check does not know. Times are compared at the milliseconds the log's
/// statistics keep.
fn stat_of(event: &AuditEvent, column: &str) -> Option<Option<Stat>> {
    let text = |value: &str| Some(Some(Stat::Text(value.to_owned())));
    match column {
        "event_id" => text(&event.event_id),
        "chain_id" => text(&event.chain_id),
        "kind" => text(&event.kind),
        "actor" => text(&event.actor),
        "subject" => Some(event.subject.clone().map(Stat::Text)),
        "decision" => Some(event.decision.clone().map(Stat::Text)),
        "chain_seq" => Some(Some(Stat::Int(event.chain_seq))),
        "occurred_at" => Some(Some(Stat::Int(event.occurred_at.div_euclid(1000)))),
        _ => None,
    }
}

/// A statistic as the log writes it for `column`.
fn stat_in_log(column: &str, value: &serde_json::Value) -> Option<Stat> {
    match column {
        "occurred_at" => {
            let time = chrono::DateTime::parse_from_rfc3339(value.as_str()?).ok()?;
            Some(Stat::Int(time.timestamp_micros().div_euclid(1000)))
        }
        "chain_seq" => value.as_i64().map(Stat::Int),
        _ => value.as_str().map(|text| Stat::Text(text.to_owned())),
    }
}

/// The day (`YYYY-MM-DD`) an event's `date` partition holds it under.
fn day_of(event: &AuditEvent) -> String {
    const DAYS_TO_EPOCH: i32 = 719_163;
    let days = atdp_schema::date_of_micros(event.occurred_at);
    days.checked_add(DAYS_TO_EPOCH)
        .and_then(chrono::NaiveDate::from_num_days_from_ce_opt)
        .map(|day| day.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// Where the log's word on a file disagrees with the `events` it holds, in words.
fn log_disagrees(entry: Option<&LogEntry>, events: &[AuditEvent]) -> Option<String> {
    let Some(entry) = entry else {
        return Some("the table lists it but its log entry cannot be read".into());
    };
    for event in events {
        let tenant = entry.partitions.get("tenant_id").cloned().flatten();
        if tenant.as_deref() != Some(event.tenant_id.as_str()) {
            return Some(
                "the log's tenant_id partition value is not the tenant its events hash".into(),
            );
        }
        let day = entry.partitions.get("date").cloned().flatten();
        if day.as_deref() != Some(day_of(event).as_str()) {
            return Some("the log's date partition value is not the day of its events".into());
        }
    }
    let Some(stats) = &entry.stats else {
        return None;
    };
    let Ok(stats) = serde_json::from_str::<serde_json::Value>(stats) else {
        return Some("the log's statistics do not read".into());
    };
    if let Some(records) = stats.get("numRecords")
        && records.as_u64() != u64::try_from(events.len()).ok()
    {
        return Some(format!(
            "the log counts {records} records, the file holds {}",
            events.len()
        ));
    }
    let bound = |kind: &str, column: &str| stats.get(kind).and_then(|values| values.get(column));
    let columns = ["minValues", "maxValues", "nullCount"]
        .iter()
        .filter_map(|kind| stats.get(*kind)?.as_object())
        .flat_map(|values| values.keys())
        .collect::<std::collections::BTreeSet<_>>();
    for column in columns {
        let Some(values) = events
            .iter()
            .map(|event| stat_of(event, column))
            .collect::<Option<Vec<Option<Stat>>>>()
        else {
            continue;
        };
        let wrong = |what: &str| {
            Some(format!(
                "the log's {what} of {column} leaves out values the file holds"
            ))
        };
        if let Some(count) = bound("nullCount", column)
            && count.as_u64() != u64::try_from(values.iter().filter(|v| v.is_none()).count()).ok()
        {
            return wrong("null count");
        }
        let present = values.iter().flatten();
        if let Some(min) = bound("minValues", column) {
            let Some(min) = stat_in_log(column, min) else {
                return wrong("minimum");
            };
            if present.clone().any(|value| *value < min) {
                return wrong("minimum");
            }
        }
        if let Some(max) = bound("maxValues", column) {
            let Some(max) = stat_in_log(column, max) else {
                return wrong("maximum");
            };
            // A text maximum may be cut short: a value it begins is within it.
            let within = |value: &Stat| match (value, &max) {
                (Stat::Text(value), Stat::Text(max)) => value <= max || value.starts_with(max),
                _ => *value <= max,
            };
            if !present.clone().all(within) {
                return wrong("maximum");
            }
        }
    }
    None
}

/// Verifies the `audit` table (at `version`, or the latest).
pub async fn verify(lake: &Lake, version: Option<u64>) -> Result<VerifyReport> {
    let table = match version {
        Some(v) => Some(lake.open_table_at(Table::Audit, v).await?),
        None => lake.open_table(Table::Audit).await?,
    };
    let Some(table) = table else {
        return Ok(VerifyReport {
            version: None,
            files: 0,
            events: 0,
            chains: Vec::new(),
            file_problems: Vec::new(),
        });
    };
    let files: Vec<Path> = table
        .get_files_by_partitions(&[])
        .await
        .map_err(Error::query)?;
    let snapshot = table.snapshot().map_err(Error::query)?;
    let log: HashMap<String, LogEntry> = snapshot
        .log_data()
        .iter()
        .map(|file| {
            let entry = LogEntry {
                partitions: file.partition_values_map(),
                stats: file.stats(),
            };
            (file.object_store_path().to_string(), entry)
        })
        .collect();
    let store = table.object_store();
    let mut file_problems = Vec::new();
    let mut chains: BTreeMap<String, Vec<AuditEvent>> = BTreeMap::new();
    let mut file_of: HashMap<(String, i64), String> = HashMap::new();
    let mut events = 0;
    for path in &files {
        let name = path.to_string();
        let read = match store.get(path).await {
            Ok(result) => result.bytes().await.map_err(Error::query),
            Err(object_store::Error::NotFound { .. }) => {
                file_problems.push(FileProblem {
                    file: name,
                    problem: "missing: the table references it but storage does not have it".into(),
                });
                continue;
            }
            Err(e) => Err(Error::query(e)),
        };
        let tenant = partition_values(&name).remove("tenant_id");
        match read.and_then(|bytes| decode(bytes, tenant.as_deref())) {
            Ok(found) => {
                if let Some(problem) = log_disagrees(log.get(&name), &found) {
                    file_problems.push(FileProblem {
                        file: name.clone(),
                        problem,
                    });
                }
                events += found.len();
                for event in found {
                    file_of.insert((event.chain_id.clone(), event.chain_seq), name.clone());
                    chains
                        .entry(event.chain_id.clone())
                        .or_default()
                        .push(event);
                }
            }
            Err(e) => file_problems.push(FileProblem {
                file: name,
                problem: format!("does not read: {e}"),
            }),
        }
    }
    let chains = chains
        .into_iter()
        .map(|(chain_id, events)| {
            let count = events.len();
            match verify_chain(&events) {
                Ok(head) => ChainReport {
                    chain_id,
                    events: count,
                    head: head.map(|h| (h.seq, h.hash)),
                    problem: None,
                    file: None,
                },
                Err(broken) => {
                    let seq = match &broken {
                        ChainBreak::HashMismatch { seq, .. }
                        | ChainBreak::BrokenLink { seq, .. }
                        | ChainBreak::Duplicate { seq } => *seq,
                        // The file after the gap: the one whose neighbour went missing.
                        ChainBreak::Missing { to_seq, .. } => to_seq + 1,
                    };
                    let file = file_of.get(&(chain_id.clone(), seq)).cloned();
                    ChainReport {
                        chain_id,
                        events: count,
                        head: None,
                        problem: Some(broken.to_string()),
                        file,
                    }
                }
            }
        })
        .collect();
    Ok(VerifyReport {
        version: table.version(),
        files: files.len(),
        events,
        chains,
        file_problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_values_are_decoded() {
        let values = partition_values("tenant_id=a%2Fb/date=2026-11-29/part-0.parquet");
        assert_eq!(values.get("tenant_id").map(String::as_str), Some("a/b"));
        assert_eq!(values.get("date").map(String::as_str), Some("2026-11-29"));
        assert_eq!(percent_decode("100%"), "100%");
    }
}
