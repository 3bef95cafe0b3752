//! `train.toml`: the settings of a training run, parsed into [`RawRunConfig`] (unknown
//! fields refused) and checked by [`RawRunConfig::validate`] into a [`RunConfig`].
//!
//! ```toml
//! model = "/models/qwen2.5-0.5b-instruct"
//! lake = "s3://bucket/atdp"          # or a local directory
//! out = "runs/support-v3"
//!
//! [select]
//! tenant = "acme"                    # required; or tenants = ["acme", "globex"]
//! agent = "support"
//! since = "2026-11-01T00:00:00Z"
//!
//! [rewards]
//! gamma = 0.9
//! weights = { task_success = 1.0, user_rating = 0.2 }
//!
//! [objective]
//! kind = "grpo"                      # or "reinforce"
//! group_by = "prompt"                # or "tag:<name>"
//! kl_coef = 0.02
//! tool_call_credit = "all"           # or "tool_choices": a call's names and values only
//!
//! [train]
//! lr = 1e-4
//! steps = 200
//! placeholders = "surrogate"         # or "keep": train on `<PERSON_…>` as stored
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use atdp_schema::Unmarked;
use serde::{Deserialize, Serialize};

use crate::data::{Credit, Placeholders, Selection};
use crate::objective::{Advantage, Baseline, GroupKey, LossConfig};
use crate::optim::AdamWConfig;
use crate::returns::RewardSpec;
use crate::{Error, Result};
use atdp_model_files::{LoraConfig, TargetModule};

/// The file as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRunConfig {
    /// The base model: a local Hugging Face directory.
    pub model: Option<PathBuf>,
    /// The lake: a URL (`s3://…`, `gs://…`, `az://…`, `file://…`) or a local directory.
    pub lake: Option<String>,
    /// Object-store options of the lake (endpoint, region, …).
    #[serde(default)]
    pub lake_options: BTreeMap<String, String>,
    /// The output directory: adapter, manifest, metrics, checkpoints.
    pub out: Option<PathBuf>,
    /// Train even when a reward function's version differs from the previous run's.
    #[serde(default)]
    pub accept_reward_change: bool,
    /// Which steps to read.
    #[serde(default)]
    pub select: RawSelect,
    /// How rewards become returns.
    #[serde(default)]
    pub rewards: RawRewards,
    /// The objective.
    #[serde(default)]
    pub objective: RawObjective,
    /// Optimisation settings.
    #[serde(default)]
    pub train: RawTrain,
    /// The adapter.
    #[serde(default)]
    pub lora: RawLora,
}

/// `[select]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawSelect {
    /// The tenant trained on (this or `tenants` is required).
    pub tenant: Option<String>,
    /// The tenants trained on, when one adapter learns from several (instead of `tenant`).
    pub tenants: Option<Vec<String>>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Steps started at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Steps started before this time (RFC 3339).
    pub until: Option<String>,
    /// Read `steps` at this Delta version.
    pub steps_version: Option<u64>,
    /// Read `rewards` at this Delta version.
    pub rewards_version: Option<u64>,
    /// Steps without a training mark: `excluded` (default) or `eligible`.
    pub unmarked: Option<String>,
}

/// `[rewards]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRewards {
    /// Turn discount γ in [0, 1] (default 1).
    pub gamma: Option<f64>,
    /// Weight of each reward name used (at least one).
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    /// Only this `reward_fn_version` of a reward name (`none`: rewards without a version,
    /// as the rewards API posts them). Names not listed take every version present.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// Train on a reward name whose selected rows come from several function versions
    /// (refused by default: a changed rule must not silently mix with old labels).
    #[serde(default)]
    pub allow_mixed_versions: bool,
}

/// `[objective]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawObjective {
    /// `grpo` (default) or `reinforce`.
    pub kind: Option<String>,
    /// GRPO groups: `prompt` (default) or `tag:<name>`.
    pub group_by: Option<String>,
    /// REINFORCE baseline: `batch_mean` (default) or `running_mean`.
    pub baseline: Option<String>,
    /// Decay of the running-mean baseline, in [0, 1) (default 0.9).
    pub baseline_decay: Option<f64>,
    /// PPO clip range ε (default 0.2).
    pub clip_eps: Option<f64>,
    /// KL penalty weight β to the base model (default 0: off).
    pub kl_coef: Option<f64>,
    /// Which tokens of a tool call the reward is credited to: `all` (default) or
    /// `tool_choices` (the function's name and the argument values).
    pub tool_call_credit: Option<String>,
}

/// `[train]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawTrain {
    /// Peak learning rate (default 1e-4).
    pub lr: Option<f64>,
    /// Warm-up steps (default 0).
    pub warmup_steps: Option<u64>,
    /// Final learning rate as a share of the peak (default 0.1).
    pub min_lr_ratio: Option<f64>,
    /// AdamW weight decay (default 0).
    pub weight_decay: Option<f64>,
    /// AdamW β₁ (default 0.9).
    pub beta1: Option<f64>,
    /// AdamW β₂ (default 0.999).
    pub beta2: Option<f64>,
    /// AdamW ε (default 1e-8).
    pub eps: Option<f64>,
    /// Clip gradients to this global norm (default 1; 0 disables).
    pub max_grad_norm: Option<f64>,
    /// Optimizer steps (or give `epochs`).
    pub steps: Option<u64>,
    /// Passes over the examples (used when `steps` is not given; default 1).
    pub epochs: Option<u64>,
    /// Examples per batch (default 8).
    pub batch_size: Option<usize>,
    /// Batches per optimizer step (default 1).
    pub grad_accumulation: Option<usize>,
    /// Padded tokens per forward pass: batches are split into micro-batches within it
    /// (default 8192).
    pub token_budget: Option<usize>,
    /// Longest example in tokens (default 2048).
    pub max_len: Option<usize>,
    /// Seeds shuffling, LoRA initialisation and dropout (default 0).
    pub seed: Option<u64>,
    /// Save a checkpoint every N optimizer steps (default 0: only at the end).
    pub checkpoint_every: Option<u64>,
    /// Keep only each layer's input in the forward pass and recompute the layer's
    /// activations in the backward pass: memory for one layer instead of all, for about one
    /// more forward pass of time, and the same gradients. Default: per micro-batch, when
    /// its activations would take more than 4 GiB
    /// ([`crate::ModelConfig::activation_bytes`]).
    pub recompute_activations: Option<bool>,
    /// How the placeholders of masked text (`<PERSON_…>`) are trained on: `surrogate`
    /// (default) renders each as a realistic fake value of its type, the same for the same
    /// placeholder of a tenant, as serving sees real values; `keep` trains on them as stored.
    pub placeholders: Option<String>,
}

/// `[lora]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawLora {
    /// Rank (default 8).
    pub r: Option<usize>,
    /// Alpha (default 16).
    pub alpha: Option<f64>,
    /// Dropout (default 0).
    pub dropout: Option<f64>,
    /// Target modules (default all seven).
    pub targets: Option<Vec<String>>,
}

/// How long to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Length {
    /// A number of optimizer steps.
    Steps(u64),
    /// Passes over the examples.
    Epochs(u64),
}

/// A checked run configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The base model directory.
    pub model_dir: PathBuf,
    /// The lake location.
    pub lake: String,
    /// Object-store options of the lake.
    pub lake_options: HashMap<String, String>,
    /// The output directory.
    pub out_dir: PathBuf,
    /// Train despite a changed reward function.
    pub accept_reward_change: bool,
    /// Train on a reward name with rows of several function versions.
    pub allow_mixed_reward_versions: bool,
    /// Which rows.
    pub selection: Selection,
    /// Rewards to returns.
    pub rewards: RewardSpec,
    /// Advantages.
    pub advantage: Advantage,
    /// The loss.
    pub loss: LossConfig,
    /// Which completion tokens the policy gradient reaches.
    pub credit: Credit,
    /// AdamW.
    pub adamw: AdamWConfig,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up steps.
    pub warmup_steps: u64,
    /// Final learning rate share.
    pub min_lr_ratio: f64,
    /// Gradient clipping (0: off).
    pub max_grad_norm: f64,
    /// How long.
    pub length: Length,
    /// Examples per batch.
    pub batch_size: usize,
    /// Batches per optimizer step.
    pub grad_accumulation: usize,
    /// Padded tokens per forward pass.
    pub token_budget: usize,
    /// Longest example.
    pub max_len: usize,
    /// The seed.
    pub seed: u64,
    /// Checkpoint interval (0: at the end only).
    pub checkpoint_every: u64,
    /// Recompute each layer's activations in the backward pass instead of keeping them
    /// (`None`: when a micro-batch's activations would take more than 4 GiB).
    pub recompute_activations: Option<bool>,
    /// How placeholders of masked text are trained on.
    pub placeholders: Placeholders,
    /// The adapter.
    pub lora: LoraConfig,
}

fn parse_time(field: &str, value: &Option<String>) -> std::result::Result<Option<i64>, String> {
    value
        .as_deref()
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.timestamp_micros())
                .map_err(|e| format!("`select.{field}` = {v:?} is not an RFC 3339 time ({e})"))
        })
        .transpose()
}

impl RawRunConfig {
    /// Parses `train.toml` text.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::RunConfig {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a `train.toml`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_toml_str(&text, path)
    }

    /// Checks every value and fills defaults; `path` names the file in errors.
    pub fn validate(self, path: &Path) -> Result<RunConfig> {
        self.check().map_err(|message| Error::RunConfig {
            path: path.to_owned(),
            message,
        })
    }

    fn check(self) -> std::result::Result<RunConfig, String> {
        let model_dir = self
            .model
            .ok_or("`model` (the base model directory) is required")?;
        let lake = self.lake.ok_or("`lake` (URL or directory) is required")?;
        let out_dir = self.out.ok_or("`out` (the output directory) is required")?;
        if self.rewards.weights.is_empty() {
            return Err("`rewards.weights` names no reward: give at least one, e.g. weights = { task_success = 1.0 }".into());
        }
        if let Some((name, w)) = self.rewards.weights.iter().find(|(_, w)| !w.is_finite()) {
            return Err(format!(
                "`rewards.weights.{name}` = {w} is not a finite number"
            ));
        }
        if let Some(name) = self
            .rewards
            .versions
            .keys()
            .find(|name| !self.rewards.weights.contains_key(*name))
        {
            return Err(format!(
                "`rewards.versions.{name}` pins a reward that `rewards.weights` does not use"
            ));
        }
        let gamma = self.rewards.gamma.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&gamma) {
            return Err(format!("`rewards.gamma` = {gamma} must be in [0, 1]"));
        }
        let o = &self.objective;
        let advantage = match o.kind.as_deref().unwrap_or("grpo") {
            "grpo" => Advantage::Grpo {
                group_by: match o.group_by.as_deref().unwrap_or("prompt") {
                    "prompt" => GroupKey::Prompt,
                    other => match other.strip_prefix("tag:") {
                        Some(tag) if !tag.is_empty() => GroupKey::Tag(tag.to_owned()),
                        _ => {
                            return Err(format!(
                                "`objective.group_by` = {other:?}: use \"prompt\" or \"tag:<name>\""
                            ));
                        }
                    },
                },
            },
            "reinforce" => Advantage::Reinforce {
                baseline: match o.baseline.as_deref().unwrap_or("batch_mean") {
                    "batch_mean" => Baseline::BatchMean,
                    "running_mean" => {
                        let decay = o.baseline_decay.unwrap_or(0.9);
                        if !(0.0..1.0).contains(&decay) {
                            return Err(format!(
                                "`objective.baseline_decay` = {decay} must be in [0, 1)"
                            ));
                        }
                        Baseline::RunningMean { decay }
                    }
                    other => {
                        return Err(format!(
                            "`objective.baseline` = {other:?}: use \"batch_mean\" or \"running_mean\""
                        ));
                    }
                },
            },
            other => {
                return Err(format!(
                    "`objective.kind` = {other:?}: use \"grpo\" or \"reinforce\""
                ));
            }
        };
        let credit = match o.tool_call_credit.as_deref() {
            None => Credit::All,
            Some(name) => Credit::from_name(name).ok_or_else(|| {
                format!("`objective.tool_call_credit` = {name:?}: use \"all\" or \"tool_choices\"")
            })?,
        };
        let clip_eps = o.clip_eps.unwrap_or(0.2);
        let kl_coef = o.kl_coef.unwrap_or(0.0);
        if !(clip_eps > 0.0 && clip_eps < 1.0) {
            return Err(format!(
                "`objective.clip_eps` = {clip_eps} must be in (0, 1)"
            ));
        }
        if !(kl_coef.is_finite() && kl_coef >= 0.0) {
            return Err(format!("`objective.kl_coef` = {kl_coef} must be ≥ 0"));
        }
        let t = &self.train;
        let lr = t.lr.unwrap_or(1e-4);
        if !(lr.is_finite() && lr > 0.0) {
            return Err(format!("`train.lr` = {lr} must be a positive number"));
        }
        let min_lr_ratio = t.min_lr_ratio.unwrap_or(0.1);
        if !(0.0..=1.0).contains(&min_lr_ratio) {
            return Err(format!(
                "`train.min_lr_ratio` = {min_lr_ratio} must be in [0, 1]"
            ));
        }
        let adamw = AdamWConfig {
            beta1: t.beta1.unwrap_or(0.9),
            beta2: t.beta2.unwrap_or(0.999),
            eps: t.eps.unwrap_or(1e-8),
            weight_decay: t.weight_decay.unwrap_or(0.0),
        };
        if !((0.0..1.0).contains(&adamw.beta1) && (0.0..1.0).contains(&adamw.beta2)) {
            return Err("`train.beta1` and `train.beta2` must be in [0, 1)".into());
        }
        if !(adamw.eps > 0.0 && adamw.weight_decay >= 0.0) {
            return Err("`train.eps` must be > 0 and `train.weight_decay` ≥ 0".into());
        }
        let max_grad_norm = t.max_grad_norm.unwrap_or(1.0);
        if !(max_grad_norm.is_finite() && max_grad_norm >= 0.0) {
            return Err(format!(
                "`train.max_grad_norm` = {max_grad_norm} must be ≥ 0"
            ));
        }
        let length = match (t.steps, t.epochs) {
            (Some(_), Some(_)) => {
                return Err("give `train.steps` or `train.epochs`, not both".into());
            }
            (Some(0), _) | (_, Some(0)) => {
                return Err("`train.steps`/`train.epochs` must be ≥ 1".into());
            }
            (Some(s), None) => Length::Steps(s),
            (None, e) => Length::Epochs(e.unwrap_or(1)),
        };
        let positive = |name: &str, v: usize| {
            if v == 0 {
                Err(format!("`train.{name}` must be ≥ 1"))
            } else {
                Ok(v)
            }
        };
        let batch_size = positive("batch_size", t.batch_size.unwrap_or(8))?;
        let grad_accumulation = positive("grad_accumulation", t.grad_accumulation.unwrap_or(1))?;
        let max_len = t.max_len.unwrap_or(2048);
        if max_len < 2 {
            return Err("`train.max_len` must be ≥ 2".into());
        }
        let token_budget = t.token_budget.unwrap_or(8192);
        if token_budget < max_len {
            return Err(format!(
                "`train.token_budget` = {token_budget} must be ≥ `train.max_len` = {max_len} (one example must fit a forward pass)"
            ));
        }
        let seed = t.seed.unwrap_or(0);
        let placeholders = match t.placeholders.as_deref().unwrap_or("surrogate") {
            "surrogate" => Placeholders::Surrogate,
            "keep" => Placeholders::Keep,
            other => {
                return Err(format!(
                    "`train.placeholders` = {other:?}: use \"surrogate\" (fake values of each placeholder's type, as serving sees real ones) or \"keep\""
                ));
            }
        };
        let targets = match &self.lora.targets {
            Some(names) => names
                .iter()
                .map(|n| n.parse::<TargetModule>().map_err(|e| e.to_string()))
                .collect::<std::result::Result<Vec<_>, _>>()?,
            None => TargetModule::ALL.to_vec(),
        };
        let lora = LoraConfig {
            r: self.lora.r.unwrap_or(8),
            alpha: self.lora.alpha.unwrap_or(16.0),
            dropout: self.lora.dropout.unwrap_or(0.0),
            target_modules: targets,
            seed,
        };
        lora.validate().map_err(|e| format!("[lora]: {e}"))?;
        let tenants = match (&self.select.tenant, &self.select.tenants) {
            (Some(_), Some(_)) => {
                return Err("give `select.tenant` or `select.tenants`, not both".into());
            }
            (Some(tenant), None) => BTreeSet::from([tenant.clone()]),
            (None, Some(tenants)) => tenants.iter().cloned().collect(),
            (None, None) => BTreeSet::new(),
        };
        if tenants.is_empty() {
            return Err("`select.tenant` is required: name the tenant whose traffic this run trains on (or several with `select.tenants = [...]`); trajectory ids are chosen by clients and repeat across tenants, so a run never reads tenants it was not told to".into());
        }
        if tenants.iter().any(|t| t.trim().is_empty()) {
            return Err("`select.tenant` / `select.tenants` holds an empty tenant id".into());
        }
        let selection = Selection {
            tenants,
            agent_id: self.select.agent.clone(),
            since: parse_time("since", &self.select.since)?,
            until: parse_time("until", &self.select.until)?,
            reward_names: self.rewards.weights.keys().cloned().collect(),
            reward_versions: self.rewards.versions.clone(),
            steps_version: self.select.steps_version,
            rewards_version: self.select.rewards_version,
            unmarked: match self.select.unmarked.as_deref() {
                None => Unmarked::default(),
                Some(name) => Unmarked::from_name(name).ok_or_else(|| {
                    format!("`select.unmarked` = {name:?}: use `excluded` or `eligible`")
                })?,
            },
        };
        Ok(RunConfig {
            model_dir,
            lake,
            lake_options: self.lake_options.into_iter().collect(),
            out_dir,
            accept_reward_change: self.accept_reward_change,
            allow_mixed_reward_versions: self.rewards.allow_mixed_versions,
            selection,
            rewards: RewardSpec {
                weights: self.rewards.weights,
                gamma,
            },
            advantage,
            loss: LossConfig { clip_eps, kl_coef },
            credit,
            adamw,
            lr,
            warmup_steps: t.warmup_steps.unwrap_or(0),
            min_lr_ratio,
            max_grad_norm,
            length,
            batch_size,
            grad_accumulation,
            token_budget,
            max_len,
            seed,
            checkpoint_every: t.checkpoint_every.unwrap_or(0),
            recompute_activations: t.recompute_activations,
            placeholders,
            lora,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const MINIMAL: &str = r#"
        model = "m"
        lake = "l"
        out = "o"
        [select]
        tenant = "acme"
        [rewards]
        weights = { ok = 1.0 }
    "#;

    fn check(text: &str) -> std::result::Result<RunConfig, String> {
        let path = Path::new("train.toml");
        RawRunConfig::from_toml_str(text, path)
            .map_err(|e| e.to_string())?
            .validate(path)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_overrides() {
        let path = Path::new("train.toml");
        let c = RawRunConfig::from_toml_str(MINIMAL, path)
            .unwrap()
            .validate(path)
            .unwrap();
        assert_eq!(
            c.advantage,
            Advantage::Grpo {
                group_by: GroupKey::Prompt
            }
        );
        assert_eq!(c.length, Length::Epochs(1));
        assert_eq!(c.lora.target_modules.len(), 7);
        assert_eq!(c.selection.tenants, BTreeSet::from(["acme".to_owned()]));
        let full = format!(
            "{}\n[objective]\nkind = \"reinforce\"\nbaseline = \"running_mean\"\n[train]\nsteps = 5\n[lora]\ntargets = [\"q_proj\"]\n",
            MINIMAL.replace(
                "tenant = \"acme\"",
                "tenant = \"acme\"\nsince = \"2026-11-01T00:00:00Z\""
            )
        );
        let c = RawRunConfig::from_toml_str(&full, path)
            .unwrap()
            .validate(path)
            .unwrap();
        assert_eq!(c.selection.since, Some(1_793_491_200_000_000));
        assert_eq!(c.length, Length::Steps(5));
        assert_eq!(
            c.advantage,
            Advantage::Reinforce {
                baseline: Baseline::RunningMean { decay: 0.9 }
            }
        );
    }

    #[test]
    fn placeholders_are_rendered_as_surrogates_unless_kept() {
        assert_eq!(
            check(MINIMAL).unwrap().placeholders,
            Placeholders::Surrogate
        );
        let keep = format!("{MINIMAL}\n[train]\nplaceholders = \"keep\"\n");
        assert_eq!(check(&keep).unwrap().placeholders, Placeholders::Keep);
        let bad = format!("{MINIMAL}\n[train]\nplaceholders = \"fake\"\n");
        let err = check(&bad).unwrap_err();
        assert!(err.contains("`train.placeholders` = \"fake\""), "{err}");
    }

    #[test]
    fn tool_call_credit_is_every_token_unless_set() {
        assert_eq!(check(MINIMAL).unwrap().credit, Credit::All);
        let choices = format!("{MINIMAL}\n[objective]\ntool_call_credit = \"tool_choices\"\n");
        assert_eq!(check(&choices).unwrap().credit, Credit::ToolChoices);
        let bad = format!("{MINIMAL}\n[objective]\ntool_call_credit = \"names\"\n");
        let err = check(&bad).unwrap_err();
        assert!(
            err.contains("`objective.tool_call_credit` = \"names\""),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        let path = Path::new("train.toml");
        let unknown = format!("{MINIMAL}\n[train]\nlearning_rate = 1.0\n");
        let err = RawRunConfig::from_toml_str(&unknown, path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("learning_rate"), "{err}");
        for (extra, needle) in [
            ("[objective]\nkind = \"dpo\"", "objective.kind"),
            ("[train]\nlr = -1.0", "train.lr"),
            ("[lora]\ntargets = [\"lm_head\"]", "lm_head"),
        ] {
            let text = format!("{MINIMAL}\n{extra}\n");
            let err = RawRunConfig::from_toml_str(&text, path)
                .unwrap()
                .validate(path)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err}");
        }
        let since = MINIMAL.replace(
            "tenant = \"acme\"",
            "tenant = \"acme\"\nsince = \"yesterday\"",
        );
        let err = check(&since).unwrap_err();
        assert!(err.contains("select.since"), "{err}");
        let err = RawRunConfig::from_toml_str("model = \"m\"\nlake = \"l\"\nout = \"o\"", path)
            .unwrap()
            .validate(path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("rewards.weights"), "{err}");
    }

    #[test]
    fn a_run_names_the_tenants_it_trains_on() {
        let err = check(&MINIMAL.replace("tenant = \"acme\"", "")).unwrap_err();
        assert!(err.contains("`select.tenant` is required"), "{err}");
        let err = check(&MINIMAL.replace("tenant = \"acme\"", "tenants = []")).unwrap_err();
        assert!(err.contains("`select.tenant` is required"), "{err}");
        let err = check(&MINIMAL.replace("tenant = \"acme\"", "tenant = \" \"")).unwrap_err();
        assert!(err.contains("empty tenant"), "{err}");
        let both = MINIMAL.replace(
            "tenant = \"acme\"",
            "tenant = \"acme\"\ntenants = [\"globex\"]",
        );
        assert!(check(&both).unwrap_err().contains("not both"));
        let several = check(&MINIMAL.replace(
            "tenant = \"acme\"",
            "tenants = [\"globex\", \"acme\", \"globex\"]",
        ))
        .unwrap();
        assert_eq!(
            several.selection.tenants,
            BTreeSet::from(["acme".to_owned(), "globex".to_owned()])
        );
    }
}
