//! The training page: the runs this auditor may see as they happen (reward per batch,
//! loss, KL to the reference, entropy and gradient norm by optimizer step; each reward's
//! distribution with its alerts; what the registry did with the versions the run produced,
//! with the gate's numbers). While a run is running the page reloads itself every
//! [`RELOAD_S`] seconds (a `<meta>` refresh: the console runs no script). Reading it records
//! nothing.

use std::fmt::Write;
use std::sync::Arc;

use askama::Template;
use atdp_lake::runs::{Alert, Distribution};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{failure, html, signed_in};
use crate::error::Error;
use crate::runs::{RegistryEvent, RunView, metrics, running, visible_runs};

/// Points drawn at most per chart: longer runs are drawn from evenly spaced steps and the
/// last.
const MAX_POINTS: usize = 300;
use crate::web::Console;
use crate::web::render::filters;

/// Seconds between reloads while a run is running.
pub(crate) const RELOAD_S: u32 = 3;

/// The figures drawn for each run: (title, field of a step's metrics).
const CHARTS: [(&str, &str); 5] = [
    ("Reward per batch", "reward_mean"),
    ("Loss", "loss"),
    ("KL to the reference", "kl"),
    ("Entropy", "entropy"),
    ("Gradient norm", "grad_norm"),
];

const CHART_W: f64 = 240.0;
const CHART_H: f64 = 70.0;

/// A chart of one figure over the run's steps.
pub(crate) struct Chart {
    title: &'static str,
    /// The last value, formatted.
    last: String,
    /// An SVG drawn from numbers only (no recorded text).
    svg: String,
}

/// A reward's distribution, drawn.
pub(crate) struct RewardView {
    name: String,
    d: Distribution,
    svg: String,
}

/// A run as the page shows it.
pub(crate) struct RunPage {
    run: RunView,
    state: &'static str,
    steps: usize,
    charts: Vec<Chart>,
    rewards: Vec<RewardView>,
}

impl RunPage {
    fn alerts(&self) -> &[Alert] {
        &self.run.alerts
    }

    fn events(&self) -> &[RegistryEvent] {
        &self.run.events
    }

    fn versions(&self) -> String {
        self.run
            .versions
            .iter()
            .map(|(policy, v)| format!("{policy} v{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(Template)]
#[template(path = "training.html")]
struct TrainingPage {
    who: Option<String>,
    versions: String,
    elapsed_ms: String,
    csrf: String,
    reload: Option<u32>,
    runs: Vec<RunPage>,
}

/// A number for a page: 4 significant decimals, or `–` when it is not finite.
fn number(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// A line chart of `values` (by step), scaled to its own range.
fn line(values: &[f64]) -> String {
    let finite: Vec<(usize, f64)> = values
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .collect();
    let mut svg = format!(
        r#"<svg class="chart" viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" height="{CHART_H}" role="img">"#
    );
    let (lo, hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, v)| {
            (a.min(*v), b.max(*v))
        });
    // Scaled by half, so that the widest range of f64 does not overflow.
    let span = if hi > lo { hi / 2.0 - lo / 2.0 } else { 1.0 };
    let n = values.len().max(2) - 1;
    let points: Vec<String> = finite
        .iter()
        .map(|(i, v)| {
            let x = 4.0 + (CHART_W - 8.0) * (*i as f64) / n as f64;
            let y = CHART_H - 4.0 - (CHART_H - 8.0) * (v / 2.0 - lo / 2.0) / span;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let _ = write!(
        svg,
        r##"<rect x="0" y="0" width="{CHART_W}" height="{CHART_H}" fill="#fff" stroke="#d9dee7"/>"##
    );
    if points.len() == 1 {
        let (x, y) = points[0].split_once(',').unwrap_or(("4", "4"));
        let _ = write!(
            svg,
            r##"<circle cx="{x}" cy="{y}" r="2.5" fill="#2453a6"/>"##
        );
    } else if !points.is_empty() {
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="#2453a6" stroke-width="1.5" points="{}"/>"##,
            points.join(" ")
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Bars of a histogram.
fn bars(histogram: &[u64]) -> String {
    let top = histogram.iter().copied().max().unwrap_or(0).max(1) as f64;
    let width = CHART_W / histogram.len().max(1) as f64;
    let mut svg = format!(
        r##"<svg class="histogram" viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" height="{CHART_H}" role="img"><rect x="0" y="0" width="{CHART_W}" height="{CHART_H}" fill="#fff" stroke="#d9dee7"/>"##
    );
    for (i, count) in histogram.iter().enumerate() {
        let h = (CHART_H - 6.0) * (*count as f64) / top;
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#166534"/>"##,
            i as f64 * width + 1.0,
            CHART_H - 2.0 - h,
            (width - 2.0).max(1.0)
        );
    }
    svg.push_str("</svg>");
    svg
}

fn state_word(run: &RunView) -> &'static str {
    if run.silent {
        return "silent";
    }
    match run.info.state {
        atdp_lake::runs::RunState::Running => "running",
        atdp_lake::runs::RunState::Finished => "finished",
        atdp_lake::runs::RunState::Failed => "failed",
        atdp_lake::runs::RunState::Stopped => "stopped",
        atdp_lake::runs::RunState::Unknown => "unknown",
    }
}

/// At most [`MAX_POINTS`] of `values`, evenly spaced, the last always among them.
fn thin(values: Vec<f64>) -> Vec<f64> {
    if values.len() <= MAX_POINTS {
        return values;
    }
    let n = values.len();
    (0..MAX_POINTS)
        .map(|i| values[i * (n - 1) / (MAX_POINTS - 1)])
        .collect()
}

async fn run_page(console: &Console, run: RunView) -> Result<RunPage, Error> {
    let steps = metrics(&console.lake, &console.training, &run).await?;
    let charts = CHARTS
        .iter()
        .map(|(title, field)| {
            let values: Vec<f64> = steps
                .iter()
                .map(|m| m[*field].as_f64().unwrap_or(f64::NAN))
                .collect();
            Chart {
                title,
                last: values.last().copied().map_or_else(String::new, number),
                svg: line(&thin(values)),
            }
        })
        .collect();
    let rewards = run
        .info
        .rewards
        .iter()
        .map(|(name, d)| RewardView {
            name: name.clone(),
            d: d.clone(),
            svg: bars(&d.histogram),
        })
        .collect();
    Ok(RunPage {
        state: state_word(&run),
        steps: steps.len(),
        charts,
        rewards,
        run,
    })
}

pub(crate) async fn training(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let (auditor, _catalog, frame) = match signed_in(&console, &headers).await {
        Ok(session) => session,
        Err(response) => return *response,
    };
    let loaded = async {
        let mut pages = Vec::new();
        for run in visible_runs(&console.lake, &console.training, &auditor).await? {
            pages.push(run_page(&console, run).await?);
        }
        Ok::<_, Error>(pages)
    };
    let runs = match loaded.await {
        Ok(runs) => runs,
        Err(e) => return failure(&e, &frame),
    };
    html(
        StatusCode::OK,
        TrainingPage {
            who: frame.who.clone(),
            versions: frame.versions.clone(),
            elapsed_ms: frame.elapsed_ms(),
            csrf: frame.csrf.clone(),
            reload: runs.iter().any(|r| running(&r.run)).then_some(RELOAD_S),
            runs,
        }
        .render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_drawn_from_numbers_only() {
        let svg = line(&[1.0, f64::NAN, 3.0, 2.0]);
        assert_eq!(svg.matches("<polyline").count(), 1);
        // Three finite points; the first at the bottom left, the largest at the top.
        assert!(svg.contains(r#"points="4.0,66.0 "#), "{svg}");
        assert!(svg.contains(",4.0 "), "{svg}");
        assert!(line(&[]).ends_with("</svg>"));
        assert_eq!(line(&[0.5]).matches("<circle").count(), 1);
        let bars = bars(&[1, 0, 4]);
        assert_eq!(bars.matches("<rect").count(), 4);
        assert_eq!(
            (number(0.123456), number(f64::NAN)),
            ("0.1235".into(), "–".into())
        );
        let long: Vec<f64> = (0..10_000).map(f64::from).collect();
        let thinned = thin(long);
        assert_eq!(thinned.len(), MAX_POINTS);
        assert_eq!((thinned[0], thinned[MAX_POINTS - 1]), (0.0, 9_999.0));
        // Values too far apart for their difference draw no NaN coordinate.
        assert!(!line(&[-f64::MAX, f64::MAX]).contains("NaN"));
    }
}
