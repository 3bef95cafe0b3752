//! `atdp-audit serve`: the web console. Server-rendered HTML (askama templates compiled
//! into the binary, no external assets, no JavaScript): log in with an auditor key, search,
//! open a trajectory, reveal a value with a reason, read the audit trail and its chain
//! status, export evidence, watch training runs as they happen.
//!
//! The console assumes a hostile browser next door. Sessions are random 256-bit ids in an
//! `HttpOnly`, `SameSite=Strict` cookie (`Secure` and `__Host-` named behind TLS), kept in
//! memory for 8 hours. Every form that changes or records anything is a `POST` carrying a
//! token and coming from the console's own origin ([`csrf`]); no `GET` writes an audit event.
//! Every response forbids caching, framing and script ([`headers`]). Logins are throttled
//! per client address and per auditor ([`throttle`]), and refused requests are counted, not
//! written one by one ([`evidence`]). Every page is decided for the logged-in auditor: a
//! trajectory of a tenant it may not read is "not found", whatever the URL says.

mod csrf;
mod evidence;
mod headers;
mod links;
mod pages;
mod render;
mod sessions;
mod throttle;
pub mod tls;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atdp_lake::Lake;
use atdp_policies::Policy;
use atdp_schema::Table;
use axum::Router;
use axum::routing::{get, post};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::trail::Trail;
use crate::verify::VerifyReport;
use csrf::Tokens;
use evidence::Evidence;
use sessions::Sessions;
use throttle::Buckets;

/// How long a loaded catalog (table versions) is reused before new commits are read.
const CATALOG_TTL: Duration = Duration::from_secs(2);

/// Settings of the console.
#[derive(Clone)]
pub struct ConsoleConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The policy directory (Cedar files, `masking.toml`).
    pub policy_dir: PathBuf,
    /// The vault key file (read on every reveal).
    pub keys: PathBuf,
    /// The console is reached over TLS (behind a TLS-terminating proxy): cookies are
    /// `Secure` with `__Host-` names, and forms must come from the `https` origin.
    pub secure_cookie: bool,
    /// Rows per search or audit page.
    pub page_size: usize,
    /// Serve HTTPS with this certificate (cookies are then `Secure`, as with
    /// `secure_cookie`); `None`: plain HTTP, for loopback or behind a TLS-terminating proxy.
    pub tls: Option<tls::TlsFiles>,
    /// The bearer token Prometheus sends to `GET /metrics` (training runs of every tenant);
    /// `None`: the endpoint is not served.
    pub metrics_token: Option<String>,
}

impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field("listen", &self.listen)
            .field("policy_dir", &self.policy_dir)
            .field("keys", &self.keys)
            .field("secure_cookie", &self.secure_cookie)
            .field("page_size", &self.page_size)
            .field("tls", &self.tls)
            .field(
                "metrics_token",
                &self.metrics_token.as_ref().map(|_| "<set>"),
            )
            .finish()
    }
}

/// Login throttling state: one bucket table per client address, one per auditor.
#[derive(Debug)]
struct Limits {
    clients: Buckets<IpAddr>,
    auditors: Buckets<String>,
}

pub(crate) struct Console {
    lake: Lake,
    /// The policy in force, read again when its files change (see [`Console::policy`]).
    policy: std::sync::RwLock<PolicyInForce>,
    config: ConsoleConfig,
    trail: Trail,
    sessions: Sessions,
    tokens: Tokens,
    limits: Mutex<Limits>,
    evidence: Mutex<Evidence>,
    /// The catalog and when it was loaded (`None`: to refresh before the next use).
    catalog: tokio::sync::Mutex<Option<(Option<Instant>, Arc<Catalog>)>>,
    verified: tokio::sync::Mutex<Option<Arc<VerifyReport>>>,
    /// Training run and registry files read so far.
    training: crate::runs::Files,
}

/// What a throttled login is told: wait this long.
pub(crate) struct Throttled(pub(crate) Duration);

/// The console's policy and what its files looked like when it was read.
struct PolicyInForce {
    stamp: Vec<(std::time::SystemTime, u64)>,
    checked: Instant,
    policy: Arc<Policy>,
}

/// How often the policy directory's files are looked at for a change.
const POLICY_CHECK: Duration = Duration::from_secs(2);

/// The modification time and length of each file of a policy directory.
fn policy_stamp(dir: &std::path::Path) -> Vec<(std::time::SystemTime, u64)> {
    [
        "schema.cedarschema",
        "policies.cedar",
        "entities.json",
        "masking.toml",
    ]
    .iter()
    .map(|name| {
        std::fs::metadata(dir.join(name)).map_or((std::time::UNIX_EPOCH, 0), |m| {
            (m.modified().unwrap_or(std::time::UNIX_EPOCH), m.len())
        })
    })
    .collect()
}

impl Console {
    /// The policy in force. Its files are looked at every [`POLICY_CHECK`]; when they
    /// changed, the directory is read again, so a revoked auditor (removed from
    /// `entities.json`) loses their sessions within seconds. A directory that does not load
    /// keeps the old policy in force, and the error is logged.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        {
            let current = self.policy.read().unwrap_or_else(|p| p.into_inner());
            if current.checked.elapsed() < POLICY_CHECK {
                return current.policy.clone();
            }
        }
        let mut current = self.policy.write().unwrap_or_else(|p| p.into_inner());
        if current.checked.elapsed() >= POLICY_CHECK {
            current.checked = Instant::now();
            let stamp = policy_stamp(&self.config.policy_dir);
            if stamp != current.stamp {
                match Policy::load(&self.config.policy_dir) {
                    Ok(policy) => {
                        current.policy = Arc::new(policy);
                        current.stamp = stamp;
                        tracing::info!("Console: the policy directory changed and was read again.");
                    }
                    Err(error) => {
                        tracing::error!(%error, "Console: the changed policy directory does not load; the old policy stays in force.");
                    }
                }
            }
        }
        current.policy.clone()
    }

    /// The catalog, brought up to date (only the commits since the last load are read) when
    /// older than [`CATALOG_TTL`].
    async fn catalog(&self) -> Result<Arc<Catalog>> {
        let mut cached = self.catalog.lock().await;
        let catalog = match cached.as_ref() {
            Some((Some(at), catalog)) if at.elapsed() < CATALOG_TTL => {
                return Ok(catalog.clone());
            }
            Some((_, catalog)) => Arc::new(catalog.refresh().await?),
            None => Arc::new(Catalog::open(&self.lake, &BTreeMap::new()).await?),
        };
        *cached = Some((Some(Instant::now()), catalog.clone()));
        Ok(catalog)
    }

    /// Makes the next request see the lake as it is now (after this console wrote to it).
    async fn refresh(&self) {
        if let Some((at, _)) = self.catalog.lock().await.as_mut() {
            *at = None;
        }
    }

    /// The verification of the audit table at `catalog`'s version, computed once per version.
    async fn verification(&self, catalog: &Catalog) -> Result<Arc<VerifyReport>> {
        let version = catalog.versions().get(&Table::Audit).copied().flatten();
        let mut cached = self.verified.lock().await;
        if let Some(report) = cached.as_ref()
            && report.version == version
        {
            return Ok(report.clone());
        }
        let report = Arc::new(crate::verify::verify(&self.lake, version).await?);
        *cached = Some(report.clone());
        Ok(report)
    }

    /// Takes a login try of `client`; `Err` when it must wait.
    fn throttle_client(&self, client: IpAddr) -> std::result::Result<(), Throttled> {
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        limits
            .clients
            .take(&client, Instant::now())
            .map_err(Throttled)
    }

    /// Takes a login of auditor `auditor_id`; `Err` when it must wait.
    fn throttle_auditor(&self, auditor_id: &str) -> std::result::Result<(), Throttled> {
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        limits
            .auditors
            .take(&auditor_id.to_owned(), Instant::now())
            .map_err(Throttled)
    }

    /// Counts a refused request as evidence (written with the window's other counts).
    fn note(&self, kind: &'static str, client: IpAddr, actor: &str, outcome: &'static str) {
        self.evidence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(kind, client, actor, outcome);
    }

    /// Writes the counted refusals to the trail, and forgets throttling buckets that are
    /// full again.
    async fn write_evidence(&self) {
        let events = self
            .evidence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain();
        {
            let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            limits.clients.forget_full(now);
            limits.auditors.forget_full(now);
        }
        for event in events {
            if let Err(e) = self.trail.record(event).await {
                tracing::error!(error = %e, "Counted refusals could not be recorded.");
            }
        }
    }
}

/// A running console.
#[derive(Debug)]
pub struct Server {
    /// The address it listens on (with the real port when 0 was asked for).
    pub addr: SocketAddr,
    handle: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown: tokio::sync::oneshot::Sender<()>,
    evidence_task: tokio::task::JoinHandle<()>,
    stop_evidence: tokio::sync::oneshot::Sender<()>,
    console: Arc<Console>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("lake", &self.lake.root().as_str())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Stops accepting, finishes requests in flight, writes the counted refusals, commits
    /// the audit events, and returns.
    pub async fn stop(self) -> Result<()> {
        let _ = self.shutdown.send(());
        let served = self.handle.await.map_err(std::io::Error::other);
        let _ = self.stop_evidence.send(());
        let _ = self.evidence_task.await;
        self.console.write_evidence().await;
        let closed = self.console.trail.close().await;
        served.and_then(|r| r).map_err(|source| crate::Error::Io {
            path: PathBuf::from(self.addr.to_string()),
            source,
        })?;
        closed
    }
}

/// Starts the console on `config.listen`, writing its audit events through `trail`.
pub async fn serve(lake: Lake, trail: Trail, mut config: ConsoleConfig) -> Result<Server> {
    let policy = Policy::load(&config.policy_dir)?;
    config.metrics_token = config.metrics_token.map(|t| t.trim().to_owned());
    if config
        .metrics_token
        .as_ref()
        .is_some_and(|t| t.chars().count() < pages::metrics::MIN_TOKEN_CHARS)
    {
        return Err(crate::Error::Invalid(format!(
            "the metrics token must have at least {} characters",
            pages::metrics::MIN_TOKEN_CHARS
        )));
    }
    // A certificate that does not load stops the start.
    let acceptor = config.tls.as_ref().map(tls::acceptor).transpose()?;
    config.secure_cookie |= acceptor.is_some();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| crate::Error::Io {
            path: PathBuf::from(config.listen.to_string()),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| crate::Error::Io {
        path: PathBuf::from(config.listen.to_string()),
        source,
    })?;
    let now = Instant::now();
    let limits = Limits {
        clients: Buckets::new(
            throttle::MAX_TRACKED,
            throttle::BURST,
            throttle::INTERVAL,
            now,
        ),
        auditors: Buckets::new(
            throttle::MAX_TRACKED,
            throttle::BURST,
            throttle::INTERVAL,
            now,
        ),
    };
    let console = Arc::new(Console {
        lake,
        policy: std::sync::RwLock::new(PolicyInForce {
            stamp: policy_stamp(&config.policy_dir),
            checked: Instant::now(),
            policy: Arc::new(policy),
        }),
        config,
        trail,
        sessions: Sessions::default(),
        tokens: Tokens::new(),
        limits: Mutex::new(limits),
        evidence: Mutex::new(Evidence::new(evidence::MAX_TALLIES)),
        catalog: tokio::sync::Mutex::new(None),
        verified: tokio::sync::Mutex::new(None),
        training: crate::runs::Files::default(),
    });
    // Load the tables now, so that the first request does not pay for it.
    console.catalog().await?;
    let app = Router::new()
        .route("/", get(pages::home))
        .route("/healthz", get(|| async { "ok" }))
        .route("/login", get(pages::login::form).post(pages::login::login))
        .route("/logout", post(pages::login::logout))
        .route(
            "/search",
            get(pages::search::form).post(pages::search::search),
        )
        .route(
            links::TRAJECTORY,
            get(pages::trajectory::open).post(pages::trajectory::read),
        )
        .route(links::EXPORT, post(pages::trajectory::export))
        .route(links::TEXT, post(pages::text::text))
        .route(
            links::REVEAL,
            get(pages::reveal::form).post(pages::reveal::reveal),
        )
        .route("/audit", get(pages::audit::audit))
        .route("/training", get(pages::runs::training))
        .route("/metrics", get(pages::metrics::metrics))
        .layer(axum::middleware::map_response(headers::secure))
        .with_state(console.clone());
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let handle = match acceptor {
        Some(acceptor) => {
            use axum::serve::ListenerExt;
            // `tap_io` gives the TLS listener axum's `ConnectInfo<SocketAddr>`.
            let listener = tls::TlsListener::new(listener, acceptor)
                .map_err(|source| crate::Error::Io {
                    path: PathBuf::from(addr.to_string()),
                    source,
                })?
                .tap_io(|_| {});
            tokio::spawn(async move {
                axum::serve(listener, service)
                    .with_graceful_shutdown(stopped)
                    .await
            })
        }
        None => tokio::spawn(async move {
            axum::serve(listener, service)
                .with_graceful_shutdown(stopped)
                .await
        }),
    };
    let (stop_evidence, mut evidence_stopped) = tokio::sync::oneshot::channel::<()>();
    let writer = console.clone();
    let evidence_task = tokio::spawn(async move {
        let mut every = tokio::time::interval_at(
            tokio::time::Instant::now() + evidence::WINDOW,
            evidence::WINDOW,
        );
        loop {
            tokio::select! {
                _ = every.tick() => writer.write_evidence().await,
                _ = &mut evidence_stopped => break,
            }
        }
    });
    tracing::info!(%addr, "Audit console listening.");
    Ok(Server {
        addr,
        handle,
        shutdown,
        evidence_task,
        stop_evidence,
        console,
    })
}
