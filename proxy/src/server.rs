//! Starting the proxy: the Pingora server for agents, the admin port, policy reload on
//! SIGHUP, and a graceful shutdown that lets in-flight streams finish and flushes the lake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pingora::apps::HttpServerOptions;
use pingora::listeners::TcpSocketOptions;
use pingora::listeners::tls::TlsSettings;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::service::Proxy;
use crate::state::State;
use crate::tls::Certificates;
use crate::upstream::Upstreams;

/// How long a graceful shutdown waits for in-flight calls before closing them.
const GRACE: Duration = Duration::from_secs(30);

/// The addresses a running proxy has bound: with port 0 in `listen` or `admin_listen`, the
/// ports the system chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Where agents connect.
    pub listen: SocketAddr,
    /// The admin port (`/metrics`, `/healthz`, `/readyz`, `POST /reload`).
    pub admin: SocketAddr,
    /// Whether `listen` serves HTTPS.
    pub tls: bool,
}

/// Runs the proxy until SIGTERM (graceful) or SIGINT (fast); then flushes the lake.
pub fn run(config: Config) -> Result<()> {
    run_with(config, |_| {})
}

/// [`run`], calling `bound` once, from another thread, with the addresses taken, as soon as
/// the agents' listener accepts connections.
pub fn run_with(config: Config, bound: impl FnOnce(Bound) + Send + 'static) -> Result<()> {
    // The lake writer, the admin port and reloads live on their own runtime, which outlives
    // Pingora's service runtimes.
    let background = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("atdp-background")
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            what: "cannot start the background runtime".into(),
            source,
        })?;
    let listen = config.listen;
    let admin = config.admin_listen;
    let config_ca = config.ca_file.clone();
    let ca_file = match &config_ca {
        Some(path) if !path.is_file() => {
            return Err(Error::Config(format!(
                "ca_file {} is not a file",
                path.display()
            )));
        }
        Some(path) => Some(path.to_string_lossy().into_owned()),
        None => None,
    };
    // The certificate is checked before anything starts: a bad file stops the start.
    let certificates = config.tls.clone().map(Certificates::load).transpose()?;
    let state = background.block_on(State::open(config))?;
    let admin_listener = background
        .block_on(tokio::net::TcpListener::bind(admin))
        .map_err(|source| Error::Io {
            what: format!("cannot listen on the admin address {admin}"),
            source,
        })?;
    let admin = admin_listener.local_addr().map_err(|source| Error::Io {
        what: format!("cannot read the admin address {admin}"),
        source,
    })?;
    background.spawn(crate::admin::serve(state.clone(), admin_listener));
    // Port 0: a socket that never listens takes a free port for the process's lifetime, and
    // Pingora's listener binds the same port beside it (both with SO_REUSEPORT), so no other
    // process can take the port in between.
    let (listen, reserved) = reserve(listen)?;
    let socket_options = reserved.as_ref().map(|_| {
        let mut options = TcpSocketOptions::default();
        options.so_reuseport = Some(true);
        options
    });
    background.spawn(reload_on_hangup(state.clone(), certificates.clone()));

    // Draining happens before Pingora is told to stop (see `Drain`), so its own grace period
    // is not needed.
    let conf = ServerConf {
        threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
        ca_file,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(5),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service(
        &server.configuration,
        Proxy {
            state: state.clone(),
            upstreams: Arc::new(Upstreams::new(&server.configuration)),
        },
    );
    // HTTP/1.1 connections close when idle by the keep-alive each call sets; HTTP/2 ones by
    // this.
    if let Some(proxy) = service.app_logic_mut() {
        let mut options = HttpServerOptions::default();
        options.h2_idle_timeout = Some(state.config.client_idle_timeout);
        proxy.server_options = Some(options);
    }
    match &certificates {
        Some(certificates) => {
            let mut tls = TlsSettings::intermediate("", "")
                .map_err(|e| Error::Config(format!("cannot set up TLS on {listen}: {e}")))?;
            tls.set_cert_resolver(certificates.clone());
            tls.enable_h2();
            service.add_tls_with_settings(&listen.to_string(), socket_options, tls);
        }
        None => match socket_options {
            Some(options) => service.add_tcp_with_settings(&listen.to_string(), options),
            None => service.add_tcp(&listen.to_string()),
        },
    }
    server.add_service(service);
    let scheme = if certificates.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(%listen, %admin, scheme, "atdp-proxy listening.");
    let taken = Bound {
        listen,
        admin,
        tls: certificates.is_some(),
    };
    let announced = std::thread::Builder::new()
        .name("atdp-announce".into())
        .spawn(move || {
            // Pingora binds in its own threads once `run` starts: wait until it listens.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !listening(taken.listen.port()) {
                if std::time::Instant::now() > deadline {
                    tracing::error!(listen = %taken.listen, "The agents' listener did not start.");
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            bound(taken);
        });
    if let Err(error) = announced {
        tracing::error!(%error, "Cannot start the thread that announces the addresses.");
    }
    server.run(RunArgs {
        shutdown_signal: Box::new(Drain {
            state: state.clone(),
        }),
    });

    tracing::info!("Shutting down: flushing the lake.");
    state.recorder.drain_blocking();
    let flushed = background
        .block_on(state.writer.shutdown(GRACE))
        .map_err(Error::Lake)?;
    if !flushed {
        tracing::warn!(
            "Not everything reached the lake in time; the write-ahead log keeps it for the next start."
        );
    }
    Ok(())
}

/// Whether a TCP socket of this process listens on `port` (Linux: the kernel's socket
/// tables, so no connection is opened to find out). Elsewhere, true at once.
fn listening(port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    let tables = ["/proc/self/net/tcp", "/proc/self/net/tcp6"].map(std::fs::read_to_string);
    if tables.iter().all(std::result::Result::is_err) {
        return true;
    }
    tables.iter().flatten().any(|table| {
        table.lines().skip(1).any(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1).unwrap_or_default();
            let state = fields.nth(1).unwrap_or_default();
            local.ends_with(&suffix) && state == "0A"
        })
    })
}

/// For a listen address with port 0: the address with the port the system chose, and the
/// socket (bound with SO_REUSEPORT, never listening) that holds it. Other addresses are
/// returned as they are.
fn reserve(listen: SocketAddr) -> Result<(SocketAddr, Option<tokio::net::TcpSocket>)> {
    if listen.port() != 0 {
        return Ok((listen, None));
    }
    let failed = |source| Error::Io {
        what: format!("cannot take a free port on {}", listen.ip()),
        source,
    };
    let socket = if listen.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(failed)?;
    socket.set_reuseport(true).map_err(failed)?;
    socket.bind(listen).map_err(failed)?;
    let taken = socket.local_addr().map_err(failed)?;
    Ok((taken, Some(socket)))
}

/// SIGTERM (or SIGQUIT): stop taking new calls (503, and `/readyz` fails), wait for the calls in flight
/// (streams included) up to the grace time, then let Pingora stop. SIGINT: stop now.
struct Drain {
    state: Arc<State>,
}

#[async_trait::async_trait]
impl ShutdownSignalWatch for Drain {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut terminate), Ok(mut interrupt), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("Cannot watch for signals; stopping.");
            return ShutdownSignal::FastShutdown;
        };
        // SIGQUIT (Pingora's upgrade signal) drains like SIGTERM: there is no socket hand-over.
        tokio::select! {
            _ = interrupt.recv() => return ShutdownSignal::FastShutdown,
            _ = terminate.recv() => {}
            _ = quit.recv() => {}
        }
        self.state.draining.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + GRACE;
        tracing::info!(
            in_flight = self.state.in_flight.load(Ordering::SeqCst),
            "Draining: new calls are refused, calls in flight may finish."
        );
        // Shadow copies in flight are waited for too: their steps and audit events are
        // queued before the recording thread drains.
        while self.state.in_flight.load(Ordering::SeqCst) > 0 || self.state.shadows.in_flight() > 0
        {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    in_flight = self.state.in_flight.load(Ordering::SeqCst),
                    "Grace time over; closing the calls still in flight."
                );
                break;
            }
            tokio::select! {
                _ = interrupt.recv() => return ShutdownSignal::FastShutdown,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        ShutdownSignal::GracefulTerminate
    }
}

async fn reload_on_hangup(state: Arc<State>, certificates: Option<Arc<Certificates>>) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        return;
    };
    while hangups.recv().await.is_some() {
        match state.reload("signal") {
            Ok(version) => tracing::info!(version, "Policy reloaded."),
            Err(error) => {
                tracing::error!(error = %error, "Policy reload refused; the old policy stays in force.")
            }
        }
        if let Some(certificates) = &certificates {
            match certificates.reload() {
                Ok(()) => tracing::info!("TLS certificate reloaded for new connections."),
                Err(error) => tracing::error!(
                    error = %error,
                    "TLS certificate reload refused; the old certificate stays in force."
                ),
            }
        }
    }
}
