//! `atdp-audit serve`: the web console. Server-rendered HTML (askama templates compiled
//! into the binary, no external assets, no JavaScript needed): log in with an auditor key,
//! search, read a trajectory, reveal a value with a reason, read the audit trail and its
//! chain status, export evidence.
//!
//! Sessions are random 256-bit ids in an `HttpOnly`, `SameSite=Strict` cookie (so another
//! site cannot make a logged-in browser post a reveal), kept in memory for 8 hours. Every
//! page is decided for the logged-in auditor: a trajectory of a tenant it may not read is
//! "not found", whatever the URL says.

mod pages;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atdp_schema::{Lake, Table};
use axum::Router;
use axum::routing::{get, post};
use policies::Policy;
use rand::RngCore;

use crate::access::Auditor;
use crate::catalog::Catalog;
use crate::error::Result;
use crate::trail::Trail;
use crate::verify::VerifyReport;

/// How long a login lasts.
const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// How long a loaded catalog (table versions) is reused before new commits are read.
const CATALOG_TTL: Duration = Duration::from_secs(2);
/// The session cookie's name.
const COOKIE: &str = "atdp_session";

/// Settings of the console.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The policy directory (Cedar files, `masking.toml`).
    pub policy_dir: PathBuf,
    /// The vault key file (read on every reveal).
    pub keys: PathBuf,
    /// Mark the session cookie `Secure` (when served behind TLS).
    pub secure_cookie: bool,
    /// Rows per search or audit page.
    pub page_size: usize,
}

struct Session {
    auditor_id: String,
    expires: Instant,
}

pub(crate) struct Console {
    lake: Lake,
    policy: Policy,
    config: ConsoleConfig,
    trail: Trail,
    sessions: Mutex<HashMap<String, Session>>,
    /// The catalog and when it was loaded (`None`: to refresh before the next use).
    catalog: tokio::sync::Mutex<Option<(Option<Instant>, Arc<Catalog>)>>,
    verified: tokio::sync::Mutex<Option<Arc<VerifyReport>>>,
}

impl Console {
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

    fn login(&self, auditor: &Auditor) -> String {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(
            id.clone(),
            Session {
                auditor_id: auditor.id.clone(),
                expires: now + SESSION_TTL,
            },
        );
        id
    }

    fn logout(&self, session: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    /// The auditor of a session; its tenants are decided again by the console's policy on
    /// every request (the policy is loaded at start: restart the console to change it).
    fn auditor(&self, session: &str) -> Option<Auditor> {
        // The lock is held only to read the session, not while Cedar decides.
        let auditor_id = {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let s = sessions
                .get(session)
                .filter(|s| s.expires > Instant::now())?;
            s.auditor_id.clone()
        };
        Auditor::from_id(&self.policy.access, &auditor_id)
    }
}

/// A running console.
#[derive(Debug)]
pub struct Server {
    /// The address it listens on (with the real port when 0 was asked for).
    pub addr: SocketAddr,
    handle: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown: tokio::sync::oneshot::Sender<()>,
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
    /// Stops accepting, finishes requests in flight, commits the audit events, and returns.
    pub async fn stop(self) -> Result<()> {
        let _ = self.shutdown.send(());
        let served = self.handle.await.map_err(std::io::Error::other);
        let closed = self.console.trail.close().await;
        served.and_then(|r| r).map_err(|source| crate::Error::Io {
            path: PathBuf::from(self.addr.to_string()),
            source,
        })?;
        closed
    }
}

/// Starts the console on `config.listen`, writing its audit events through `trail`.
pub async fn serve(lake: Lake, trail: Trail, config: ConsoleConfig) -> Result<Server> {
    let policy = Policy::load(&config.policy_dir)?;
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
    let console = Arc::new(Console {
        lake,
        policy,
        config,
        trail,
        sessions: Mutex::new(HashMap::new()),
        catalog: tokio::sync::Mutex::new(None),
        verified: tokio::sync::Mutex::new(None),
    });
    // Load the tables now, so that the first request does not pay for it.
    console.catalog().await?;
    let app = Router::new()
        .route("/", get(pages::home))
        .route("/healthz", get(|| async { "ok" }))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/search", get(pages::search))
        .route("/trajectories/{id}", get(pages::trajectory))
        .route("/trajectories/{id}/export", get(pages::export))
        .route("/reveal", get(pages::reveal_form).post(pages::reveal))
        .route("/audit", get(pages::audit))
        .with_state(console.clone());
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    tracing::info!(%addr, "Audit console listening.");
    Ok(Server {
        addr,
        handle,
        shutdown,
        console,
    })
}
