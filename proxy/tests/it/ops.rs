//! The deployment files of `ops/`, checked offline: the Kubernetes manifests against the
//! Kubernetes schemas (and the rules a schema cannot state: non-root, read-only root file
//! system, probes on the admin port, a grace period long enough to drain), the settings their
//! ConfigMaps hold loaded by `atdp-proxy --check-config`, and the systemd unit by
//! `systemd-analyze verify`. The container recipe is not built here (no container runtime).
//!
//! The operations views: the alerting rules by `promtool check rules` and their unit tests by
//! `promtool test rules`; every metric and label that the dashboard and the rules ask for
//! against a scrape of a running proxy; the dashboard's structure (each panel on the
//! data-source variable, with its own id, place and queries).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use crate::harness::*;

fn check_ops(args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(root().join("tests/python/check_ops.py"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "check_ops.py {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_kubernetes_manifests_are_valid_and_their_proxy_settings_load() {
    let ops = root().join("ops");
    let report = check_ops(&["kubernetes", ops.to_str().unwrap()]);
    for kind in [
        "StatefulSet",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(report.contains(kind), "{kind} not checked: {report}");
    }

    // The settings of each ConfigMap, with the cluster's paths replaced by local ones.
    let dir = tempfile::tempdir().unwrap();
    check_ops(&[
        "proxy-configs",
        ops.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    let (_, cert, key) = tls_certificates(dir.path());
    for (name, tls) in [("sidecar", false), ("gateway", true)] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_atdp-proxy"));
        command
            .arg("--config")
            .arg(dir.path().join(format!("{name}.toml")))
            .arg("--policy")
            .arg(quickstart())
            .arg("--keys")
            .arg(dir.path().join("keys.json"))
            .arg("--wal")
            .arg(dir.path().join("wal"));
        if tls {
            command.args(["--tls-cert", &cert, "--tls-key", &key]);
        }
        let out = command
            .arg("--check-config")
            .env("OPENAI_API_KEY", "sk-test")
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("configuration is valid"),
            "{name}: {stdout}"
        );
        assert!(stdout.contains("s3://"), "{name} records to object storage");
        let scheme = if tls { "(https" } else { "(plain http)" };
        assert!(stdout.contains(scheme), "{name}: {stdout}");
    }
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root().join("ops/systemd/atdp-proxy.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/atdp-proxy "));
    // systemd-analyze checks that the command exists: the binary under test stands in.
    let unit = unit.replace(
        "/usr/local/bin/atdp-proxy",
        env!("CARGO_BIN_EXE_atdp-proxy"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("atdp-proxy.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package; .ci/run installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // What it says of other units (the machine's own targets) is not the unit's.
    let about_the_unit: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("atdp-proxy.service"))
        .collect();
    assert!(out.status.success() && about_the_unit.is_empty(), "{said}");
}

const DASHBOARD: &str = "ops/grafana/atdp-proxy.json";
const ALERTS: &str = "ops/prometheus/atdp-alerts.yml";
const ALERT_TESTS: &str = "ops/prometheus/atdp-alerts.test.yml";

/// The data source every panel and query names: the dashboard's template variable.
const DATASOURCE: &str = "${datasource}";

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(root())
        .output()
        .expect("promtool (Debian's prometheus package; .ci/run installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {said}");
    said
}

/// One alerting rule of `atdp-alerts.yml`, read line by line: the file keeps to one layout,
/// a rule from its `- alert:` line to the next, its `expr:` on one line or as a `|` block.
struct AlertRule {
    name: String,
    expr: String,
    /// The keys of its lines (`expr`, `for`, `severity`, `summary`, …).
    keys: BTreeSet<String>,
}

fn alert_rules() -> Vec<AlertRule> {
    let text = std::fs::read_to_string(root().join(ALERTS)).unwrap();
    let mut rules: Vec<AlertRule> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            rules.push(AlertRule {
                name: name.trim().to_owned(),
                expr: String::new(),
                keys: BTreeSet::new(),
            });
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            continue;
        };
        let key = trimmed.split_once(':').map(|(key, _)| key);
        if let Some(key) = key.filter(|k| k.chars().all(word)) {
            rule.keys.insert(key.to_owned());
        }
        if let Some(expr) = trimmed.strip_prefix("expr:") {
            rule.expr = expr.trim().to_owned();
            if rule.expr == "|" {
                let indent = line.len() - trimmed.len();
                rule.expr.clear();
                while let Some(next) = lines.next_if(|l| l.len() - l.trim_start().len() > indent) {
                    rule.expr.push_str(next.trim());
                    rule.expr.push('\n');
                }
            }
        }
    }
    rules
}

#[test]
fn the_alerting_rules_check_and_pass_their_unit_tests() {
    let rules = alert_rules();
    let checked = promtool(&["check", "rules", ALERTS]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "every rule is read here: {checked}"
    );
    // What each evaluation in the unit tests expects: (alert, whether it fires).
    let tests = std::fs::read_to_string(root().join(ALERT_TESTS)).unwrap();
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let expected: BTreeSet<(&str, bool)> = lines
        .windows(2)
        .filter_map(|pair| {
            let alert = pair[0].strip_prefix("alertname: ")?;
            Some((alert, pair[1] == "exp_alerts:"))
        })
        .collect();
    for rule in &rules {
        assert!(!rule.expr.is_empty(), "{}: no expr read", rule.name);
        for key in ["for", "severity", "summary", "description"] {
            assert!(rule.keys.contains(key), "{} has no {key}", rule.name);
        }
        for fires in [true, false] {
            assert!(
                expected.contains(&(rule.name.as_str(), fires)),
                "{ALERT_TESTS} has no evaluation where {} {}",
                rule.name,
                if fires { "fires" } else { "stays quiet" }
            );
        }
    }
    let tested = promtool(&["test", "rules", ALERT_TESTS]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// A scrape of the admin port's `/metrics`.
struct Exposition {
    /// Each family's `# TYPE`.
    types: BTreeMap<String, String>,
    /// Each sample name (a histogram's `_bucket`, `_sum`, `_count`) and the label names its
    /// series carry.
    samples: BTreeMap<String, BTreeSet<String>>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut types = BTreeMap::new();
        let mut samples: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                let (name, kind) = declared.split_once(' ').unwrap();
                types.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let name_end = line.find(['{', ' ']).unwrap();
                let labels = samples.entry(line[..name_end].to_owned()).or_default();
                if let Some(inside) = line[name_end..].strip_prefix('{') {
                    let pairs = &inside[..inside.rfind('}').unwrap()];
                    labels.extend(names(&without_strings(pairs)));
                }
            }
        }
        Exposition { types, samples }
    }

    /// Whether a query may select `name`: a counter or a gauge by its own name, a histogram
    /// only by its `_bucket`, `_sum` or `_count` series; and the scrape has the series.
    fn exports(&self, name: &str) -> bool {
        let family_ok = match self.types.get(name) {
            Some(kind) => kind != "histogram",
            None => ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .and_then(|family| self.types.get(family))
                    .is_some_and(|kind| kind == "histogram")
            }),
        };
        family_ok && self.samples.contains_key(name)
    }

    fn labels(&self, name: &str) -> BTreeSet<String> {
        self.samples.get(name).cloned().unwrap_or_default()
    }
}

/// The text with every string literal (`"…"`, `'…'`, `` `…` ``) blanked: what is left of a
/// PromQL expression is metric names, label names, functions and numbers.
fn without_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote = None;
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None => {
                out.push(c);
                continue;
            }
            Some(_) if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
        }
        out.push(' ');
    }
    out
}

/// A character of a word of PromQL: a name or a number.
fn word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The words of a PromQL expression and its other characters one by one, spaces left out.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some(first) = rest.chars().next() {
        let end = if word(first) {
            rest.find(|c: char| !word(c)).unwrap_or(rest.len())
        } else {
            first.len_utf8()
        };
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    out
}

/// Whether a token is a name (not a number, not punctuation).
fn is_name(token: &str) -> bool {
    token.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// The names among the tokens of `text`.
fn names(text: &str) -> BTreeSet<String> {
    tokens(text)
        .into_iter()
        .filter(|t| is_name(t))
        .map(String::from)
        .collect()
}

/// What an expression asks of the proxy's metrics: each `atdp_` name it selects, with the
/// label names of its selector, and the label names it groups by.
#[derive(Debug, Default)]
struct Asks {
    selectors: Vec<(String, BTreeSet<String>)>,
    grouping: BTreeSet<String>,
}

fn asks(expr: &str) -> Asks {
    let blanked = without_strings(expr);
    let tokens = tokens(&blanked);
    let mut asks = Asks::default();
    // The names between the `open` right after token `at` and the next `close`.
    let inside = |at: usize, open: &str, close: &str| -> BTreeSet<String> {
        if tokens.get(at + 1) != Some(&open) {
            return BTreeSet::new();
        }
        tokens[at + 2..]
            .iter()
            .take_while(|t| **t != close)
            .filter(|t| is_name(t))
            .map(|t| (*t).to_owned())
            .collect()
    };
    for (at, token) in tokens.iter().enumerate() {
        if token.starts_with("atdp_") {
            asks.selectors
                .push(((*token).to_owned(), inside(at, "{", "}")));
        } else if matches!(*token, "by" | "without" | "on" | "ignoring") {
            asks.grouping.extend(inside(at, "(", ")"));
        }
    }
    asks
}

/// What is wrong with `expr` (from `source`) against the scrape: names the proxy does not
/// export, labels their series do not carry.
fn problems(source: &str, expr: &str, exported: &Exposition) -> Vec<String> {
    // Prometheus adds these to every series it scrapes.
    let target: BTreeSet<String> = ["job", "instance"].map(String::from).into();
    let asks = asks(expr);
    let mut problems = Vec::new();
    if asks.selectors.is_empty() {
        problems.push(format!("{source}: no atdp_ metric in {expr:?}"));
    }
    let mut known = target.clone();
    for (name, labels) in &asks.selectors {
        if !exported.exports(name) {
            problems.push(format!("{source}: {name} is not exported"));
        }
        let carried = exported.labels(name);
        for label in labels.difference(&target) {
            if !carried.contains(label) {
                problems.push(format!("{source}: {name} has no label {label}"));
            }
        }
        known.extend(carried);
    }
    for label in asks.grouping.difference(&known) {
        problems.push(format!(
            "{source}: no series in {expr:?} has the label {label}"
        ));
    }
    problems
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(root().join(DASHBOARD)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every panel, those inside a collapsed row included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

/// Each query of the dashboard (panel targets and template variables), with where it is.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            let title = panel["title"].as_str().unwrap_or_default();
            queries.push((format!("panel {title:?}"), expr.to_owned()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            let name = variable["name"].as_str().unwrap_or_default();
            queries.push((format!("variable {name}"), query.to_owned()));
        }
    }
    queries
}

/// The value of the unlabelled counter `name` in a scrape.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} not in {text}"))
        .parse()
        .unwrap()
}

#[test]
fn the_scan_cache_answers_a_conversations_history_and_the_metrics_count_it() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    let system = "You are the support agent of the billing team. Answer in two sentences, \
                  quote the order number, and never promise a refund before checking it.";
    let first = "Hello, this is Maria Jansen. My order 55120 arrived broken and I would like \
                 a replacement; reach me at maria.jansen@example.com please.";
    let auth = format!("Bearer {DEMO_KEY}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let scrape = || String::from_utf8(http(proxy.admin, "GET", "/metrics", &[], b"").body).unwrap();
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": system}),
        serde_json::json!({"role": "user", "content": first}),
    ];
    let mut seen = Vec::new();
    for turn in 0..3 {
        let body = serde_json::json!({"model": "gpt-4.1-mini", "messages": messages});
        let response = http(
            proxy.port,
            "POST",
            "/v1/chat/completions",
            &headers,
            body.to_string().as_bytes(),
        );
        assert_eq!(response.status, 200, "turn {turn}");
        messages.push(serde_json::json!({"role": "assistant", "content": "Noted."}));
        messages.push(serde_json::json!({"role": "user", "content": format!(
            "Turn {turn}: any news about the replacement for order 55120? It has been a while \
             and I still have not heard back from anyone on your team."
        )}));
        let text = scrape();
        seen.push((
            counter(&text, "atdp_scan_cache_lookups_total"),
            counter(&text, "atdp_scan_cache_hits_total"),
            counter(&text, "atdp_scan_cache_hit_bytes_total"),
        ));
    }
    // Every later turn repeats the history: the system prompt and every earlier user turn
    // (each over 128 bytes) are answered by the cache, once per pass that reads them.
    for (turn, pair) in seen.windows(2).enumerate() {
        let ((lookups_before, hits_before, bytes_before), (lookups, hits, bytes)) =
            (pair[0], pair[1]);
        let repeated = 2 + turn as u64;
        assert!(lookups > lookups_before, "{seen:?}");
        assert!(
            hits - hits_before >= repeated,
            "turn {}: {seen:?}",
            turn + 1
        );
        assert!(
            bytes - bytes_before >= (system.len() + first.len()) as u64,
            "{seen:?}"
        );
    }
    assert!(
        seen[0].1 < seen[0].0,
        "the first turn's texts were new: {seen:?}"
    );
}

#[test]
fn the_dashboard_and_the_alerts_ask_only_for_what_the_proxy_exports() {
    let upstream = Upstream::start();
    let proxy = Proxy::start(upstream.port, &[]);
    // One call with an e-mail address to mask, one with a key the policy does not know: the
    // labelled families get series.
    let chat = br#"{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"mail jane@example.com"}]}"#;
    for (key, status) in [(DEMO_KEY, 200), ("sk-atdp-no-such-key", 401)] {
        let auth = format!("Bearer {key}");
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        let response = http(proxy.port, "POST", "/v1/chat/completions", &headers, chat);
        assert_eq!(response.status, status, "{key}");
    }
    let scraped = http(proxy.admin, "GET", "/metrics", &[], b"");
    assert_eq!(scraped.status, 200);
    let text = String::from_utf8(scraped.body).unwrap();
    for series in [
        "atdp_requests_total{api=\"openai.chat\",status=\"200\"} 1",
        "atdp_requests_total{api=\"openai.chat\",status=\"401\"} 1",
        "atdp_masked_total{entity=\"EMAIL_ADDRESS\"} 1",
        "atdp_denied_total{reason=\"invalid_api_key\"} 1",
        "atdp_upstream_latency_seconds_count 1",
    ] {
        assert!(text.contains(series), "{series} in {text}");
    }
    let exported = Exposition::parse(&text);

    // The check itself finds a misspelt name, a histogram without its suffix, and labels the
    // series do not carry.
    for wrong in [
        "sum(rate(atdp_request_total[5m]))",
        "atdp_added_latency_seconds > 1",
        "rate(atdp_masked_total{entities=\"EMAIL_ADDRESS\"}[5m])",
        "sum by (reasons) (rate(atdp_denied_total[5m]))",
        "histogram_quantile(0.5, sum by (le, api) (rate(atdp_added_latency_seconds_bucket[5m])))",
    ] {
        assert!(
            !problems("example", wrong, &exported).is_empty(),
            "{wrong} passed"
        );
    }

    let dashboard = dashboard();
    let queries = dashboard_queries(&dashboard);
    let rules = alert_rules();
    assert!(!rules.is_empty());
    let mut wrong: Vec<String> = queries
        .iter()
        .flat_map(|(source, expr)| problems(source, expr, &exported))
        .collect();
    for rule in &rules {
        wrong.extend(problems(
            &format!("alert {}", rule.name),
            &rule.expr,
            &exported,
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // And the dashboard shows every family the proxy exports.
    let shown: BTreeSet<String> = queries
        .iter()
        .flat_map(|(_, expr)| asks(expr).selectors)
        .map(|(name, _)| name)
        .collect();
    for (family, kind) in &exported.types {
        let series = if kind == "histogram" {
            format!("{family}_bucket")
        } else {
            family.clone()
        };
        assert!(shown.contains(&series), "{family} is not on the dashboard");
    }
    let _ = proxy.stop();
}

#[test]
fn the_dashboard_is_well_formed() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 39);
    assert_eq!(dashboard["uid"], "atdp-proxy");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    for name in ["job", "instance"] {
        assert_eq!(variable(name)["type"], "query");
        assert_eq!(variable(name)["datasource"]["uid"], DATASOURCE, "{name}");
    }

    let mut ids = BTreeSet::new();
    let mut places: Vec<(String, [u64; 4])> = Vec::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id taken"
        );
        let grid = &panel["gridPos"];
        let place = ["x", "y", "w", "h"].map(|k| grid[k].as_u64().unwrap());
        let [x, _, w, h] = place;
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: gridPos {grid}");
        places.push((title.to_owned(), place));
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["type"], "prometheus", "{title}");
        assert_eq!(panel["datasource"]["uid"], DATASOURCE, "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        let mut refs = BTreeSet::new();
        for target in targets {
            assert!(refs.insert(target["refId"].as_str().unwrap()), "{title}");
            assert_eq!(target["datasource"]["uid"], DATASOURCE, "{title}");
            let expr = target["expr"].as_str().unwrap();
            assert!(!expr.trim().is_empty(), "{title}: empty expr");
            // Each selector follows the job and instance variables.
            for (name, labels) in asks(expr).selectors {
                assert!(
                    labels.contains("job") && labels.contains("instance"),
                    "{title}: {name} ignores $job or $instance"
                );
            }
        }
    }
    // No two panels on the same cells.
    for (i, (a, [ax, ay, aw, ah])) in places.iter().enumerate() {
        for (b, [bx, by, bw, bh]) in &places[i + 1..] {
            let apart = ax + aw <= *bx || bx + bw <= *ax || ay + ah <= *by || by + bh <= *ay;
            assert!(apart, "{a} and {b} overlap");
        }
    }
}
