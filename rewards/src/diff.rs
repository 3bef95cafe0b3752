//! `atdp-reward diff`: two functions (or two versions of one) on the same sample.

use std::collections::BTreeMap;
use std::fmt;

use atdp_lake::Catalog;

use crate::error::{Error, Result};
use crate::label::Label;
use crate::preview::sample;
use crate::select::Selection;
use crate::spec::RewardFn;

/// Distinct values up to which a confusion table is printed instead of a correlation.
const DISCRETE_MAX: usize = 12;
/// Values closer than this agree.
const EPSILON: f64 = 1e-9;

/// How two functions compare on one sample.
#[derive(Debug, Clone)]
pub struct Diff {
    /// `name (version)` of A and B.
    pub a: String,
    /// See `a`.
    pub b: String,
    /// Units in the sample.
    pub units: u64,
    /// Units both functions gave a value for.
    pub compared: usize,
    /// Share of compared units where the values are equal.
    pub agreement: f64,
    /// Mean of A over compared units.
    pub mean_a: f64,
    /// Mean of B over compared units.
    pub mean_b: f64,
    /// For few distinct values: counts by (A value, B value).
    pub confusion: Option<Confusion>,
    /// For continuous values: Pearson correlation.
    pub correlation: Option<f64>,
}

/// Counts of (A value, B value) pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct Confusion {
    /// A's distinct values (rows).
    pub rows: Vec<f64>,
    /// B's distinct values (columns).
    pub columns: Vec<f64>,
    /// `counts[row][column]`.
    pub counts: Vec<Vec<usize>>,
}

/// Each unit's value under the function's own name (a program may write several).
fn by_unit(
    function: &RewardFn,
    labels: &[Label],
) -> BTreeMap<(String, String, Option<String>), f64> {
    let mut out = BTreeMap::new();
    for label in labels.iter().filter(|l| l.name == function.name) {
        out.entry(label.key()).or_insert(label.value);
    }
    if out.is_empty() {
        for label in labels {
            out.entry(label.key()).or_insert(label.value);
        }
    }
    out
}

fn distinct(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut out: Vec<f64> = values.collect();
    out.sort_by(f64::total_cmp);
    out.dedup();
    out
}

/// Compares `a` and `b` on the same sample of `size` units.
pub async fn diff(
    catalog: &Catalog,
    a: &RewardFn,
    b: &RewardFn,
    selection: &Selection,
    size: usize,
    seed: u64,
) -> Result<Diff> {
    if a.target != b.target {
        return Err(Error::Invalid(
            "the two functions reward different targets (step vs trajectory); compare like with like".into(),
        ));
    }
    let sample_a = sample(catalog, a, selection, size, seed).await?;
    let sample_b = sample(catalog, b, selection, size, seed).await?;
    let values_a = by_unit(a, &sample_a.labels);
    let values_b = by_unit(b, &sample_b.labels);
    let pairs: Vec<(f64, f64)> = values_a
        .iter()
        .filter_map(|(k, va)| values_b.get(k).map(|vb| (*va, *vb)))
        .collect();
    Ok(compare(
        format!("{} ({})", a.name, a.version),
        format!("{} ({})", b.name, b.version),
        sample_a.units,
        &pairs,
    ))
}

pub(crate) fn compare(a: String, b: String, units: u64, pairs: &[(f64, f64)]) -> Diff {
    let n = pairs.len() as f64;
    let agree = pairs
        .iter()
        .filter(|(x, y)| (x - y).abs() <= EPSILON)
        .count();
    let mean_a = pairs.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_b = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let rows = distinct(pairs.iter().map(|p| p.0));
    let columns = distinct(pairs.iter().map(|p| p.1));
    let (confusion, correlation) = if rows.len() <= DISCRETE_MAX && columns.len() <= DISCRETE_MAX {
        let mut counts = vec![vec![0; columns.len()]; rows.len()];
        for (x, y) in pairs {
            let r = rows.iter().position(|v| v == x);
            let c = columns.iter().position(|v| v == y);
            if let (Some(r), Some(c)) = (r, c) {
                counts[r][c] += 1;
            }
        }
        (
            Some(Confusion {
                rows,
                columns,
                counts,
            }),
            None,
        )
    } else {
        let cov: f64 = pairs.iter().map(|(x, y)| (x - mean_a) * (y - mean_b)).sum();
        let var_a: f64 = pairs.iter().map(|(x, _)| (x - mean_a).powi(2)).sum();
        let var_b: f64 = pairs.iter().map(|(_, y)| (y - mean_b).powi(2)).sum();
        (None, Some(cov / (var_a * var_b).sqrt()))
    };
    Diff {
        a,
        b,
        units,
        compared: pairs.len(),
        agreement: agree as f64 / n,
        mean_a,
        mean_b,
        confusion,
        correlation,
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "A: {}", self.a)?;
        writeln!(f, "B: {}", self.b)?;
        writeln!(
            f,
            "sample: {} units, {} with a value from both",
            self.units, self.compared
        )?;
        writeln!(f, "agreement: {:.1}%", self.agreement * 100.0)?;
        writeln!(f, "mean A: {:.4}   mean B: {:.4}", self.mean_a, self.mean_b)?;
        if let Some(c) = &self.confusion {
            write!(f, "{:>10} |", "A \\ B")?;
            for v in &c.columns {
                write!(f, " {v:>8}")?;
            }
            writeln!(f)?;
            for (v, row) in c.rows.iter().zip(&c.counts) {
                write!(f, "{v:>10} |")?;
                for n in row {
                    write!(f, " {n:>8}")?;
                }
                writeln!(f)?;
            }
        }
        if let Some(r) = self.correlation {
            writeln!(f, "correlation (Pearson): {r:.4}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn agreement_and_confusion() {
        let d = compare(
            "a".into(),
            "b".into(),
            4,
            &[(1.0, 1.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0)],
        );
        assert_eq!(d.agreement, 0.75);
        assert_eq!((d.mean_a, d.mean_b), (0.5, 0.75));
        let c = d.confusion.unwrap();
        assert_eq!(c.counts, vec![vec![1, 1], vec![0, 2]]);
        let pairs: Vec<(f64, f64)> = (0..50)
            .map(|i| (f64::from(i), f64::from(i) * 2.0))
            .collect();
        let d = compare("a".into(), "b".into(), 50, &pairs);
        assert!((d.correlation.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(d.agreement, 0.02);
    }
}
