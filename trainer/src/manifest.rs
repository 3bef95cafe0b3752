//! `manifest.json`, written next to the adapter (its name and the base model's identity are
//! `atdp-model-files`', which serving reads): what the adapter was trained from (the base
//! model's hash, the Delta table versions and row counts read, the reward names and their
//! `reward_fn_version`s), how (hyper-parameters), and with what result (final metrics). A
//! later run into the same directory refuses a changed reward function unless told to
//! accept it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use atdp_model_files::{BaseModel, MANIFEST_FILE, hash_weights, write_atomic};
use atdp_schema::Reward;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::data::{Example, ExampleStats, TableRead};
use crate::model::Model;
use crate::report::StepMetrics;
use crate::returns::RewardSpec;
use crate::run_config::RunConfig;
use crate::{Error, Result};

/// Stands for a null `reward_fn_version` (rewards posted through the API).
pub(crate) const NO_VERSION: &str = "none";

/// For each reward name used: its weight, the `reward_fn_version`s present in the data and
/// the number of reward rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RewardVersions(pub BTreeMap<String, RewardInfo>);

/// One reward name in the manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RewardInfo {
    /// Its weight in the return.
    pub weight: f64,
    /// The `reward_fn_version`s in the selected rows (`none` for rows without one).
    pub reward_fn_versions: BTreeSet<String>,
    /// Reward rows of this name read.
    pub rows: usize,
}

impl RewardVersions {
    /// The versions present in `rewards` for the names `spec` uses.
    pub fn of(rewards: &[Reward], spec: &RewardSpec) -> Self {
        let mut map: BTreeMap<String, RewardInfo> = spec
            .weights
            .iter()
            .map(|(name, &weight)| {
                (
                    name.clone(),
                    RewardInfo {
                        weight,
                        ..RewardInfo::default()
                    },
                )
            })
            .collect();
        for r in rewards {
            if let Some(info) = map.get_mut(&r.name) {
                info.rows += 1;
                info.reward_fn_versions.insert(
                    r.reward_fn_version
                        .clone()
                        .unwrap_or_else(|| NO_VERSION.into()),
                );
            }
        }
        RewardVersions(map)
    }
}

/// Refuses a selection in which one reward name has rows of several function versions,
/// unless `allow` (a changed rule must not silently mix with the labels of the old one).
pub fn check_mixed_versions(now: &RewardVersions, allow: bool) -> Result<()> {
    if allow {
        return Ok(());
    }
    match now
        .0
        .iter()
        .find(|(_, info)| info.reward_fn_versions.len() > 1)
    {
        Some((name, info)) => Err(Error::invalid(
            "rewards",
            format!(
                "reward `{name}` has rows of {} function versions in the selection ({}): pin one with `rewards.versions.{name} = \"<version>\"`, or allow mixing with `rewards.allow_mixed_versions = true` / `--allow-mixed-reward-versions`",
                info.reward_fn_versions.len(),
                info.reward_fn_versions
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// Refuses to train when a reward name used now had other `reward_fn_version`s in the
/// previous run's manifest in `out_dir`, unless `accept`.
pub fn check_reward_versions(out_dir: &Path, now: &RewardVersions, accept: bool) -> Result<()> {
    let Some(previous) = read_previous(out_dir)? else {
        return Ok(());
    };
    if accept {
        return Ok(());
    }
    for (name, info) in &now.0 {
        let Some(before) = previous.rewards.0.get(name) else {
            continue;
        };
        if before.reward_fn_versions != info.reward_fn_versions {
            let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
            return Err(Error::RewardChanged {
                name: name.clone(),
                previous: list(&before.reward_fn_versions),
                current: list(&info.reward_fn_versions),
            });
        }
    }
    Ok(())
}

fn read_previous(out_dir: &Path) -> Result<Option<Manifest>> {
    let path = out_dir.join(MANIFEST_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::json(&path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// The final metrics of the previous manifest in `out_dir`, if any (a resumed run that had
/// no step left to do reports them).
pub(crate) fn previous_final_metrics(out_dir: &Path) -> Option<StepMetrics> {
    read_previous(out_dir).ok().flatten()?.final_metrics
}

/// The contents of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `atdp-trainer/manifest-v1`.
    pub format: String,
    /// The base model.
    pub base_model: BaseModel,
    /// The lake location (no credentials) and the tables read.
    pub lake: String,
    /// Table versions and row counts.
    pub tables: Vec<TableRead>,
    /// The reward names, weights and versions.
    pub rewards: RewardVersions,
    /// Hyper-parameters and selection.
    pub hyper_parameters: Value,
    /// How steps became examples.
    pub examples: ExampleStats,
    /// Examples with a return.
    pub rewarded_examples: usize,
    /// Step rewards that credited nothing: their `step_id` is not a selected step of their
    /// own tenant and trajectory (never moved to another step).
    #[serde(default)]
    pub unmatched_step_rewards: usize,
    /// Optimizer steps done.
    pub steps: u64,
    /// The last step's metrics.
    pub final_metrics: Option<StepMetrics>,
    /// What the adapter learned from (absent from manifests of older runs).
    #[serde(default)]
    pub lineage: Lineage,
    /// The run as published beside the lake's tables (`training/<run id>/`), which the
    /// console links to this adapter's versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// The trajectories whose steps became the examples trained on, by tenant: an erasure finds
/// the adapter versions that learned from a person by looking up the person's trajectories
/// here (`atdp-audit lineage`). A step's prompt holds only its own trajectory's history, so
/// trajectories cover every text the adapter saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// Tenant → trajectory ids, sorted.
    pub trajectories: BTreeMap<String, BTreeSet<String>>,
}

impl Lineage {
    /// The trajectories of `examples`.
    pub fn of<'a>(examples: impl IntoIterator<Item = &'a Example>) -> Self {
        let mut trajectories: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for e in examples {
            trajectories
                .entry(e.tenant_id.clone())
                .or_default()
                .insert(e.trajectory_id.clone());
        }
        Lineage { trajectories }
    }
}

impl Manifest {
    /// Collects the manifest of a finished run.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        config: &RunConfig,
        model: &Model,
        tables: &[TableRead],
        rewards: RewardVersions,
        examples: &ExampleStats,
        rewarded_examples: usize,
        unmatched_step_rewards: usize,
        steps: u64,
        final_metrics: Option<StepMetrics>,
        lineage: Lineage,
        run_id: Option<String>,
    ) -> Result<Self> {
        let (sha256, files) = hash_weights(model.weight_files())?;
        let hyper_parameters = json!({
            "selection": {
                "tenants": config.selection.tenants,
                "agent": config.selection.agent_id,
                "since_micros": config.selection.since,
                "until_micros": config.selection.until,
                "unmarked": config.selection.unmarked.name(),
            },
            "gamma": config.rewards.gamma,
            "objective": format!("{:?}", config.advantage),
            "clip_eps": config.loss.clip_eps,
            "kl_coef": config.loss.kl_coef,
            "tool_call_credit": config.credit.name(),
            "lr": config.lr,
            "warmup_steps": config.warmup_steps,
            "min_lr_ratio": config.min_lr_ratio,
            "adamw": { "beta1": config.adamw.beta1, "beta2": config.adamw.beta2,
                       "eps": config.adamw.eps, "weight_decay": config.adamw.weight_decay },
            "max_grad_norm": config.max_grad_norm,
            "length": config.length,
            "batch_size": config.batch_size,
            "grad_accumulation": config.grad_accumulation,
            "token_budget": config.token_budget,
            "max_len": config.max_len,
            "seed": config.seed,
            "placeholders": config.placeholders.name(),
            "lora": { "r": config.lora.r, "alpha": config.lora.alpha,
                      "dropout": config.lora.dropout,
                      "target_modules": config.lora.target_modules.iter().map(|m| m.name()).collect::<Vec<_>>() },
        });
        Ok(Manifest {
            format: "atdp-trainer/manifest-v1".into(),
            base_model: BaseModel {
                path: config.model_dir.display().to_string(),
                sha256,
                files,
            },
            lake: redact_url(&config.lake),
            tables: tables.to_vec(),
            rewards,
            hyper_parameters,
            examples: examples.clone(),
            rewarded_examples,
            unmatched_step_rewards,
            steps,
            final_metrics,
            lineage,
            run_id,
        })
    }

    /// Writes `manifest.json` into `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| Error::json(&path, e))?;
        Ok(write_atomic(&path, text.as_bytes())?)
    }
}

/// The lake location without user info or query (where credentials could hide).
fn redact_url(location: &str) -> String {
    match url::Url::parse(location) {
        Ok(mut u) if u.scheme().len() > 1 => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        _ => location.to_owned(),
    }
}
