//! The promotion gate: a candidate adapter is promoted only when, on held-out episodes, it
//! is not worse than the served version by more than a margin, and nothing suggests reward
//! hacking. Both versions are evaluated offline, each on an engine of its own served on a
//! loopback port: production traffic and the lake are not touched.

use std::net::SocketAddr;
use std::path::Path;

use atdp_deploy::{BaseModel, Engine, EngineOptions, Fleet, Registry, Watcher};
use atdp_model_files::ChatFormat;
use atdp_trainer::{Adapter, LoadOptions, Model, load_adapter};
use candle_core::{D, Tensor};
use serde::{Deserialize, Serialize};

use crate::client::{Agent, ChatMessage, Prompt};
use crate::environment::Environment;
use crate::error::blocking;
use crate::eval::{EvalPlan, EvalReport, evaluate};
use crate::{Error, Result};

/// The gate's bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
    /// The candidate's held-out mean reward may be at most this much below the served
    /// version's.
    pub margin: f64,
    /// Largest mean KL divergence of the candidate from the base model, in nats, on the
    /// next-token distribution at the start of each held-out reply.
    pub max_kl: f64,
    /// Largest relative change of the mean reply length (completion tokens per call).
    pub max_length_drift: f64,
    /// Largest rise of the share of invalid replies (refusals, answers outside the task).
    pub max_invalid_rise: f64,
    /// A candidate whose reward on training episodes rises by at least this much while its
    /// held-out reward does not rise is refused as overfitting or reward hacking.
    pub hacking_train_gain: f64,
    /// Held-out episodes per version.
    pub episodes: u64,
    /// First held-out seed (keep it apart from the seeds trained on).
    pub heldout_seed: u64,
    /// Training episodes replayed per version for the reward-hacking check (0: off).
    pub train_episodes: u64,
    /// First training seed.
    pub train_seed: u64,
    /// Sampling temperature of the evaluation.
    pub temperature: f64,
    /// Episodes in flight.
    pub concurrency: usize,
    /// A candidate that passes goes first to this share of the policy's requests as a
    /// canary, beside the served version, and is promoted (or rejected) when its live reward
    /// is compared (`check_canary`); 0 promotes it to every request at once.
    pub canary_share: f64,
    /// A candidate that passes goes first, before any canary, into shadow on this share of
    /// the policy's requests: copies of them, whose replies are recorded and never returned,
    /// scored against the served replies by `shadow_reward` (`check_shadow`); 0: no shadow.
    pub shadow_share: f64,
    /// The step-level reward (a reward function run over the lake) that scores replies in
    /// shadow and the served replies they copy; required with a `shadow_share`.
    pub shadow_reward: Option<String>,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            margin: 0.02,
            max_kl: 5.0,
            max_length_drift: 0.5,
            max_invalid_rise: 0.05,
            hacking_train_gain: 0.1,
            episodes: 200,
            heldout_seed: 1_000_000_000,
            train_episodes: 100,
            train_seed: 0,
            temperature: 1.0,
            concurrency: 8,
            canary_share: 0.0,
            shadow_share: 0.0,
            shadow_reward: None,
        }
    }
}

impl GateConfig {
    /// Refuses settings no gate can act on: a canary or shadow share that is not 0 (none) or
    /// strictly between 0 and 1, a shadow without the reward that scores it.
    pub fn check(&self) -> crate::Result<()> {
        let share = self.canary_share;
        if !(share == 0.0 || (share > 0.0 && share < 1.0)) {
            return Err(crate::Error::Loop(format!(
                "canary_share = {share}: use 0 (promote to every request at once) or a share between 0 and 1"
            )));
        }
        let shadow = self.shadow_share;
        if !(shadow == 0.0 || (shadow > 0.0 && shadow < 1.0)) {
            return Err(crate::Error::Loop(format!(
                "shadow_share = {shadow}: use 0 (no shadow) or a share between 0 and 1"
            )));
        }
        if shadow > 0.0 && self.shadow_reward.as_deref().is_none_or(str::is_empty) {
            return Err(crate::Error::Loop(
                "shadow_share needs shadow_reward: the step-level reward that scores replies in shadow"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// One check of the gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// `heldout_reward`, `kl_to_base`, `reply_length`, `invalid_replies`, `reward_hacking`.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// What was measured.
    pub value: f64,
    /// The bound it was held to.
    pub bound: f64,
    /// The explanation, with the numbers.
    pub detail: String,
}

/// The gate's decision and everything it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// The candidate (`policy@vN`).
    pub candidate: String,
    /// The version it was compared with (`policy@vM` or `policy@base`).
    pub current: String,
    /// Promote or not.
    pub promote: bool,
    /// Every check.
    pub checks: Vec<Check>,
    /// The bounds used.
    pub config: GateConfig,
    /// The candidate on held-out episodes.
    pub candidate_heldout: EvalReport,
    /// The served version on the same episodes.
    pub current_heldout: EvalReport,
    /// Both on training episodes (when replayed).
    pub candidate_train: Option<EvalReport>,
    /// The served version on training episodes.
    pub current_train: Option<EvalReport>,
    /// KL of the candidate from the base model; `None` when it could not be measured (the
    /// environment reported no prompts), which the `kl_to_base` check refuses.
    pub kl_to_base: Option<f64>,
}

impl GateReport {
    /// One line per failed check, or the passing summary.
    pub fn reason(&self) -> String {
        let failed: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.detail.as_str())
            .collect();
        if failed.is_empty() {
            format!(
                "gate passed: held-out reward {:.3} vs {:.3} ({} episodes), KL to base {:.3}",
                self.candidate_heldout.mean_reward,
                self.current_heldout.mean_reward,
                self.candidate_heldout.episodes,
                self.kl_to_base.unwrap_or(f64::NAN)
            )
        } else {
            format!("gate refused: {}", failed.join("; "))
        }
    }
}

/// The checks, from the measurements. `kl` is `None` when it could not be measured (no
/// prompts): the `kl_to_base` check then refuses.
pub fn decide(
    config: &GateConfig,
    candidate: &EvalReport,
    current: &EvalReport,
    train: Option<(&EvalReport, &EvalReport)>,
    kl: Option<f64>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let delta = candidate.mean_reward - current.mean_reward;
    checks.push(Check {
        name: "heldout_reward".into(),
        passed: candidate.episodes > 0 && delta >= -config.margin,
        value: delta,
        bound: -config.margin,
        detail: format!(
            "held-out mean reward {:.3} vs {:.3} served ({:+.3}; at most {:.3} worse allowed; {} episodes, {} failed)",
            candidate.mean_reward,
            current.mean_reward,
            delta,
            config.margin,
            candidate.episodes,
            candidate.failed
        ),
    });
    checks.push(match kl {
        Some(kl) => Check {
            name: "kl_to_base".into(),
            passed: kl.is_finite() && kl <= config.max_kl,
            value: kl,
            bound: config.max_kl,
            detail: format!(
                "KL to the base model {kl:.3} nats (bound {:.3})",
                config.max_kl
            ),
        },
        None => Check {
            name: "kl_to_base".into(),
            passed: false,
            value: f64::NAN,
            bound: config.max_kl,
            detail: "KL to the base model not measured: the environment reported no prompt \
                     for any held-out episode (a command environment's `prompt`), and a \
                     change that cannot be measured is not promoted"
                .to_owned(),
        },
    });
    let base_len = current.mean_completion_tokens.max(1e-9);
    let drift =
        (candidate.mean_completion_tokens - current.mean_completion_tokens).abs() / base_len;
    checks.push(Check {
        name: "reply_length".into(),
        passed: drift <= config.max_length_drift,
        value: drift,
        bound: config.max_length_drift,
        detail: format!(
            "reply length {:.2} vs {:.2} tokens per call ({:.0}% change; bound {:.0}%)",
            candidate.mean_completion_tokens,
            current.mean_completion_tokens,
            drift * 100.0,
            config.max_length_drift * 100.0
        ),
    });
    let rise = candidate.invalid_rate - current.invalid_rate;
    checks.push(Check {
        name: "invalid_replies".into(),
        passed: rise <= config.max_invalid_rise,
        value: rise,
        bound: config.max_invalid_rise,
        detail: format!(
            "invalid or refused replies {:.1}% vs {:.1}% (rise bound {:.1} points)",
            candidate.invalid_rate * 100.0,
            current.invalid_rate * 100.0,
            config.max_invalid_rise * 100.0
        ),
    });
    if let Some((cand_train, cur_train)) = train {
        let gain = cand_train.mean_reward - cur_train.mean_reward;
        let hacked = gain >= config.hacking_train_gain && delta <= 0.0;
        checks.push(Check {
            name: "reward_hacking".into(),
            passed: !hacked,
            value: gain,
            bound: config.hacking_train_gain,
            detail: format!(
                "training-episode reward {:+.3} while held-out reward {:+.3}{}",
                gain,
                delta,
                if hacked {
                    ": it learned the training episodes, not the task"
                } else {
                    ""
                }
            ),
        });
    }
    checks
}

/// An engine answering on a loopback port until dropped.
struct Local {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The repair of a dead engine (`Watcher::keep_alive`).
    keep_alive: tokio::task::JoinHandle<()>,
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.keep_alive.abort();
    }
}

/// How often the engine under evaluation is checked for a death.
const KEEP_ALIVE_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Serves `engine` on loopback; `watcher` (of its policy) loads it afresh when it dies, and
/// the requests it failed run again on the fresh load.
async fn serve_locally(engine: Engine, watcher: Watcher) -> Result<Local> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::Io(format!("cannot listen on loopback: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Io(format!("no local address: {e}")))?;
    let policy = engine.version.policy.clone();
    let fleet = Fleet::fixed(engine);
    let serving = fleet
        .serving(&policy)
        .cloned()
        .ok_or_else(|| Error::Loop(format!("the fixed fleet does not serve {policy}")))?;
    let keep_alive = tokio::spawn(watcher.keep_alive(serving, KEEP_ALIVE_POLL));
    let app = atdp_deploy::router(fleet);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(Local {
        addr,
        stop: Some(stop),
        keep_alive,
    })
}

/// The token ids of `messages` as the model's chat template renders them, ready for the
/// assistant's reply.
pub fn prompt_ids(chat: &ChatFormat, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    request_ids(chat, messages, &[])
}

/// The token ids of `messages` offering `tools`, as the model's chat template renders them,
/// ready for the assistant's reply.
pub fn request_ids(
    chat: &ChatFormat,
    messages: &[ChatMessage],
    tools: &[atdp_schema::Tool],
) -> Result<Vec<u32>> {
    let messages: Vec<atdp_schema::Message> = messages.iter().map(ChatMessage::to_record).collect();
    Ok(chat.encode(&chat.render(&messages, tools, true)?)?)
}

/// Mean KL(candidate ‖ base) of the next-token distribution after each prompt, in nats.
/// Blocking.
pub fn kl_to_base(base: &Path, adapter: &Path, prompts: &[Prompt]) -> Result<f64> {
    let model = Model::load(base, &LoadOptions::default())?;
    let lora = load_adapter(adapter, &model)?;
    let chat = ChatFormat::load(base)?;
    let mut total = 0.0;
    for prompt in prompts {
        let ids = request_ids(&chat, &prompt.messages, &prompt.tools)?;
        let len = ids.len();
        let ids = Tensor::new(ids.as_slice(), model.device())
            .and_then(|t| t.unsqueeze(0))
            .map_err(atdp_trainer::Error::from)?;
        let last = |adapter| -> Result<Vec<f64>> {
            let logits = model.forward(&ids, adapter)?;
            let row = logits
                .get(0)
                .and_then(|l| l.get(len - 1))
                .and_then(|l| l.to_dtype(candle_core::DType::F64))
                .and_then(|l| {
                    let max = l.max_keepdim(D::Minus1)?;
                    let shifted = l.broadcast_sub(&max)?;
                    let norm = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
                    shifted.broadcast_sub(&norm)?.to_vec1::<f64>()
                })
                .map_err(atdp_trainer::Error::from)?;
            Ok(row)
        };
        let policy = last(Adapter::On(&lora))?;
        let reference = last(Adapter::Off)?;
        total += policy
            .iter()
            .zip(&reference)
            .map(|(p, q)| p.exp() * (p - q))
            .sum::<f64>();
    }
    Ok(total / prompts.len().max(1) as f64)
}

/// What the gate needs to load versions.
#[derive(Debug, Clone)]
pub struct GateSetup {
    /// The registry of the policy.
    pub registry: Registry,
    /// The base model.
    pub base: BaseModel,
    /// Where fetched adapters are kept.
    pub cache: std::path::PathBuf,
    /// Engine options.
    pub options: EngineOptions,
}

async fn eval_version(
    setup: &GateSetup,
    number: Option<u32>,
    env: &Environment,
    plans: &[EvalPlan],
) -> Result<Vec<EvalReport>> {
    let watcher = Watcher {
        registry: setup.registry.clone(),
        base: setup.base.clone(),
        cache: setup.cache.clone(),
        options: setup.options.clone(),
        drain: std::time::Duration::from_secs(1),
    };
    let engine = watcher.prepare(number).await?;
    let name = engine.version.to_string();
    let local = serve_locally(engine, watcher).await?;
    let agent = Agent::new(&format!("http://{}/v1", local.addr), None, &name);
    let mut reports = Vec::new();
    for plan in plans {
        let mut plan = plan.clone();
        plan.label = format!("{name} {}", plan.label);
        plan.env = env.clone();
        reports.push(evaluate(&agent, &plan).await);
    }
    Ok(reports)
}

/// The prompts the KL to the base is measured on (at most 64): a built-in environment's first
/// requests (messages and tools) of the held-out seeds; a command environment's first messages as its held-out
/// episodes on the candidate reported them (none when it reported none).
fn kl_prompts(
    env: &Environment,
    config: &GateConfig,
    candidate_heldout: &EvalReport,
) -> Vec<Prompt> {
    const MOST: usize = 64;
    match env {
        Environment::Builtin(env) => (0..config.episodes.min(MOST as u64))
            .map(|i| env.first_request(config.heldout_seed + i))
            .collect(),
        Environment::Command(_) => candidate_heldout
            .episode_list
            .iter()
            .filter(|e| e.error.is_none())
            .filter_map(|e| e.prompt.clone())
            .map(Prompt::from)
            .take(MOST)
            .collect(),
    }
}

/// Evaluates published `candidate` against the served version and decides. Records nothing:
/// the caller promotes or rejects with the report.
pub async fn gate(
    setup: &GateSetup,
    candidate: u32,
    env: &Environment,
    config: &GateConfig,
) -> Result<GateReport> {
    let current = setup.registry.state().await?.serving;
    let plan = |label: &str, first_seed, episodes| EvalPlan {
        label: label.to_owned(),
        env: env.clone(),
        first_seed,
        episodes,
        temperature: config.temperature,
        concurrency: config.concurrency,
        post_rewards: false,
    };
    let mut plans = vec![plan("held-out", config.heldout_seed, config.episodes)];
    if config.train_episodes > 0 {
        plans.push(plan("training", config.train_seed, config.train_episodes));
    }
    // One engine at a time: the served version's, then the candidate's.
    let mut current_reports = eval_version(setup, current, env, &plans).await?;
    let mut candidate_reports = eval_version(setup, Some(candidate), env, &plans).await?;
    let (candidate_train, current_train) = if plans.len() > 1 {
        (candidate_reports.pop(), current_reports.pop())
    } else {
        (None, None)
    };
    let (Some(candidate_heldout), Some(current_heldout)) =
        (candidate_reports.pop(), current_reports.pop())
    else {
        return Err(Error::Io("no held-out evaluation was run".into()));
    };
    let prompts = kl_prompts(env, config, &candidate_heldout);
    let kl = if prompts.is_empty() {
        None
    } else {
        let adapter = setup.registry.fetch(candidate, &setup.cache).await?;
        let base_dir = setup.base.dir.clone();
        Some(blocking("kl", move || kl_to_base(&base_dir, &adapter, &prompts)).await?)
    };
    let train = candidate_train.as_ref().zip(current_train.as_ref());
    let checks = decide(config, &candidate_heldout, &current_heldout, train, kl);
    let policy = setup.registry.policy();
    Ok(GateReport {
        candidate: format!("{policy}@v{candidate}"),
        current: current.map_or_else(|| format!("{policy}@base"), |n| format!("{policy}@v{n}")),
        promote: checks.iter().all(|c| c.passed),
        checks,
        config: config.clone(),
        candidate_heldout,
        current_heldout,
        candidate_train,
        current_train,
        kl_to_base: kl,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::env::Episode;

    pub(crate) fn report(mean_reward: f64, tokens: f64, invalid: f64) -> EvalReport {
        EvalReport {
            label: String::new(),
            env: "routing".to_owned(),
            model: String::new(),
            temperature: 1.0,
            seeds: [0, 100],
            episodes: 100,
            successes: (mean_reward * 100.0) as usize,
            success_rate: mean_reward,
            ci95: [0.0, 1.0],
            mean_reward,
            mean_completion_tokens: tokens,
            invalid_rate: invalid,
            failed: 0,
            failures: Vec::new(),
            versions: Default::default(),
            wall_s: 0.0,
            started_at: String::new(),
            episode_list: Vec::<Episode>::new(),
        }
    }

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn each_check_refuses_on_its_own_sign() {
        let config = GateConfig::default();
        let current = report(0.5, 2.0, 0.0);
        let better = report(0.7, 2.0, 0.0);
        assert!(failed(&decide(&config, &better, &current, None, Some(0.5))).is_empty());
        // Within the margin is not worse; beyond it is.
        assert!(
            failed(&decide(
                &config,
                &report(0.49, 2.0, 0.0),
                &current,
                None,
                Some(0.5)
            ))
            .is_empty()
        );
        assert_eq!(
            failed(&decide(
                &config,
                &report(0.4, 2.0, 0.0),
                &current,
                None,
                Some(0.5)
            )),
            ["heldout_reward"]
        );
        assert_eq!(
            failed(&decide(&config, &better, &current, None, Some(9.0))),
            ["kl_to_base"]
        );
        assert_eq!(
            failed(&decide(&config, &better, &current, None, Some(f64::NAN))),
            ["kl_to_base"]
        );
        // Not measured (an environment that reports no prompts): refused, and said so.
        let checks = decide(&config, &better, &current, None, None);
        assert_eq!(failed(&checks), ["kl_to_base"]);
        assert!(
            checks[1].detail.contains("not measured"),
            "{}",
            checks[1].detail
        );
        assert_eq!(
            failed(&decide(
                &config,
                &report(0.7, 3.5, 0.0),
                &current,
                None,
                Some(0.5)
            )),
            ["reply_length"]
        );
        assert_eq!(
            failed(&decide(
                &config,
                &report(0.7, 2.0, 0.2),
                &current,
                None,
                Some(0.5)
            )),
            ["invalid_replies"]
        );
        // Training episodes up by 0.4 while held-out is flat: refused.
        let flat = report(0.5, 2.0, 0.0);
        let train = (&report(0.9, 2.0, 0.0), &report(0.5, 2.0, 0.0));
        assert_eq!(
            failed(&decide(&config, &flat, &current, Some(train), Some(0.5))),
            ["reward_hacking"]
        );
        // The same training gain with a held-out gain passes.
        assert!(failed(&decide(&config, &better, &current, Some(train), Some(0.5))).is_empty());
    }
}
