//! Console latency on a large synthetic lake: a trajectory page and a tenant + day search,
//! through the real HTTP server (login, Cedar, lake read, render).
//!
//! `cargo run --release -p atdp-audit --example bench-console -- --lake /tmp/atdp-bench-console/lake --steps 1000000`
//!
//! The lake is generated first when missing (atdp_lake::synth through the lake writer, then
//! compacted with `optimize` as an operator would), so later runs reuse it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atdp_audit::{Catalog, ConsoleConfig, Trail};
use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::{Lake, LakeWriter, WriterConfig};
use atdp_schema::Table;
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// The lake directory (generated when missing).
    #[arg(long, default_value = "/tmp/atdp-bench-console/lake")]
    lake: PathBuf,
    /// Steps to generate.
    #[arg(long, default_value_t = 1_000_000)]
    steps: usize,
    /// Tenants to generate.
    #[arg(long, default_value_t = 4)]
    tenants: usize,
    /// Days to generate.
    #[arg(long, default_value_t = 14)]
    days: u32,
    /// Requests per measurement.
    #[arg(long, default_value_t = 30)]
    runs: usize,
}

const KEY: &str = "sk-bench-auditor";

/// A signed-in console session, sending what the console's own pages send: the login form's
/// nonce cookie and token, the console's origin, and the session's token in every form.
struct Session {
    http: reqwest::Client,
    base: String,
    cookie: String,
    csrf: String,
}

/// The `name=value` part of the `Set-Cookie` named `name`.
fn cookie(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next())
        .find(|pair| pair.starts_with(&format!("{name}=")))
        .expect("the cookie")
        .to_owned()
}

/// The value of a page's first `csrf` form field.
fn csrf_of(html: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let at = html.find(marker).expect("a csrf field") + marker.len();
    html[at..at + html[at..].find('"').unwrap()].to_owned()
}

impl Session {
    async fn login(base: String) -> Session {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let form = http.get(format!("{base}/login")).send().await.unwrap();
        let nonce = cookie(&form, "atdp_login");
        let token = csrf_of(&form.text().await.unwrap());
        let login = http
            .post(format!("{base}/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", &base)
            .header("cookie", nonce)
            .body(format!("key={KEY}&csrf={token}"))
            .send()
            .await
            .unwrap();
        let cookie = cookie(&login, "atdp_session");
        let page = http
            .get(format!("{base}/search"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        let csrf = csrf_of(&page.text().await.unwrap());
        Session {
            http,
            base,
            cookie,
            csrf,
        }
    }

    /// Posts a form and returns the milliseconds until the whole page arrived.
    async fn post(&self, path: &str, form: &str) -> f64 {
        let body = if form.is_empty() {
            format!("csrf={}", self.csrf)
        } else {
            format!("{form}&csrf={}", self.csrf)
        };
        let started = Instant::now();
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", &self.base)
            .header("cookie", &self.cookie)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        response.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status}");
        started.elapsed().as_secs_f64() * 1e3
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{name}: n={} p50={:.1} ms p95={:.1} ms max={:.1} ms",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.95),
        ms[ms.len() - 1]
    );
}

async fn generate_lake(args: &Args, work: &Path) {
    let started = Instant::now();
    let mut config = WriterConfig::new(
        args.lake.to_string_lossy().into_owned(),
        work.join("wal-generate"),
    );
    config.fsync = false;
    let writer = LakeWriter::open(config).await.unwrap();
    let summary = generate(
        &SynthConfig {
            steps: args.steps,
            tenants: args.tenants,
            days: args.days,
            ..SynthConfig::default()
        },
        |record| loop {
            match writer.append(record.clone()) {
                Ok(_) => return Ok(()),
                Err(atdp_lake::Error::Backpressure { .. }) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(e),
            }
        },
    )
    .unwrap();
    writer.flush().await.unwrap();
    writer.shutdown(Duration::from_secs(600)).await.unwrap();
    println!(
        "generated {} steps, {} trajectories in {:.0} s",
        summary.steps,
        summary.trajectories,
        started.elapsed().as_secs_f64()
    );
    let lake = Lake::new(&args.lake.to_string_lossy(), Default::default()).unwrap();
    for table in Table::ALL {
        let started = Instant::now();
        let report = atdp_lake::maintenance::optimize(&lake, table, 128 << 20)
            .await
            .unwrap();
        println!(
            "optimized {table}: {} files into {} in {:.0} s",
            report.files_removed,
            report.files_added,
            started.elapsed().as_secs_f64()
        );
    }
}

/// The quickstart schema and policies, with the synthetic tenants and one auditor of all.
fn policy_dir(work: &Path, tenants: usize) -> PathBuf {
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/examples/quickstart");
    let dir = work.join("policy");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["schema.cedarschema", "policies.cedar"] {
        std::fs::copy(quickstart.join(name), dir.join(name)).unwrap();
    }
    let names: Vec<String> = (0..tenants).map(|t| format!("tenant-{t:02}")).collect();
    let mut entities: Vec<serde_json::Value> = names
        .iter()
        .map(|t| serde_json::json!({"uid": {"type": "Atdp::Tenant", "id": t}, "attrs": {}, "parents": []}))
        .collect();
    entities.push(serde_json::json!({
        "uid": {"type": "Atdp::Auditor", "id": atdp_policies::hash_api_key(KEY)},
        "attrs": {"role": "compliance_officer", "tenants": names.iter().map(|t| serde_json::json!({"__entity": {"type": "Atdp::Tenant", "id": t}})).collect::<Vec<_>>()},
        "parents": []
    }));
    std::fs::write(
        dir.join("entities.json"),
        serde_json::to_string(&entities).unwrap(),
    )
    .unwrap();
    dir
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let work = args.lake.parent().unwrap().to_path_buf();
    if !args.lake.join("atdp/v1/steps/_delta_log").exists() {
        generate_lake(&args, &work).await;
    }
    let lake = Lake::new(&args.lake.to_string_lossy(), Default::default()).unwrap();
    let started = Instant::now();
    let catalog = Catalog::open(&lake, &Default::default()).await.unwrap();
    println!(
        "catalog open (the four tables' logs, cold, as at console start): {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    let count = catalog.sql("SELECT count(*) FROM steps").await.unwrap();
    println!(
        "lake: {}",
        arrow::util::pretty::pretty_format_batches(&count)
            .unwrap()
            .to_string()
            .replace('\n', " ")
    );
    let sample = catalog
        .sql(&format!(
            "SELECT trajectory_id, tenant_id, CAST(date AS VARCHAR) AS day FROM steps WHERE turn_index = 0 ORDER BY random() LIMIT {}",
            args.runs
        ))
        .await
        .unwrap();
    let mut picks = Vec::new();
    for batch in &sample {
        let column = |i: usize| {
            let c =
                arrow::compute::cast(batch.column(i), &arrow::datatypes::DataType::Utf8).unwrap();
            c.as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap()
                .iter()
                .map(|v| v.unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        let (ids, tenants, days) = (column(0), column(1), column(2));
        for i in 0..ids.len() {
            picks.push((ids[i].clone(), tenants[i].clone(), days[i].clone()));
        }
    }

    let console_dir = work.join(format!("console-{}", std::process::id()));
    let trail = Trail::open(WriterConfig::new(
        args.lake.to_string_lossy().into_owned(),
        console_dir.join("wal"),
    ))
    .await
    .unwrap();
    let server = atdp_audit::serve(
        lake.clone(),
        trail,
        ConsoleConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            policy_dir: policy_dir(&console_dir, args.tenants),
            keys: console_dir.join("keys.json"),
            secure_cookie: false,
            page_size: 50,
            tls: None,
            metrics_token: None,
        },
    )
    .await
    .unwrap();
    let console = Session::login(format!("http://{}", server.addr)).await;

    // Each measurement waits out the console's 2 s catalog cache once, so its first request
    // pays for reading the commits since (an incremental refresh); reported separately. Every
    // measured request is a form post, as the console's own buttons send it, and each is
    // audited (a `read` or `query` event), as in use.
    for (name, posts) in [
        (
            "trajectory page (tenant hint from the search link)",
            picks
                .iter()
                .map(|(id, tenant, _)| {
                    (
                        format!("/trajectory?id={id}&tenant={tenant}"),
                        String::new(),
                    )
                })
                .collect::<Vec<_>>(),
        ),
        (
            "trajectory page (no hint: all tenants)",
            picks
                .iter()
                .map(|(id, _, _)| (format!("/trajectory?id={id}"), String::new()))
                .collect(),
        ),
        (
            "search: tenant + one day, first page of 50",
            picks
                .iter()
                .map(|(_, tenant, day)| {
                    (
                        "/search".to_owned(),
                        format!("tenant={tenant}&since={day}&until={day}"),
                    )
                })
                .collect(),
        ),
        (
            "search landing page: newest 50 steps of all tenants",
            picks
                .iter()
                .map(|_| ("/search".to_owned(), String::new()))
                .collect(),
        ),
        (
            "search: tenant + one day + EMAIL_ADDRESS entity",
            picks
                .iter()
                .map(|(_, tenant, day)| {
                    (
                        "/search".to_owned(),
                        format!("tenant={tenant}&since={day}&until={day}&entity=EMAIL_ADDRESS"),
                    )
                })
                .collect(),
        ),
    ] {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (path, body) = &posts[0];
        let first = console.post(path, body).await;
        let mut ms = Vec::new();
        for (path, body) in &posts[1..] {
            ms.push(console.post(path, body).await);
        }
        println!("{name}: first request (catalog refresh) {first:.1} ms");
        report(&format!("{name} (catalog cached)"), ms);
    }
    server.stop().await.unwrap();
}
