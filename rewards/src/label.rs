//! A computed reward value before it becomes a `rewards` row.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type};
use atdp_schema::{Reward, new_id};

use crate::error::{Error, Result};
use crate::spec::RewardFn;

/// One value for one step or trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    /// Tenant of the trajectory.
    pub tenant_id: String,
    /// The trajectory.
    pub trajectory_id: String,
    /// The step; `None` for a trajectory reward.
    pub step_id: Option<String>,
    /// Reward name.
    pub name: String,
    /// The value (finite).
    pub value: f64,
}

impl Label {
    /// The `rewards` row for this label.
    pub fn reward(&self, function: &RewardFn, created_at: i64) -> Reward {
        Reward {
            reward_id: new_id(),
            trajectory_id: self.trajectory_id.clone(),
            step_id: self.step_id.clone(),
            tenant_id: self.tenant_id.clone(),
            name: self.name.clone(),
            value: self.value,
            source: function.source.clone(),
            reward_fn_version: Some(function.version.clone()),
            terminal: function.terminal,
            created_at,
            tags: Default::default(),
        }
    }

    /// The unit this label belongs to: (tenant, trajectory, step). Trajectory ids are
    /// chosen by clients, so the tenant is part of every unit's identity.
    pub fn key(&self) -> (String, String, Option<String>) {
        (
            self.tenant_id.clone(),
            self.trajectory_id.clone(),
            self.step_id.clone(),
        )
    }
}

/// Whether `name` may be a reward name.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn strings(batch: &RecordBatch, name: &str) -> Result<Vec<Option<String>>> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| Error::Query(format!("the result has no `{name}` column")))?;
    let column = cast(column, &DataType::Utf8)?;
    let column = column.as_string::<i32>();
    Ok((0..column.len())
        .map(|i| column.is_valid(i).then(|| column.value(i).to_owned()))
        .collect())
}

/// Labels from a batch with columns `tenant_id`, `trajectory_id`, `step_id`, `value`;
/// fails on a null or non-finite value, naming the step.
pub(crate) fn from_batch(name: &str, batch: &RecordBatch) -> Result<Vec<Label>> {
    let tenants = strings(batch, "tenant_id")?;
    let trajectories = strings(batch, "trajectory_id")?;
    let steps = strings(batch, "step_id")?;
    let values = batch
        .column_by_name("value")
        .ok_or_else(|| Error::Query("the result has no `value` column".into()))?;
    let values = cast(values, &DataType::Float64)?;
    let values = values.as_primitive::<Float64Type>();
    let mut labels = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let trajectory_id = trajectories[i].clone().unwrap_or_default();
        let step_id = steps[i].clone();
        let value = if values.is_valid(i) {
            values.value(i)
        } else {
            f64::NAN
        };
        if !value.is_finite() {
            return Err(Error::NotFinite {
                name: name.to_owned(),
                value,
                trajectory_id,
                step_id: step_id.unwrap_or_default(),
            });
        }
        labels.push(Label {
            tenant_id: tenants[i].clone().unwrap_or_default(),
            trajectory_id,
            step_id,
            name: name.to_owned(),
            value,
        });
    }
    Ok(labels)
}

/// (tenant, trajectory) pairs from a batch with columns `k_tenant_id`, `k_trajectory_id`.
pub(crate) fn from_batch_keys(batch: &RecordBatch) -> Result<Vec<(String, String)>> {
    let tenants = strings(batch, "k_tenant_id")?;
    let trajectories = strings(batch, "k_trajectory_id")?;
    Ok(tenants
        .into_iter()
        .zip(trajectories)
        .map(|(t, j)| (t.unwrap_or_default(), j.unwrap_or_default()))
        .collect())
}
