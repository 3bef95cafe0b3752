//! Table maintenance: compaction of small files, vacuum of unreferenced files, and
//! statistics. Safe to run while writers append: compaction rewrites only the files it read
//! and commits with Delta's conflict checks, so appends committed meanwhile are kept and no
//! row is duplicated.

use std::collections::BTreeSet;
use std::num::NonZeroU64;
use std::time::Duration;

use serde::Serialize;

use deltalake::operations::vacuum::VacuumMode;

use crate::error::{Error, Result};
use crate::tables::{Lake, writer_properties};
use atdp_schema::Table;

/// Figures of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// The table.
    pub table: &'static str,
    /// Its latest version; `None` when it does not exist yet.
    pub version: Option<u64>,
    /// Live data files.
    pub files: usize,
    /// Bytes in live data files.
    pub bytes: u64,
    /// Rows, from the files' statistics.
    pub rows: u64,
    /// Distinct (tenant, date) partitions.
    pub partitions: usize,
}

/// Statistics of every table of the lake.
pub async fn stats(lake: &Lake) -> Result<Vec<TableStats>> {
    let mut all = Vec::new();
    for table in Table::ALL {
        let Some(delta) = lake.open_table(table).await? else {
            all.push(TableStats {
                table: table.name(),
                version: None,
                files: 0,
                bytes: 0,
                rows: 0,
                partitions: 0,
            });
            continue;
        };
        let state = delta
            .snapshot()
            .map_err(|e| Error::delta(table.name(), e))?;
        let mut files = 0;
        let mut bytes = 0u64;
        let mut rows = 0u64;
        let mut partitions = BTreeSet::new();
        for file in state.log_data().iter() {
            files += 1;
            bytes += u64::try_from(file.size()).unwrap_or(0);
            rows += file
                .stats()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                .and_then(|v| v.get("numRecords").and_then(serde_json::Value::as_u64))
                .unwrap_or(0);
            let mut key: Vec<(String, Option<String>)> =
                file.partition_values_map().into_iter().collect();
            key.sort();
            partitions.insert(key);
        }
        all.push(TableStats {
            table: table.name(),
            version: delta.version(),
            files,
            bytes,
            rows,
            partitions: partitions.len(),
        });
    }
    Ok(all)
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptimizeReport {
    /// The table.
    pub table: &'static str,
    /// Files written.
    pub files_added: u64,
    /// Small files replaced.
    pub files_removed: u64,
    /// Partitions that were compacted.
    pub partitions_optimized: u64,
    /// The table version after compaction.
    pub version: Option<u64>,
}

/// Compacts small files of `table` into files of about `target_bytes`.
pub async fn optimize(lake: &Lake, table: Table, target_bytes: u64) -> Result<OptimizeReport> {
    let Some(delta) = lake.open_table(table).await? else {
        return Ok(OptimizeReport {
            table: table.name(),
            files_added: 0,
            files_removed: 0,
            partitions_optimized: 0,
            version: None,
        });
    };
    let target = NonZeroU64::new(target_bytes)
        .ok_or_else(|| Error::Config("the compaction target size must be above zero".into()))?;
    let (delta, metrics) = delta
        .optimize()
        .with_target_size(target)
        .with_writer_properties(writer_properties(table))
        .await
        .map_err(|e| Error::delta(table.name(), e))?;
    Ok(OptimizeReport {
        table: table.name(),
        files_added: metrics.num_files_added,
        files_removed: metrics.num_files_removed,
        partitions_optimized: metrics.partitions_optimized,
        version: delta.version(),
    })
}

/// What a vacuum did (or would do, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VacuumReport {
    /// The table.
    pub table: &'static str,
    /// Whether nothing was deleted.
    pub dry_run: bool,
    /// Files deleted (or to delete).
    pub files: Vec<String>,
}

/// Deletes files no longer referenced by `table` and older than `retention` (files replaced
/// by compaction, leftovers of failed commits). Time travel before the retention is lost.
/// Delta refuses a retention under its `deletedFileRetentionDuration` (7 days by default)
/// unless `force` is set.
pub async fn vacuum(
    lake: &Lake,
    table: Table,
    retention: Duration,
    dry_run: bool,
    force: bool,
) -> Result<VacuumReport> {
    let Some(delta) = lake.open_table(table).await? else {
        return Ok(VacuumReport {
            table: table.name(),
            dry_run,
            files: Vec::new(),
        });
    };
    let retention = chrono::Duration::from_std(retention)
        .map_err(|e| Error::Config(format!("retention is out of range: {e}")))?;
    let (_, metrics) = delta
        .vacuum()
        .with_retention_period(retention)
        .with_enforce_retention_duration(!force)
        // Full: also files no commit references (left by failed or interrupted commits),
        // not only those that commits removed.
        .with_mode(VacuumMode::Full)
        .with_dry_run(dry_run)
        .await
        .map_err(|e| Error::delta(table.name(), e))?;
    Ok(VacuumReport {
        table: table.name(),
        dry_run,
        files: metrics.files_deleted,
    })
}
