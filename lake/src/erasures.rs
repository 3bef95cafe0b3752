//! Erasures as training reads them. An erasure (`atdp-audit erase`) shreds originals, but
//! the masked steps of the erased subject stay in the lake for review, and an adapter trained
//! on them again would learn from the erased person once more. So a training read leaves out
//! every trajectory an allowed erasure of the tenant reached, taken from its `erase` audit
//! event (recorded before anything is erased, so an erasure that failed half-way excludes as
//! well):
//!
//! - a subject erasure names the subject's tokens (placeholders and keyed hashes) and the
//!   trajectories it reached when it ran (a span carrying one of them, or the value itself
//!   where its type is stored in the clear): those trajectories, and any with a step whose
//!   `pii` spans carry one of the tokens, are left out whole, whichever of their steps the
//!   read selects, and even after the steps that carried the subject left the lake (expiry);
//! - a tenant erasure shreds the tenant's keys: a trajectory with a step that started before
//!   it is left out whole.
//!
//! Which trajectories those are is asked of all the tenant's steps, not only the steps a read
//! selects: the subject may appear only in a step outside its time window, or in one that is
//! itself not eligible.

use std::collections::BTreeSet;

use arrow::array::{Array, AsArray};
use deltalake::datafusion::functions::core::expr_fn::get_field;
use deltalake::datafusion::prelude::{DataFrame, col, lit};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::reader::{Filter, LakeReader, time_range};
use atdp_schema::Table;

/// What the allowed erasures of one tenant reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Erasures {
    /// The tokens of erased subjects.
    pub tokens: BTreeSet<String>,
    /// The trajectories the subject erasures reached when they ran.
    pub trajectories: BTreeSet<String>,
    /// When the tenant's keys were last erased (µs since epoch, UTC), if ever.
    pub tenant_erased_at: Option<i64>,
}

/// An `erase` event's detail.
#[derive(Debug, Deserialize)]
struct Detail {
    scope: String,
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    trajectories: Vec<String>,
}

impl Erasures {
    /// Whether no erasure reached anything.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty() && self.trajectories.is_empty() && self.tenant_erased_at.is_none()
    }
}

fn query_error(table: Table) -> impl Fn(&dyn std::fmt::Display) -> Error {
    move |e| Error::Query {
        table: table.name(),
        message: e.to_string(),
    }
}

/// The distinct `trajectory_id` values of `frame`.
async fn trajectory_ids(frame: DataFrame, into: &mut BTreeSet<String>) -> Result<()> {
    let error = query_error(Table::Steps);
    let batches = frame
        .select_columns(&["trajectory_id"])
        .and_then(DataFrame::distinct)
        .map_err(|e| error(&e))?
        .collect()
        .await
        .map_err(|e| error(&e))?;
    for batch in &batches {
        let column = arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8)
            .map_err(|e| error(&e))?;
        let ids = column.as_string::<i32>();
        into.extend(
            (0..ids.len())
                .filter(|&i| ids.is_valid(i))
                .map(|i| ids.value(i).to_owned()),
        );
    }
    Ok(())
}

impl LakeReader {
    /// The allowed erasures of `tenant` recorded in the `audit` table (latest version). An
    /// `erase` event whose detail cannot be read is an error: what it erased is unknown, and
    /// training must not guess.
    pub async fn erasures(&self, tenant: &str) -> Result<Erasures> {
        let error = query_error(Table::Audit);
        let filter = Filter {
            tenant_id: Some(tenant.to_owned()),
            ..Filter::default()
        };
        let Some((frame, _)) = self.frame(Table::Audit, &filter).await? else {
            return Ok(Erasures::default());
        };
        let frame = frame
            .filter(
                col("kind")
                    .eq(lit("erase"))
                    .and(col("decision").eq(lit("allow"))),
            )
            .map_err(|e| error(&e))?;
        let mut erasures = Erasures::default();
        for batch in &Self::sorted(Table::Audit, frame).await? {
            for event in atdp_schema::audit_from_batch(batch)? {
                if event.tenant_id != tenant {
                    continue;
                }
                let detail: Detail = event
                    .detail_json
                    .as_deref()
                    .and_then(|d| serde_json::from_str(d).ok())
                    .ok_or_else(|| {
                        error(&format!(
                            "erasure {} has no readable scope and tokens, so what it erased is unknown",
                            event.event_id
                        ))
                    })?;
                if detail.scope == "tenant" {
                    erasures.tenant_erased_at =
                        erasures.tenant_erased_at.max(Some(event.occurred_at));
                } else {
                    erasures.tokens.extend(detail.tokens);
                    erasures.trajectories.extend(detail.trajectories);
                }
            }
        }
        Ok(erasures)
    }

    /// How many allowed erasures, of any tenant, the `audit` table holds from before `until`
    /// (µs since epoch, UTC).
    pub async fn erasures_before(&self, until: i64) -> Result<usize> {
        let error = query_error(Table::Audit);
        let filter = Filter {
            until: Some(until),
            ..Filter::default()
        };
        let Some((frame, _)) = self.frame(Table::Audit, &filter).await? else {
            return Ok(0);
        };
        let count = frame
            .filter(
                col("kind")
                    .eq(lit("erase"))
                    .and(col("decision").eq(lit("allow"))),
            )
            .map_err(|e| error(&e))?
            .count()
            .await
            .map_err(|e| error(&e))?;
        Ok(count)
    }

    /// The trajectories of `tenant` that its allowed erasures reached, among all its steps
    /// at `steps_version` (the latest when `None`).
    pub async fn erased_trajectories(
        &self,
        tenant: &str,
        steps_version: Option<u64>,
    ) -> Result<BTreeSet<String>> {
        let erasures = self.erasures(tenant).await?;
        let mut reached = erasures.trajectories.clone();
        if erasures.tokens.is_empty() && erasures.tenant_erased_at.is_none() {
            return Ok(reached);
        }
        let error = query_error(Table::Steps);
        let filter = Filter {
            tenant_id: Some(tenant.to_owned()),
            version: steps_version,
            ..Filter::default()
        };
        let Some((steps, _)) = self.frame(Table::Steps, &filter).await? else {
            return Ok(reached);
        };
        if let Some(at) = erasures.tenant_erased_at {
            let mut before = steps.clone();
            for predicate in time_range("started_at", None, Some(at)) {
                before = before.filter(predicate).map_err(|e| error(&e))?;
            }
            trajectory_ids(before, &mut reached).await?;
        }
        if !erasures.tokens.is_empty() {
            let tokens = erasures.tokens.iter().map(|t| lit(t.clone())).collect();
            let carrying = steps
                .select_columns(&["trajectory_id", "pii"])
                .and_then(|f| f.unnest_columns(&["pii"]))
                .and_then(|f| f.filter(get_field(col("pii"), "token").in_list(tokens, false)))
                .map_err(|e| error(&e))?;
            trajectory_ids(carrying, &mut reached).await?;
        }
        Ok(reached)
    }
}
