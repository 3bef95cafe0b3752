//! Computing a function's values over the units in scope, batch by batch, tenant by tenant:
//! a query reads only the rows of the tenant it labels, a program batch holds one tenant's
//! steps, and every label keeps the tenant of its unit.

use std::collections::BTreeMap;

use atdp_lake::Catalog;

use atdp_schema::{Step, Table, steps_from_batch};
use deltalake::datafusion::common::ScalarValue;
use deltalake::datafusion::common::tree_node::TreeNode;
use deltalake::datafusion::execution::context::SQLOptions;
use deltalake::datafusion::execution::session_state::SessionStateBuilder;
use deltalake::datafusion::prelude::{DataFrame, Expr, SessionContext, cast, col, lit};
use futures::StreamExt;

use arrow::array::AsArray;
use arrow::datatypes::DataType;

use crate::error::{Error, Result};
use crate::label::{self, Label};
use crate::program::{self, Batch};
use crate::select::{self, Pull, Scope, Selection};
use crate::spec::{Body, Program, RewardFn, Target};

/// Called with each batch of checked labels and the number of units done so far; an error
/// stops the computation.
pub type OnBatch<'a> = dyn FnMut(Vec<Label>, u64) -> Result<()> + Send + 'a;

/// Computes `function` over the units in `scope`, handing each checked batch to `on_batch`.
/// Returns the number of units (steps or trajectories) that were in scope.
///
/// Rewards are training data: the function reads only steps that may be trained on (the
/// catalog's `steps` restricted by [`Catalog::for_rewards`], unmarked steps as
/// `selection.unmarked` says), in its units, its rows and its queries alike, and the replies
/// recorded in shadow, which are scored to judge a candidate version and never trained on.
pub async fn compute(
    catalog: &Catalog,
    function: &RewardFn,
    selection: &Selection,
    scope: Scope,
    on_start: &mut (dyn FnMut(u64) + Send),
    on_batch: &mut OnBatch<'_>,
) -> Result<u64> {
    selection.validate()?;
    let catalog = &scorable(catalog, selection).await?;
    let units = select::units(catalog, function, selection, scope)
        .await?
        .cache()
        .await?;
    let total = units.clone().count().await? as u64;
    on_start(total);
    if total == 0 {
        return Ok(0);
    }
    let mut done = 0u64;
    match &function.body {
        Body::Expression(expression) => {
            let steps = select::unit_steps(catalog, selection, units, Pull::Parallel).await?;
            // An expression reads its own row only: a subquery does not resolve the lake's
            // tables (planning fails), and an aggregate or window function, which would read
            // the other rows in scope (another tenant's among them), is refused.
            let value = steps.parse_sql_expr(expression)?;
            own_row_only(&value)?;
            let frame = steps.select(vec![
                col("tenant_id"),
                col("trajectory_id"),
                col("step_id"),
                cast(value, DataType::Float64).alias("value"),
            ])?;
            stream_sql(&function.name, frame, &mut done, on_batch).await?;
        }
        Body::Query(query) => {
            for tenant in unit_tenants(&units).await? {
                let session = tenant_session(catalog, &tenant).await?;
                let own = units
                    .clone()
                    .filter(col("k_tenant_id").eq(lit(tenant.clone())))?;
                let frame = query_frame(&session, function.target, query, own).await?;
                stream_sql(&function.name, frame, &mut done, on_batch).await?;
            }
        }
        Body::Program(program) => match function.target {
            Target::Step => {
                // One partition: the program is the slow end, so the scan waits for it
                // instead of reading ahead into memory.
                let steps = select::unit_steps(catalog, selection, units, Pull::Sequential).await?;
                program_steps(&function.name, program, steps, on_batch).await?;
            }
            Target::Trajectory => {
                program_trajectories(catalog, &function.name, program, units, on_batch).await?;
            }
        },
    }
    Ok(total)
}

/// Refuses an expression that reads other rows than its own: an aggregate or window
/// function, or a subquery.
fn own_row_only(expression: &Expr) -> Result<()> {
    let reads_other_rows = expression.exists(|e| {
        Ok(matches!(
            e,
            Expr::AggregateFunction(_)
                | Expr::WindowFunction(_)
                | Expr::ScalarSubquery(_)
                | Expr::InSubquery(_)
                | Expr::Exists(_)
                | Expr::OuterReferenceColumn(..)
        ))
    })?;
    if reads_other_rows {
        return Err(Error::Query(
            "an expression reads the one row of its step: aggregate and window functions \
             and subqueries belong in a `query`"
                .into(),
        ));
    }
    Ok(())
}

/// `catalog` with `steps` restricted to what reward functions read (what may be trained on,
/// unmarked steps as `selection.unmarked` says, and the replies recorded in shadow): the
/// catalog itself when it already is.
pub(crate) async fn scorable(catalog: &Catalog, selection: &Selection) -> Result<Catalog> {
    if catalog.training() == Some(selection.unmarked) && catalog.shadows() {
        return Ok(catalog.clone());
    }
    Ok(catalog.for_rewards(selection.unmarked).await?)
}

async fn stream_sql(
    name: &str,
    frame: DataFrame,
    done: &mut u64,
    on_batch: &mut OnBatch<'_>,
) -> Result<()> {
    let mut stream = frame.execute_stream().await?;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        let labels = label::from_batch(name, &batch)?;
        *done += labels.len() as u64;
        on_batch(labels, *done)?;
    }
    Ok(())
}

/// The tenants of the units in scope, sorted.
async fn unit_tenants(units: &DataFrame) -> Result<Vec<String>> {
    let batches = units
        .clone()
        .select(vec![
            cast(col("k_tenant_id"), DataType::Utf8).alias("tenant"),
        ])?
        .distinct()?
        .collect()
        .await?;
    let mut tenants = Vec::new();
    for batch in &batches {
        let column = batch.column(0).as_string::<i32>();
        tenants.extend(column.iter().flatten().map(str::to_owned));
    }
    tenants.sort();
    Ok(tenants)
}

/// A session in which the tables a reward reads (`steps`, `rewards`) hold only `tenant`'s
/// rows, over the catalog's table versions and object stores: a reward query run in it
/// cannot read, join or aggregate another tenant's data, whatever it says. `audit` and
/// `pii_vault` are not there: the audit trail holds what the strict mode recorded of calls
/// that may not be trained on (consent withdrawn, expired), and the vault holds originals.
async fn tenant_session(catalog: &Catalog, tenant: &str) -> Result<SessionContext> {
    let state = catalog.session().state();
    let session = SessionContext::new_with_state(
        SessionStateBuilder::new()
            .with_config(state.config().clone())
            .with_runtime_env(state.runtime_env().clone())
            .with_default_features()
            .build(),
    );
    for table in [Table::Steps, Table::Rewards] {
        let rows = catalog
            .frame(table)
            .await?
            .filter(col("tenant_id").eq(lit(tenant.to_owned())))?;
        session.register_table(table.name(), rows.into_view())?;
    }
    Ok(session)
}

/// The user's query, run in one tenant's session, joined to that tenant's units in scope
/// (which also supply `tenant_id`).
async fn query_frame(
    session: &SessionContext,
    target: Target,
    query: &str,
    units: DataFrame,
) -> Result<DataFrame> {
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let result = session.sql_with_options(query, options).await?;
    let has = |name: &str| result.schema().fields().iter().any(|f| f.name() == name);
    let mut needed = vec!["trajectory_id", "value"];
    if target == Target::Step {
        needed.push("step_id");
    }
    for name in needed {
        if !has(name) {
            return Err(Error::Invalid(format!(
                "the reward query must return a `{name}` column (it returns: {})",
                result
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let utf8 = |name: &str| cast(col(name), DataType::Utf8);
    Ok(match target {
        Target::Step => result
            .select(vec![
                utf8("trajectory_id").alias("q_trajectory_id"),
                utf8("step_id").alias("q_step_id"),
                col("value").alias("q_value"),
            ])?
            .join(
                units,
                deltalake::datafusion::common::JoinType::Inner,
                &["q_trajectory_id", "q_step_id"],
                &["k_trajectory_id", "k_step_id"],
                None,
            )?
            .select(vec![
                col("k_tenant_id").alias("tenant_id"),
                col("q_trajectory_id").alias("trajectory_id"),
                col("q_step_id").alias("step_id"),
                cast(col("q_value"), DataType::Float64).alias("value"),
            ])?,
        Target::Trajectory => result
            .select(vec![
                utf8("trajectory_id").alias("q_trajectory_id"),
                col("value").alias("q_value"),
            ])?
            .join(
                units,
                deltalake::datafusion::common::JoinType::Inner,
                &["q_trajectory_id"],
                &["k_trajectory_id"],
                None,
            )?
            .select(vec![
                col("k_tenant_id").alias("tenant_id"),
                col("q_trajectory_id").alias("trajectory_id"),
                lit(ScalarValue::Utf8(None)).alias("step_id"),
                cast(col("q_value"), DataType::Float64).alias("value"),
            ])?,
    })
}

/// Step targets: the steps stream through, gathered into batches of one tenant each (a
/// program never sees two tenants' steps in one run, so ids it answers with are never
/// ambiguous across tenants). At most one unfinished batch per tenant is held.
async fn program_steps(
    name: &str,
    program: &Program,
    steps: DataFrame,
    on_batch: &mut OnBatch<'_>,
) -> Result<()> {
    let mut stream = steps.execute_stream().await?;
    let mut pending: BTreeMap<String, Vec<Vec<Step>>> = BTreeMap::new();
    let mut done = 0u64;
    while let Some(batch) = stream.next().await {
        for step in steps_from_batch(&batch?)? {
            let items = pending.entry(step.tenant_id.clone()).or_default();
            items.push(vec![step]);
            if items.len() >= program.batch {
                let items = std::mem::take(items);
                done += items.len() as u64;
                run_batch(name, program, Target::Step, items, done, on_batch).await?;
            }
        }
    }
    for items in pending.into_values().filter(|items| !items.is_empty()) {
        done += items.len() as u64;
        run_batch(name, program, Target::Step, items, done, on_batch).await?;
    }
    Ok(())
}

async fn run_batch(
    name: &str,
    program: &Program,
    target: Target,
    items: Vec<Vec<Step>>,
    done: u64,
    on_batch: &mut OnBatch<'_>,
) -> Result<()> {
    let batch = Batch::new(target, items)?;
    let labels = program::run(program, name, &batch).await?;
    on_batch(labels, done)
}

/// Trajectory targets: the (tenant, trajectory) keys in scope, then, tenant by tenant, each
/// batch's steps (all of a trajectory's steps, whatever the time filter, so that a program
/// sees whole trajectories; only that tenant's, whoever else uses the same id).
async fn program_trajectories(
    catalog: &Catalog,
    name: &str,
    program: &Program,
    units: DataFrame,
    on_batch: &mut OnBatch<'_>,
) -> Result<()> {
    let ids = units
        .select(vec![col("k_tenant_id"), col("k_trajectory_id")])?
        .collect()
        .await?;
    let mut by_tenant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for batch in &ids {
        for (tenant, trajectory) in label::from_batch_keys(batch)? {
            by_tenant.entry(tenant).or_default().push(trajectory);
        }
    }
    let mut done = 0u64;
    for (tenant, trajectories) in &by_tenant {
        for chunk in trajectories.chunks(program.batch) {
            let list: Vec<Expr> = chunk.iter().map(|t| lit(t.clone())).collect();
            let frame = catalog.frame(Table::Steps).await?.filter(
                col("tenant_id")
                    .eq(lit(tenant.clone()))
                    .and(col("trajectory_id").in_list(list, false)),
            )?;
            let mut by_trajectory: BTreeMap<String, Vec<Step>> = BTreeMap::new();
            for batch in frame.collect().await? {
                for step in steps_from_batch(&batch)? {
                    if &step.tenant_id == tenant {
                        by_trajectory
                            .entry(step.trajectory_id.clone())
                            .or_default()
                            .push(step);
                    }
                }
            }
            let items: Vec<Vec<Step>> = chunk
                .iter()
                .filter_map(|t| by_trajectory.remove(t))
                .map(|mut steps| {
                    steps.sort_by_key(|s| (s.started_at, s.turn_index));
                    steps
                })
                .collect();
            done += chunk.len() as u64;
            run_batch(name, program, Target::Trajectory, items, done, on_batch).await?;
        }
    }
    Ok(())
}
