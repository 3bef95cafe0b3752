//! The admin port: `GET /metrics` (Prometheus), `GET /healthz` (the process is up),
//! `GET /readyz` (it can take traffic: policy loaded, the lake writer not failing or over
//! budget), `POST /reload` (reload the policy directory; an invalid one is refused and the
//! old one stays in force). Endpoints that change state need the admin token
//! (`Authorization: Bearer …`, from `admin_token_env`, default `ATDP_ADMIN_TOKEN`); without a
//! token configured they are off (403), and SIGHUP still reloads. A deliberately small
//! HTTP/1.1 server: one request per connection, no bodies read, 10 s per connection. Bind it
//! to a private address.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::state::State;

/// Serves the admin endpoints until the listener fails.
pub async fn serve(state: Arc<State>, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, say: do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let answered =
                tokio::time::timeout(std::time::Duration::from_secs(10), answer(&state, stream));
            let _ = answered.await;
        });
    }
}

/// Whether the request carries `token` as `Authorization: Bearer <token>`.
fn authorised(head: &str, token: &str) -> bool {
    head.lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            let credentials = value.trim().split_once(' ');
            name.trim().eq_ignore_ascii_case("authorization")
                && credentials.is_some_and(|(scheme, given)| {
                    scheme.eq_ignore_ascii_case("bearer") && same(given.trim(), token)
                })
        })
    })
}

/// Compares without stopping at the first difference (no timing hint about the token).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

async fn answer(state: &State, mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            200,
            "text/plain; version=0.0.4",
            state.metrics.render(
                &state.writer.stats(),
                state.recorder.room_bytes(),
                state.policy.current().1.scanner.cache_stats(),
            ),
        ),
        ("GET", "/healthz") => (200, "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") => {
            let stats = state.writer.stats();
            if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
                (503, "text/plain", "not ready: shutting down\n".to_owned())
            } else if stats.log_failure.is_some() {
                (
                    503,
                    "text/plain",
                    "not ready: the write-ahead log failed\n".to_owned(),
                )
            } else if stats.held_bytes >= stats.budget_bytes {
                (
                    503,
                    "text/plain",
                    "not ready: lake back-log over budget\n".to_owned(),
                )
            } else {
                (200, "text/plain", "ready\n".to_owned())
            }
        }
        ("POST", "/reload") if state.config.admin_token.is_none() => (
            403,
            "text/plain",
            "reloading over HTTP is off: no admin token is configured (set ATDP_ADMIN_TOKEN, or send SIGHUP)\n".to_owned(),
        ),
        ("POST", "/reload")
            if !state
                .config
                .admin_token
                .as_ref()
                .is_some_and(|token| authorised(&line, &token.0)) =>
        {
            (
                401,
                "text/plain",
                "reloading needs Authorization: Bearer <admin token>\n".to_owned(),
            )
        }
        ("POST", "/reload") => match state.reload("admin") {
            Ok(version) => {
                tracing::info!(version, "Policy reloaded.");
                (
                    200,
                    "text/plain",
                    format!("policy version {version} in force\n"),
                )
            }
            Err(error) => {
                tracing::error!(error = %error, "Policy reload refused; the old policy stays in force.");
                (
                    422,
                    "text/plain",
                    format!("reload refused, old policy in force: {error}\n"),
                )
            }
        },
        _ => (404, "text/plain", "not found\n".to_owned()),
    };
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        422 => "Unprocessable Entity",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
