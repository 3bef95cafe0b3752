//! Reading the lake back: records filtered by tenant, agent, time range and trajectory,
//! optionally pinned to a table version. Filters are pushed into the Delta scan, so
//! partitions of other tenants and days are never opened and file statistics skip the rest.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use deltalake::DeltaTable;
use deltalake::datafusion::common::ScalarValue;
use deltalake::datafusion::prelude::{DataFrame, Expr, SessionContext, col, lit};

use crate::Lake;
use crate::error::{Error, Result};
use atdp_schema::{AuditEvent, Reward, Step, Table, Unmarked, VaultEntry, date_of_micros};

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

/// The steps a training reader may read, and how many others the filter matched, by
/// [`crate::Exclusion::name`].
#[derive(Debug, Clone, PartialEq)]
pub struct Trainable {
    /// The trainable rows, in start order, and the table version read.
    pub steps: Read<Step>,
    /// The rows left out, by reason (`not_eligible`, `unmarked`, `retention_expired`).
    pub excluded: BTreeMap<String, usize>,
}

/// Whether a `steps` frame has the training governance columns (protocol 1.1); a table of
/// version 1 has none, and all its rows are unmarked.
pub fn has_training_marks(frame: &DataFrame) -> bool {
    frame
        .schema()
        .has_column_with_unqualified_name("training_eligible")
}

/// The rows of a `steps` frame (filters already applied) that may not be trained on at
/// `now`, counted by reason. Only the two governance columns of those rows are read.
pub async fn count_exclusions(
    frame: DataFrame,
    now: i64,
    unmarked: Unmarked,
) -> Result<BTreeMap<String, usize>> {
    let query_error = |e: &dyn std::fmt::Display| Error::Query {
        table: Table::Steps.name(),
        message: e.to_string(),
    };
    let mut excluded = BTreeMap::new();
    if !has_training_marks(&frame) {
        if unmarked == Unmarked::Excluded {
            let rows = frame.count().await.map_err(|e| query_error(&e))?;
            if rows > 0 {
                excluded.insert(atdp_schema::Exclusion::Unmarked.name().to_owned(), rows);
            }
        }
        return Ok(excluded);
    }
    let batches = frame
        .filter(!trainable_predicate(true, now, unmarked))
        .and_then(|f| f.select_columns(&["training_eligible", "retention_until"]))
        .map_err(|e| query_error(&e))?
        .collect()
        .await
        .map_err(|e| query_error(&e))?;
    for batch in &batches {
        let eligible = batch
            .column(0)
            .as_boolean_opt()
            .ok_or_else(|| Error::Query {
                table: Table::Steps.name(),
                message: "training_eligible is not a boolean column".into(),
            })?;
        let until = cast(batch.column(1), &DataType::Int64).map_err(|e| query_error(&e))?;
        let until = until.as_primitive::<arrow::datatypes::Int64Type>();
        for row in 0..batch.num_rows() {
            let step = Step {
                training_eligible: eligible.is_valid(row).then(|| eligible.value(row)),
                retention_until: until.is_valid(row).then(|| until.value(row)),
                ..Step::default()
            };
            if let Some(reason) = step.training_exclusion(now, unmarked) {
                *excluded.entry(reason.name().to_owned()).or_insert(0) += 1;
            }
        }
    }
    Ok(excluded)
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

/// The predicate that keeps the replies recorded in shadow (`consent_source` `shadow`) not
/// past `retention_until` at `now`, in a table with the governance columns.
pub fn shadow_predicate(now: i64) -> Expr {
    let retained = col("retention_until")
        .is_null()
        .or(col("retention_until").gt(timestamp(now)));
    col("consent_source").eq(lit("shadow")).and(retained)
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

    /// The filtered frame of `table` and its version; `None` when the table does not exist.
    pub(crate) async fn frame(
        &self,
        table: Table,
        filter: &Filter,
    ) -> Result<Option<(DataFrame, u64)>> {
        let query_error = |e: &dyn std::fmt::Display| Error::Query {
            table: table.name(),
            message: e.to_string(),
        };
        let Some(delta) = self.table(table, filter.version).await? else {
            return Ok(None);
        };
        let Some(version) = delta.version() else {
            return Ok(None);
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
        Ok(Some((frame, version)))
    }

    /// `frame`'s rows in event-time order.
    pub(crate) async fn sorted(table: Table, frame: DataFrame) -> Result<Vec<RecordBatch>> {
        let query_error = |e: &dyn std::fmt::Display| Error::Query {
            table: table.name(),
            message: e.to_string(),
        };
        frame
            .sort(vec![col(time_column(table)).sort(true, false)])
            .map_err(|e| query_error(&e))?
            .collect()
            .await
            .map_err(|e| query_error(&e))
    }

    /// The matching rows of `table` as Arrow batches, in event-time order.
    pub async fn batches(&self, table: Table, filter: &Filter) -> Result<Read<RecordBatch>> {
        let Some((frame, version)) = self.frame(table, filter).await? else {
            return Ok(Read {
                rows: Vec::new(),
                version: None,
            });
        };
        Ok(Read {
            rows: Self::sorted(table, frame).await?,
            version: Some(version),
        })
    }

    /// The matching `steps` rows that may be trained on at `now` (µs since epoch, UTC), and
    /// the count of the others by reason ([`crate::Step::training_exclusion`]'s rule). The
    /// rule is part of the scan: rows left out are counted from their governance columns and
    /// never read whole. Both come from the same table version.
    pub async fn trainable_steps(
        &self,
        filter: &Filter,
        now: i64,
        unmarked: Unmarked,
    ) -> Result<Trainable> {
        let Some((frame, version)) = self.frame(Table::Steps, filter).await? else {
            return Ok(Trainable {
                steps: Read {
                    rows: Vec::new(),
                    version: None,
                },
                excluded: BTreeMap::new(),
            });
        };
        let excluded = count_exclusions(frame.clone(), now, unmarked).await?;
        let marked = has_training_marks(&frame);
        let kept = frame
            .filter(trainable_predicate(marked, now, unmarked))
            .map_err(|e| Error::Query {
                table: Table::Steps.name(),
                message: e.to_string(),
            })?;
        let mut rows = Vec::new();
        for batch in &Self::sorted(Table::Steps, kept).await? {
            rows.extend(atdp_schema::steps_from_batch(batch)?);
        }
        Ok(Trainable {
            steps: Read {
                rows,
                version: Some(version),
            },
            excluded,
        })
    }

    async fn rows<T>(
        &self,
        table: Table,
        filter: &Filter,
        convert: fn(&RecordBatch) -> std::result::Result<Vec<T>, atdp_schema::ConversionError>,
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
        self.rows(Table::Steps, filter, atdp_schema::steps_from_batch)
            .await
    }

    /// Matching `rewards` rows.
    pub async fn rewards(&self, filter: &Filter) -> Result<Read<Reward>> {
        self.rows(Table::Rewards, filter, atdp_schema::rewards_from_batch)
            .await
    }

    /// Matching `audit` rows.
    pub async fn audit(&self, filter: &Filter) -> Result<Read<AuditEvent>> {
        self.rows(Table::Audit, filter, atdp_schema::audit_from_batch)
            .await
    }

    /// Matching `pii_vault` rows.
    pub async fn vault(&self, filter: &Filter) -> Result<Read<VaultEntry>> {
        self.rows(Table::PiiVault, filter, atdp_schema::vault_from_batch)
            .await
    }
}
