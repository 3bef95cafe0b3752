//! The lake's tables registered by name (`steps`, `rewards`, `audit`, `pii_vault`) in one
//! DataFusion session, each pinned to a table version so that a query's answer can be
//! reproduced as evidence later. The compliance console, reward functions and analysts'
//! SQL read the lake through it.
//!
//! A catalog for training ([`Catalog::for_training`]) registers `steps` as only the rows that
//! may be trained on (the rule of [`crate::Step::training_exclusion`], judged when the catalog
//! is built): every query over it, the reward functions' included, sees no other step.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::Lake;
use crate::reader::{has_training_marks, shadow_predicate, trainable_predicate};
use arrow::array::RecordBatch;
use atdp_schema::arrow_schema;
use atdp_schema::{Table, Unmarked, now_micros};
use deltalake::DeltaTable;
use deltalake::datafusion::datasource::MemTable;
use deltalake::datafusion::execution::context::SQLOptions;
use deltalake::datafusion::prelude::{DataFrame, SessionContext};

use crate::error::{Error, Result};

fn sql_error(error: impl std::fmt::Display) -> Error {
    Error::Sql(error.to_string())
}

/// The tables of one lake, as of fixed versions.
#[derive(Clone)]
pub struct Catalog {
    lake: Lake,
    ctx: SessionContext,
    versions: BTreeMap<Table, Option<u64>>,
    /// The loaded tables (absent: not created yet), kept for incremental refreshes.
    tables: BTreeMap<Table, DeltaTable>,
    pinned: bool,
    /// `Some` for a catalog for training: how unmarked steps are treated.
    training: Option<Unmarked>,
    /// With `training`: replies recorded in shadow (`consent_source` `shadow`, never trained
    /// on) are read too, for reward functions to score them.
    shadows: bool,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("lake", &self.lake.root().as_str())
            .field("versions", &self.versions)
            .field("training", &self.training)
            .finish()
    }
}

impl Catalog {
    /// The lake's tables at their latest versions, or at the versions in `pins` (by table).
    /// A table not created yet is registered empty, with its schema.
    pub async fn open(lake: &Lake, pins: &BTreeMap<Table, u64>) -> Result<Catalog> {
        let mut tables = BTreeMap::new();
        for table in Table::ALL {
            let delta = match pins.get(&table) {
                Some(version) => Some(lake.open_table_at(table, *version).await?),
                None => lake.open_table(table).await?,
            };
            if let Some(delta) = delta {
                tables.insert(table, delta);
            }
        }
        Catalog::build(lake, tables, !pins.is_empty(), None, false).await
    }

    /// The same tables, with `steps` restricted to the rows that may be trained on now
    /// (`unmarked`: whether steps without a training mark are).
    pub async fn for_training(&self, unmarked: Unmarked) -> Result<Catalog> {
        let tables = self.tables.clone();
        Catalog::build(&self.lake, tables, self.pinned, Some(unmarked), false).await
    }

    /// What reward functions read: the rows of [`Catalog::for_training`], and the replies
    /// recorded in shadow (`consent_source` `shadow`: a candidate version's answers, which the
    /// policy and consent would let be trained on and which are held back only because nobody
    /// received them), so that a shadow can be scored against the served replies. A shadow
    /// step is never read for training itself.
    pub async fn for_rewards(&self, unmarked: Unmarked) -> Result<Catalog> {
        let tables = self.tables.clone();
        Catalog::build(&self.lake, tables, self.pinned, Some(unmarked), true).await
    }

    /// Whether this catalog reads replies recorded in shadow ([`Catalog::for_rewards`]).
    pub fn shadows(&self) -> bool {
        self.shadows
    }

    /// `Some` for a catalog for training: how it treats unmarked steps.
    pub fn training(&self) -> Option<Unmarked> {
        self.training
    }

    /// The same lake at its latest versions, reading only the commits made since this
    /// catalog was loaded (a catalog with pinned versions is returned as it is).
    pub async fn refresh(&self) -> Result<Catalog> {
        if self.pinned {
            return Ok(self.clone());
        }
        let mut tables = BTreeMap::new();
        for table in Table::ALL {
            let delta = match self.tables.get(&table) {
                Some(delta) => {
                    let mut delta = delta.clone();
                    delta.update_incremental(None).await.map_err(sql_error)?;
                    Some(delta)
                }
                None => self.lake.open_table(table).await?,
            };
            if let Some(delta) = delta {
                tables.insert(table, delta);
            }
        }
        Catalog::build(&self.lake, tables, false, self.training, self.shadows).await
    }

    async fn build(
        lake: &Lake,
        tables: BTreeMap<Table, DeltaTable>,
        pinned: bool,
        training: Option<Unmarked>,
        shadows: bool,
    ) -> Result<Catalog> {
        let ctx = SessionContext::new();
        let mut versions = BTreeMap::new();
        for table in Table::ALL {
            let version = match tables.get(&table) {
                Some(delta) => {
                    register_delta(&ctx, table, delta).await?;
                    delta.version()
                }
                None => {
                    let empty =
                        MemTable::try_new(arrow_schema(table), vec![vec![]]).map_err(sql_error)?;
                    ctx.register_table(table.name(), Arc::new(empty))
                        .map_err(sql_error)?;
                    None
                }
            };
            versions.insert(table, version);
        }
        if let Some(unmarked) = training {
            let steps = ctx.table(Table::Steps.name()).await.map_err(sql_error)?;
            let marked = has_training_marks(&steps);
            let now = now_micros();
            let mut kept = trainable_predicate(marked, now, unmarked);
            if shadows && marked {
                kept = kept.or(shadow_predicate(now));
            }
            let trainable = steps.filter(kept).map_err(sql_error)?;
            ctx.deregister_table(Table::Steps.name())
                .map_err(sql_error)?;
            ctx.register_table(Table::Steps.name(), trainable.into_view())
                .map_err(sql_error)?;
        }
        Ok(Catalog {
            lake: lake.clone(),
            ctx,
            versions,
            tables,
            pinned,
            training,
            shadows,
        })
    }

    /// The lake.
    pub fn lake(&self) -> &Lake {
        &self.lake
    }

    /// The session, with the tables registered.
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The version each table was read at (`None`: the table does not exist yet).
    pub fn versions(&self) -> &BTreeMap<Table, Option<u64>> {
        &self.versions
    }

    /// A table as a data frame.
    pub async fn frame(&self, table: Table) -> Result<DataFrame> {
        self.ctx.table(table.name()).await.map_err(sql_error)
    }

    /// Runs a read-only SQL query over the registered tables (for analysts: `atdp-audit
    /// sql`). DDL (`CREATE EXTERNAL TABLE`), DML (`INSERT`, `COPY … TO`) and statements
    /// (`SET`) are refused: the lake is evidence, and this is not a way to change it.
    pub async fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let frame = self
            .ctx
            .sql_with_options(sql, options)
            .await
            .map_err(sql_error)?;
        frame.collect().await.map_err(sql_error)
    }
}

/// Runs `frame` and converts its batches to records (`atdp_schema::steps_from_batch`, …).
pub async fn rows<T>(
    frame: deltalake::datafusion::error::Result<DataFrame>,
    convert: fn(&RecordBatch) -> std::result::Result<Vec<T>, atdp_schema::ConversionError>,
) -> Result<Vec<T>> {
    let batches = frame
        .map_err(sql_error)?
        .collect()
        .await
        .map_err(sql_error)?;
    let mut out = Vec::new();
    for batch in &batches {
        out.extend(convert(batch)?);
    }
    Ok(out)
}

async fn register_delta(ctx: &SessionContext, table: Table, delta: &DeltaTable) -> Result<()> {
    delta
        .update_datafusion_session(&ctx.state())
        .map_err(sql_error)?;
    let provider = delta.table_provider().await.map_err(sql_error)?;
    ctx.register_table(table.name(), provider)
        .map_err(sql_error)?;
    Ok(())
}
