//! Prometheus metrics, rendered in the text exposition format on the admin port.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds in seconds, from 50 µs to 60 s.
const BOUNDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// How a shadow copy ends (`crate::shadow`); each is exported from the start, at 0.
pub const SHADOW_OUTCOMES: [&str; 3] = ["recorded", "failed", "skipped"];

/// A latency histogram.
#[derive(Debug)]
pub struct Histogram {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in nanoseconds.
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: BOUNDS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        if let Some(index) = BOUNDS.iter().position(|b| seconds <= *b) {
            self.buckets[index].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            value.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in BOUNDS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Everything the proxy counts.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests by (api, status code).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Masked values by entity type.
    masked: Mutex<BTreeMap<String, u64>>,
    /// Denials by reason kind.
    denied: Mutex<BTreeMap<String, u64>>,
    /// The proxy's own work before a call is dispatched (from the request's arrival: auth,
    /// body, policy, masking).
    pub added: Histogram,
    /// Time from dispatch to the upstream's response header.
    pub upstream: Histogram,
    /// Calls served without being recorded (back-pressure with `serve_unrecorded`).
    pub unrecorded: AtomicU64,
    /// Calls refused because of back-pressure.
    pub refused_backpressure: AtomicU64,
    /// Records that failed to reach the writer.
    pub record_errors: AtomicU64,
    /// Shadow copies by how they ended (`recorded`, `failed`, `skipped`).
    shadows: Mutex<BTreeMap<&'static str, u64>>,
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K, by: u64) {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    *map.entry(key).or_insert(0) += by;
}

impl Metrics {
    /// Counts a finished request.
    pub fn request(&self, api: &str, status: u16) {
        bump(&self.requests, (api.to_owned(), status), 1);
    }

    /// Counts masked values.
    pub fn masked(&self, entity: &str) {
        bump(&self.masked, entity.to_owned(), 1);
    }

    /// Counts a denial.
    pub fn denied(&self, reason: &str) {
        bump(&self.denied, reason.to_owned(), 1);
    }

    /// Counts a shadow copy by how it ended.
    pub fn shadow(&self, outcome: &'static str) {
        bump(&self.shadows, outcome, 1);
    }

    /// The text exposition; `lake` gives the writer's back-log figures.
    /// `scan` is what the scan cache of the policy in force answered (`None`: the cache is
    /// off); its counters start again at a policy reload, which builds a new scanner.
    pub fn render(
        &self,
        lake: &atdp_lake::WriterStats,
        queue_free_bytes: usize,
        scan: Option<atdp_detect::CacheStats>,
    ) -> String {
        let mut out = String::new();
        out.push_str("# HELP atdp_requests_total Requests by API and status.\n# TYPE atdp_requests_total counter\n");
        for ((api, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "atdp_requests_total{{api=\"{api}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP atdp_masked_total Values masked, by entity type.\n# TYPE atdp_masked_total counter\n");
        for (entity, n) in self.masked.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "atdp_masked_total{{entity=\"{entity}\"}} {n}");
        }
        out.push_str("# HELP atdp_denied_total Requests refused, by reason.\n# TYPE atdp_denied_total counter\n");
        for (reason, n) in self.denied.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "atdp_denied_total{{reason=\"{reason}\"}} {n}");
        }
        out.push_str("# HELP atdp_shadow_calls_total Shadow copies of calls, by outcome (recorded, failed, skipped).\n# TYPE atdp_shadow_calls_total counter\n");
        let shadows = self
            .shadows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for outcome in SHADOW_OUTCOMES {
            let n = shadows.get(outcome).copied().unwrap_or(0);
            let _ = writeln!(out, "atdp_shadow_calls_total{{outcome=\"{outcome}\"}} {n}");
        }
        self.added.render(
            "atdp_added_latency_seconds",
            "Proxy work before a call is dispatched (auth, policy, masking).",
            &mut out,
        );
        self.upstream.render(
            "atdp_upstream_latency_seconds",
            "From dispatch to the upstream's response header.",
            &mut out,
        );
        for (name, help, value) in [
            (
                "atdp_unrecorded_total",
                "Calls served without recording (back-pressure).",
                self.unrecorded.load(Ordering::Relaxed),
            ),
            (
                "atdp_refused_backpressure_total",
                "Calls refused with 503 under back-pressure.",
                self.refused_backpressure.load(Ordering::Relaxed),
            ),
            (
                "atdp_record_errors_total",
                "Steps that could not be handed to the lake writer.",
                self.record_errors.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        if let Some(scan) = scan {
            for (name, help, value) in [
                (
                    "atdp_scan_cache_lookups_total",
                    "Texts of 128 bytes or more looked up in the scan cache.",
                    scan.lookups,
                ),
                (
                    "atdp_scan_cache_hits_total",
                    "Texts the scan cache answered (scanned recently for the same tenant).",
                    scan.hits,
                ),
                (
                    "atdp_scan_cache_lookup_bytes_total",
                    "Bytes of the texts looked up in the scan cache.",
                    scan.looked_up_bytes,
                ),
                (
                    "atdp_scan_cache_hit_bytes_total",
                    "Bytes of the texts the scan cache answered.",
                    scan.hit_bytes,
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP atdp_lake_backlog_bytes Write-ahead log bytes not yet committed to the lake.\n# TYPE atdp_lake_backlog_bytes gauge\natdp_lake_backlog_bytes {}",
            lake.held_bytes
        );
        let _ = writeln!(
            out,
            "# HELP atdp_lake_store_down Whether object storage is failing (1) or not (0).\n# TYPE atdp_lake_store_down gauge\natdp_lake_store_down {}",
            u8::from(lake.store_down)
        );
        let _ = writeln!(
            out,
            "# HELP atdp_record_queue_free_bytes Room left in the queue to the recording thread.\n# TYPE atdp_record_queue_free_bytes gauge\natdp_record_queue_free_bytes {queue_free_bytes}"
        );
        out
    }
}
