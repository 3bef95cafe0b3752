//! When a call is tried again on another connection, against an HTTP/1.1 upstream on
//! loopback that answers the first request on each connection and then does what the test
//! asks with the second.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::tests::dispatch;
use super::*;

/// What the test upstream does with the second request on a connection.
#[derive(Debug, Clone, Copy)]
enum Second {
    /// Reads it whole, then closes the connection without answering.
    ReadThenClose,
    /// Closes the connection as soon as it starts to arrive, the rest unread, so the kernel
    /// resets the connection while the request is still being written.
    CloseWhileArriving,
}

/// The upstream, counting the connections it accepts and the requests it reads whole.
struct TestUpstream {
    port: u16,
    connections: Arc<AtomicUsize>,
    whole: Arc<AtomicUsize>,
}

impl TestUpstream {
    fn start(second: Second) -> TestUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let whole = Arc::new(AtomicUsize::new(0));
        let (accepted, read) = (connections.clone(), whole.clone());
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(mut connection) = connection else {
                    return;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let read = read.clone();
                std::thread::spawn(move || {
                    if !atdp_testkit::read_request(&mut connection) {
                        return;
                    }
                    read.fetch_add(1, Ordering::SeqCst);
                    let reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
                    if connection.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                    match second {
                        Second::ReadThenClose => {
                            if atdp_testkit::read_request(&mut connection) {
                                read.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Second::CloseWhileArriving => {
                            let _ = connection.read(&mut [0u8; 1024]);
                        }
                    }
                });
            }
        });
        TestUpstream {
            port,
            connections,
            whole,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn whole(&self) -> usize {
        self.whole.load(Ordering::SeqCst)
    }
}

/// One call: the request sent, the response read whole, and the connection put back in the
/// pool for the next call; the response's status.
async fn call(upstreams: &Upstreams, dispatch: &Dispatch, body: Bytes) -> Result<u16> {
    let peer = peer(dispatch);
    let (mut connection, header) = upstreams.send(dispatch, &peer, body).await?;
    let mut done = connection.response_done();
    while !done {
        done = connection.read_response_body().await?.is_none() || connection.response_done();
    }
    upstreams
        .connector
        .release_http_session(connection, &peer, Some(IDLE_TIMEOUT))
        .await;
    Ok(header.status.as_u16())
}

fn plain_dispatch(port: u16) -> Dispatch {
    let mut dispatch = dispatch(false, port, ApiKind::OpenAiChat);
    dispatch.upstream.host = "127.0.0.1".into();
    dispatch.upstream.read_timeout = Duration::from_secs(10);
    dispatch
}

#[tokio::test]
async fn a_request_the_upstream_read_whole_is_not_sent_again_when_it_closes_without_answering() {
    let upstream = TestUpstream::start(Second::ReadThenClose);
    let upstreams = Upstreams::new(&ServerConf::default());
    let dispatch = plain_dispatch(upstream.port);
    let body = Bytes::from_static(b"{\"model\":\"m\"}");
    let first = call(&upstreams, &dispatch, body.clone()).await.unwrap();
    assert_eq!(first, 200);

    // On the pooled connection: the upstream reads the request, then closes it.
    let failed = call(&upstreams, &dispatch, body).await.unwrap_err();
    assert_eq!(failed.etype(), &ErrorType::ConnectionClosed, "{failed}");
    assert_eq!(upstream.whole(), 2, "the second request arrived once");
    assert_eq!(upstream.connections(), 1, "no other connection was tried");
}

#[tokio::test]
async fn a_pooled_connection_closed_while_the_request_is_written_is_retried_on_a_fresh_one() {
    let upstream = TestUpstream::start(Second::CloseWhileArriving);
    let upstreams = Upstreams::new(&ServerConf::default());
    let dispatch = plain_dispatch(upstream.port);
    let first = call(&upstreams, &dispatch, Bytes::from_static(b"{}")).await;
    assert_eq!(first.unwrap(), 200);

    // More than the sockets' buffers hold, so the write is still going on when the upstream
    // closes the pooled connection, and fails.
    let large = Bytes::from(vec![b' '; 32 << 20]);
    assert_eq!(call(&upstreams, &dispatch, large).await.unwrap(), 200);
    let fresh = upstream.connections();
    assert_eq!(fresh, 2, "the retry took a fresh connection");
    assert_eq!(
        upstream.whole(),
        2,
        "the upstream read the first request and the retried one whole, nothing else"
    );
}

#[test]
fn only_a_request_the_upstream_cannot_have_acted_on_is_retried() {
    use ErrorType::*;
    use Stage::{Writing, Written};
    let (reused_only, yes, no) = (RetryType::ReusedOnly, true.into(), false.into());
    let cases: [(ErrorType, RetryType, Stage, bool, bool); 10] = [
        // A reused connection that fails while the request is written.
        (WriteError, reused_only, Writing, true, true),
        (WriteError, reused_only, Writing, false, false),
        (WriteTimedout, no, Writing, true, false),
        // An HTTP/2 connection going away before the stream was opened.
        (H2Error, yes, Writing, true, true),
        // The request was written whole: a connection closed or reset is the call's failure.
        (ConnectionClosed, reused_only, Written, true, false),
        (ReadError, reused_only, Written, true, false),
        (ReadTimedout, no, Written, true, false),
        // An HTTP/2 upstream that refused the stream, one that failed it, and one that
        // cannot speak HTTP/2.
        (H2Error, yes, Written, false, true),
        (H2Error, no, Written, true, false),
        (InvalidH2, yes, Written, true, false),
    ];
    for (etype, retry, stage, reused, expected) in cases {
        let mut error = Error::explain(etype.clone(), "a test failure");
        error.retry = retry;
        let decided = retryable(&mut error, stage, reused);
        assert_eq!(
            decided, expected,
            "{etype:?} {retry:?} {stage:?} reused={reused}"
        );
        assert_eq!(error.retry(), expected, "the error says the same");
    }
}
