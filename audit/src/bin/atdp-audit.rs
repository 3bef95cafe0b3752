//! `atdp-audit`: verify the audit trail, query the lake, run SQL, serve the compliance
//! console, erase, export evidence. See `docs/audit.md`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use arrow::array::{AsArray, RecordBatch};
use atdp_audit::{
    Auditor, Catalog, ConsoleConfig, Hit, MAX_PAGE, Search, Searcher, Subject, Trail, event, row,
    seal,
};
use atdp_lake::cli::{LakeArgs, init_logging, run_async};
use atdp_lake::{Lake, WriterConfig};
use atdp_schema::{Table, shown};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "atdp-audit",
    version,
    about = "The compliance side of atdp: audit trail, search, reveal, erasure, evidence"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct Common {
    /// Directory for the default lake, key file and this tool's write-ahead log.
    #[arg(long, env = "ATDP_DATA", default_value = "atdp-data", global = true)]
    data: PathBuf,
    /// The lake (default <data>/lake).
    #[command(flatten)]
    lake: LakeArgs,
    /// Policy directory (Cedar files and masking.toml).
    #[arg(
        long,
        env = "ATDP_POLICY_DIR",
        default_value = "policies/examples/quickstart",
        global = true
    )]
    policy: PathBuf,
    /// Vault key file, the one the proxy uses (default <data>/keys.json).
    #[arg(long, env = "ATDP_KEY_FILE", global = true)]
    keys: Option<PathBuf>,
    /// This tool's write-ahead log for its audit events (default <data>/wal-audit); one per
    /// running process.
    #[arg(long, env = "ATDP_AUDIT_WAL", global = true)]
    wal: Option<PathBuf>,
    /// Pin a table to a version for repeatable evidence: TABLE=VERSION (repeatable).
    #[arg(long = "at", global = true)]
    at: Vec<String>,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check the audit hash chains and every file of the audit table; exit 1 on a problem.
    Verify,
    /// Search steps with filters (as the console does).
    Query(Box<QueryArgs>),
    /// Run SQL over the lake's tables (steps, rewards, audit, pii_vault).
    Sql {
        /// The query.
        sql: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Who runs it, for the audit trail (default cli:$USER; with an auditor key, the
        /// auditor).
        #[arg(long, conflicts_with = "auditor_key")]
        actor: Option<String>,
        /// Read only what this auditor may read (Cedar): every table holds just the rows of
        /// the auditor's tenants. Without it, every tenant (storage credentials are then the
        /// boundary).
        #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
        auditor_key: Option<String>,
    },
    /// Serve the web console.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "ATDP_AUDIT_LISTEN", default_value = "127.0.0.1:8710")]
        listen: SocketAddr,
        /// Rows per page.
        #[arg(long, default_value_t = 50)]
        page_size: usize,
        /// The console is served over TLS (behind a TLS-terminating proxy): cookies are
        /// `Secure` `__Host-` cookies and the console's origin is `https://<Host>`.
        #[arg(long, env = "ATDP_AUDIT_SECURE_COOKIE")]
        secure_cookie: bool,
        /// PEM certificate chain: with --tls-key, the console serves HTTPS itself (cookies
        /// are then Secure, as with --secure-cookie).
        #[arg(long, env = "ATDP_AUDIT_TLS_CERT", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// PEM private key of --tls-cert.
        #[arg(long, env = "ATDP_AUDIT_TLS_KEY", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// A file holding the bearer token (at least 32 characters) that Prometheus sends
        /// to `GET /metrics` for the training runs' figures; without it, no `/metrics`.
        #[arg(long, env = "ATDP_AUDIT_METRICS_TOKEN_FILE")]
        metrics_token_file: Option<PathBuf>,
    },
    /// Crypto-shred a subject's values (or a whole tenant's keys) so they cannot be revealed.
    Erase {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The value to erase (an e-mail address, a phone number, …); without it the
        /// tenant's keys are erased.
        #[arg(long)]
        subject: Option<String>,
        /// Why (recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// The auditor key of who erases (Cedar decides).
        #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
        auditor_key: String,
    },
    /// Issue the receipt of an erasure: what it deleted, rewrote and vacuumed, the adapter
    /// versions that learned from the data and whether each is retired; recorded in the audit
    /// trail as an `erase_receipt` event. Exits 1 while the erasure is not complete.
    Receipt {
        /// The erasure: the event id `erase` printed (`event_id`).
        #[arg(long)]
        erasure: String,
        /// The auditor key of who asks (Cedar decides, as for `erase`).
        #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
        auditor_key: String,
    },
    /// Check a recorded erasure receipt against the audit trail: the trail is intact and every
    /// event the receipt cites is unchanged; exits 1 when not.
    CheckReceipt {
        /// The receipt's audit event id (`receipt_event` of `receipt`).
        receipt_event: String,
    },
    /// Delete a tenant's steps whose retention ended (`retention_until`), with their rewards
    /// and the vault entries only they used; run it on a schedule (cron, a systemd timer).
    Expire {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Why (recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// The instant compared with `retention_until` (RFC 3339 or YYYY-MM-DD; never later
        /// than now). Default: now.
        #[arg(long)]
        now: Option<String>,
        /// Delete the removed files from storage at once, instead of after each table's
        /// retention window (older table versions can then no longer be read).
        #[arg(long)]
        vacuum_now: bool,
        /// The auditor key of who deletes (Cedar decides, as for `erase`).
        #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
        auditor_key: String,
    },
    /// Check that no readable version of `steps` holds a tenant's step whose retention ended;
    /// exits 1 when one does.
    CheckRetention {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The instant compared with `retention_until` (RFC 3339 or YYYY-MM-DD). Default: now.
        #[arg(long)]
        now: Option<String>,
    },
    /// Rotate a tenant's vault key (new values sealed under a new key id; old ones still open).
    RotateKey {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Why (recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// The auditor key of who rotates (Cedar decides).
        #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
        auditor_key: String,
    },
    /// Export a trajectory as a JSON evidence bundle.
    Export {
        /// The trajectory.
        #[arg(long)]
        trajectory: String,
        /// Its tenant (when two tenants use the same trajectory id).
        #[arg(long)]
        tenant: Option<String>,
        /// The auditor key of who exports (Cedar decides).
        #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
        auditor_key: String,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct QueryArgs {
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    agent: Option<String>,
    /// From this time (RFC 3339, or a day YYYY-MM-DD).
    #[arg(long)]
    since: Option<String>,
    /// Until this time, excluded (RFC 3339, or a day YYYY-MM-DD: its start).
    #[arg(long)]
    until: Option<String>,
    #[arg(long)]
    trajectory: Option<String>,
    #[arg(long)]
    model: Option<String>,
    #[arg(long)]
    status: Option<String>,
    /// PII entity type masked in the step.
    #[arg(long)]
    entity: Option<String>,
    #[arg(long)]
    reward_min: Option<f64>,
    #[arg(long)]
    reward_max: Option<f64>,
    /// Text in the masked content (case-insensitive).
    #[arg(long)]
    text: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: usize,
    #[arg(long, default_value_t = 0)]
    offset: usize,
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Restrict to what this auditor may read (Cedar); without it, every tenant of the
    /// policy directory (storage credentials are then the boundary).
    #[arg(long, env = "ATDP_AUDITOR_KEY", hide_env_values = true)]
    auditor_key: Option<String>,
    /// Also write the matching steps as an evidence bundle to this file.
    #[arg(long)]
    evidence: Option<PathBuf>,
}

fn time(value: &str) -> Result<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.timestamp_micros());
    }
    let day = chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .with_context(|| format!("{value:?} is neither RFC 3339 nor YYYY-MM-DD"))?;
    day.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_micros())
        .context("invalid day")
}

struct Env {
    lake: Lake,
    lake_url: String,
    options: std::collections::HashMap<String, String>,
    keys: PathBuf,
    wal: PathBuf,
    policy_dir: PathBuf,
    policy: std::cell::OnceCell<atdp_policies::Policy>,
    pins: BTreeMap<Table, u64>,
}

impl Env {
    fn new(common: &Common) -> Result<Env> {
        let lake_url = common
            .lake
            .url_or(&common.data.join("lake").to_string_lossy());
        let options = common.lake.options()?;
        let lake = Lake::new(&lake_url, options.clone())?;
        let mut pins = BTreeMap::new();
        for pin in &common.at {
            let (name, version) = pin.split_once('=').context("--at takes TABLE=VERSION")?;
            let table = Table::from_name(name).with_context(|| format!("unknown table {name}"))?;
            pins.insert(
                table,
                version.parse().context("--at: the version is a number")?,
            );
        }
        Ok(Env {
            lake,
            lake_url,
            options,
            keys: common
                .keys
                .clone()
                .unwrap_or_else(|| common.data.join("keys.json")),
            wal: common
                .wal
                .clone()
                .unwrap_or_else(|| common.data.join("wal-audit")),
            policy_dir: common.policy.clone(),
            policy: std::cell::OnceCell::new(),
            pins,
        })
    }

    async fn trail(&self) -> Result<Trail> {
        let mut config = WriterConfig::new(self.lake_url.clone(), self.wal.clone());
        config.storage_options = self.options.clone();
        Ok(Trail::open(config).await?)
    }

    /// The policy directory, loaded on first use (`verify` and `sql` do not need it).
    fn policy(&self) -> Result<&atdp_policies::Policy> {
        if let Some(policy) = self.policy.get() {
            return Ok(policy);
        }
        let policy = atdp_policies::Policy::load(&self.policy_dir)
            .with_context(|| format!("policy directory {}", self.policy_dir.display()))?;
        Ok(self.policy.get_or_init(|| policy))
    }

    fn auditor(&self, key: &str) -> Result<Auditor> {
        Auditor::from_key(&self.policy()?.access, key)
            .context("this key is not an auditor key of the policy directory")
    }
}

fn cli_actor(actor: Option<String>) -> String {
    actor.unwrap_or_else(|| {
        format!(
            "cli:{}",
            std::env::var("USER").unwrap_or_else(|_| "unknown".into())
        )
    })
}

fn print_batches(batches: &[RecordBatch], format: Format) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        Format::Table => {
            let table = arrow::util::pretty::pretty_format_batches(batches)?.to_string();
            writeln!(out, "{}", shown::for_terminal(&table))?;
        }
        Format::Csv => {
            let mut writer = arrow::csv::Writer::new(&mut out);
            for batch in batches {
                writer.write(&inert_cells(batch)?)?;
            }
        }
        Format::Json => {
            let mut writer = arrow::json::LineDelimitedWriter::new(&mut out);
            writer.write_batches(&batches.iter().collect::<Vec<_>>())?;
            writer.finish()?;
        }
    }
    Ok(())
}

fn csv_field(value: &str) -> String {
    let value = shown::for_spreadsheet(value);
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.into_owned()
    }
}

/// `batch` with every text cell inert in a spreadsheet ([`shown::for_spreadsheet`]).
fn inert_cells(batch: &RecordBatch) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|column| -> Result<arrow::array::ArrayRef> {
            use arrow::datatypes::DataType;
            // The lake's scans return strings as views; any string type is read as `Utf8`.
            let column = match column.data_type() {
                DataType::Utf8 => column.clone(),
                DataType::Utf8View | DataType::LargeUtf8 => {
                    arrow::compute::cast(column, &DataType::Utf8)?
                }
                _ => return Ok(column.clone()),
            };
            let text = column.as_string::<i32>();
            let inert: arrow::array::StringArray = text
                .iter()
                .map(|v| v.map(|v| shown::for_spreadsheet(v).into_owned()))
                .collect();
            Ok(std::sync::Arc::new(inert))
        })
        .collect::<Result<Vec<_>>>()?;
    let fields: Vec<arrow::datatypes::Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(field, column)| {
            arrow::datatypes::Field::new(
                field.name(),
                column.data_type().clone(),
                field.is_nullable(),
            )
        })
        .collect();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn print_hits(hits: &[Hit], format: Format) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let columns = |h: &Hit| {
        [
            chrono::DateTime::from_timestamp_micros(h.started_at)
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            h.tenant_id.clone(),
            h.agent_id.clone(),
            h.trajectory_id.clone(),
            h.step_id.clone(),
            h.turn_index.to_string(),
            h.model.clone(),
            h.status.clone(),
            h.entities.join(" "),
            h.preview.replace('\n', " "),
        ]
    };
    let header = [
        "started_at",
        "tenant",
        "agent",
        "trajectory_id",
        "step_id",
        "turn",
        "model",
        "status",
        "entities",
        "preview",
    ];
    match format {
        Format::Json => {
            for hit in hits {
                writeln!(out, "{}", serde_json::to_string(hit)?)?;
            }
        }
        Format::Csv => {
            writeln!(out, "{}", header.join(","))?;
            for hit in hits {
                let row: Vec<String> = columns(hit).iter().map(|c| csv_field(c)).collect();
                writeln!(out, "{}", row.join(","))?;
            }
        }
        Format::Table => {
            writeln!(out, "{}", header.join("\t"))?;
            for hit in hits {
                let row: Vec<String> = columns(hit)
                    .iter()
                    .map(|c| shown::for_terminal(&c.replace(['\t', '\n', '\r'], " ")).into_owned())
                    .collect();
                writeln!(out, "{}", row.join("\t"))?;
            }
        }
    }
    Ok(())
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let env = Env::new(&cli.common)?;
    match cli.command {
        Command::Verify => {
            let version = env.pins.get(&Table::Audit).copied();
            let report = atdp_audit::verify(&env.lake, version).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            if let Some(problem) = report.first_problem() {
                eprintln!("atdp-audit: the audit trail is broken: {problem}");
                return Ok(ExitCode::from(1));
            }
            eprintln!(
                "atdp-audit: {} events in {} chains, {} files: intact",
                report.events,
                report.chains.len(),
                report.files
            );
        }
        Command::Query(args) => {
            let catalog = Catalog::open(&env.lake, &env.pins).await?;
            let auditor = args
                .auditor_key
                .as_deref()
                .map(|k| env.auditor(k))
                .transpose()?;
            let search = Search {
                tenant: args.tenant.clone(),
                agent: args.agent,
                since: args.since.as_deref().map(time).transpose()?,
                until: args.until.as_deref().map(time).transpose()?,
                trajectory: args.trajectory,
                model: args.model,
                status: args.status,
                entity: args.entity,
                reward_min: args.reward_min,
                reward_max: args.reward_max,
                text: args.text,
                offset: args.offset,
                limit: args.limit,
            };
            let trail = env.trail().await?;
            let operator = cli_actor(None);
            let searcher = match &auditor {
                Some(auditor) => Searcher::Auditor(auditor),
                None => Searcher::Operator { actor: &operator },
            };
            let page =
                atdp_audit::audited_search(&catalog, env.policy()?, &trail, searcher, &search)
                    .await?;
            print_hits(&page.hits, args.format)?;
            let actor = auditor
                .as_ref()
                .map_or_else(|| operator.clone(), Auditor::actor);
            // The hits were checked: their tenants are the ones the bundle may read.
            let tenants: Vec<String> = page
                .hits
                .iter()
                .map(|h| h.tenant_id.clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if let Some(path) = &args.evidence {
                let audited = search.redacted(&env.policy()?.scanner);
                let steps = atdp_audit::steps_by_id(&catalog, &tenants, &page.hits).await?;
                let rows = steps
                    .iter()
                    .map(|s| row(Table::Steps, s))
                    .collect::<atdp_audit::Result<Vec<_>>>()?;
                let bundle = seal(
                    &catalog,
                    &trail,
                    &actor,
                    Subject {
                        tenant: atdp_audit::SYSTEM_TENANT,
                        subject: format!("query:{}", serde_json::to_string(&audited)?),
                        description: "steps matching a query".into(),
                    },
                    rows,
                    Vec::new(),
                )
                .await?;
                std::fs::write(path, serde_json::to_string_pretty(&bundle)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            trail.close().await?;
        }
        Command::Sql {
            sql,
            format,
            actor,
            auditor_key,
        } => {
            let auditor = auditor_key.as_deref().map(|k| env.auditor(k)).transpose()?;
            let catalog = Catalog::open(&env.lake, &env.pins).await?;
            if let Some(auditor) = &auditor {
                atdp_audit::scope_catalog(&catalog, auditor).await?;
            }
            let actor = match &auditor {
                Some(auditor) => auditor.actor(),
                None => cli_actor(actor),
            };
            let tenants = auditor.as_ref().map(|a| a.tenants.clone());
            let trail = env.trail().await?;
            // Personal data typed into the SQL is redacted with the policy's detectors (or
            // the built-in ones when there is no policy directory here).
            let redacted = match env.policy() {
                Ok(policy) => atdp_audit::redact(&policy.scanner, &sql),
                Err(_) => atdp_audit::redact(&atdp_detect::Scanner::new(None)?, &sql),
            };
            let mut record = event("query", &actor, atdp_audit::SYSTEM_TENANT);
            record.decision = Some("allow".into());
            record.detail_json = Some(
                serde_json::json!({
                    "sql": redacted,
                    "tenants": tenants,
                    "versions": catalog.versions().iter().map(|(t, v)| (t.name(), v)).collect::<BTreeMap<_, _>>(),
                })
                .to_string(),
            );
            trail.record(record).await?;
            let result = catalog.sql(&sql).await;
            trail.close().await?;
            print_batches(&result?, format)?;
        }
        Command::Serve {
            listen,
            page_size,
            secure_cookie,
            tls_cert,
            tls_key,
            metrics_token_file,
        } => {
            let metrics_token = match metrics_token_file {
                Some(path) => Some(
                    std::fs::read_to_string(&path)
                        .with_context(|| {
                            format!("reading --metrics-token-file {}", path.display())
                        })?
                        .trim()
                        .to_owned(),
                ),
                None => None,
            };
            let tls = tls_cert
                .zip(tls_key)
                .map(|(cert, key)| atdp_audit::ConsoleTls { cert, key });
            let scheme = if tls.is_some() { "https" } else { "http" };
            if page_size == 0 || page_size > MAX_PAGE {
                bail!("--page-size must be between 1 and {MAX_PAGE}");
            }
            let trail = env.trail().await?;
            let server = atdp_audit::serve(
                env.lake.clone(),
                trail,
                ConsoleConfig {
                    listen,
                    policy_dir: cli.common.policy.clone(),
                    keys: env.keys.clone(),
                    secure_cookie,
                    page_size,
                    tls,
                    metrics_token,
                },
            )
            .await?;
            eprintln!("atdp-audit: console on {scheme}://{}", server.addr);
            // Announce the bound address for scripts and tests (port 0 picks a free one).
            println!(
                "{}",
                serde_json::json!({ "listen": server.addr.to_string(), "scheme": scheme })
            );
            std::io::stdout().flush()?;
            shutdown_signal().await;
            server.stop().await?;
        }
        Command::Erase {
            tenant,
            subject,
            reason,
            auditor_key,
        } => {
            let auditor = env.auditor(&auditor_key)?;
            let trail = env.trail().await?;
            let report = atdp_audit::erase(
                &env.lake,
                env.policy()?,
                &env.keys,
                &trail,
                &auditor,
                &tenant,
                subject.as_deref(),
                &reason,
            )
            .await;
            trail.close().await?;
            println!("{}", serde_json::to_string_pretty(&report?)?);
        }
        Command::Receipt {
            erasure,
            auditor_key,
        } => {
            let auditor = env.auditor(&auditor_key)?;
            let trail = env.trail().await?;
            let issued =
                atdp_audit::issue_receipt(&env.lake, env.policy()?, &trail, &auditor, &erasure)
                    .await;
            trail.close().await?;
            let (receipt, receipt_event) = issued?;
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "receipt_event": receipt_event,
                    "receipt": receipt,
                }))?
            );
            if !receipt.complete {
                eprintln!(
                    "atdp-audit: the erasure is not complete: {}",
                    receipt.pending.join("; ")
                );
                return Ok(ExitCode::from(1));
            }
        }
        Command::CheckReceipt { receipt_event } => {
            let check = atdp_audit::check_receipt(&env.lake, &receipt_event).await?;
            println!("{}", serde_json::to_string_pretty(&check)?);
            if !check.ok() {
                eprintln!(
                    "atdp-audit: the receipt does not hold: {}",
                    check.problems.join("; ")
                );
                return Ok(ExitCode::from(1));
            }
        }
        Command::Expire {
            tenant,
            reason,
            now,
            vacuum_now,
            auditor_key,
        } => {
            let auditor = env.auditor(&auditor_key)?;
            let now = now.as_deref().map(time).transpose()?;
            let trail = env.trail().await?;
            let report = atdp_audit::expire(
                &env.lake,
                env.policy()?,
                &trail,
                &auditor,
                &tenant,
                now.unwrap_or_else(atdp_schema::now_micros),
                if vacuum_now {
                    atdp_audit::Vacuum::Now
                } else {
                    atdp_audit::Vacuum::AfterWindow
                },
                &reason,
            )
            .await;
            trail.close().await?;
            println!("{}", serde_json::to_string_pretty(&report?)?);
        }
        Command::CheckRetention { tenant, now } => {
            let now = now
                .as_deref()
                .map(time)
                .transpose()?
                .unwrap_or_else(atdp_schema::now_micros);
            let report = atdp_audit::check_retention(&env.lake, &tenant, now).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            if !report.ok() {
                eprintln!(
                    "atdp-audit: {} version(s) of steps still hold steps whose retention ended",
                    report.holding.len()
                );
                return Ok(ExitCode::from(1));
            }
        }
        Command::RotateKey {
            tenant,
            reason,
            auditor_key,
        } => {
            let auditor = env.auditor(&auditor_key)?;
            let trail = env.trail().await?;
            let report = atdp_audit::rotate_key(
                env.policy()?,
                &env.keys,
                &trail,
                &auditor,
                &tenant,
                &reason,
            )
            .await;
            trail.close().await?;
            println!("{}", serde_json::to_string_pretty(&report?)?);
        }
        Command::Export {
            trajectory,
            tenant,
            auditor_key,
            out,
        } => {
            let auditor = env.auditor(&auditor_key)?;
            let catalog = Catalog::open(&env.lake, &env.pins).await?;
            let trail = env.trail().await?;
            let bundle = atdp_audit::trajectory_bundle(
                &catalog,
                &env.policy()?.access,
                &trail,
                &auditor,
                &trajectory,
                tenant.as_deref(),
            )
            .await;
            trail.close().await?;
            let text = serde_json::to_string_pretty(&bundle?)?;
            match out {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => println!("{text}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn main() -> ExitCode {
    init_logging("warn,atdp_audit=info");
    let cli = Cli::parse();
    run_async("atdp-audit", run(cli))
}
