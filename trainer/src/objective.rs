//! Policy-gradient objectives: advantages (REINFORCE with a baseline, GRPO's group
//! normalisation) and the per-token loss (PPO-style clipped importance ratio against the
//! behaviour log-probs when recorded, else against the detached current policy, which is
//! plain REINFORCE; an optional k3 KL penalty to the reference policy).

use std::collections::HashMap;

use candle_core::Tensor;

use crate::Result;
use crate::data::Example;

/// How advantages are computed.
#[derive(Debug, Clone, PartialEq)]
pub enum Advantage {
    /// `A = G − b`, the baseline `b` being the batch mean or a running mean.
    Reinforce {
        /// The baseline.
        baseline: Baseline,
    },
    /// GRPO: `A = (G − mean_g) / (std_g + ε)` within each group of examples sharing a key.
    /// Examples alone in their group get 0.
    Grpo {
        /// What makes a group.
        group_by: GroupKey,
    },
}

/// The REINFORCE baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Baseline {
    /// The mean return of the optimizer step's examples.
    BatchMean,
    /// An exponential moving average of past returns, `b ← decay·b + (1 − decay)·mean`,
    /// updated after each optimizer step (saved in checkpoints).
    RunningMean {
        /// The decay in [0, 1).
        decay: f64,
    },
}

/// The key that groups examples for GRPO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKey {
    /// The rendered prompt (its hash): the same task asked several times.
    Prompt,
    /// A step tag, e.g. `task`; examples without the tag are alone in their group.
    Tag(String),
}

/// The loss settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LossConfig {
    /// PPO's clip range ε: the ratio is clipped to `[1 − ε, 1 + ε]`.
    pub clip_eps: f64,
    /// Weight β of the KL penalty to the reference policy (0 disables it and its forward pass).
    pub kl_coef: f64,
}

/// GRPO advantages for all `examples` (in order), given each one's return.
pub fn grpo_advantages(examples: &[Example], returns: &[f64], key: &GroupKey) -> Vec<f64> {
    let group_of = |e: &Example| -> Option<String> {
        match key {
            GroupKey::Prompt => Some(format!("{:016x}", e.prompt_hash)),
            GroupKey::Tag(tag) => e.tags.get(tag).cloned(),
        }
    };
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, e) in examples.iter().enumerate() {
        if let Some(g) = group_of(e) {
            groups.entry(g).or_default().push(i);
        }
    }
    let mut adv = vec![0.0; examples.len()];
    for members in groups.values().filter(|m| m.len() > 1) {
        let n = members.len() as f64;
        let mean = members.iter().map(|&i| returns[i]).sum::<f64>() / n;
        let var = members
            .iter()
            .map(|&i| (returns[i] - mean).powi(2))
            .sum::<f64>()
            / n;
        let std = var.sqrt();
        for &i in members {
            adv[i] = (returns[i] - mean) / (std + 1e-6);
        }
    }
    adv
}

/// REINFORCE advantages `G − b` for one batch of returns; `running` is the running mean
/// so far (updated in place for [`Baseline::RunningMean`]).
pub fn reinforce_advantages(
    returns: &[f64],
    baseline: Baseline,
    running: &mut Option<f64>,
) -> Vec<f64> {
    let mean = if returns.is_empty() {
        0.0
    } else {
        returns.iter().sum::<f64>() / returns.len() as f64
    };
    let b = match baseline {
        Baseline::BatchMean => mean,
        Baseline::RunningMean { decay } => {
            let b = running.unwrap_or(mean);
            *running = Some(decay * b + (1.0 - decay) * mean);
            b
        }
    };
    returns.iter().map(|g| g - b).collect()
}

/// The per-token terms of one example's completion.
#[derive(Debug)]
pub struct TokenTerms {
    /// The policy term per token (differentiable), `[n]`.
    pub policy: Tensor,
    /// The k3 KL estimate per token (differentiable when `kl_coef > 0`), `[n]`; zeros
    /// when there is no reference pass.
    pub kl: Tensor,
}

/// Per-token terms of one completion's loss `−min(ρ·A, clip(ρ, 1 − ε, 1 + ε)·A) + β·k3`: the
/// policy term and `k3`, apart, since the trainer averages them over different tokens (the
/// policy term over the tokens the reward is credited to, `k3` over all), where
/// `ρ = exp(logp − logp_behaviour)` (or `exp(logp − logp.detach())` without behaviour
/// log-probs) and `k3 = exp(logp_ref − logp) − 1 − (logp_ref − logp)`.
pub fn token_terms(
    logp: &Tensor,
    behaviour: Option<&Tensor>,
    reference: Option<&Tensor>,
    advantage: f64,
    config: &LossConfig,
) -> Result<TokenTerms> {
    let old = match behaviour {
        Some(b) => b.clone(),
        None => logp.detach(),
    };
    let ratio = logp.sub(&old)?.exp()?;
    let clipped = ratio.clamp(1.0 - config.clip_eps, 1.0 + config.clip_eps)?;
    let unclipped_obj = ratio.affine(advantage, 0.0)?;
    let clipped_obj = clipped.affine(advantage, 0.0)?;
    let policy = unclipped_obj.minimum(&clipped_obj)?.neg()?;
    let kl = match reference {
        Some(r) => {
            let diff = r.sub(logp)?;
            diff.exp()?.sub(&diff)?.affine(1.0, -1.0)?
        }
        None => logp.zeros_like()?,
    };
    Ok(TokenTerms { policy, kl })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use candle_core::{Device, Var};

    use super::*;

    fn ex(hash: u64, tag: Option<&str>) -> Example {
        Example {
            step_id: String::new(),
            trajectory_id: String::new(),
            tenant_id: String::new(),
            tokens: vec![1, 2],
            prompt_len: 1,
            behaviour_logprobs: None,
            prompt_hash: hash,
            weights: None,
            tags: tag
                .map(|t| [("task".to_owned(), t.to_owned())].into())
                .unwrap_or_default(),
        }
    }

    #[test]
    fn grpo_normalises_within_groups() {
        let examples = [
            ex(1, Some("a")),
            ex(1, Some("b")),
            ex(2, Some("a")),
            ex(3, None),
        ];
        let adv = grpo_advantages(&examples, &[1.0, -1.0, 5.0, 7.0], &GroupKey::Prompt);
        assert!((adv[0] - 1.0).abs() < 1e-5 && (adv[1] + 1.0).abs() < 1e-5);
        assert_eq!((adv[2], adv[3]), (0.0, 0.0), "alone in its group");
        let adv = grpo_advantages(
            &examples,
            &[1.0, -1.0, 5.0, 7.0],
            &GroupKey::Tag("task".into()),
        );
        assert!(adv[0] < 0.0 && adv[2] > 0.0 && adv[1] == 0.0 && adv[3] == 0.0);
    }

    #[test]
    fn reinforce_baselines() {
        let mut running = None;
        assert_eq!(
            reinforce_advantages(&[1.0, 3.0], Baseline::BatchMean, &mut running),
            [-1.0, 1.0]
        );
        let rm = Baseline::RunningMean { decay: 0.5 };
        assert_eq!(
            reinforce_advantages(&[1.0, 3.0], rm, &mut running),
            [-1.0, 1.0]
        );
        assert_eq!(running, Some(2.0));
        assert_eq!(reinforce_advantages(&[4.0], rm, &mut running), [2.0]);
        assert_eq!(running, Some(3.0));
    }

    #[test]
    fn on_policy_gradient_is_reinforce_and_clipping_stops_it() {
        let dev = Device::Cpu;
        let config = LossConfig {
            clip_eps: 0.2,
            kl_coef: 0.0,
        };
        let logp = Var::new(&[-1.0f64, -2.0], &dev).unwrap();
        // Without behaviour log-probs: d loss / d logp = −A.
        let t = token_terms(logp.as_tensor(), None, None, 2.0, &config).unwrap();
        let g = t.policy.sum_all().unwrap().backward().unwrap();
        assert_eq!(
            g.get(&logp).unwrap().to_vec1::<f64>().unwrap(),
            [-2.0, -2.0]
        );
        // Ratio far above 1 + ε with A > 0: clipped, no gradient.
        let old = Tensor::new(&[-3.0f64, -2.0], &dev).unwrap();
        let t = token_terms(logp.as_tensor(), Some(&old), None, 1.0, &config).unwrap();
        let g = t.policy.sum_all().unwrap().backward().unwrap();
        let g = g.get(&logp).unwrap().to_vec1::<f64>().unwrap();
        assert_eq!(g[0], 0.0);
        assert!((g[1] + 1.0).abs() < 1e-12);
        // k3 is 0 at the reference and positive elsewhere.
        let config = LossConfig {
            clip_eps: 0.2,
            kl_coef: 1.0,
        };
        let same = logp.as_tensor().detach();
        let t = token_terms(logp.as_tensor(), None, Some(&same), 0.0, &config).unwrap();
        assert_eq!(t.kl.to_vec1::<f64>().unwrap(), [0.0, 0.0]);
        let other = Tensor::new(&[-1.5f64, -1.0], &dev).unwrap();
        let t = token_terms(logp.as_tensor(), None, Some(&other), 0.0, &config).unwrap();
        assert!(t.kl.to_vec1::<f64>().unwrap().iter().all(|k| *k > 0.0));
    }
}
