//! The call to the upstream, made from the client's own task: a pooled connection from
//! Pingora's connector, the request written to it, and the response pumped to the client as
//! it arrives.
//!
//! This replaces a Pingora subrequest per call (a second task, its channels and a second pass
//! through Pingora's proxy state machine), so it does by hand what that pass did: build the
//! request header (from the headers [`crate::stages::forward`] lets through, never from the
//! client's header as a whole), put it in HTTP/2 form when the connection is HTTP/2
//! (`:authority` from the upstream, no `Host`), retry a call only while the upstream cannot
//! have acted on it (see [`Stage`]), and frame a response that has no length as chunked for
//! the client. An HTTP/1.1 request's header and body go out in one write.
//!
//! A model call is not idempotent (it costs money and may act through tools), so a request
//! that reached the upstream whole is never sent again: once it is written, a failure is the
//! call's failure. A pooled connection that the upstream closed while it was idle is found by
//! Pingora's connector before it is handed out (on HTTP/1.1 by its idle watcher, and by a
//! read that must find nothing when the connection is taken), so no request is written to it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderName, HeaderValue, Version, header};
use pingora::connectors::ConnectorOptions;
use pingora::connectors::http::Connector;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::protocols::http::HttpTask;
use pingora::protocols::http::client::HttpSession;
use pingora::protocols::http::v1::client::{HttpSession as Http1Session, http_req_header_to_wire};
use pingora::proxy::Session;
use pingora::server::configuration::ServerConf;
use pingora::{Error, ErrorType, Result, RetryType};
use tokio::io::AsyncWriteExt;

use crate::config::Upstream;
use crate::stages::restore::Pump;
use crate::wire::{ApiFamily, ApiKind};

/// How many connections a call tries when each fails in a way that is safe to retry (a
/// reused connection the upstream had closed, found while the request was being written);
/// Pingora's own default.
const MAX_TRIES: usize = 16;

/// How long an idle upstream connection is kept for reuse.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Resolves an upstream's address without blocking (Pingora's `HttpPeer::new` would resolve
/// synchronously and panic on failure).
pub async fn resolve(upstream: &Upstream) -> std::io::Result<SocketAddr> {
    if let Ok(ip) = upstream.host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, upstream.port));
    }
    tokio::net::lookup_host((upstream.host.as_str(), upstream.port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other("the name resolves to no address"))
}

/// The status and message a client gets when the upstream fails with `kind` before
/// answering.
pub fn upstream_failure(kind: &ErrorType) -> (u16, &'static str) {
    match kind {
        ErrorType::ConnectTimedout => (504, "the upstream did not accept the connection in time"),
        ErrorType::ReadTimedout => (504, "the upstream did not answer in time"),
        ErrorType::HTTPStatus(code) if *code >= 400 => (*code, "the upstream failed"),
        _ => (502, "the upstream could not be reached or failed"),
    }
}

/// Where one call goes.
#[derive(Debug, Clone)]
pub struct Dispatch {
    /// The upstream.
    pub upstream: Upstream,
    /// Its resolved address.
    pub address: SocketAddr,
    /// The API (for the credential header).
    pub api: ApiKind,
    /// Path to send (the upstream's prefix and the API's path; never a query).
    pub path: String,
    /// The client headers that go upstream ([`crate::stages::forward::forwarded_headers`]).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// How a call to the upstream ended, when it did not end well.
#[derive(Debug)]
pub struct Failure {
    /// Whether the upstream failed (else the client, or the proxy's own filter).
    pub from_upstream: bool,
    /// Whether the response header had reached the client.
    pub header_sent: bool,
    /// What failed.
    pub kind: ErrorType,
}

/// Connections to every upstream (pooled; HTTP/2 where a TLS upstream offers it).
pub struct Upstreams {
    connector: Connector,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams").finish_non_exhaustive()
    }
}

impl Upstreams {
    /// A connector with the server's TLS settings (its CA file) and pool size.
    pub fn new(conf: &ServerConf) -> Upstreams {
        Upstreams {
            connector: Connector::new(Some(ConnectorOptions::from_server_conf(conf))),
        }
    }

    /// Sends `body` to the upstream and pumps the response to the client through `pump`.
    /// The connection goes back to the pool only after a complete response.
    pub async fn exchange(
        &self,
        session: &mut Session,
        dispatch: &Dispatch,
        body: Bytes,
        pump: &mut Pump,
    ) -> std::result::Result<(), Failure> {
        self.pump(Some(session), dispatch, body, pump).await
    }

    /// Sends `body` to the upstream and reads the response through `pump` for the record
    /// alone: nothing reaches a client (a shadow copy).
    pub async fn exchange_unseen(
        &self,
        dispatch: &Dispatch,
        body: Bytes,
        pump: &mut Pump,
    ) -> std::result::Result<(), Failure> {
        self.pump(None, dispatch, body, pump).await
    }

    async fn pump(
        &self,
        mut session: Option<&mut Session>,
        dispatch: &Dispatch,
        body: Bytes,
        pump: &mut Pump,
    ) -> std::result::Result<(), Failure> {
        let peer = peer(dispatch);
        let failed_upstream = |header_sent, error: Box<Error>| Failure {
            from_upstream: true,
            header_sent,
            kind: error.etype().clone(),
        };
        let (mut connection, header) = self
            .send(dispatch, &peer, body)
            .await
            .map_err(|e| failed_upstream(false, e))?;
        let mut done = connection.response_done();
        let mut task = Some(HttpTask::Header(header, done));
        let mut header_sent = false;
        loop {
            if let Some(task) = task.take() {
                let written = match pump.filter(task) {
                    Ok(Some(task)) => match session.as_deref_mut() {
                        Some(session) => session
                            .write_response_tasks(vec![task])
                            .await
                            .map(|_| pump.sent()),
                        None => {
                            pump.sent();
                            Ok(())
                        }
                    },
                    Ok(None) => Ok(()),
                    Err(error) => Err(error),
                };
                if let Err(error) = written {
                    connection.shutdown().await;
                    return Err(Failure {
                        from_upstream: false,
                        header_sent,
                        kind: error.etype().clone(),
                    });
                }
                header_sent = true;
            }
            if done {
                break;
            }
            match connection.read_response_body().await {
                Ok(Some(bytes)) => {
                    done = connection.response_done();
                    task = Some(HttpTask::Body(Some(bytes), done));
                }
                Ok(None) => {
                    done = true;
                    task = Some(HttpTask::Done);
                }
                Err(error) => {
                    connection.shutdown().await;
                    return Err(failed_upstream(header_sent, error));
                }
            }
        }
        self.connector
            .release_http_session(connection, &peer, Some(IDLE_TIMEOUT))
            .await;
        Ok(())
    }

    /// Gets a connection, writes the request and reads the response header, retrying on a
    /// fresh connection only when the try failed before the upstream could have the whole
    /// request ([`retryable`]).
    async fn send(
        &self,
        dispatch: &Dispatch,
        peer: &HttpPeer,
        body: Bytes,
    ) -> Result<(HttpSession, Box<ResponseHeader>)> {
        let mut tries = 0;
        loop {
            tries += 1;
            // Built for each try (the connection takes it), rather than cloned from a copy.
            let request = request_header(dispatch, body.len())?;
            let (connection, reused) = self.connector.get_http_session(peer).await?;
            match try_once(connection, peer, dispatch, request, &body).await {
                Ok(answered) => return Ok(answered),
                Err((mut error, stage)) => {
                    if !retryable(&mut error, stage, reused) || tries >= MAX_TRIES {
                        return Err(error);
                    }
                    // No content: the error's kind, and where the try stopped.
                    tracing::warn!(
                        upstream = %dispatch.upstream.name,
                        try_number = tries,
                        reused,
                        error = error.etype.as_str(),
                        "A try failed before the upstream could have the whole request; it is sent again on another connection."
                    );
                }
            }
        }
    }
}

/// How far a failed try got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The request was being written: it did not reach the connection whole, so the upstream
    /// cannot have all of it (a `Content-Length` body, or an HTTP/2 stream without its end).
    Writing,
    /// The request was written whole (on HTTP/1.1: into the socket, flushed; on HTTP/2: its
    /// last frame handed to the session), and reading the response header failed. The
    /// upstream may have it and be acting on it.
    Written,
}

/// Whether a try that failed with `error` at `stage`, on a connection that was `reused` from
/// the pool, may be made again on another connection; settles `error.retry` to match.
///
/// - While writing: when the error is one Pingora (or [`write_h1`]) marks safe to retry, a
///   system error on a reused connection (the upstream had closed it) among them.
/// - Once written: only when an HTTP/2 upstream said that it did not process the stream, a
///   `RST_STREAM` with `REFUSED_STREAM` or a `GOAWAY` that leaves the stream out (RFC 9113
///   §8.7); Pingora marks these `H2Error`s retryable on any connection. Anything else, a
///   reused HTTP/1.1 connection closed or reset before the response header included, fails
///   the call: the upstream cannot be told apart from one that read the request and failed.
fn retryable(error: &mut Error, stage: Stage, reused: bool) -> bool {
    let retry = match stage {
        Stage::Writing => {
            error.retry.decide_reuse(reused);
            error.retry()
        }
        Stage::Written => {
            error.etype == ErrorType::H2Error && matches!(error.retry, RetryType::Decided(true))
        }
    };
    error.retry = retry.into();
    retry
}

/// One try on one connection: the request written, the response header read. The
/// connection is shut down when the try fails, and the error says how far it got.
async fn try_once(
    connection: HttpSession,
    peer: &HttpPeer,
    dispatch: &Dispatch,
    request: Box<RequestHeader>,
    body: &Bytes,
) -> std::result::Result<(HttpSession, Box<ResponseHeader>), (Box<Error>, Stage)> {
    let timeout = dispatch.upstream.read_timeout;
    let mut connection = match connection {
        HttpSession::H1(h1) => {
            // Header and body in one write (one system call for a request that fits the
            // socket), where Pingora's session would flush the header on its own first. The
            // stream is taken out of the session for that, and a new session reads the
            // response.
            let mut stream = h1.into_inner();
            if let Err(error) = write_h1(&mut stream, &request, body, timeout).await {
                let _ = stream.shutdown().await;
                return Err((error, Stage::Writing));
            }
            HttpSession::H1(Http1Session::new_with_options(stream, peer))
        }
        mut other => {
            other.set_write_timeout(Some(timeout));
            let written = match &other {
                HttpSession::H2(_) => match h2_form(request, &dispatch.upstream) {
                    Ok(request) => write_whole(&mut other, request, body).await,
                    Err(error) => Err(error),
                },
                _ => write_whole(&mut other, request, body).await,
            };
            if let Err(error) = written {
                other.shutdown().await;
                return Err((error, Stage::Writing));
            }
            other
        }
    };
    connection.set_read_timeout(Some(timeout));
    connection.set_write_timeout(Some(timeout));
    match read_header(&mut connection).await {
        Ok(header) => Ok((connection, header)),
        Err(error) => {
            connection.shutdown().await;
            Err((error, Stage::Written))
        }
    }
}

/// Writes an HTTP/1.1 request (header and body) to `stream` in one vectored write, and
/// flushes it. A system error on the write is worth a retry when the connection was reused
/// (the upstream had closed it): the request did not go out whole.
async fn write_h1(
    stream: &mut pingora::protocols::Stream,
    request: &RequestHeader,
    body: &Bytes,
    timeout: Duration,
) -> Result<()> {
    let header = http_req_header_to_wire(request).ok_or_else(|| {
        Error::explain(
            ErrorType::InvalidHTTPHeader,
            "the request line holds a forbidden byte",
        )
    })?;
    let mut wire = header.freeze().chain(body.clone());
    let write = async {
        stream.write_all_buf(&mut wire).await?;
        stream.flush().await
    };
    match tokio::time::timeout(timeout, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(cause)) => {
            let system = cause.raw_os_error().is_some();
            let mut error =
                Error::because(ErrorType::WriteError, "while writing the request", cause);
            if system {
                error.retry = RetryType::ReusedOnly;
            }
            Err(error)
        }
        Err(_) => Err(Error::explain(
            ErrorType::WriteTimedout,
            "while writing the request (timeout)",
        )),
    }
}

/// Writes a request through the session (HTTP/2).
async fn write_whole(
    connection: &mut HttpSession,
    request: Box<RequestHeader>,
    body: &Bytes,
) -> Result<()> {
    connection.write_request_header(request).await?;
    connection.write_request_body(body.clone(), true).await?;
    connection.finish_request_body().await?;
    Ok(())
}

/// The peer for one call: TLS with SNI, HTTP/2 offered over TLS, the upstream's timeouts.
fn peer(dispatch: &Dispatch) -> HttpPeer {
    let upstream = &dispatch.upstream;
    let sni = if upstream.tls {
        upstream.host.clone()
    } else {
        String::new()
    };
    let mut peer = HttpPeer::new(dispatch.address, upstream.tls, sni);
    peer.options.connection_timeout = Some(upstream.connect_timeout);
    peer.options.read_timeout = Some(upstream.read_timeout);
    peer.options.idle_timeout = Some(IDLE_TIMEOUT);
    if upstream.tls {
        peer.options.set_http_version(2, 1);
    }
    peer
}

fn invalid(what: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InternalError, what)
}

/// The upstream's `Host`: its name, with the port when it is not the scheme's default.
fn authority(upstream: &Upstream) -> String {
    let default_port = if upstream.tls { 443 } else { 80 };
    if upstream.port == default_port {
        upstream.host.clone()
    } else {
        format!("{}:{}", upstream.host, upstream.port)
    }
}

/// The request the upstream gets, in HTTP/1.1 form: `POST` to the upstream's path, `Host`,
/// the body's type and length, the forwarded client headers and the provider's credential.
pub fn request_header(dispatch: &Dispatch, body_len: usize) -> Result<Box<RequestHeader>> {
    let mut request = Box::new(RequestHeader::build(
        "POST",
        dispatch.path.as_bytes(),
        Some(dispatch.headers.len() + 4),
    )?);
    request.set_version(Version::HTTP_11);
    let upstream = &dispatch.upstream;
    request.insert_header(header::HOST, authority(upstream))?;
    request.insert_header(header::CONTENT_TYPE, "application/json")?;
    request.insert_header(header::CONTENT_LENGTH, body_len)?;
    for (name, value) in &dispatch.headers {
        request.append_header(name.clone(), value.clone())?;
    }
    if let Some(key) = &upstream.api_key {
        match dispatch.api.family() {
            ApiFamily::Anthropic => request.insert_header("x-api-key", key.0.as_str())?,
            ApiFamily::OpenAi => {
                request.insert_header(header::AUTHORIZATION, format!("Bearer {}", key.0))?
            }
        }
    }
    Ok(request)
}

/// The same request for an HTTP/2 connection: an absolute URI whose authority becomes
/// `:authority`, and no `Host` (some HTTP/2 servers refuse both).
fn h2_form(mut request: Box<RequestHeader>, upstream: &Upstream) -> Result<Box<RequestHeader>> {
    request.remove_header(&header::HOST);
    let path = request
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let uri = http::Uri::builder()
        .scheme(if upstream.tls { "https" } else { "http" })
        .authority(authority(upstream))
        .path_and_query(path)
        .build()
        .map_err(|_| invalid("the upstream's address is not a valid authority"))?;
    request.set_uri(uri);
    request.set_version(Version::HTTP_2);
    Ok(request)
}

/// Reads the response header, skipping informational responses (the proxy never sends
/// `Expect`). The header is made one for an HTTP/1.1 client: a response without a length
/// (HTTP/2 gives none; HTTP/1 may end a body by closing) is framed as chunked, or given
/// `Content-Length: 0` when it has no body, so the client's connection stays reusable.
async fn read_header(connection: &mut HttpSession) -> Result<Box<ResponseHeader>> {
    let mut header = loop {
        connection.read_response_header().await?;
        let header = connection
            .response_header()
            .ok_or_else(|| invalid("the upstream connection returned no response header"))?;
        if !header.status.is_informational() || header.status == 101 {
            break Box::new(header.clone());
        }
    };
    // The client is answered in HTTP/1.1 whatever the upstream spoke (Pingora's HTTP/1
    // writer cannot write an HTTP/2 status line).
    header.set_version(Version::HTTP_11);
    let framed = header.headers.contains_key(header::TRANSFER_ENCODING)
        || header.headers.contains_key(header::CONTENT_LENGTH);
    let bodiless = matches!(header.status.as_u16(), 204 | 304);
    if !framed && !bodiless {
        if connection.response_done() {
            header.insert_header(header::CONTENT_LENGTH, 0)?;
        } else {
            header.insert_header(header::TRANSFER_ENCODING, "chunked")?;
        }
    }
    Ok(header)
}

#[cfg(test)]
mod retry_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Secret, Trust};

    pub(super) fn dispatch(tls: bool, port: u16, api: ApiKind) -> Dispatch {
        Dispatch {
            upstream: Upstream {
                name: "provider".into(),
                host: "api.example.com".into(),
                port,
                tls,
                prefix: "/openai".into(),
                trust: Trust::External,
                api_key: Some(Secret("sk-provider".into())),
                connect_timeout: Duration::from_secs(1),
                read_timeout: Duration::from_secs(1),
                record_logprobs: false,
                record_token_ids: false,
                audit: None,
            },
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            api,
            path: "/openai/v1/chat/completions".into(),
            headers: vec![(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static("2023-06-01"),
            )],
        }
    }

    fn names(request: &RequestHeader) -> Vec<String> {
        let mut names: Vec<String> = request.headers.keys().map(|n| n.to_string()).collect();
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn the_upstream_gets_the_forwarded_headers_its_path_host_length_and_own_key() {
        let request = request_header(&dispatch(false, 8000, ApiKind::OpenAiChat), 12).unwrap();
        assert_eq!(
            names(&request),
            [
                "anthropic-version",
                "authorization",
                "content-length",
                "content-type",
                "host"
            ]
        );
        let header = |name: &str| request.headers.get(name).unwrap().to_str().unwrap();
        assert_eq!(header("authorization"), "Bearer sk-provider");
        assert_eq!(header("host"), "api.example.com:8000");
        assert_eq!(header("content-length"), "12");
        assert_eq!(request.uri, "/openai/v1/chat/completions");
        assert_eq!(request.version, Version::HTTP_11);

        // Anthropic's key goes in x-api-key; the default port is left out of Host.
        let request = request_header(&dispatch(true, 443, ApiKind::AnthropicMessages), 12).unwrap();
        let header = |name: &str| request.headers.get(name).unwrap().to_str().unwrap();
        assert_eq!(header("x-api-key"), "sk-provider");
        assert!(request.headers.get("authorization").is_none());
        assert_eq!(header("host"), "api.example.com");
    }

    #[test]
    fn the_http2_form_carries_the_authority_in_the_uri_and_no_host() {
        let dispatch = dispatch(true, 8443, ApiKind::OpenAiChat);
        let request = request_header(&dispatch, 12).unwrap();
        let request = h2_form(request, &dispatch.upstream).unwrap();
        assert_eq!(
            request.uri,
            "https://api.example.com:8443/openai/v1/chat/completions"
        );
        assert!(request.headers.get("host").is_none());
        assert_eq!(request.version, Version::HTTP_2);
        assert_eq!(
            request.headers.get("authorization").unwrap(),
            "Bearer sk-provider"
        );
    }
}
