//! Which steps or trajectories a run or a preview works on: the user's filters as typed
//! DataFusion predicates (tenant and `date` bounds prune partitions), minus what this
//! function version has already labelled (an anti-join with `rewards`), or a deterministic
//! sample.

use atdp_lake::{Catalog, time_range};

use atdp_schema::{Table, Unmarked};
use deltalake::datafusion::common::JoinType;
use deltalake::datafusion::prelude::{DataFrame, Expr, col, lit};

use crate::error::{Error, Result};
use crate::spec::{RewardFn, Target};

/// Which steps to consider. Unset fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only steps started at or after this (µs since epoch, UTC).
    pub since: Option<i64>,
    /// Only steps started before this (µs since epoch, UTC).
    pub until: Option<i64>,
    /// Whether steps without a training mark are labelled (by default they are not: only
    /// steps that may be trained on are read).
    pub unmarked: Unmarked,
}

/// What to compute over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// What this function version has not labelled yet (`run`).
    Pending,
    /// A deterministic sample of `size` steps or trajectories (`preview`, `diff`): the same
    /// filters and seed give the same sample.
    Sample {
        /// How many.
        size: usize,
        /// Changes which ones.
        seed: u64,
    },
}

impl Selection {
    /// The filter as a predicate over `steps`.
    fn predicate(&self) -> Option<Expr> {
        let mut parts = Vec::new();
        if let Some(tenant) = &self.tenant_id {
            parts.push(col("tenant_id").eq(lit(tenant.clone())));
        }
        if let Some(agent) = &self.agent_id {
            parts.push(col("agent_id").eq(lit(agent.clone())));
        }
        parts.extend(time_range("started_at", self.since, self.until));
        parts.into_iter().reduce(Expr::and)
    }

    /// Checks the filters for contradictions.
    pub fn validate(&self) -> Result<()> {
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(Error::Invalid("--since must be before --until".into()));
        }
        Ok(())
    }
}

/// `steps` with the selection applied.
pub(crate) async fn steps(catalog: &Catalog, selection: &Selection) -> Result<DataFrame> {
    let frame = catalog.frame(Table::Steps).await?;
    Ok(match selection.predicate() {
        Some(predicate) => frame.filter(predicate)?,
        None => frame,
    })
}

/// The key columns of a target, as they are named in `steps`.
pub(crate) fn keys(target: Target) -> &'static [&'static str] {
    match target {
        Target::Step => &["tenant_id", "trajectory_id", "step_id"],
        Target::Trajectory => &["tenant_id", "trajectory_id"],
    }
}

/// The same keys renamed `k_<key>`, so that they can be joined against `steps`.
pub(crate) fn renamed(target: Target) -> Vec<String> {
    keys(target).iter().map(|k| format!("k_{k}")).collect()
}

fn as_refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// The keys (`k_tenant_id`, `k_trajectory_id`[, `k_step_id`]) of the units in scope: one
/// row per step or trajectory to label.
pub(crate) async fn units(
    catalog: &Catalog,
    function: &RewardFn,
    selection: &Selection,
    scope: Scope,
) -> Result<DataFrame> {
    let target = function.target;
    let key_cols: Vec<Expr> = keys(target)
        .iter()
        .zip(renamed(target))
        .map(|(k, r)| col(*k).alias(r))
        .collect();
    let all = steps(catalog, selection)
        .await?
        .select(key_cols)?
        .distinct()?;
    match scope {
        Scope::Pending => {
            // Rows of this function version: (source, version) identifies it, whatever names
            // a program wrote. A trajectory counts as labelled once any row names it.
            let mut labelled = catalog.frame(Table::Rewards).await?.filter(
                col("source")
                    .eq(lit(function.source.clone()))
                    .and(col("reward_fn_version").eq(lit(function.version.clone()))),
            )?;
            if let Some(tenant) = &selection.tenant_id {
                labelled = labelled.filter(col("tenant_id").eq(lit(tenant.clone())))?;
            }
            let done: Vec<String> = keys(target).iter().map(|k| format!("l_{k}")).collect();
            let labelled = labelled
                .select(
                    keys(target)
                        .iter()
                        .zip(&done)
                        .map(|(k, d)| col(*k).alias(d))
                        .collect::<Vec<_>>(),
                )?
                .distinct()?;
            let left = renamed(target);
            Ok(all.join(
                labelled,
                JoinType::LeftAnti,
                &as_refs(&left),
                &as_refs(&done),
                None,
            )?)
        }
        Scope::Sample { size, seed } => {
            let id = match target {
                Target::Step => "k_step_id",
                Target::Trajectory => "k_trajectory_id",
            };
            let order = all.parse_sql_expr(&format!("md5(concat({id}, '/{seed}'))"))?;
            // Two tenants (or trajectories) may share an id, and so its hash: the other keys
            // break the tie, so that the sample stays the same from run to run.
            let mut sort = vec![order.sort(true, false)];
            sort.extend(
                renamed(target)
                    .iter()
                    .map(|k| col(k.as_str()).sort(true, false)),
            );
            Ok(all.sort(sort)?.limit(0, Some(size))?)
        }
    }
}

/// How the rows of [`unit_steps`] are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pull {
    /// On every core (a SQL expression, consumed as fast as it is read).
    Parallel,
    /// On one partition, a plain pull from the scan through the join: a slow consumer (a
    /// program labelling thousands of steps per second) holds the scan back instead of
    /// letting parallel partitions read ahead into memory.
    Sequential,
}

/// `steps` rows (every column) of the units in scope, for step targets.
pub(crate) async fn unit_steps(
    catalog: &Catalog,
    selection: &Selection,
    units: DataFrame,
    pull: Pull,
) -> Result<DataFrame> {
    // Units on the left, so that the hash table is built on the key set and the wide steps
    // rows stream through (a right semi-join keeps the right side's columns). DataFusion's
    // join selection would swap the sides when the key set has more rows than its
    // collect threshold, and build the table on `steps`: every column of every selected
    // row in memory (the benchmark's million steps outgrew 24 GB). Reordering is turned off for this query.
    let unit_keys = renamed(Target::Step);
    let joined = units.join(
        steps(catalog, selection).await?,
        JoinType::RightSemi,
        &as_refs(&unit_keys),
        keys(Target::Step),
        None,
    )?;
    let (mut state, plan) = joined.into_parts();
    let options = state.config_mut().options_mut();
    options.optimizer.join_reordering = false;
    if pull == Pull::Sequential {
        options.execution.target_partitions = 1;
    }
    Ok(DataFrame::new(state, plan))
}
