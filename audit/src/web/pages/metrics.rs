//! `GET /metrics`: the training page's figures for Prometheus (text exposition format 0.0.4),
//! for the runs of every tenant, newest [`crate::runs::MAX_RUNS`]: each run's state and
//! steps, its last step's reward, loss, KL, entropy, gradient norm and throughput, each
//! reward's distribution and alerts, and the registry events of the versions it produced.
//! Served only with a configured bearer token (`atdp-audit serve --metrics-token-file`), which
//! Prometheus sends (`authorization: { credentials_file: … }`); anything else is 401. Not a
//! page: no login, no audit event.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::runs::{RunView, last_metrics, running, runs_where};
use crate::web::Console;

/// Shortest token accepted.
pub(crate) const MIN_TOKEN_CHARS: usize = 32;

/// The last step's figures exported for each run: (metric, field of a step's metrics, help).
const LAST_STEP: [(&str, &str, &str); 6] = [
    (
        "reward_mean",
        "reward_mean",
        "Mean return of the last optimizer step's examples.",
    ),
    (
        "loss",
        "loss",
        "Token-mean loss of the last optimizer step.",
    ),
    (
        "kl",
        "kl",
        "Token-mean KL to the reference model at the last optimizer step.",
    ),
    (
        "entropy",
        "entropy",
        "Token-mean policy entropy at the last optimizer step.",
    ),
    (
        "grad_norm",
        "grad_norm",
        "Global gradient norm before clipping at the last optimizer step.",
    ),
    (
        "tokens_per_second",
        "tokens_per_s",
        "Tokens processed per second at the last optimizer step.",
    ),
];

/// Whether `headers` carry `Authorization: Bearer <token>` (compared by digest, so the time
/// taken says nothing about the token).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token)
    else {
        return false;
    };
    Sha256::digest(given.trim().as_bytes()) == Sha256::digest(token.as_bytes())
}

/// A label value, escaped as the exposition format asks.
fn label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// A sample's value: Prometheus spells the non-finite ones `NaN`, `+Inf`, `-Inf`.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// The exposition of `runs` with each run's last step's metrics.
pub(crate) fn exposition(runs: &[(RunView, Option<serde_json::Value>)]) -> String {
    let mut families: Vec<(String, &str, Vec<String>)> = Vec::new();
    let mut family = |name: &str, help: &'static str, lines: Vec<String>| {
        families.push((format!("atdp_training_{name}"), help, lines));
    };
    let run_labels = |run: &RunView| {
        format!(
            r#"run="{}",tenants="{}",agent="{}""#,
            label(&run.info.run_id),
            label(&run.info.tenants.join(",")),
            label(run.info.agent_id.as_deref().unwrap_or(""))
        )
    };
    let each = |f: &dyn Fn(&RunView, Option<&serde_json::Value>) -> Option<String>| {
        runs.iter()
            .filter_map(|(run, last)| f(run, last.as_ref()))
            .collect::<Vec<_>>()
    };
    family(
        "running",
        "1 while the run is running and writing, else 0.",
        each(&|run, _| {
            Some(format!(
                "{{{}}} {}",
                run_labels(run),
                u8::from(running(run))
            ))
        }),
    );
    family(
        "steps_done",
        "Optimizer steps the run has done.",
        each(&|run, _| Some(format!("{{{}}} {}", run_labels(run), run.info.steps_done))),
    );
    family(
        "steps_total",
        "Optimizer steps the run will take.",
        each(&|run, _| Some(format!("{{{}}} {}", run_labels(run), run.info.total_steps))),
    );
    for (name, field, help) in LAST_STEP {
        family(
            name,
            help,
            each(&|run, last| {
                let last = last?[field].as_f64()?;
                Some(format!("{{{}}} {}", run_labels(run), value(last)))
            }),
        );
    }
    let mut rewards = Vec::new();
    let mut alerts = Vec::new();
    let mut events = Vec::new();
    for (run, _) in runs {
        for (name, d) in &run.info.rewards {
            for (stat, v) in [
                ("count", d.count as f64),
                ("mean", d.mean),
                ("std", d.std),
                ("min", d.min),
                ("max", d.max),
                ("share_at_max", d.at_max),
            ] {
                rewards.push(format!(
                    r#"{{{},reward="{}",stat="{stat}"}} {}"#,
                    run_labels(run),
                    label(name),
                    value(v)
                ));
            }
        }
        for a in &run.alerts {
            alerts.push(format!(
                r#"{{{},reward="{}",kind="{}"}} 1"#,
                run_labels(run),
                label(&a.reward),
                a.kind
            ));
        }
        for e in &run.events {
            events.push(format!(
                r#"{{{},policy="{}",seq="{}",version="{}",action="{}"}} 1"#,
                run_labels(run),
                label(&e.policy),
                e.seq,
                e.version,
                label(&e.action),
            ));
        }
    }
    family(
        "reward",
        "Distribution of each reward over what the run trains on.",
        rewards,
    );
    family(
        "reward_alert",
        "1 for each odd shape of a reward's distribution (piled_at_max, variance_collapsed, jumped).",
        alerts,
    );
    family(
        "registry_event",
        "1 for each registry log entry about a version the run produced (seq: its position in the policy's log).",
        events,
    );
    let mut out = String::new();
    for (name, help, lines) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for line in lines {
            let _ = writeln!(out, "{name}{line}");
        }
    }
    out
}

pub(crate) async fn metrics(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let Some(token) = console.config.metrics_token.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if !authorized(&headers, token) {
        let mut response = StatusCode::UNAUTHORIZED.into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    let loaded = async {
        let mut found = Vec::new();
        for run in runs_where(&console.lake, &console.training, |_| true).await? {
            let last = last_metrics(&console.lake, &console.training, &run).await?;
            found.push((run, last));
        }
        Ok::<_, crate::Error>(found)
    };
    match loaded.await {
        Ok(runs) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            exposition(&runs),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "Training metrics could not be read from the lake.");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_cannot_break_out_of_their_quotes() {
        assert_eq!(label("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
        assert_eq!(
            (value(f64::NAN), value(f64::NEG_INFINITY), value(0.5)),
            ("NaN".into(), "-Inf".into(), "0.5".into())
        );
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, "t"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        assert!(authorized(&headers, "t"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer t"));
        assert!(authorized(&headers, "t"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic t"));
        assert!(!authorized(&headers, "t"));
        assert!(!authorized(&headers, "u"));
    }
}
