//! `report.html`, written next to the adapter: reward, loss, KL, entropy and the advantage
//! distribution over optimizer steps, as inline SVG (no scripts, no external files), plus
//! the manifest's key facts; and [`StepMetrics`], what each step measured (a line of
//! `metrics.jsonl`), that the report draws.

use std::fmt::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Result;
use atdp_model_files::write_atomic;

/// What one optimizer step measured (one line of `metrics.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Optimizer step, from 1.
    pub step: u64,
    /// Total steps of the run.
    pub total_steps: u64,
    /// Token-mean loss.
    pub loss: f64,
    /// Mean return of the step's examples.
    pub reward_mean: f64,
    /// Mean advantage.
    pub advantage_mean: f64,
    /// Standard deviation of the advantages.
    pub advantage_std: f64,
    /// Smallest advantage.
    pub advantage_min: f64,
    /// Largest advantage.
    pub advantage_max: f64,
    /// Token-mean k3 KL to the base model (0 when the KL term is off).
    pub kl: f64,
    /// Token-mean entropy of the policy on completion tokens.
    pub entropy: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Examples in the step.
    pub examples: usize,
    /// Completion tokens in the step.
    pub completion_tokens: usize,
    /// Tokens (prompt and completion) processed per second.
    pub tokens_per_s: f64,
}

/// The report file.
pub const REPORT_FILE: &str = "report.html";

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 200.0;
const PAD: f64 = 40.0;

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An SVG chart of `series` (name, colour, values by step), with an optional band
/// (lower, upper) drawn behind them.
fn chart(
    title: &str,
    steps: &[u64],
    series: &[(&str, &str, Vec<f64>)],
    band: Option<(&[f64], &[f64])>,
) -> String {
    let all = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .chain(
            band.into_iter()
                .flat_map(|(lo, hi)| lo.iter().chain(hi).copied()),
        )
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        (lo, hi) = (lo - 0.5, hi + 0.5);
    }
    let (first, last) = (
        steps.first().copied().unwrap_or(0) as f64,
        steps.last().copied().unwrap_or(1) as f64,
    );
    let span = (last - first).max(1.0);
    let x = |s: u64| PAD + (s as f64 - first) / span * (WIDTH - 2.0 * PAD);
    let y = |v: f64| HEIGHT - PAD + -(v - lo) / (hi - lo) * (HEIGHT - 2.0 * PAD);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<figure><figcaption>{}</figcaption><svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">"#,
        escape(title)
    );
    let _ = write!(
        svg,
        r##"<rect x="{PAD}" y="{PAD}" width="{}" height="{}" fill="none" stroke="#ccc"/>"##,
        WIDTH - 2.0 * PAD,
        HEIGHT - 2.0 * PAD
    );
    let _ = write!(
        svg,
        r#"<text x="2" y="{:.1}" font-size="10">{hi:.3}</text><text x="2" y="{:.1}" font-size="10">{lo:.3}</text>"#,
        PAD + 4.0,
        HEIGHT - PAD
    );
    let _ = write!(
        svg,
        r#"<text x="{PAD}" y="{:.1}" font-size="10">step {first}</text><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">step {last}</text>"#,
        HEIGHT - PAD + 14.0,
        WIDTH - PAD,
        HEIGHT - PAD + 14.0
    );
    if let Some((lower, upper)) = band {
        let mut points: Vec<String> = steps
            .iter()
            .zip(upper)
            .map(|(&s, &v)| format!("{:.1},{:.1}", x(s), y(v)))
            .collect();
        points.extend(
            steps
                .iter()
                .zip(lower)
                .rev()
                .map(|(&s, &v)| format!("{:.1},{:.1}", x(s), y(v))),
        );
        let _ = write!(
            svg,
            r##"<polygon points="{}" fill="#9ecae1" fill-opacity="0.5" stroke="none"/>"##,
            points.join(" ")
        );
    }
    for (i, (name, colour, values)) in series.iter().enumerate() {
        let points: Vec<String> = steps
            .iter()
            .zip(values)
            .filter(|(_, v)| v.is_finite())
            .map(|(&s, &v)| format!("{:.1},{:.1}", x(s), y(v)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" font-size="10" fill="{colour}">{}</text>"#,
            points.join(" "),
            WIDTH - PAD - 120.0 + 60.0 * (i % 2) as f64,
            PAD - 6.0 - 12.0 * (i / 2) as f64,
            escape(name)
        );
    }
    svg.push_str("</svg></figure>\n");
    svg
}

/// Renders the report of a run from its metrics and manifest (pretty JSON).
pub fn render(metrics: &[StepMetrics], manifest_json: &str) -> String {
    let steps: Vec<u64> = metrics.iter().map(|m| m.step).collect();
    let col = |f: fn(&StepMetrics) -> f64| metrics.iter().map(f).collect::<Vec<f64>>();
    let (lower, upper): (Vec<f64>, Vec<f64>) = metrics
        .iter()
        .map(|m| {
            (
                m.advantage_mean - m.advantage_std,
                m.advantage_mean + m.advantage_std,
            )
        })
        .unzip();
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>atdp-train report</title>\
         <style>body{font-family:sans-serif;margin:2em}figure{display:inline-block;margin:1em}\
         figcaption{font-weight:bold}pre{background:#f6f6f6;padding:1em;overflow:auto}</style>\
         </head><body><h1>atdp-train report</h1>\n",
    );
    html.push_str(&chart(
        "Mean return",
        &steps,
        &[("reward", "#2b8cbe", col(|m| m.reward_mean))],
        None,
    ));
    html.push_str(&chart(
        "Loss (token mean)",
        &steps,
        &[("loss", "#e34a33", col(|m| m.loss))],
        None,
    ));
    html.push_str(&chart(
        "KL to the base model (k3)",
        &steps,
        &[("kl", "#756bb1", col(|m| m.kl))],
        None,
    ));
    html.push_str(&chart(
        "Entropy (nats/token)",
        &steps,
        &[("entropy", "#31a354", col(|m| m.entropy))],
        None,
    ));
    html.push_str(&chart(
        "Advantages: min, max, mean ± std (band)",
        &steps,
        &[
            ("min", "#636363", col(|m| m.advantage_min)),
            ("max", "#636363", col(|m| m.advantage_max)),
            ("mean", "#08519c", col(|m| m.advantage_mean)),
        ],
        Some((&lower, &upper)),
    ));
    html.push_str(&chart(
        "Gradient norm (before clipping) and learning rate × 1000",
        &steps,
        &[
            ("grad norm", "#d95f0e", col(|m| m.grad_norm)),
            ("lr×1000", "#1b9e77", col(|m| m.lr * 1000.0)),
        ],
        None,
    ));
    html.push_str("<h2>Manifest</h2><pre>");
    html.push_str(&escape(manifest_json));
    html.push_str("</pre></body></html>\n");
    html
}

/// Writes `report.html` into `dir`.
pub fn write(dir: &Path, metrics: &[StepMetrics], manifest_json: &str) -> Result<()> {
    Ok(write_atomic(
        &dir.join(REPORT_FILE),
        render(metrics, manifest_json).as_bytes(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_one_chart_per_metric_and_escapes_text() {
        let m = |step, reward| StepMetrics {
            step,
            total_steps: 2,
            loss: 0.1,
            reward_mean: reward,
            advantage_mean: 0.0,
            advantage_std: 1.0,
            advantage_min: -1.0,
            advantage_max: 1.0,
            kl: 0.0,
            entropy: 5.0,
            grad_norm: 0.5,
            lr: 1e-4,
            examples: 4,
            completion_tokens: 10,
            tokens_per_s: 100.0,
        };
        let html = render(&[m(1, 0.0), m(2, 1.0)], r#"{"lake": "<x>"}"#);
        assert_eq!(html.matches("<svg").count(), 6);
        assert!(html.contains("&lt;x&gt;") && !html.contains("<x>"));
        assert!(!html.contains("<script"));
        assert!(html.contains("Mean return"));
    }
}
