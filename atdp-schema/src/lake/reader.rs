//! Reading the lake back: records filtered by tenant, agent, time range and trajectory,
//! optionally pinned to a table version. Filters are pushed into the Delta scan, so
//! partitions of other tenants and days are never opened and file statistics skip the rest.

use arrow::array::RecordBatch;
use deltalake::DeltaTable;
use deltalake::datafusion::common::ScalarValue;
use deltalake::datafusion::prelude::{Expr, SessionContext, col, lit};

use crate::batch;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::record::{AuditEvent, Reward, Step, Table, Unmarked, VaultEntry, date_of_micros};

/// Which rows to read. Unset fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this agent (`steps` only).
    pub agent_id: Option<String>,
    /// Only rows whose event time is at or after this (µs since epoch, UTC).
    pub since: Option<i64>,
    /// Only rows whose event time is before this (µs since epoch, UTC).
    pub until: Option<i64>,
    /// Only this trajectory (`steps` and `rewards`).
    pub trajectory_id: Option<String>,
    /// Read the table as of this version (time travel) instead of the latest.
    pub version: Option<u64>,
}

/// Rows read, with the table version they were read at (record it for reproducibility).
#[derive(Debug, Clone, PartialEq)]
pub struct Read<T> {
    /// The rows, in event-time order.
    pub rows: Vec<T>,
    /// The table version read; `None` when the table does not exist yet.
    pub version: Option<u64>,
}

/// Reads ATDP tables.
#[derive(Debug, Clone)]
pub struct LakeReader {
    lake: Lake,
}

fn time_column(table: Table) -> &'static str {
    match table {
        Table::Steps => "started_at",
        Table::Rewards | Table::PiiVault => "created_at",
        Table::Audit => "occurred_at",
    }
}

fn timestamp(micros: i64) -> Expr {
    lit(ScalarValue::TimestampMicrosecond(
        Some(micros),
        Some("UTC".into()),
    ))
}

fn date(micros: i64) -> Expr {
    lit(ScalarValue::Date32(Some(date_of_micros(micros))))
}

/// The predicates of a time range on `time_column` (µs since epoch, UTC; `since` included,
/// `until` excluded), with the `date` partition bounds derived from it so that whole
/// partitions outside the range are never opened. Empty when neither bound is set.
pub fn time_range(time_column: &str, since: Option<i64>, until: Option<i64>) -> Vec<Expr> {
    let mut parts = Vec::new();
    if let Some(since) = since {
        parts.push(col("date").gt_eq(date(since)));
        parts.push(col(time_column).gt_eq(timestamp(since)));
    }
    if let Some(until) = until {
        parts.push(col("date").lt_eq(date(until)));
        parts.push(col(time_column).lt(timestamp(until)));
    }
    parts
}

/// The predicate that keeps the `steps` rows a training reader may read at `now` (µs since
/// epoch, UTC): eligible (or unmarked, when `unmarked` says they are), and not past
/// `retention_until`; the same rule as [`Step::training_exclusion`]. `marked` says whether
/// the table has the governance columns: a table of protocol version 1 has none, and all its
/// rows are unmarked.
pub fn trainable_predicate(marked: bool, now: i64, unmarked: Unmarked) -> Expr {
    if !marked {
        return lit(unmarked == Unmarked::Eligible);
    }
    let eligible = match unmarked {
        Unmarked::Excluded => col("training_eligible").is_true(),
        Unmarked::Eligible => col("training_eligible").is_not_false(),
    };
    let retained = col("retention_until")
        .is_null()
        .or(col("retention_until").gt(timestamp(now)));
    eligible.and(retained)
}

/// The filter as a DataFusion predicate; `date` bounds are derived from the time range so
/// that whole partitions are pruned.
fn predicate(table: Table, filter: &Filter) -> Result<Option<Expr>> {
    let mut parts = Vec::new();
    if let Some(tenant) = &filter.tenant_id {
        parts.push(col("tenant_id").eq(lit(tenant.clone())));
    }
    if let Some(agent) = &filter.agent_id {
        if table != Table::Steps {
            return Err(Error::Query {
                table: table.name(),
                message: "the agent filter applies to steps only".into(),
            });
        }
        parts.push(col("agent_id").eq(lit(agent.clone())));
    }
    if let Some(trajectory) = &filter.trajectory_id {
        if !matches!(table, Table::Steps | Table::Rewards) {
            return Err(Error::Query {
                table: table.name(),
                message: "the trajectory filter applies to steps and rewards only".into(),
            });
        }
        parts.push(col("trajectory_id").eq(lit(trajectory.clone())));
    }
    parts.extend(time_range(time_column(table), filter.since, filter.until));
    Ok(parts.into_iter().reduce(Expr::and))
}

impl LakeReader {
    /// A reader of `lake`.
    pub fn new(lake: Lake) -> Self {
        LakeReader { lake }
    }

    /// The lake read.
    pub fn lake(&self) -> &Lake {
        &self.lake
    }

    async fn table(&self, table: Table, version: Option<u64>) -> Result<Option<DeltaTable>> {
        match version {
            Some(version) => self.lake.open_table_at(table, version).await.map(Some),
            None => self.lake.open_table(table).await,
        }
    }

    /// The matching rows of `table` as Arrow batches, in event-time order.
    pub async fn batches(&self, table: Table, filter: &Filter) -> Result<Read<RecordBatch>> {
        let query_error = |e: &dyn std::fmt::Display| Error::Query {
            table: table.name(),
            message: e.to_string(),
        };
        let Some(delta) = self.table(table, filter.version).await? else {
            return Ok(Read {
                rows: Vec::new(),
                version: None,
            });
        };
        let ctx = SessionContext::new();
        delta
            .update_datafusion_session(&ctx.state())
            .map_err(|e| Error::delta(table.name(), e))?;
        let provider = delta.table_provider().await.map_err(|e| query_error(&e))?;
        let mut frame = ctx.read_table(provider).map_err(|e| query_error(&e))?;
        if let Some(predicate) = predicate(table, filter)? {
            frame = frame.filter(predicate).map_err(|e| query_error(&e))?;
        }
        let frame = frame
            .sort(vec![col(time_column(table)).sort(true, false)])
            .map_err(|e| query_error(&e))?;
        let rows = frame.collect().await.map_err(|e| query_error(&e))?;
        Ok(Read {
            rows,
            version: delta.version(),
        })
    }

    async fn rows<T>(
        &self,
        table: Table,
        filter: &Filter,
        convert: fn(&RecordBatch) -> Result<Vec<T>>,
    ) -> Result<Read<T>> {
        let read = self.batches(table, filter).await?;
        let mut rows = Vec::new();
        for batch in &read.rows {
            rows.extend(convert(batch)?);
        }
        Ok(Read {
            rows,
            version: read.version,
        })
    }

    /// Matching `steps` rows.
    pub async fn steps(&self, filter: &Filter) -> Result<Read<Step>> {
        self.rows(Table::Steps, filter, batch::steps_from_batch)
            .await
    }

    /// Matching `rewards` rows.
    pub async fn rewards(&self, filter: &Filter) -> Result<Read<Reward>> {
        self.rows(Table::Rewards, filter, batch::rewards_from_batch)
            .await
    }

    /// Matching `audit` rows.
    pub async fn audit(&self, filter: &Filter) -> Result<Read<AuditEvent>> {
        self.rows(Table::Audit, filter, batch::audit_from_batch)
            .await
    }

    /// Matching `pii_vault` rows.
    pub async fn vault(&self, filter: &Filter) -> Result<Read<VaultEntry>> {
        self.rows(Table::PiiVault, filter, batch::vault_from_batch)
            .await
    }
}
