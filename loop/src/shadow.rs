//! The verdict on a version in shadow: each of its recorded replies (a step tagged
//! `shadow_of`, recorded by the proxy and never returned) is paired with the served reply to
//! the same request, and both are scored by a step-level reward (a reward function run over
//! the lake, since no environment saw the shadow's reply). Once the latest `window` pairs are
//! scored, the shadow goes on to its canary (or straight to promotion) when its mean is not
//! below the served replies' by more than the margin, and is rejected otherwise.

use std::collections::{BTreeSet, HashMap};

use atdp_deploy::{Action, Event, Registry};
use atdp_trainer::Selection;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::adapter_events::AdapterEvents;
use crate::live::{RollbackConfig, SHADOW_TAG};

/// A shadow version's replies against the served replies to the same requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowScores {
    /// Copies counted: the latest, at most the window, of those a reward function reads (the
    /// copy marked `shadow`, the served step one that may be trained on), up to the newest
    /// scored one.
    pub copies: usize,
    /// Of them, the copies that failed (no reply, an error, an unknown version).
    pub failed: usize,
    /// Of them, the copies that answered but that the reward function left unscored while it
    /// scored a later one (it could not score them).
    pub unscored: usize,
    /// Of them, the pairs in which both replies are scored.
    pub pairs: usize,
    /// The shadow's mean score over the pairs.
    pub shadow_mean: f64,
    /// The served replies' mean score over the pairs.
    pub served_mean: f64,
}

/// The `consent_source` of a copy that the policy and consent let reward functions read.
const SHADOW_SOURCE: &str = "shadow";

/// Most copies of a window that may fail or stay unscored: a shadow with more is rejected.
pub const MAX_FAILED_SHARE: f64 = 0.05;

/// Whether a reward was computed by a reward function over the lake (`sql:<fn>`,
/// `program:<fn>`), not posted by a client or an environment.
fn computed(source: &str) -> bool {
    source.starts_with("sql:") || source.starts_with("program:")
}

/// Scores the copies of the requests that version `version` (`support@v8`) answered in
/// shadow since `since` (µs; its shadow entry in the log) against the served replies they
/// copy, by the step-level reward named `reward` as reward functions computed it (a step's
/// latest value; rewards a client posted never count): the latest `window` copies up to the
/// newest scored one ([`ShadowScores`]). Blocking.
pub fn shadow_scores(
    lake: &str,
    options: HashMap<String, String>,
    selection: &Selection,
    reward: &str,
    version: &str,
    since: i64,
    window: usize,
) -> Result<ShadowScores> {
    let mut selection = selection.clone();
    selection.reward_names = BTreeSet::from([reward.to_owned()]);
    selection.since = Some(selection.since.map_or(since, |s| s.max(since)));
    let data = atdp_trainer::read_lake_to_monitor(lake, options, &selection)?;
    let mut scores: HashMap<(&str, &str), (i64, f64)> = HashMap::new();
    for r in data.rewards.iter().filter(|r| computed(&r.source)) {
        let Some(step) = r.step_id.as_deref() else {
            continue;
        };
        let entry = scores
            .entry((r.tenant_id.as_str(), step))
            .or_insert((r.created_at, r.value));
        if r.created_at >= entry.0 {
            *entry = (r.created_at, r.value);
        }
    }
    let score = |tenant: &str, step: &str| scores.get(&(tenant, step)).map(|s| s.1);
    let steps: HashMap<(&str, &str), &atdp_schema::Step> = data
        .steps
        .iter()
        .map(|s| ((s.tenant_id.as_str(), s.step_id.as_str()), s))
        .collect();
    // The copies a function would score, with the served step it would score beside them:
    // the copy marked `shadow` (the policy and consent let both be read), the served step
    // one that may be trained on.
    let mut copies: Vec<(i64, Outcome)> = data
        .steps
        .iter()
        .filter(|s| s.model_requested == version && s.started_at >= since)
        .filter(|s| s.consent_source.as_deref() == Some(SHADOW_SOURCE))
        .filter_map(|s| {
            let served_id = s.tags.get(SHADOW_TAG)?;
            let served = steps.get(&(s.tenant_id.as_str(), served_id.as_str()))?;
            if served.training_eligible != Some(true) {
                return None;
            }
            let outcome = if s.status != "ok" {
                Outcome::Failed
            } else {
                match (
                    score(&s.tenant_id, &s.step_id),
                    score(&s.tenant_id, served_id),
                ) {
                    (Some(shadow), Some(served)) => Outcome::Scored(shadow, served),
                    _ => Outcome::Unscored,
                }
            };
            Some((s.started_at, outcome))
        })
        .collect();
    // Scoring runs behind the traffic: copies newer than the newest scored one wait for it,
    // and an older one still unscored is one the function could not score. Failures count at
    // once only while nothing is scored (a shadow that fails every copy is decided too).
    let newest_scored = copies
        .iter()
        .filter(|c| matches!(c.1, Outcome::Scored(..)))
        .map(|c| c.0)
        .max();
    copies.retain(|(at, outcome)| match outcome {
        Outcome::Scored(..) => true,
        Outcome::Failed => newest_scored.is_none_or(|t| *at <= t),
        Outcome::Unscored => newest_scored.is_some_and(|t| *at < t),
    });
    copies.sort_by_key(|c| std::cmp::Reverse(c.0));
    copies.truncate(window);
    let pairs: Vec<(f64, f64)> = copies
        .iter()
        .filter_map(|c| match c.1 {
            Outcome::Scored(shadow, served) => Some((shadow, served)),
            _ => None,
        })
        .collect();
    let failed = copies
        .iter()
        .filter(|c| matches!(c.1, Outcome::Failed))
        .count();
    let n = pairs.len().max(1) as f64;
    Ok(ShadowScores {
        copies: copies.len(),
        failed,
        unscored: copies.len() - pairs.len() - failed,
        pairs: pairs.len(),
        shadow_mean: pairs.iter().map(|p| p.0).sum::<f64>() / n,
        served_mean: pairs.iter().map(|p| p.1).sum::<f64>() / n,
    })
}

/// How one copy counts.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// It failed (an error, no reply, an unknown version).
    Failed,
    /// Both replies are scored: the shadow's and the served one's.
    Scored(f64, f64),
    /// It answered, and one of the replies is not scored.
    Unscored,
}

/// When version `version` went into shadow last (µs since epoch): its latest `shadow` entry
/// in the policy's log.
pub async fn shadow_started(registry: &Registry, version: u32) -> Result<Option<i64>> {
    let log = registry.log().await?;
    Ok(log
        .iter()
        .rev()
        .find(|e| e.action == Action::Shadow && e.version == version)
        .and_then(|e| chrono::DateTime::parse_from_rfc3339(&e.at).ok())
        .map(|at| at.timestamp_micros()))
}

/// Decides the policy's shadow once `scores` count a full window of copies: rejected when
/// more than [`MAX_FAILED_SHARE`] of them failed, or when its mean is below the served
/// replies' by more than the margin; else on to a canary with `canary_share` of the requests
/// (promoted at once when it is 0). The decision goes into the audit `trail` too when given.
/// Returns it; none while no shadow of `version` runs or the window is not full.
pub async fn check_shadow(
    registry: &Registry,
    version: u32,
    scores: &ShadowScores,
    config: &RollbackConfig,
    canary_share: f64,
    by: &str,
    trail: Option<&AdapterEvents>,
) -> Result<Option<Event>> {
    let state = registry.state().await?;
    let Some(shadow) = state.canary.filter(|c| c.shadow && c.version == version) else {
        return Ok(None);
    };
    if scores.copies < config.window.max(1) {
        return Ok(None);
    }
    let policy = registry.policy();
    let name = format!("{policy}@v{}", shadow.version);
    let report = serde_json::json!({
        "shadow": {
            "candidate": {"version": name, "mean": scores.shadow_mean},
            "served": {"mean": scores.served_mean},
            "copies": scores.copies,
            "failed": scores.failed,
            "unscored": scores.unscored,
            "pairs": scores.pairs,
            "share": shadow.share,
            "config": config,
        }
    });
    let (shadow_mean, served_mean) = (scores.shadow_mean, scores.served_mean);
    let failed_share = (scores.failed + scores.unscored) as f64 / scores.copies as f64;
    let held = format!(
        "{name}'s replies in shadow scored {shadow_mean:.3} against the served replies' {served_mean:.3} over {} pairs of the last {} copies ({} failed, {} unscored)",
        scores.pairs, scores.copies, scores.failed, scores.unscored
    );
    let event = if failed_share > MAX_FAILED_SHARE || scores.pairs == 0 {
        let reason = format!(
            "{held}: more than {:.0}% of its copies failed or could not be scored",
            MAX_FAILED_SHARE * 100.0
        );
        registry
            .reject(shadow.version, by, &reason, Some(report.clone()))
            .await?
    } else if shadow_mean < served_mean - config.margin {
        let reason = format!("{held}: below by more than {:.3}", config.margin);
        registry
            .reject(shadow.version, by, &reason, Some(report.clone()))
            .await?
    } else if canary_share > 0.0 {
        let reason = format!("{held} (margin {:.3}): on to a canary", config.margin);
        registry
            .canary(
                shadow.version,
                canary_share,
                by,
                &reason,
                Some(report.clone()),
            )
            .await?
    } else {
        let reason = format!("{held} (margin {:.3})", config.margin);
        registry
            .promote(shadow.version, by, &reason, Some(report.clone()))
            .await?
    };
    if let Some(trail) = trail {
        trail.record(policy, &event, report).await?;
    }
    Ok(Some(event))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;
    use std::time::Duration;

    use atdp_lake::{LakeWriter, WriterConfig};
    use atdp_schema::{Reward, Step, new_id};

    use super::*;
    use crate::live::tests::published_registry;

    /// The first copy's start (µs).
    const AT: i64 = 1_795_910_400_000_000;

    /// What the copy at each second is, after one before the shadow started (second -1).
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        /// Both replies scored by the function.
        Scored,
        /// Failed (an upstream error).
        Failed,
        /// Answered; its reply not scored.
        Unscored,
        /// Its end user withdrew consent: not for reward functions.
        Withdrawn,
        /// The served step may not be trained on.
        ServedIneligible,
        /// A copy of another version.
        Other,
    }

    /// A served step of `support@v1` and its copy in shadow to `support@v2` for each kind, a
    /// second apart from second -1 (a scored pair before the shadow started); the function
    /// `quality` scores served steps `served` and copies `shadow`, and a client posted a
    /// `quality` of 0 on every served step (never counted).
    fn shadow_lake(dir: &Path, kinds: &[Kind], served: f64, shadow: f64) -> String {
        let lake = dir.join("lake").display().to_string();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut config = WriterConfig::new(lake.clone(), dir.join("wal"));
            config.fsync = false;
            let writer = LakeWriter::open(config).await.unwrap();
            let at = |i: i64| AT + i * 1_000_000;
            let step = |id: &str, version: &str, of: Option<&str>, i: i64| Step {
                step_id: id.into(),
                trajectory_id: format!("t-{id}"),
                tenant_id: "acme".into(),
                agent_id: "support".into(),
                started_at: at(i),
                status: "ok".into(),
                model_requested: if of.is_some() { version } else { "support" }.into(),
                policy_version: Some(version.into()),
                training_eligible: Some(of.is_none()),
                consent_source: Some(
                    if of.is_some() {
                        "shadow"
                    } else {
                        "policy:default"
                    }
                    .into(),
                ),
                tags: of
                    .map(|of| [(SHADOW_TAG.to_owned(), of.to_owned())].into())
                    .unwrap_or_default(),
                ..Step::default()
            };
            let reward = |id: &str, value: f64, i: i64, source: &str| Reward {
                reward_id: new_id(),
                trajectory_id: format!("t-{id}"),
                step_id: Some(id.into()),
                tenant_id: "acme".into(),
                name: "quality".into(),
                value,
                source: source.into(),
                created_at: at(i) + 10,
                ..Reward::default()
            };
            let all = std::iter::once(Kind::Scored).chain(kinds.iter().copied());
            for (i, kind) in (-1..).zip(all) {
                let (served_id, shadow_id) = (format!("s{i}"), format!("h{i}"));
                let version = if kind == Kind::Other {
                    "support@v3"
                } else {
                    "support@v2"
                };
                let mut served_step = step(&served_id, "support@v1", None, i);
                if kind == Kind::ServedIneligible {
                    served_step.training_eligible = Some(false);
                }
                writer.append(served_step).unwrap();
                let mut copy = step(&shadow_id, version, Some(&served_id), i);
                match kind {
                    Kind::Failed => {
                        copy.status = "upstream_error".into();
                        copy.policy_version = None;
                    }
                    Kind::Withdrawn => copy.consent_source = Some("header".into()),
                    _ => {}
                }
                writer.append(copy).unwrap();
                writer
                    .append(reward(&served_id, served, i, "sql:quality"))
                    .unwrap();
                writer
                    .append(reward(&served_id, 0.0, i + 1, "api"))
                    .unwrap();
                if !matches!(kind, Kind::Unscored | Kind::Failed) {
                    writer
                        .append(reward(&shadow_id, shadow, i, "sql:quality"))
                        .unwrap();
                }
                if i == 0 {
                    // A reward on the copy's whole trajectory, which live reward never counts.
                    let mut whole = reward(&shadow_id, shadow, i, "sql:quality");
                    whole.step_id = None;
                    writer.append(whole).unwrap();
                }
            }
            writer.flush().await.unwrap();
            assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
        });
        lake
    }

    fn acme() -> Selection {
        Selection {
            tenants: ["acme".to_owned()].into(),
            ..Selection::default()
        }
    }

    fn scores_of(lake: &str, reward: &str, window: usize) -> ShadowScores {
        shadow_scores(
            lake,
            Default::default(),
            &acme(),
            reward,
            "support@v2",
            AT,
            window,
        )
        .unwrap()
    }

    #[test]
    fn the_copies_a_function_scores_count_up_to_the_newest_scored_one() {
        use Kind::*;
        let dir = tempfile::tempdir().unwrap();
        let kinds = [
            Failed,
            Unscored,
            Withdrawn,
            ServedIneligible,
            Other,
            Scored,
            Scored,
            Scored,
            Unscored,
            Failed,
        ];
        let lake = shadow_lake(dir.path(), &kinds, 0.5, 1.0);
        // Three scored pairs, the older failure and the older copy the function left
        // unscored; not the copies after the newest scored one (scoring runs behind), the
        // ones no function reads, the other version's, or the one before the shadow started;
        // the client's zeros never count.
        assert_eq!(
            scores_of(&lake, "quality", 10),
            ShadowScores {
                copies: 5,
                failed: 1,
                unscored: 1,
                pairs: 3,
                shadow_mean: 1.0,
                served_mean: 0.5
            }
        );
        // The latest two: scored pairs.
        let two = scores_of(&lake, "quality", 2);
        assert_eq!((two.copies, two.failed, two.pairs), (2, 0, 2));
        // Nothing scored: the failures count, every one (a shadow that only fails is decided).
        let none = scores_of(&lake, "other", 10);
        assert_eq!(
            (none.copies, none.failed, none.unscored, none.pairs),
            (2, 2, 0, 0)
        );
        // A copy was never served: the live reward per version leaves it out.
        let live = crate::live_rewards(&lake, Default::default(), &acme(), "quality", 10).unwrap();
        assert!(!live.contains_key("support@v2"), "{live:?}");
    }

    fn scores(copies: usize, failed: usize, shadow_mean: f64, served_mean: f64) -> ShadowScores {
        ShadowScores {
            copies,
            failed,
            unscored: 0,
            pairs: copies - failed,
            shadow_mean,
            served_mean,
        }
    }

    /// The verdict on `version` with `scores`, a window of 3 and a margin of 0.05.
    async fn decide(
        registry: &Registry,
        version: u32,
        scores: ShadowScores,
        canary_share: f64,
    ) -> Option<Event> {
        let config = RollbackConfig {
            window: 3,
            margin: 0.05,
        };
        check_shadow(registry, version, &scores, &config, canary_share, "t", None)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_shadow_goes_on_to_its_canary_or_is_rejected_on_its_scores() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, _) = published_registry(dir.path(), 4).await;
        registry.promote(1, "test", "first", None).await.unwrap();
        let shadow = async |version| {
            registry
                .shadow(version, 0.5, "test", "gate passed", None)
                .await
                .unwrap();
        };
        shadow(2).await;
        assert!(shadow_started(&registry, 2).await.unwrap().is_some());
        assert_eq!(shadow_started(&registry, 3).await.unwrap(), None);
        // Not a full window, or another version: nothing yet.
        assert!(
            decide(&registry, 2, scores(2, 0, 1.0, 0.0), 0.1)
                .await
                .is_none()
        );
        assert!(
            decide(&registry, 3, scores(3, 0, 1.0, 0.0), 0.1)
                .await
                .is_none()
        );
        // Held within the margin: on to a canary of the same version.
        let event = decide(&registry, 2, scores(3, 0, 0.46, 0.5), 0.1)
            .await
            .unwrap();
        assert_eq!(
            (event.action, event.version, event.share),
            (Action::Canary, 2, Some(0.1))
        );
        let state = registry.state().await.unwrap();
        assert_eq!(
            state.canary.map(|c| (c.version, c.shadow)),
            Some((2, false))
        );
        // A canary is not decided here.
        assert!(
            decide(&registry, 2, scores(3, 0, 0.0, 1.0), 0.1)
                .await
                .is_none()
        );

        // Below by more than the margin: rejected, and out of service.
        shadow(3).await;
        let event = decide(&registry, 3, scores(3, 0, 0.44, 0.5), 0.1)
            .await
            .unwrap();
        assert_eq!((event.action, event.version), (Action::Reject, 3));
        assert_eq!(registry.state().await.unwrap().canary, None);
        // Better on what it answered, but a copy in three failed: rejected.
        shadow(4).await;
        let event = decide(&registry, 4, scores(3, 1, 1.0, 0.5), 0.1)
            .await
            .unwrap();
        assert_eq!((event.action, event.version), (Action::Reject, 4));
    }

    #[tokio::test]
    async fn without_a_canary_share_a_shadow_that_holds_is_promoted() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, _) = published_registry(dir.path(), 2).await;
        registry.promote(1, "test", "first", None).await.unwrap();
        registry
            .shadow(2, 0.2, "test", "gate passed", None)
            .await
            .unwrap();
        let event = decide(&registry, 2, scores(3, 0, 0.5, 0.5), 0.0)
            .await
            .unwrap();
        assert_eq!((event.action, event.version), (Action::Promote, 2));
        assert_eq!(registry.state().await.unwrap().serving, Some(2));
    }
}
