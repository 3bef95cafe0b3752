//! Per-step returns from raw rewards (`docs/atdp-v1.md` §7), computed in memory; the raw
//! rewards are never written back.
//!
//! - Duplicates (same trajectory, step, name, source and `reward_fn_version`): the latest
//!   `created_at` wins.
//! - Several names combine by their configured weights.
//! - A step reward (`step_id` set) applies to that step.
//! - A trajectory reward (`step_id` null) attaches to the trajectory's most recent leaf
//!   (greatest `started_at` among the steps no other step continues) and flows back along
//!   `parent_step_id`: the step at distance `d` from that leaf gets `γ^d · r`. Only the path
//!   that led to the leaf is credited; siblings (a failed retry, an abandoned branch) get
//!   nothing.

use std::collections::{BTreeMap, HashMap, HashSet};

use atdp_schema::{Reward, Step};

use crate::{Error, Result};

/// Rewards with the same (trajectory, step, name, source, `reward_fn_version`) are one.
type DedupKey<'a> = (&'a str, Option<&'a str>, &'a str, &'a str, Option<&'a str>);

/// How rewards become returns.
#[derive(Debug, Clone, PartialEq)]
pub struct RewardSpec {
    /// Weight of each reward name used; other names are ignored.
    pub weights: BTreeMap<String, f64>,
    /// Turn discount γ in [0, 1].
    pub gamma: f64,
}

/// The weighted, discounted return of every step that received some reward (steps absent
/// from the map received none).
pub fn step_returns(
    steps: &[Step],
    rewards: &[Reward],
    spec: &RewardSpec,
) -> Result<HashMap<String, f64>> {
    let by_id: HashMap<&str, &Step> = steps.iter().map(|s| (s.step_id.as_str(), s)).collect();
    let continued: HashSet<&str> = steps
        .iter()
        .filter_map(|s| s.parent_step_id.as_deref())
        .collect();
    // The most recent leaf of each trajectory.
    let mut last_leaf: HashMap<&str, &Step> = HashMap::new();
    for s in steps
        .iter()
        .filter(|s| !continued.contains(s.step_id.as_str()))
    {
        let entry = last_leaf.entry(s.trajectory_id.as_str()).or_insert(s);
        if (s.started_at, s.step_id.as_str()) > (entry.started_at, entry.step_id.as_str()) {
            *entry = s;
        }
    }

    // De-duplicate: the latest row per (trajectory, step, name, source, version).
    let mut latest: BTreeMap<DedupKey<'_>, &Reward> = BTreeMap::new();
    for r in rewards {
        let Some(weight) = spec.weights.get(&r.name) else {
            continue;
        };
        if !r.value.is_finite() {
            return Err(Error::Reward {
                reward_id: r.reward_id.clone(),
                name: r.name.clone(),
                message: format!(
                    "value {} is not a finite number; fix or delete the reward at its source (raw rewards are never rewritten by the trainer), or select a time range without it",
                    r.value
                ),
            });
        }
        if !weight.is_finite() {
            return Err(Error::Reward {
                reward_id: r.reward_id.clone(),
                name: r.name.clone(),
                message: format!("weight {weight} is not a finite number"),
            });
        }
        let key = (
            r.trajectory_id.as_str(),
            r.step_id.as_deref(),
            r.name.as_str(),
            r.source.as_str(),
            r.reward_fn_version.as_deref(),
        );
        let entry = latest.entry(key).or_insert(r);
        if r.created_at > entry.created_at {
            *entry = r;
        }
    }

    let mut returns: HashMap<String, f64> = HashMap::new();
    for r in latest.values() {
        let value = spec.weights.get(&r.name).copied().unwrap_or(0.0) * r.value;
        match r.step_id.as_deref() {
            Some(step_id) => {
                if by_id.contains_key(step_id) {
                    *returns.entry(step_id.to_owned()).or_default() += value;
                }
            }
            None => {
                let Some(leaf) = last_leaf.get(r.trajectory_id.as_str()) else {
                    continue;
                };
                let mut seen = HashSet::new();
                let mut current = Some(*leaf);
                let mut discount = 1.0;
                while let Some(step) = current {
                    if !seen.insert(step.step_id.as_str()) {
                        break; // a cycle in parent_step_id: stop rather than loop
                    }
                    *returns.entry(step.step_id.clone()).or_default() += discount * value;
                    discount *= spec.gamma;
                    current = step
                        .parent_step_id
                        .as_deref()
                        .and_then(|p| by_id.get(p).copied());
                }
            }
        }
    }
    Ok(returns)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn step(id: &str, parent: Option<&str>, at: i64) -> Step {
        Step {
            step_id: id.into(),
            trajectory_id: "t".into(),
            parent_step_id: parent.map(Into::into),
            started_at: at,
            status: "ok".into(),
            ..Step::default()
        }
    }

    fn reward(step: Option<&str>, name: &str, value: f64, at: i64) -> Reward {
        Reward {
            reward_id: format!("r{at}"),
            trajectory_id: "t".into(),
            step_id: step.map(Into::into),
            name: name.into(),
            value,
            source: "api".into(),
            created_at: at,
            ..Reward::default()
        }
    }

    fn spec(gamma: f64) -> RewardSpec {
        RewardSpec {
            weights: [("ok".to_owned(), 1.0), ("rating".to_owned(), 0.5)].into(),
            gamma,
        }
    }

    /// §6's worked example: A → {B (failed retry), C → D}.
    fn retry_tree() -> Vec<Step> {
        vec![
            step("A", None, 1),
            step("B", Some("A"), 2),
            step("C", Some("A"), 3),
            step("D", Some("C"), 4),
        ]
    }

    #[test]
    fn trajectory_rewards_flow_back_along_the_path_only() {
        let returns =
            step_returns(&retry_tree(), &[reward(None, "ok", 1.0, 10)], &spec(0.5)).unwrap();
        assert_eq!(returns["D"], 1.0);
        assert_eq!(returns["C"], 0.5);
        assert_eq!(returns["A"], 0.25);
        assert!(!returns.contains_key("B"), "the sibling gets nothing");
    }

    #[test]
    fn step_rewards_stay_on_their_step_and_names_combine_by_weight() {
        let rewards = [
            reward(Some("B"), "ok", -1.0, 10),
            reward(Some("C"), "rating", 4.0, 11),
            reward(Some("C"), "ignored", 100.0, 12),
            reward(None, "ok", 1.0, 13),
        ];
        let returns = step_returns(&retry_tree(), &rewards, &spec(1.0)).unwrap();
        assert_eq!(returns["B"], -1.0);
        assert_eq!(returns["C"], 2.0 + 1.0);
        assert_eq!(returns["D"], 1.0);
        assert_eq!(returns["A"], 1.0);
    }

    #[test]
    fn the_latest_duplicate_wins_and_the_most_recent_leaf_is_credited() {
        let mut late_b = retry_tree();
        late_b[1].started_at = 9; // B is now the most recent leaf
        let rewards = [reward(None, "ok", 5.0, 10), reward(None, "ok", 2.0, 20)];
        let returns = step_returns(&late_b, &rewards, &spec(0.5)).unwrap();
        assert_eq!(returns["B"], 2.0);
        assert_eq!(returns["A"], 1.0);
        assert!(!returns.contains_key("C") && !returns.contains_key("D"));
    }

    #[test]
    fn non_finite_rewards_are_refused() {
        for bad in [f64::NAN, f64::INFINITY] {
            let err =
                step_returns(&retry_tree(), &[reward(None, "ok", bad, 1)], &spec(0.9)).unwrap_err();
            assert!(matches!(err, Error::Reward { .. }), "{err}");
            assert!(err.to_string().contains("not a finite number"));
        }
        // An unselected name with a bad value is not read.
        assert!(
            step_returns(
                &retry_tree(),
                &[reward(None, "other", f64::NAN, 1)],
                &spec(0.9)
            )
            .is_ok()
        );
    }
}
