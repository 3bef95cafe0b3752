//! The proxy's settings: one TOML file, every setting overridable by a flag or an environment
//! variable (the binary merges those in before [`RawConfig::validate`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::tls::TlsFiles;

/// How trusted an upstream is: decides which masking actions apply to what it is sent, and is
/// the `upstream_trust` of the Cedar context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Run by the company (our mistral.rs, a vLLM cluster).
    Internal,
    /// A provider outside the company.
    External,
}

impl Trust {
    /// As written in policies: `internal` or `external`.
    pub fn name(self) -> &'static str {
        match self {
            Trust::Internal => "internal",
            Trust::External => "external",
        }
    }
}

/// What to do when the lake writer signals back-pressure (its log is over budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnBackpressure {
    /// Refuse new calls with 503 until the back-log drains.
    #[default]
    Refuse,
    /// Serve them without recording, and count them (`atdp_unrecorded_total`).
    ServeUnrecorded,
}

/// How the write-ahead log makes recorded calls durable (`durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Each group commit is written and `fdatasync`ed: what was committed survives a crash of
    /// the machine.
    #[default]
    Fsync,
    /// Each group commit is written to the operating system without `fdatasync`: it survives
    /// a crash of the proxy, not of the machine (the kernel writes it back on its own
    /// schedule, about 30 s on Linux). Rewards are answered once written, not once on disk.
    Buffered,
}

impl Durability {
    /// As written in the settings.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Buffered => "buffered",
        }
    }
}

/// When the decision and the masked request of a call are made durable (`audit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuditMode {
    /// Queued for the write-ahead log before the call is forwarded, written within the commit
    /// interval: a crash of the proxy can lose the records of the calls of its last moments
    /// (measured in `docs/benchmarks.md`).
    #[default]
    Default,
    /// The decision event, carrying the request as stored (masked for storage), is in the
    /// write-ahead log (written, and fsynced under `durability = "fsync"`) before any byte is
    /// sent upstream: every call that left has its audit event, whatever crashes. Costs a
    /// wait for the log's next commit on every call.
    Strict,
}

impl AuditMode {
    /// As written in the settings.
    pub fn name(self) -> &'static str {
        match self {
            AuditMode::Default => "default",
            AuditMode::Strict => "strict",
        }
    }
}

/// Default `commit_interval_ms`: at most 100 fsyncs a second. Measured at 8,000 calls/s
/// (docs/benchmarks.md): 2 ms cost the log's sync thread 8 µs of CPU per call, 20 ms 1.6 µs;
/// on cloud block storage each fsync is also an operation out of a provisioned budget. It
/// adds up to this much to the time an answered call's record waits in memory, where a crash
/// of the machine can lose it.
pub const DEFAULT_COMMIT_INTERVAL_MS: u64 = 10;

/// Longest `commit_interval_ms` (the lake writer's own bound).
const MAX_COMMIT_INTERVAL_MS: u64 = 1_000;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Address agents connect to (default 127.0.0.1:8080).
    pub listen: Option<String>,
    /// Address of `/metrics`, `/healthz` and `/readyz` (default 127.0.0.1:9090).
    pub admin_listen: Option<String>,
    /// Policy directory: Cedar schema, policies, entities and `masking.toml`.
    pub policy: Option<PathBuf>,
    /// Vault key file; created with fresh keys for the policy's tenants when missing
    /// (default `<data>/keys.json`).
    pub keys: Option<PathBuf>,
    /// The lake: a directory or an `s3://`, `gs://`, `az://` URL (default `<data>/lake`).
    pub lake: Option<String>,
    /// Object-store options for the lake (endpoint, region, credentials, …).
    #[serde(default)]
    pub lake_options: StorageOptions,
    /// This instance's write-ahead log directory (default `<data>/wal`).
    pub wal: Option<PathBuf>,
    /// Where defaults for `keys`, `lake` and `wal` live (default `./atdp-data`).
    pub data: Option<PathBuf>,
    /// Largest request body accepted, in bytes (default 8 MiB).
    pub max_body_bytes: Option<usize>,
    /// What to do under lake back-pressure.
    #[serde(default)]
    pub on_backpressure: OnBackpressure,
    /// How the write-ahead log is made durable (default fsync).
    pub durability: Option<Durability>,
    /// Shortest time between two group commits of the write-ahead log, in milliseconds
    /// (default [`DEFAULT_COMMIT_INTERVAL_MS`], at most 1000): calls recorded in between share
    /// one write and one fsync.
    pub commit_interval_ms: Option<u64>,
    /// PEM file of the certificate authorities trusted for HTTPS upstreams, instead of the
    /// system's (for a company CA, or a test server).
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain of the agents' listener: with `tls_key`, `listen` serves HTTPS
    /// (HTTP/2 and HTTP/1.1 by ALPN) instead of plain HTTP; both files are read again on
    /// SIGHUP.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Record calls in the lake (default true).
    pub record: Option<bool>,
    /// Detect and mask personal data (default true). Turning it off is only allowed with
    /// `record = false`: nothing unmasked is ever stored. For benchmarks and debugging.
    pub mask: Option<bool>,
    /// When a call's decision and masked request are made durable: `default` or `strict`
    /// (before anything is forwarded); an upstream's own `audit` overrides it.
    pub audit: Option<AuditMode>,
    /// Create vault keys for tenants of the policy that have none in the key file (default
    /// false: a tenant without keys stops the start, or a reload, and the error says how to
    /// create them). For the quickstart and tests.
    pub generate_keys: Option<bool>,
    /// Environment variable holding the admin token that `POST /reload` on the admin port
    /// requires (default `ATDP_ADMIN_TOKEN`); without one, reloading over HTTP is off (SIGHUP
    /// still reloads).
    pub admin_token_env: Option<String>,
    /// Longest time a client may take to send a request body, in seconds (default 30).
    pub client_body_timeout_s: Option<u64>,
    /// How long an idle client connection is kept open between requests, in seconds
    /// (default 60).
    pub client_idle_timeout_s: Option<u64>,
    /// Upstreams calls can be routed to.
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<RawUpstream>,
    /// Routes from model names to upstreams, first match wins.
    #[serde(default, rename = "route")]
    pub routes: Vec<RawRoute>,
    /// Rate limits.
    #[serde(default)]
    pub limits: Limits,
}

/// One upstream as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// Name used by routes and recorded in each step.
    pub name: String,
    /// Base URL: `https://api.openai.com`, `http://127.0.0.1:8000`; a path is a prefix.
    pub url: String,
    /// `internal` or `external` (default external: masking for outside providers applies).
    pub trust: Option<Trust>,
    /// Environment variable holding the upstream's API key, injected by the proxy.
    pub api_key_env: Option<String>,
    /// Seconds to wait for a connection (default 10).
    pub connect_timeout_s: Option<u64>,
    /// Longest pause between two reads of a reply, streams included (default 300).
    pub read_timeout_s: Option<u64>,
    /// Ask this upstream for the log-probabilities of the tokens it samples (OpenAI chat
    /// `logprobs: true`) and record them as the behaviour policy's, stripping them from the
    /// reply when the client did not ask (default false; for vLLM, SGLang, mistral.rs).
    pub record_logprobs: Option<bool>,
    /// Ask for the completion's token ids (vLLM `return_token_ids: true`) and record them,
    /// stripping them from the reply (default false; only for servers that accept it).
    pub record_token_ids: Option<bool>,
    /// `default` or `strict` for the calls to this upstream (default: the global `audit`).
    pub audit: Option<AuditMode>,
}

/// One route as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Model name pattern: `*` matches any run of characters (`gpt-*`, `local/*`, `*`).
    pub model: String,
    /// Upstream name.
    pub upstream: String,
    /// Model name sent upstream instead of the client's (an alias); `*` in it is replaced by
    /// what the pattern's `*` matched.
    pub rewrite: Option<String>,
}

/// Default `key_max_in_flight`.
pub const DEFAULT_KEY_MAX_IN_FLIGHT: u32 = 256;

fn default_key_max_in_flight() -> u32 {
    DEFAULT_KEY_MAX_IN_FLIGHT
}

/// Rate limits per minute (0 or absent means unlimited), and calls in flight per key.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Requests per minute per API key.
    #[serde(default)]
    pub key_requests_per_minute: u32,
    /// Requests per minute per tenant.
    #[serde(default)]
    pub tenant_requests_per_minute: u32,
    /// Tokens (prompt + completion, as reported) per minute per tenant.
    #[serde(default)]
    pub tenant_tokens_per_minute: u64,
    /// Tokens (prompt + completion, as reported) per minute per API key.
    #[serde(default)]
    pub key_tokens_per_minute: u64,
    /// Calls one API key may have in flight at once (default
    /// [`DEFAULT_KEY_MAX_IN_FLIGHT`]; 0: unlimited): one key cannot take every connection
    /// and buffer from the others.
    #[serde(default = "default_key_max_in_flight")]
    pub key_max_in_flight: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            key_requests_per_minute: 0,
            tenant_requests_per_minute: 0,
            tenant_tokens_per_minute: 0,
            key_tokens_per_minute: 0,
            key_max_in_flight: DEFAULT_KEY_MAX_IN_FLIGHT,
        }
    }
}

/// A checked upstream.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Its name.
    pub name: String,
    /// Host name (for SNI and `Host`).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Whether to use TLS.
    pub tls: bool,
    /// Path prefix ("" or "/something").
    pub prefix: String,
    /// Trust level.
    pub trust: Trust,
    /// The upstream's API key, read from the environment at start (never printed).
    pub api_key: Option<Secret>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Read timeout.
    pub read_timeout: Duration,
    /// Whether to ask for and record behaviour log-probs.
    pub record_logprobs: bool,
    /// Whether to ask for and record token ids.
    pub record_token_ids: bool,
    /// Its own audit mode, when set.
    pub audit: Option<AuditMode>,
}

/// Object-store options; their values may be credentials, so `Debug` shows the names only.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct StorageOptions(pub std::collections::HashMap<String, String>);

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        f.debug_tuple("StorageOptions").field(&names).finish()
    }
}

/// A value never printed by `Debug`.
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// A checked route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Pattern.
    pub model: String,
    /// Index into [`Config::upstreams`].
    pub upstream: usize,
    /// Alias.
    pub rewrite: Option<String>,
}

/// Checked settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Agents' address.
    pub listen: SocketAddr,
    /// Admin address.
    pub admin_listen: SocketAddr,
    /// Policy directory.
    pub policy: PathBuf,
    /// Key file.
    pub keys: PathBuf,
    /// Lake URL or directory.
    pub lake: String,
    /// Object-store options.
    pub lake_options: StorageOptions,
    /// WAL directory.
    pub wal: PathBuf,
    /// Body limit.
    pub max_body_bytes: usize,
    /// Back-pressure policy.
    pub on_backpressure: OnBackpressure,
    /// How the write-ahead log is made durable.
    pub durability: Durability,
    /// Shortest time between two group commits of the write-ahead log.
    pub commit_interval: Duration,
    /// Trusted CAs for HTTPS upstreams (`None`: the system's).
    pub ca_file: Option<PathBuf>,
    /// The agents' listener's certificate and key (`None`: plain HTTP).
    pub tls: Option<TlsFiles>,
    /// Whether calls are recorded.
    pub record: bool,
    /// Whether personal data is detected and masked.
    pub mask: bool,
    /// The audit mode of upstreams that set none.
    pub audit: AuditMode,
    /// Whether missing vault keys are generated.
    pub generate_keys: bool,
    /// The admin token, when one is configured.
    pub admin_token: Option<Secret>,
    /// Longest time to receive a request body.
    pub client_body_timeout: Duration,
    /// Idle time after which a client connection is closed.
    pub client_idle_timeout: Duration,
    /// Upstreams.
    pub upstreams: Vec<Upstream>,
    /// Routes.
    pub routes: Vec<Route>,
    /// Rate limits.
    pub limits: Limits,
}

fn address(value: Option<&str>, default: &str, what: &str) -> Result<SocketAddr> {
    let text = value.unwrap_or(default);
    text.parse().map_err(|_| {
        Error::Config(format!(
            "`{what}` = {text:?} is not an address like 127.0.0.1:8080"
        ))
    })
}

fn upstream(raw: &RawUpstream) -> Result<Upstream> {
    let bad = |why: &str| Error::Config(format!("upstream {:?}: {why}", raw.name));
    let (tls, rest) = if let Some(rest) = raw.url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = raw.url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(bad("`url` must start with http:// or https://"));
    };
    let (authority, prefix) = match rest.find('/') {
        Some(at) => (&rest[..at], rest[at..].trim_end_matches('/').to_owned()),
        None => (rest, String::new()),
    };
    let default_port = if tls { 443 } else { 80 };
    let parse_port = |port: &str| {
        port.parse::<u16>()
            .map_err(|_| bad("the port is not a number"))
    };
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8000`.
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("an IPv6 address needs its closing `]`"))?;
        let port = match after.strip_prefix(':') {
            Some(port) => parse_port(port)?,
            None if after.is_empty() => default_port,
            None => return Err(bad("unexpected text after the IPv6 address")),
        };
        (host.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), parse_port(port)?),
            None => (authority.to_owned(), default_port),
        }
    };
    if host.is_empty() {
        return Err(bad("`url` has no host"));
    }
    let api_key = match &raw.api_key_env {
        Some(var) => Some(Secret(std::env::var(var).map_err(|_| {
            bad(&format!(
                "environment variable {var} (api_key_env) is not set"
            ))
        })?)),
        None => None,
    };
    Ok(Upstream {
        name: raw.name.clone(),
        host,
        port,
        tls,
        prefix,
        trust: raw.trust.unwrap_or(Trust::External),
        api_key,
        connect_timeout: Duration::from_secs(raw.connect_timeout_s.unwrap_or(10)),
        read_timeout: Duration::from_secs(raw.read_timeout_s.unwrap_or(300)),
        record_logprobs: raw.record_logprobs.unwrap_or(false),
        record_token_ids: raw.record_token_ids.unwrap_or(false),
        audit: raw.audit,
    })
}

impl RawConfig {
    /// Parses a TOML file's text; errors name the line.
    pub fn from_toml(text: &str) -> Result<RawConfig> {
        toml::from_str(text).map_err(|e| Error::Config(e.to_string()))
    }

    /// Checks everything and resolves defaults.
    pub fn validate(self) -> Result<Config> {
        let data = self.data.unwrap_or_else(|| PathBuf::from("atdp-data"));
        let policy = self
            .policy
            .ok_or_else(|| Error::Config("no policy directory: set `policy` or --policy".into()))?;
        if self.upstreams.is_empty() {
            return Err(Error::Config(
                "no upstream: add an [[upstream]] section or pass --upstream URL".into(),
            ));
        }
        let upstreams = self
            .upstreams
            .iter()
            .map(upstream)
            .collect::<Result<Vec<_>>>()?;
        for (i, u) in upstreams.iter().enumerate() {
            if upstreams[..i].iter().any(|v| v.name == u.name) {
                return Err(Error::Config(format!(
                    "upstream {:?} is declared twice",
                    u.name
                )));
            }
        }
        let mut routes = Vec::new();
        for raw in &self.routes {
            let upstream = upstreams
                .iter()
                .position(|u| u.name == raw.upstream)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "route {:?} names upstream {:?}, which is not declared",
                        raw.model, raw.upstream
                    ))
                })?;
            routes.push(Route {
                model: raw.model.clone(),
                upstream,
                rewrite: raw.rewrite.clone(),
            });
        }
        if routes.is_empty() && upstreams.len() == 1 {
            // One upstream and no routes: everything goes there.
            routes.push(Route {
                model: "*".into(),
                upstream: 0,
                rewrite: None,
            });
        }
        let (record, mask) = (self.record.unwrap_or(true), self.mask.unwrap_or(true));
        if record && !mask {
            return Err(Error::Config(
                "`mask = false` needs `record = false`: unmasked calls are never stored".into(),
            ));
        }
        let global_audit = self.audit.unwrap_or_default();
        let strict = upstreams
            .iter()
            .any(|u| u.audit.unwrap_or(global_audit) == AuditMode::Strict);
        if strict && (!record || self.on_backpressure == OnBackpressure::ServeUnrecorded) {
            return Err(Error::Config(
                "`audit = \"strict\"` needs `record = true` and `on_backpressure = \"refuse\"`: \
                 a strictly audited call is never forwarded unrecorded"
                    .into(),
            ));
        }
        let tls = match (self.tls_cert.clone(), self.tls_key.clone()) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "`tls_cert` and `tls_key` go together: set both for HTTPS, or neither".into(),
                ));
            }
        };
        let max_body_bytes = self.max_body_bytes.unwrap_or(8 << 20);
        if max_body_bytes < 1024 {
            return Err(Error::Config(
                "`max_body_bytes` must be at least 1024".into(),
            ));
        }
        let seconds = |value: Option<u64>, default: u64, what: &str| match value.unwrap_or(default)
        {
            0 => Err(Error::Config(format!("`{what}` must be at least 1"))),
            n => Ok(Duration::from_secs(n)),
        };
        let client_body_timeout = seconds(self.client_body_timeout_s, 30, "client_body_timeout_s")?;
        let client_idle_timeout = seconds(self.client_idle_timeout_s, 60, "client_idle_timeout_s")?;
        let token_env = self
            .admin_token_env
            .unwrap_or_else(|| "ATDP_ADMIN_TOKEN".to_owned());
        let admin_token = std::env::var(&token_env)
            .ok()
            .filter(|t| !t.is_empty())
            .map(Secret);
        if admin_token.as_ref().is_some_and(|t| t.0.len() < 16) {
            return Err(Error::Config(format!(
                "the admin token in {token_env} must be at least 16 characters"
            )));
        }
        let commit_interval_ms = self
            .commit_interval_ms
            .unwrap_or(DEFAULT_COMMIT_INTERVAL_MS);
        if commit_interval_ms > MAX_COMMIT_INTERVAL_MS {
            return Err(Error::Config(format!(
                "`commit_interval_ms` must be at most {MAX_COMMIT_INTERVAL_MS}"
            )));
        }
        Ok(Config {
            listen: address(self.listen.as_deref(), "127.0.0.1:8080", "listen")?,
            admin_listen: address(
                self.admin_listen.as_deref(),
                "127.0.0.1:9090",
                "admin_listen",
            )?,
            policy,
            keys: self.keys.unwrap_or_else(|| data.join("keys.json")),
            lake: self
                .lake
                .unwrap_or_else(|| data.join("lake").to_string_lossy().into_owned()),
            lake_options: self.lake_options,
            wal: self.wal.unwrap_or_else(|| data.join("wal")),
            max_body_bytes,
            on_backpressure: self.on_backpressure,
            durability: self.durability.unwrap_or_default(),
            commit_interval: Duration::from_millis(commit_interval_ms),
            ca_file: self.ca_file,
            tls,
            record,
            mask,
            audit: self.audit.unwrap_or_default(),
            generate_keys: self.generate_keys.unwrap_or(false),
            admin_token,
            client_body_timeout,
            client_idle_timeout,
            upstreams,
            routes,
            limits: self.limits,
        })
    }
}

/// Whether `model` matches `pattern` (`*` matches any run of characters); on a match, what
/// the first `*` matched.
pub fn glob(pattern: &str, model: &str) -> Option<String> {
    let Some((head, tail)) = pattern.split_once('*') else {
        return (pattern == model).then(String::new);
    };
    let rest = model.strip_prefix(head)?;
    // The remaining pattern may contain more stars: try every split.
    for at in (0..=rest.len()).filter(|at| rest.is_char_boundary(*at)) {
        if glob(tail, &rest[at..]).is_some() {
            return Some(rest[..at].to_owned());
        }
    }
    None
}

impl Config {
    /// The audit mode of calls to `upstream`.
    pub fn audit_mode(&self, upstream: &Upstream) -> AuditMode {
        upstream.audit.unwrap_or(self.audit)
    }

    /// The upstream and the model name to send for the model a client asked for.
    pub fn route(&self, model: &str) -> Option<(&Upstream, String)> {
        self.routes.iter().find_map(|route| {
            let star = glob(&route.model, model)?;
            let upstream = self.upstreams.get(route.upstream)?;
            let dispatched = match &route.rewrite {
                Some(rewrite) => rewrite.replacen('*', &star, 1),
                None => model.to_owned(),
            };
            Some((upstream, dispatched))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls() {
        let parse = |url: &str| {
            upstream(&RawUpstream {
                name: "u".into(),
                url: url.into(),
                trust: None,
                api_key_env: None,
                connect_timeout_s: None,
                read_timeout_s: None,
                record_logprobs: None,
                record_token_ids: None,
                audit: None,
            })
            .map(|u| (u.host, u.port, u.tls, u.prefix))
        };
        assert_eq!(
            parse("http://[::1]").unwrap(),
            ("::1".into(), 80, false, String::new())
        );
        assert_eq!(
            parse("https://[::1]:8443/v").unwrap(),
            ("::1".into(), 8443, true, "/v".into())
        );
        assert_eq!(
            parse("http://h:81").unwrap(),
            ("h".into(), 81, false, String::new())
        );
        assert!(parse("http://h:x").is_err());
        assert!(parse("http://[::1").is_err());
    }

    #[test]
    fn storage_option_values_are_not_printed() {
        let options =
            StorageOptions([("aws_secret_access_key".to_owned(), "hunter2".to_owned())].into());
        assert!(!format!("{options:?}").contains("hunter2"));
    }

    #[test]
    fn globs() {
        assert_eq!(glob("gpt-*", "gpt-4.1"), Some("4.1".into()));
        assert_eq!(glob("*", "anything"), Some("anything".into()));
        assert_eq!(glob("local/*", "gpt-4"), None);
        assert_eq!(glob("exact", "exact"), Some(String::new()));
        assert_eq!(glob("a*c*e", "abcde"), Some("b".into()));
        assert_eq!(glob("claude-*", "claude"), None);
    }

    #[test]
    fn routes_and_aliases() {
        let raw = RawConfig::from_toml(
            r#"
policy = "p"
[[upstream]]
name = "openai"
url = "https://api.openai.com/"
[[upstream]]
name = "local"
url = "http://127.0.0.1:8000/serve"
trust = "internal"
[[route]]
model = "fast"
upstream = "openai"
rewrite = "gpt-4.1-mini"
[[route]]
model = "local/*"
upstream = "local"
rewrite = "*"
[[route]]
model = "gpt-*"
upstream = "openai"
"#,
        )
        .unwrap();
        let config = raw.validate().unwrap();
        let (u, m) = config.route("fast").unwrap();
        assert_eq!(
            (u.name.as_str(), m.as_str(), u.tls, u.port),
            ("openai", "gpt-4.1-mini", true, 443)
        );
        let (u, m) = config.route("local/qwen").unwrap();
        assert_eq!(
            (u.name.as_str(), m.as_str(), u.port, u.prefix.as_str()),
            ("local", "qwen", 8000, "/serve")
        );
        assert_eq!(u.trust, Trust::Internal);
        assert!(config.route("claude-3").is_none());
    }

    #[test]
    fn durability_and_commit_interval() {
        let base = "policy = \"p\"\n[[upstream]]\nname = \"a\"\nurl = \"http://x\"\n";
        let parse = |extra: &str| RawConfig::from_toml(&format!("{extra}\n{base}"));
        let config = parse("").unwrap().validate().unwrap();
        assert_eq!(config.durability, Durability::Fsync);
        assert_eq!(config.commit_interval, Duration::from_millis(10));
        let config = parse("durability = \"buffered\"\ncommit_interval_ms = 20")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(config.durability, Durability::Buffered);
        assert_eq!(config.commit_interval, Duration::from_millis(20));
        let error = parse("durability = \"never\"").unwrap_err().to_string();
        assert!(
            error.contains("fsync") && error.contains("buffered"),
            "{error}"
        );
        let error = parse("commit_interval_ms = 1001")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("at most 1000"), "{error}");
    }

    #[test]
    fn bad_settings_are_explained() {
        let error = RawConfig::from_toml("listen = 1").unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
        let error = RawConfig::from_toml("lisen = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field"), "{error}");
        let raw =
            RawConfig::from_toml("policy = \"p\"\n[[upstream]]\nname = \"a\"\nurl = \"ftp://x\"\n")
                .unwrap();
        assert!(raw.validate().unwrap_err().to_string().contains("http://"));
        let raw = RawConfig::from_toml(
            "policy = \"p\"\n[[upstream]]\nname = \"a\"\nurl = \"http://x\"\n[[route]]\nmodel = \"*\"\nupstream = \"b\"\n",
        )
        .unwrap();
        assert!(
            raw.validate()
                .unwrap_err()
                .to_string()
                .contains("not declared")
        );
    }

    #[test]
    fn a_strictly_audited_upstream_is_never_served_unrecorded() {
        let base = "policy = \"p\"\n[[upstream]]\nname = \"a\"\nurl = \"http://x\"\n";
        for (extra, ok) in [
            ("audit = \"strict\"\n", true),
            (
                "audit = \"strict\"\non_backpressure = \"serve_unrecorded\"\n",
                false,
            ),
            ("audit = \"strict\"\nrecord = false\nmask = false\n", false),
            ("on_backpressure = \"serve_unrecorded\"\n", true),
        ] {
            let raw = RawConfig::from_toml(&format!("{extra}{base}")).unwrap();
            let validated = raw.validate();
            assert_eq!(validated.is_ok(), ok, "{extra}");
            if !ok {
                let error = validated.unwrap_err().to_string();
                assert!(error.contains("never forwarded unrecorded"), "{error}");
            }
        }
        let per_upstream = RawConfig::from_toml(&format!(
            "on_backpressure = \"serve_unrecorded\"\n{base}audit = \"strict\"\n"
        ))
        .unwrap();
        assert!(per_upstream.validate().is_err());
    }
}
