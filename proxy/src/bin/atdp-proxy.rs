//! `atdp-proxy`: the sidecar agents point their `base_url` at.
//!
//! Settings come from `--config FILE` (TOML, see `docs/proxy.md`); each can be overridden by a
//! flag or its environment variable. `atdp-proxy --policy policies/examples/quickstart
//! --upstream URL` starts with nothing else configured. `--check-config` validates the
//! settings, the policy directory and the key file, prints a summary, and exits. Started, it
//! prints one JSON line on stdout with the addresses it bound (`--listen 127.0.0.1:0` and
//! `--admin-listen 127.0.0.1:0` pick free ports).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use atdp_proxy::{RawConfig, RawUpstream, Trust};
use clap::Parser;

/// mimalloc instead of glibc's malloc: allocation and freeing took about a tenth of the
/// proxy's CPU time at 2,000 calls/s (docs/proxy.md, "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "atdp-proxy",
    version,
    about = "Policy-checking, masking, recording LLM proxy"
)]
struct Cli {
    /// TOML settings file.
    #[arg(long, env = "ATDP_CONFIG")]
    config: Option<PathBuf>,
    /// Address agents connect to (default 127.0.0.1:8080).
    #[arg(long, env = "ATDP_LISTEN")]
    listen: Option<String>,
    /// Address of /metrics, /healthz, /readyz, /reload (default 127.0.0.1:9090).
    #[arg(long, env = "ATDP_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// One upstream base URL for every model (replaces the file's upstreams and routes).
    #[arg(long, env = "ATDP_UPSTREAM")]
    upstream: Option<String>,
    /// Trust level of --upstream: internal or external (default external).
    #[arg(long, env = "ATDP_UPSTREAM_TRUST")]
    upstream_trust: Option<String>,
    /// Environment variable holding --upstream's API key, injected by the proxy.
    #[arg(long, env = "ATDP_UPSTREAM_KEY_ENV")]
    upstream_key_env: Option<String>,
    /// Ask --upstream for behaviour log-probs and record them (vLLM, SGLang, mistral.rs).
    #[arg(long, env = "ATDP_UPSTREAM_LOGPROBS")]
    upstream_logprobs: Option<bool>,
    /// Ask --upstream for token ids (vLLM `return_token_ids`) and record them.
    #[arg(long, env = "ATDP_UPSTREAM_TOKEN_IDS")]
    upstream_token_ids: Option<bool>,
    /// The lake: a directory or s3://, gs://, az:// URL.
    #[arg(long, env = "ATDP_LAKE")]
    lake: Option<String>,
    /// Policy directory (Cedar files and masking.toml).
    #[arg(long, env = "ATDP_POLICY_DIR")]
    policy: Option<PathBuf>,
    /// Vault key file (created when missing).
    #[arg(long, env = "ATDP_KEY_FILE")]
    keys: Option<PathBuf>,
    /// Write-ahead log directory of this instance.
    #[arg(long, env = "ATDP_WAL")]
    wal: Option<PathBuf>,
    /// Directory for the default lake, WAL and key file (default ./atdp-data).
    #[arg(long, env = "ATDP_DATA")]
    data: Option<PathBuf>,
    /// Largest request body in bytes (default 8 MiB).
    #[arg(long, env = "ATDP_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Record calls in the lake: true or false (default true).
    #[arg(long, env = "ATDP_RECORD")]
    record: Option<bool>,
    /// Detect and mask personal data: true or false (default true; false needs --record false).
    #[arg(long, env = "ATDP_MASK")]
    mask: Option<bool>,
    /// PEM file of the CAs trusted for HTTPS upstreams (default: the system's).
    #[arg(long, env = "ATDP_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// PEM certificate chain for HTTPS (and HTTP/2) towards agents; needs --tls-key. Read
    /// again on SIGHUP.
    #[arg(long, env = "ATDP_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "ATDP_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Object-store option for the lake, KEY=VALUE (repeatable; e.g. aws_endpoint=…).
    #[arg(long = "lake-option", value_name = "KEY=VALUE")]
    lake_options: Vec<String>,
    /// Write-ahead log durability: fsync (default) or buffered (no fsync; survives a crash
    /// of the proxy, not of the machine).
    #[arg(long, env = "ATDP_DURABILITY")]
    durability: Option<String>,
    /// Shortest time between two write-ahead log commits, in ms (default 10, at most 1000).
    #[arg(long, env = "ATDP_COMMIT_INTERVAL_MS")]
    commit_interval_ms: Option<u64>,
    /// Under lake back-pressure: refuse (503) or serve_unrecorded.
    #[arg(long, env = "ATDP_ON_BACKPRESSURE")]
    on_backpressure: Option<String>,
    /// Requests per minute per API key (0: unlimited).
    #[arg(long, env = "ATDP_KEY_RPM")]
    key_rpm: Option<u32>,
    /// Requests per minute per tenant (0: unlimited).
    #[arg(long, env = "ATDP_TENANT_RPM")]
    tenant_rpm: Option<u32>,
    /// Tokens per minute per tenant (0: unlimited).
    #[arg(long, env = "ATDP_TENANT_TPM")]
    tenant_tpm: Option<u64>,
    /// Tokens per minute per API key (0: unlimited).
    #[arg(long, env = "ATDP_KEY_TPM")]
    key_tpm: Option<u64>,
    /// Calls one API key may have in flight at once (0: unlimited; default 256).
    #[arg(long, env = "ATDP_KEY_MAX_IN_FLIGHT")]
    key_max_in_flight: Option<u32>,
    /// When a call's decision and masked request are made durable: default or strict (in
    /// the write-ahead log before anything is forwarded).
    #[arg(long, env = "ATDP_AUDIT")]
    audit: Option<String>,
    /// Create vault keys for tenants without any in the key file (for the quickstart and
    /// tests; otherwise create keys with `atdp-policy keygen`).
    #[arg(long, env = "ATDP_GENERATE_KEYS")]
    generate_keys: bool,
    /// Environment variable holding the admin token for POST /reload (default
    /// ATDP_ADMIN_TOKEN).
    #[arg(long, env = "ATDP_ADMIN_TOKEN_ENV")]
    admin_token_env: Option<String>,
    /// Longest time a client may take to send a request body, in seconds (default 30).
    #[arg(long, env = "ATDP_CLIENT_BODY_TIMEOUT_S")]
    client_body_timeout_s: Option<u64>,
    /// Idle time after which a client connection is closed, in seconds (default 60).
    #[arg(long, env = "ATDP_CLIENT_IDLE_TIMEOUT_S")]
    client_idle_timeout_s: Option<u64>,
    /// Validate everything, print a summary, and exit.
    #[arg(long)]
    check_config: bool,
}

fn settings(cli: &Cli) -> anyhow::Result<RawConfig> {
    let mut raw = match &cli.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            RawConfig::from_toml(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => RawConfig::default(),
    };
    macro_rules! over {
        ($field:ident) => {
            if let Some(value) = &cli.$field {
                raw.$field = Some(value.clone());
            }
        };
    }
    over!(listen);
    over!(admin_listen);
    over!(lake);
    over!(policy);
    over!(keys);
    over!(wal);
    over!(data);
    over!(max_body_bytes);
    over!(record);
    over!(mask);
    over!(ca_file);
    over!(tls_cert);
    over!(tls_key);
    over!(commit_interval_ms);
    over!(admin_token_env);
    over!(client_body_timeout_s);
    over!(client_idle_timeout_s);
    if cli.generate_keys {
        raw.generate_keys = Some(true);
    }
    if let Some(audit) = &cli.audit {
        raw.audit = Some(match audit.as_str() {
            "default" => atdp_proxy::AuditMode::Default,
            "strict" => atdp_proxy::AuditMode::Strict,
            other => anyhow::bail!("--audit {other:?}: use default or strict"),
        });
    }
    if let Some(limit) = cli.key_max_in_flight {
        raw.limits.key_max_in_flight = limit;
    }
    for option in &cli.lake_options {
        let (key, value) = option
            .split_once('=')
            .with_context(|| format!("--lake-option {option:?}: use KEY=VALUE"))?;
        raw.lake_options.0.insert(key.to_owned(), value.to_owned());
    }
    if let Some(policy) = &cli.on_backpressure {
        raw.on_backpressure = match policy.as_str() {
            "refuse" => atdp_proxy::OnBackpressure::Refuse,
            "serve_unrecorded" => atdp_proxy::OnBackpressure::ServeUnrecorded,
            other => anyhow::bail!("--on-backpressure {other:?}: use refuse or serve_unrecorded"),
        };
    }
    if let Some(durability) = &cli.durability {
        raw.durability = Some(match durability.as_str() {
            "fsync" => atdp_proxy::Durability::Fsync,
            "buffered" => atdp_proxy::Durability::Buffered,
            other => anyhow::bail!("--durability {other:?}: use fsync or buffered"),
        });
    }
    if let Some(rpm) = cli.key_rpm {
        raw.limits.key_requests_per_minute = rpm;
    }
    if let Some(rpm) = cli.tenant_rpm {
        raw.limits.tenant_requests_per_minute = rpm;
    }
    if let Some(tpm) = cli.tenant_tpm {
        raw.limits.tenant_tokens_per_minute = tpm;
    }
    if let Some(tpm) = cli.key_tpm {
        raw.limits.key_tokens_per_minute = tpm;
    }
    if let Some(url) = &cli.upstream {
        let trust = match cli.upstream_trust.as_deref() {
            None | Some("external") => Trust::External,
            Some("internal") => Trust::Internal,
            Some(other) => anyhow::bail!("--upstream-trust {other:?}: use internal or external"),
        };
        raw.upstreams = vec![RawUpstream {
            name: "default".into(),
            url: url.clone(),
            trust: Some(trust),
            api_key_env: cli.upstream_key_env.clone(),
            connect_timeout_s: None,
            read_timeout_s: None,
            record_logprobs: cli.upstream_logprobs,
            record_token_ids: cli.upstream_token_ids,
            audit: None,
        }];
        raw.routes.clear();
    }
    Ok(raw)
}

/// Transparent huge pages off for this process. mimalloc asks for them on the memory it maps,
/// and the lake writer's segment commits allocate a few hundred megabytes in a burst and free
/// it: each fresh 2 MiB page was zeroed whole by the kernel, 15% of the proxy's CPU time in a
/// profile at 8,000 calls/s; with them off, 73–78 µs of CPU per call against 80–82 µs
/// (docs/benchmarks.md).
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = nix::sys::prctl::set_thp_disable(true) {
        tracing::debug!(%error, "Could not turn transparent huge pages off.");
    }
}

/// One line on stdout with the addresses taken (port 0 picks a free one), for scripts and
/// supervisors: `{"listen":"127.0.0.1:8080","admin":"127.0.0.1:9090","scheme":"http"}`.
fn announce(bound: atdp_proxy::Bound) {
    use std::io::Write;
    let line = serde_json::json!({
        "listen": bound.listen.to_string(),
        "admin": bound.admin.to_string(),
        "scheme": if bound.tls { "https" } else { "http" },
    });
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the proxy.
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

fn main() -> ExitCode {
    // Our crates at info; the libraries (Pingora, delta-rs) only when they warn. Pingora logs
    // an error when a pooled upstream connection is still held by its idle watcher (it then
    // connects anew): silenced, as delta-rs's kernel is by `init_logging`. Standard output
    // carries only the line of bound addresses (`announce`).
    atdp_lake::cli::init_logging(
        "warn,atdp_proxy=info,atdp_lake=info,atdp_policies=info,pingora_core::connectors=off",
    );
    // Before the runtimes and their threads start.
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    let outcome = settings(&cli)
        .and_then(|raw| Ok(raw.validate()?))
        .and_then(|config| {
            if cli.check_config {
                let policy = atdp_policies::Policy::load(&config.policy)?;
                let tenants = policy.access.tenants();
                // Checks the key file without creating or changing it.
                let keys = if config.keys.exists() {
                    let ring = atdp_policies::KeyRing::load(&config.keys)?;
                    let missing: Vec<&String> =
                        tenants.iter().filter(|t| !ring.has_tenant(t)).collect();
                    if missing.is_empty() {
                        "present, keys for every tenant".to_owned()
                    } else if config.generate_keys {
                        format!("present; keys would be added for {missing:?}")
                    } else {
                        format!(
                            "present; no keys for {missing:?}: the start would be refused (create them with `atdp-policy keygen`, or pass --generate-keys)"
                        )
                    }
                } else if config.generate_keys {
                    "absent; it would be created at start".to_owned()
                } else {
                    "absent: the start would be refused (create it with `atdp-policy keygen`, or pass --generate-keys)".to_owned()
                };
                let tls = match &config.tls {
                    Some(files) => {
                        atdp_proxy::Certificates::load(files.clone())?;
                        format!("https, certificate {}", files.cert.display())
                    }
                    None => "plain http".to_owned(),
                };
                println!("listen        {} ({tls})", config.listen);
                println!("admin         {}", config.admin_listen);
                println!(
                    "policy        {} (tenants: {})",
                    config.policy.display(),
                    tenants.join(", ")
                );
                println!("keys          {} ({keys})", config.keys.display());
                println!(
                    "lake          {} (options: {:?})",
                    config.lake, config.lake_options
                );
                println!(
                    "wal           {} (durability {}, commits at most every {} ms)",
                    config.wal.display(),
                    config.durability.name(),
                    config.commit_interval.as_millis()
                );
                println!(
                    "record        {}   mask {}   audit {}",
                    config.record,
                    config.mask,
                    config.audit.name()
                );
                println!(
                    "clients       body within {} s, idle connections closed after {} s",
                    config.client_body_timeout.as_secs(),
                    config.client_idle_timeout.as_secs()
                );
                println!(
                    "admin token   {}",
                    if config.admin_token.is_some() {
                        "configured (POST /reload on)"
                    } else {
                        "none (POST /reload off; SIGHUP reloads)"
                    }
                );
                println!("limits        {:?}", config.limits);
                for upstream in &config.upstreams {
                    println!(
                        "upstream      {} → {}://{}:{}{} ({}, key {})",
                        upstream.name,
                        if upstream.tls { "https" } else { "http" },
                        upstream.host,
                        upstream.port,
                        upstream.prefix,
                        upstream.trust.name(),
                        if upstream.api_key.is_some() {
                            "injected"
                        } else {
                            "none"
                        }
                    );
                }
                for route in &config.routes {
                    let name = config
                        .upstreams
                        .get(route.upstream)
                        .map_or("?", |u| u.name.as_str());
                    match &route.rewrite {
                        Some(rewrite) => {
                            println!("route         {} → {name} as {rewrite}", route.model)
                        }
                        None => println!("route         {} → {name}", route.model),
                    }
                }
                println!("configuration is valid");
                return Ok(());
            }
            Ok(atdp_proxy::run_with(config, announce)?)
        });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => atdp_lake::cli::fail("atdp-proxy", format!("{error:#}")),
    }
}
