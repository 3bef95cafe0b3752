//! Per-step returns from raw rewards (`docs/atdp-v1.md` §7), computed in memory; the raw
//! rewards are never written back.
//!
//! Everything is matched within a tenant: steps by (tenant, trajectory, step), trajectories by
//! (tenant, trajectory). Trajectory ids are chosen by clients and step ids repeat in imported
//! or synthetic data, so neither id alone names a step, and one tenant's reward never credits
//! another tenant's step.
//!
//! - Duplicates (same tenant, trajectory, step, name, source and `reward_fn_version`): the
//!   latest `created_at` wins, the greater `reward_id` among equal times.
//! - Several names combine by their configured weights.
//! - A step reward (`step_id` set) applies to that step of its own trajectory. One whose
//!   `step_id` is not a selected step of that trajectory (a step of another trajectory, or
//!   one outside the selection) credits nothing and is counted in
//!   [`Returns::unmatched_step_rewards`].
//! - A trajectory reward (`step_id` null) attaches to the trajectory's most recent leaf
//!   (greatest `started_at` among the steps no other step continues) and flows back along
//!   `parent_step_id`: the step at distance `d` from that leaf gets `γ^d · r`. Only the path
//!   that led to the leaf is credited; siblings (a failed retry, an abandoned branch) get
//!   nothing. The steps given are the ones that may be trained on, so when a trajectory's
//!   latest step is excluded, its latest trainable step is the leaf credited.

use std::collections::{BTreeMap, HashMap, HashSet};

use atdp_schema::{Reward, Step};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A step's identity in the lake: its tenant, its trajectory and its own id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StepKey {
    /// The tenant.
    pub tenant_id: String,
    /// The trajectory.
    pub trajectory_id: String,
    /// The step.
    pub step_id: String,
}

impl StepKey {
    /// The key of `step`.
    pub fn of(step: &Step) -> Self {
        StepKey::new(&step.tenant_id, &step.trajectory_id, &step.step_id)
    }

    /// The key of step `step_id` of trajectory `trajectory_id` of `tenant_id`.
    pub fn new(tenant_id: &str, trajectory_id: &str, step_id: &str) -> Self {
        StepKey {
            tenant_id: tenant_id.to_owned(),
            trajectory_id: trajectory_id.to_owned(),
            step_id: step_id.to_owned(),
        }
    }
}

/// (tenant, trajectory, step), borrowed.
type Key<'a> = (&'a str, &'a str, &'a str);

/// Rewards with the same (tenant, trajectory, step, name, source, `reward_fn_version`) are one.
type DedupKey<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
    &'a str,
    Option<&'a str>,
);

fn key(step: &Step) -> Key<'_> {
    (&step.tenant_id, &step.trajectory_id, &step.step_id)
}

/// How rewards become returns.
#[derive(Debug, Clone, PartialEq)]
pub struct RewardSpec {
    /// Weight of each reward name used; other names are ignored.
    pub weights: BTreeMap<String, f64>,
    /// Turn discount γ in [0, 1].
    pub gamma: f64,
}

/// The returns of a selection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Returns {
    /// The weighted, discounted return of every step that received some reward (steps absent
    /// from the map received none).
    pub by_step: HashMap<StepKey, f64>,
    /// Step rewards (of the names used) that credited nothing: their `step_id` is not a
    /// selected step of their own tenant and trajectory.
    pub unmatched_step_rewards: usize,
}

impl Returns {
    /// The return of `step`, if it received some reward.
    pub fn of(&self, step: &StepKey) -> Option<f64> {
        self.by_step.get(step).copied()
    }
}

/// The returns of `steps` from `rewards` (both of any number of tenants), per step.
pub fn step_returns(steps: &[Step], rewards: &[Reward], spec: &RewardSpec) -> Result<Returns> {
    let by_key: HashMap<Key<'_>, &Step> = steps.iter().map(|s| (key(s), s)).collect();
    let parent_of = |step: &Step| {
        step.parent_step_id.as_deref().and_then(|p| {
            by_key
                .get(&(&*step.tenant_id, &*step.trajectory_id, p))
                .copied()
        })
    };
    let continued: HashSet<Key<'_>> = steps
        .iter()
        .filter_map(|s| {
            s.parent_step_id
                .as_deref()
                .map(|p| (&*s.tenant_id, &*s.trajectory_id, p))
        })
        .collect();
    // The most recent leaf of each (tenant, trajectory).
    let mut last_leaf: HashMap<(&str, &str), &Step> = HashMap::new();
    for s in steps.iter().filter(|s| !continued.contains(&key(s))) {
        let entry = last_leaf
            .entry((&s.tenant_id, &s.trajectory_id))
            .or_insert(s);
        if (s.started_at, s.step_id.as_str()) > (entry.started_at, entry.step_id.as_str()) {
            *entry = s;
        }
    }

    // De-duplicate: the latest row per (tenant, trajectory, step, name, source, version).
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
        let dedup = (
            r.tenant_id.as_str(),
            r.trajectory_id.as_str(),
            r.step_id.as_deref(),
            r.name.as_str(),
            r.source.as_str(),
            r.reward_fn_version.as_deref(),
        );
        let entry = latest.entry(dedup).or_insert(r);
        // The latest wins; at the same time, the greater reward_id, so that the choice does
        // not depend on the order the rows were read in.
        if (r.created_at, r.reward_id.as_str()) > (entry.created_at, entry.reward_id.as_str()) {
            *entry = r;
        }
    }

    let mut out = Returns::default();
    let mut credit = |step: &Step, value: f64| {
        *out.by_step.entry(StepKey::of(step)).or_default() += value;
    };
    let mut unmatched = 0;
    for r in latest.values() {
        let value = spec.weights.get(&r.name).copied().unwrap_or(0.0) * r.value;
        match r.step_id.as_deref() {
            Some(step_id) => match by_key.get(&(&*r.tenant_id, &*r.trajectory_id, step_id)) {
                Some(step) => credit(step, value),
                None => unmatched += 1,
            },
            None => {
                let Some(leaf) = last_leaf.get(&(&*r.tenant_id, &*r.trajectory_id)) else {
                    continue;
                };
                let mut seen = HashSet::new();
                let mut current = Some(*leaf);
                let mut discount = 1.0;
                while let Some(step) = current {
                    if !seen.insert(step.step_id.as_str()) {
                        break; // a cycle in parent_step_id: stop rather than loop
                    }
                    credit(step, discount * value);
                    discount *= spec.gamma;
                    current = parent_of(step);
                }
            }
        }
    }
    out.unmatched_step_rewards = unmatched;
    // Finite rewards can still add up past what a float holds (an API accepts any finite
    // value): such a return would make every advantage of the batch NaN.
    if let Some((key, _)) = out.by_step.iter().find(|(_, v)| !v.is_finite()) {
        return Err(Error::invalid(
            "rewards",
            format!(
                "the rewards of step {} of trajectory {} (tenant {}) add up to a number too large to train on; fix them at their source, or select a time range without them",
                key.step_id, key.trajectory_id, key.tenant_id
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn step(id: &str, parent: Option<&str>, at: i64) -> Step {
        Step {
            step_id: id.into(),
            trajectory_id: "t".into(),
            tenant_id: "acme".into(),
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
            tenant_id: "acme".into(),
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

    /// The return of step `id` of acme's trajectory `t`.
    fn of(returns: &Returns, id: &str) -> Option<f64> {
        returns.of(&StepKey::new("acme", "t", id))
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

    fn in_tenant<T>(tenant: &str, mut rows: Vec<T>, set: impl Fn(&mut T, &str)) -> Vec<T> {
        for row in &mut rows {
            set(row, tenant);
        }
        rows
    }

    #[test]
    fn trajectory_rewards_flow_back_along_the_path_only() {
        let returns =
            step_returns(&retry_tree(), &[reward(None, "ok", 1.0, 10)], &spec(0.5)).unwrap();
        assert_eq!(of(&returns, "D"), Some(1.0));
        assert_eq!(of(&returns, "C"), Some(0.5));
        assert_eq!(of(&returns, "A"), Some(0.25));
        assert_eq!(of(&returns, "B"), None, "the sibling gets nothing");
        assert_eq!(returns.unmatched_step_rewards, 0);
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
        assert_eq!(of(&returns, "B"), Some(-1.0));
        assert_eq!(of(&returns, "C"), Some(2.0 + 1.0));
        assert_eq!(of(&returns, "D"), Some(1.0));
        assert_eq!(of(&returns, "A"), Some(1.0));
    }

    #[test]
    fn rewards_that_add_up_past_a_float_are_refused() {
        let rewards = [
            reward(Some("C"), "ok", f64::MAX, 10),
            reward(Some("C"), "rating", f64::MAX, 11),
        ];
        let error = step_returns(&retry_tree(), &rewards, &spec(1.0)).unwrap_err();
        assert!(error.to_string().contains("too large"), "{error}");
    }

    #[test]
    fn the_latest_duplicate_wins_and_the_most_recent_leaf_is_credited() {
        let mut late_b = retry_tree();
        late_b[1].started_at = 9; // B is now the most recent leaf
        let rewards = [reward(None, "ok", 5.0, 10), reward(None, "ok", 2.0, 20)];
        let returns = step_returns(&late_b, &rewards, &spec(0.5)).unwrap();
        assert_eq!(of(&returns, "B"), Some(2.0));
        assert_eq!(of(&returns, "A"), Some(1.0));
        assert_eq!((of(&returns, "C"), of(&returns, "D")), (None, None));
    }

    /// Two tenants with the same trajectory id and the same step ids: globex's tree has B as
    /// its most recent leaf, acme's has D.
    #[test]
    fn tenants_with_the_same_ids_get_their_own_returns() {
        let set_step = |s: &mut Step, t: &str| s.tenant_id = t.into();
        let set_reward = |r: &mut Reward, t: &str| r.tenant_id = t.into();
        let mut steps = in_tenant("acme", retry_tree(), set_step);
        let mut globex = in_tenant("globex", retry_tree(), set_step);
        globex[1].started_at = 9;
        steps.extend(globex);
        let mut rewards = in_tenant("acme", vec![reward(None, "ok", 1.0, 10)], set_reward);
        rewards.extend(in_tenant(
            "globex",
            // Later than acme's trajectory reward: de-duplication is per tenant too.
            vec![
                reward(None, "ok", -1.0, 11),
                reward(Some("C"), "ok", 4.0, 12),
            ],
            set_reward,
        ));
        let returns = step_returns(&steps, &rewards, &spec(0.5)).unwrap();
        let got = |tenant: &str, id: &str| returns.of(&StepKey::new(tenant, "t", id));
        assert_eq!(
            ["A", "B", "C", "D"].map(|id| got("acme", id)),
            [Some(0.25), None, Some(0.5), Some(1.0)]
        );
        assert_eq!(
            ["A", "B", "C", "D"].map(|id| got("globex", id)),
            [Some(-0.5), Some(-1.0), Some(4.0), None]
        );
        assert_eq!(returns.by_step.len(), 6);
        assert_eq!(returns.unmatched_step_rewards, 0);
    }

    #[test]
    fn a_step_reward_naming_a_step_of_another_trajectory_or_tenant_credits_nothing() {
        let mut steps = retry_tree();
        let mut x = step("X", None, 5);
        x.trajectory_id = "u".into();
        let mut y = step("Y", None, 6);
        y.tenant_id = "globex".into();
        steps.extend([x, y]);
        let rewards = [
            reward(Some("X"), "ok", 3.0, 10),    // X is a step of trajectory u
            reward(Some("Y"), "ok", 3.0, 11),    // Y is a step of globex
            reward(Some("Z"), "ok", 3.0, 12),    // no such step
            reward(Some("Z"), "other", 3.0, 13), // not a name used
            reward(Some("D"), "ok", 1.0, 14),
        ];
        let returns = step_returns(&steps, &rewards, &spec(1.0)).unwrap();
        assert_eq!(returns.by_step.len(), 1, "{returns:?}");
        assert_eq!(of(&returns, "D"), Some(1.0));
        assert_eq!(returns.unmatched_step_rewards, 3);
    }

    #[test]
    fn a_parent_is_looked_up_within_its_own_tenant_and_trajectory() {
        // acme's u/E names parent C, a step id of trajectory t: E is a root of u.
        let mut steps = retry_tree();
        let mut e = step("E", Some("C"), 9);
        e.trajectory_id = "u".into();
        steps.push(e);
        let mut r = reward(None, "ok", 1.0, 10);
        r.trajectory_id = "u".into();
        let returns = step_returns(&steps, &[r, reward(None, "ok", 2.0, 11)], &spec(0.5)).unwrap();
        assert_eq!(returns.of(&StepKey::new("acme", "u", "E")), Some(1.0));
        // C is still continued by D in t, so D stays t's leaf.
        assert_eq!(of(&returns, "D"), Some(2.0));
        assert_eq!(of(&returns, "C"), Some(1.0));
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
