//! `atdp-eval`: N episodes of an environment against a model, a JSON report with the success
//! rate and its 95% confidence interval, and an HTML page comparing two reports.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::client::Agent;
use crate::env::Episode;
use crate::environment::Environment;

/// What a set of episodes gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// A label (`before`, `candidate v3`, …).
    pub label: String,
    /// The environment's name (`routing`, `guess`, or a command environment's name).
    pub env: String,
    /// The `model` asked for.
    pub model: String,
    /// Sampling temperature.
    pub temperature: f64,
    /// The seeds played, `[first, first + count)`.
    pub seeds: [u64; 2],
    /// Episodes played (failed requests excluded).
    pub episodes: usize,
    /// Episodes solved.
    pub successes: usize,
    /// `successes / episodes`.
    pub success_rate: f64,
    /// Wilson 95% interval of the success rate.
    pub ci95: [f64; 2],
    /// Mean reward.
    pub mean_reward: f64,
    /// Mean completion tokens per model call.
    pub mean_completion_tokens: f64,
    /// Share of replies that were not a valid action (refusals and the like).
    pub invalid_rate: f64,
    /// Episodes that could not be played because a request failed.
    pub failed: usize,
    /// The first failures' messages (at most 5).
    pub failures: Vec<String>,
    /// Model calls per serving version.
    pub versions: BTreeMap<String, usize>,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Every episode.
    pub episode_list: Vec<Episode>,
}

/// Wilson score interval at 95% for `k` successes of `n`.
pub fn wilson(k: usize, n: usize) -> [f64; 2] {
    if n == 0 {
        return [0.0, 1.0];
    }
    let (k, n, z) = (k as f64, n as f64, 1.959_963_984_540_054);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    [(centre - half).max(0.0), (centre + half).min(1.0)]
}

/// How to run an evaluation.
#[derive(Debug, Clone)]
pub struct EvalPlan {
    /// The label of the report.
    pub label: String,
    /// The environment.
    pub env: Environment,
    /// First seed.
    pub first_seed: u64,
    /// Episodes.
    pub episodes: u64,
    /// Sampling temperature.
    pub temperature: f64,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Post each episode's reward through the rewards API.
    pub post_rewards: bool,
}

/// Plays the plan's episodes with `agent`.
pub async fn evaluate(agent: &Agent, plan: &EvalPlan) -> EvalReport {
    let started_at = chrono::Utc::now().to_rfc3339();
    let clock = Instant::now();
    let mut list: Vec<Episode> = match &plan.env {
        Environment::Builtin(env) => {
            let seeds = plan.first_seed..plan.first_seed + plan.episodes;
            futures::stream::iter(seeds)
                .map(|seed| env.episode(agent, seed, plan.temperature, plan.post_rewards))
                .buffer_unordered(plan.concurrency.max(1))
                .collect()
                .await
        }
        Environment::Command(command) => {
            let played = command
                .play(
                    agent,
                    plan.first_seed,
                    plan.episodes,
                    plan.temperature,
                    plan.concurrency,
                )
                .await;
            if plan.post_rewards {
                futures::stream::iter(played)
                    .map(|episode| post_reward(agent, &command.name, &command.reward, episode))
                    .buffer_unordered(plan.concurrency.max(1))
                    .collect()
                    .await
            } else {
                played
            }
        }
    };
    list.sort_by_key(|e| e.seed);
    summarize(
        plan,
        &agent.model,
        list,
        started_at,
        clock.elapsed().as_secs_f64(),
    )
}

/// Posts a command environment's episode's reward on its trajectory, as the built-in
/// environments post theirs; an episode without a trajectory, or whose reward is refused,
/// becomes a failed one.
async fn post_reward(agent: &Agent, env: &str, reward: &str, mut episode: Episode) -> Episode {
    if episode.error.is_some() {
        return episode;
    }
    let Some(trajectory) = episode.trajectory_id.clone() else {
        episode.error = Some(format!(
            "seed {}: no trajectory_id in the environment command's line: its reward cannot be posted",
            episode.seed
        ));
        return episode;
    };
    let tags = BTreeMap::from([
        ("env".to_owned(), env.to_owned()),
        ("seed".to_owned(), episode.seed.to_string()),
    ]);
    if let Err(e) = agent
        .reward(&trajectory, reward, episode.reward, tags)
        .await
    {
        episode.error = Some(e);
    }
    episode
}

fn summarize(
    plan: &EvalPlan,
    model: &str,
    list: Vec<Episode>,
    started_at: String,
    wall_s: f64,
) -> EvalReport {
    let played: Vec<&Episode> = list.iter().filter(|e| e.error.is_none()).collect();
    let n = played.len();
    let successes = played.iter().filter(|e| e.success).count();
    let calls: usize = played.iter().map(|e| e.turns).sum();
    let mean = |total: f64, count: usize| {
        if count == 0 {
            0.0
        } else {
            total / count as f64
        }
    };
    let mut versions = BTreeMap::new();
    for v in list.iter().flat_map(|e| e.versions.iter()) {
        *versions.entry(v.clone()).or_insert(0) += 1;
    }
    EvalReport {
        label: plan.label.clone(),
        env: plan.env.name().to_owned(),
        model: model.to_owned(),
        temperature: plan.temperature,
        seeds: [plan.first_seed, plan.episodes],
        episodes: n,
        successes,
        success_rate: mean(successes as f64, n),
        ci95: wilson(successes, n),
        mean_reward: mean(played.iter().map(|e| e.reward).sum(), n),
        mean_completion_tokens: mean(
            played.iter().map(|e| e.completion_tokens as f64).sum(),
            calls,
        ),
        invalid_rate: mean(played.iter().map(|e| e.invalid_replies as f64).sum(), calls),
        failed: list.len() - n,
        failures: list
            .iter()
            .filter_map(|e| e.error.clone())
            .take(5)
            .collect(),
        versions,
        wall_s,
        started_at,
        episode_list: list,
    }
}

/// One row of the comparison table: a figure of a report, as text.
type Cell = fn(&EvalReport) -> String;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML page comparing `before` and `after`: success rates with their intervals drawn,
/// and every other figure side by side.
pub fn compare_html(before: &EvalReport, after: &EvalReport) -> String {
    let mut page = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>atdp-eval: before and after</title>\
         <style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th:first-child,td:first-child{text-align:left}</style>",
    );
    let _ = write!(page, "<h1>{} — before and after</h1>", escape(&before.env));
    // Success rate bars with the Wilson interval as a whisker.
    let _ = write!(
        page,
        "<svg width=\"520\" height=\"130\" role=\"img\" aria-label=\"success rate\">"
    );
    for (i, report) in [before, after].iter().enumerate() {
        let y = 20 + i as i32 * 50;
        let w = |p: f64| 120.0 + p * 380.0;
        let _ = write!(
            page,
            "<text x=\"0\" y=\"{}\">{}</text>\
             <rect x=\"120\" y=\"{y}\" width=\"{:.1}\" height=\"24\" fill=\"{}\"/>\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\" stroke-width=\"2\"/>\
             <text x=\"{:.1}\" y=\"{}\">{:.1}%</text>",
            y + 16,
            escape(&report.label),
            report.success_rate * 380.0,
            if i == 0 { "#9aa" } else { "#2a7" },
            w(report.ci95[0]),
            w(report.ci95[1]),
            y + 12,
            y + 12,
            w(report.ci95[1]) + 4.0,
            y + 16,
            report.success_rate * 100.0,
        );
    }
    page.push_str("</svg><table><tr><th></th>");
    for report in [before, after] {
        let _ = write!(page, "<th>{}</th>", escape(&report.label));
    }
    page.push_str("</tr>");
    let rows: [(&str, Cell); 9] = [
        ("model", |r| r.model.clone()),
        ("versions", |r| {
            r.versions
                .iter()
                .map(|(v, n)| format!("{v} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }),
        ("episodes", |r| r.episodes.to_string()),
        ("success rate", |r| {
            format!(
                "{:.1}% [{:.1}, {:.1}]",
                r.success_rate * 100.0,
                r.ci95[0] * 100.0,
                r.ci95[1] * 100.0
            )
        }),
        ("mean reward", |r| format!("{:.3}", r.mean_reward)),
        ("completion tokens per call", |r| {
            format!("{:.2}", r.mean_completion_tokens)
        }),
        ("invalid replies", |r| {
            format!("{:.1}%", r.invalid_rate * 100.0)
        }),
        ("failed episodes", |r| r.failed.to_string()),
        ("seconds", |r| format!("{:.1}", r.wall_s)),
    ];
    for (name, cell) in rows {
        let _ = write!(
            page,
            "<tr><td>{name}</td><td>{}</td><td>{}</td></tr>",
            escape(&cell(before)),
            escape(&cell(after))
        );
    }
    page.push_str("</table>");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_interval_matches_known_values() {
        // 50 of 100: 0.4038 to 0.5962 (Wilson, z = 1.96).
        let [lo, hi] = wilson(50, 100);
        assert!(
            (lo - 0.4038).abs() < 1e-3 && (hi - 0.5962).abs() < 1e-3,
            "{lo} {hi}"
        );
        let [lo, hi] = wilson(0, 20);
        assert!(lo == 0.0 && (hi - 0.1611).abs() < 1e-3, "{hi}");
        assert_eq!(wilson(0, 0), [0.0, 1.0]);
    }

    #[tokio::test]
    async fn a_command_environment_s_rewards_are_posted_on_their_trajectories() {
        #![allow(clippy::unwrap_used)]
        use std::sync::{Arc, Mutex};

        // A rewards API on loopback that keeps what it is sent.
        let posted: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let keep = posted.clone();
        let app = axum::Router::new().route(
            "/v1/atdp/rewards",
            axum::routing::post(move |body: axum::body::Bytes| {
                let keep = keep.clone();
                async move {
                    keep.lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap());
                    "{}"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });

        let script = r#"
import json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
first, count = (int(x) for x in args["--seeds"].split(":"))
for seed in range(first, first + count):
    line = {"seed": seed, "reward": seed / 10, "turns": 1, "completion_tokens": 1,
            "invalid_replies": 0, "trajectory_id": "t-%d" % seed}
    if seed == 12:
        del line["trajectory_id"]
    print(json.dumps(line))
"#;
        let dir = tempfile::tempdir().unwrap();
        let env = crate::command::tests::python_env(dir.path(), script)
            .named("tickets")
            .unwrap();
        let plan = EvalPlan {
            label: "live".into(),
            env: env.into(),
            first_seed: 10,
            episodes: 3,
            temperature: 1.0,
            concurrency: 2,
            post_rewards: true,
        };
        let agent = Agent::new(&format!("http://{addr}/v1"), None, "m");
        let report = evaluate(&agent, &plan).await;
        assert_eq!(report.env, "tickets");
        assert_eq!(
            (report.episodes, report.failed),
            (2, 1),
            "{:?}",
            report.failures
        );
        assert!(
            report.failures[0].contains("no trajectory_id"),
            "{:?}",
            report.failures
        );
        let mut rewards: Vec<serde_json::Value> = posted
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| b["rewards"].as_array().unwrap().clone())
            .collect();
        rewards.sort_by_key(|r| r["trajectory_id"].as_str().unwrap().to_owned());
        assert_eq!(
            rewards,
            [10, 11].map(|seed| serde_json::json!({
                "trajectory_id": format!("t-{seed}"),
                "name": "solved",
                "value": seed as f64 / 10.0,
                "terminal": true,
                "tags": {"env": "tickets", "seed": seed.to_string()},
            }))
        );
    }

    #[test]
    fn the_comparison_page_escapes_labels() {
        let plan = EvalPlan {
            label: "<b>".into(),
            env: crate::env::Env::Routing.into(),
            first_seed: 0,
            episodes: 0,
            temperature: 1.0,
            concurrency: 1,
            post_rewards: false,
        };
        let report = summarize(&plan, "m", Vec::new(), String::new(), 0.0);
        let page = compare_html(&report, &report);
        assert!(page.contains("&lt;b&gt;") && !page.contains("<b>"));
    }
}
