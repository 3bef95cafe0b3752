//! `atdp-reward preview`: a function's value distribution on a sample, with examples, so
//! that a degenerate rule is seen before a training run trusts it. Writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use atdp_lake::Catalog;

use atdp_schema::{Step, Table, steps_from_batch};
use deltalake::datafusion::prelude::{Expr, col, lit};

use crate::compute::compute;
use crate::error::Result;
use crate::label::Label;
use crate::select::{Scope, Selection};
use crate::spec::RewardFn;

/// Distinct values up to which each value is its own bucket.
const DISTINCT_BUCKETS: usize = 12;
/// Equal-width bins for continuous values.
const BINS: usize = 10;
/// Examples shown per bucket.
const EXAMPLES: usize = 3;
/// Characters of text shown per example field.
const TEXT_MAX: usize = 120;

/// The function's values on a sample. `labels` holds every value computed.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// Units (steps or trajectories) in the sample.
    pub units: u64,
    /// The values computed.
    pub labels: Vec<Label>,
}

/// Computes `function` on a deterministic sample of `size` units, writing nothing.
pub async fn sample(
    catalog: &Catalog,
    function: &RewardFn,
    selection: &Selection,
    size: usize,
    seed: u64,
) -> Result<Sampled> {
    if size == 0 {
        return Err(crate::Error::Invalid(
            "the sample size must be at least 1".into(),
        ));
    }
    let mut labels = Vec::new();
    let units = compute(
        catalog,
        function,
        selection,
        Scope::Sample { size, seed },
        &mut |_| {},
        &mut |batch, _| {
            labels.extend(batch);
            Ok(())
        },
    )
    .await?;
    Ok(Sampled { units, labels })
}

/// One bucket of the histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// `1` for a distinct value, `[0.2, 0.4)` for a bin.
    pub label: String,
    /// Lower bound (inclusive).
    pub low: f64,
    /// Upper bound (exclusive, but inclusive for the last bin).
    pub high: f64,
    /// Values in it.
    pub count: usize,
    /// Examples: (trajectory, step, value, last user message, reply), truncated.
    pub examples: Vec<Example>,
}

/// An example of a bucket: masked text as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The trajectory.
    pub trajectory_id: String,
    /// The step shown (for a trajectory reward: its last step that may be trained on).
    pub step_id: String,
    /// The value.
    pub value: f64,
    /// The last user message, truncated.
    pub user: String,
    /// The reply (text or tool calls), truncated.
    pub reply: String,
}

/// A preview: distribution and examples.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Reward name.
    pub name: String,
    /// Function version.
    pub version: String,
    /// Units sampled.
    pub units: u64,
    /// Values computed.
    pub values: usize,
    /// Their mean (`NaN` when there are none).
    pub mean: f64,
    /// Whether values are few and distinct (one bucket each) rather than binned.
    pub discrete: bool,
    /// The histogram.
    pub buckets: Vec<Bucket>,
}

/// Buckets of `values`: one per distinct value when there are few, else equal-width bins.
/// Returns the buckets and, for each value, its bucket index.
pub(crate) fn buckets(values: &[f64]) -> (bool, Vec<Bucket>, Vec<usize>) {
    let mut distinct: Vec<f64> = values.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    let bucket = |label: String, low: f64, high: f64| Bucket {
        label,
        low,
        high,
        count: 0,
        examples: Vec::new(),
    };
    let (discrete, mut buckets, index): (bool, Vec<Bucket>, Vec<usize>) =
        if distinct.len() <= DISTINCT_BUCKETS {
            let buckets = distinct
                .iter()
                .map(|v| bucket(format!("{v}"), *v, *v))
                .collect();
            let index = values
                .iter()
                .map(|v| distinct.iter().position(|d| d == v).unwrap_or(0))
                .collect();
            (true, buckets, index)
        } else {
            let low = distinct.first().copied().unwrap_or(0.0);
            let high = distinct.last().copied().unwrap_or(0.0);
            let width = (high - low) / BINS as f64;
            let buckets = (0..BINS)
                .map(|i| {
                    let a = low + width * i as f64;
                    let b = if i + 1 == BINS { high } else { a + width };
                    let close = if i + 1 == BINS { ']' } else { ')' };
                    bucket(format!("[{a:.3}, {b:.3}{close}"), a, b)
                })
                .collect();
            let index = values
                .iter()
                .map(|v| (((v - low) / width) as usize).min(BINS - 1))
                .collect();
            (false, buckets, index)
        };
    for i in &index {
        if let Some(b) = buckets.get_mut(*i) {
            b.count += 1;
        }
    }
    (discrete, buckets, index)
}

/// Previews `function` on a sample of `size` units (steps or trajectories).
pub async fn preview(
    catalog: &Catalog,
    function: &RewardFn,
    selection: &Selection,
    size: usize,
    seed: u64,
) -> Result<Preview> {
    let sampled = sample(catalog, function, selection, size, seed).await?;
    // A program may write several names; the preview shows the function's own.
    let labels: Vec<&Label> = {
        let own: Vec<&Label> = sampled
            .labels
            .iter()
            .filter(|l| l.name == function.name)
            .collect();
        if own.is_empty() {
            sampled.labels.iter().collect()
        } else {
            own
        }
    };
    let values: Vec<f64> = labels.iter().map(|l| l.value).collect();
    let (discrete, mut buckets, index) = buckets(&values);
    let mut chosen: Vec<(usize, &Label)> = Vec::new();
    for (label, bucket) in labels.iter().zip(&index) {
        if chosen.iter().filter(|(b, _)| b == bucket).count() < EXAMPLES {
            chosen.push((*bucket, label));
        }
    }
    // Examples are shown from the steps the function read: a trajectory's latest trainable
    // step (or reply in shadow), never one that may not be trained on.
    let trainable = crate::compute::scorable(catalog, selection).await?;
    let steps = example_steps(&trainable, &chosen).await?;
    for (bucket, label) in chosen {
        let step = match &label.step_id {
            Some(_) => steps.get(&label.key()),
            None => steps
                .values()
                .filter(|s| {
                    s.tenant_id == label.tenant_id && s.trajectory_id == label.trajectory_id
                })
                .max_by_key(|s| s.started_at),
        };
        if let (Some(b), Some(step)) = (buckets.get_mut(bucket), step) {
            b.examples.push(example(step, label));
        }
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Ok(Preview {
        name: function.name.clone(),
        version: function.version.clone(),
        units: sampled.units,
        values: values.len(),
        mean,
        discrete,
        buckets,
    })
}

/// The steps of the chosen labels, by (tenant, trajectory, step): a label shows its own
/// tenant's step, whoever else uses the same ids.
async fn example_steps(
    catalog: &Catalog,
    chosen: &[(usize, &Label)],
) -> Result<BTreeMap<(String, String, Option<String>), Step>> {
    let mut tenants: BTreeSet<&str> = BTreeSet::new();
    let mut by_step: Vec<Expr> = Vec::new();
    let mut by_trajectory: Vec<Expr> = Vec::new();
    for (_, label) in chosen {
        tenants.insert(&label.tenant_id);
        match &label.step_id {
            Some(step) => by_step.push(lit(step.clone())),
            None => by_trajectory.push(lit(label.trajectory_id.clone())),
        }
    }
    if tenants.is_empty() {
        return Ok(BTreeMap::new());
    }
    let wanted: BTreeSet<(&str, &str, Option<&str>)> = chosen
        .iter()
        .map(|(_, l)| {
            (
                l.tenant_id.as_str(),
                l.trajectory_id.as_str(),
                l.step_id.as_deref(),
            )
        })
        .collect();
    let predicate = col("tenant_id")
        .in_list(
            tenants.iter().map(|t| lit((*t).to_owned())).collect(),
            false,
        )
        .and(
            col("step_id")
                .in_list(by_step, false)
                .or(col("trajectory_id").in_list(by_trajectory, false)),
        );
    let frame = catalog.frame(Table::Steps).await?.filter(predicate)?;
    let mut out = BTreeMap::new();
    for batch in frame.collect().await? {
        for step in steps_from_batch(&batch)? {
            let as_step = (
                step.tenant_id.as_str(),
                step.trajectory_id.as_str(),
                Some(step.step_id.as_str()),
            );
            let as_trajectory = (step.tenant_id.as_str(), step.trajectory_id.as_str(), None);
            if wanted.contains(&as_step) || wanted.contains(&as_trajectory) {
                out.insert(
                    (
                        step.tenant_id.clone(),
                        step.trajectory_id.clone(),
                        Some(step.step_id.clone()),
                    ),
                    step,
                );
            }
        }
    }
    Ok(out)
}

/// `text` on one line, at most `TEXT_MAX` characters, inert on a terminal.
fn truncate(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = atdp_schema::shown::for_terminal(&flat).into_owned();
    if flat.chars().count() <= TEXT_MAX {
        flat
    } else {
        let cut: String = flat.chars().take(TEXT_MAX).collect();
        format!("{cut}…")
    }
}

fn example(step: &Step, label: &Label) -> Example {
    let user = step
        .request_messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .and_then(|m| m.content.as_deref())
        .unwrap_or("");
    let reply = match &step.response_message {
        Some(m) if !m.tool_calls.is_empty() => m
            .tool_calls
            .iter()
            .map(|c| format!("[tool call {}({})]", c.name, c.arguments))
            .collect::<Vec<_>>()
            .join(" "),
        Some(m) => m.content.clone().unwrap_or_default(),
        None => format!("[no reply: {}]", step.status),
    };
    Example {
        trajectory_id: step.trajectory_id.clone(),
        step_id: step.step_id.clone(),
        value: label.value,
        user: truncate(user),
        reply: truncate(&reply),
    }
}

/// A bar of `width` at most 40 characters for `count` out of `max`.
pub(crate) fn bar(count: usize, max: usize) -> String {
    let width = (count * 40).checked_div(max).unwrap_or(0);
    let width = if count > 0 { width.max(1) } else { 0 };
    "#".repeat(width)
}

impl fmt::Display for Preview {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "reward {} ({}) on a sample of {} units: {} values, mean {:.4}",
            self.name, self.version, self.units, self.values, self.mean
        )?;
        let max = self.buckets.iter().map(|b| b.count).max().unwrap_or(0);
        let width = self
            .buckets
            .iter()
            .map(|b| b.label.len())
            .max()
            .unwrap_or(0);
        for b in &self.buckets {
            let share = b.count as f64 / self.values.max(1) as f64 * 100.0;
            writeln!(
                f,
                "  {:>width$} | {:<40} {:>6} {:>5.1}%",
                b.label,
                bar(b.count, max),
                b.count,
                share
            )?;
        }
        if self.buckets.len() == 1 {
            writeln!(
                f,
                "  warning: every value is the same; this reward carries no signal"
            )?;
        }
        for b in &self.buckets {
            if b.examples.is_empty() {
                continue;
            }
            writeln!(f, "examples for {}:", b.label)?;
            for e in &b.examples {
                writeln!(
                    f,
                    "  value {} · trajectory {} step {}",
                    e.value, e.trajectory_id, e.step_id
                )?;
                writeln!(f, "    user:  {}", e.user)?;
                writeln!(f, "    reply: {}", e.reply)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn few_values_get_a_bucket_each_and_many_are_binned() {
        let (discrete, b, index) = buckets(&[0.0, 1.0, 1.0, 0.0, 1.0]);
        assert!(discrete);
        assert_eq!(b.iter().map(|b| b.count).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(index, [0, 1, 1, 0, 1]);
        let many: Vec<f64> = (0..100).map(f64::from).collect();
        let (discrete, b, _) = buckets(&many);
        assert!(!discrete);
        assert_eq!(b.len(), BINS);
        assert_eq!(b.iter().map(|b| b.count).sum::<usize>(), 100);
        assert_eq!(b[BINS - 1].count, 10, "the maximum falls in the last bin");
        assert_eq!(bar(5, 10).len(), 20);
        assert_eq!(truncate(&"x ".repeat(200)).chars().count(), TEXT_MAX + 1);
    }
}
