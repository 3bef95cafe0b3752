//! The floor for the proxy benchmark: a plain Pingora reverse proxy that does nothing but
//! forward every request to one upstream (Pingora's own upstream phase, its connection pool,
//! no body handling, no policy, no recording), with the same thread count and allocator as
//! `atdp-proxy`. `scripts/bench-proxy` runs it as target "pingora", so the cost of the
//! framework itself and the cost of what atdp adds on top can be told apart
//! (docs/benchmarks.md, "Proxy overhead").
//!
//! ```sh
//! bench-pingora --listen 127.0.0.1:19203 --upstream 127.0.0.1:19201
//! ```

use std::net::SocketAddr;

use async_trait::async_trait;
use clap::Parser;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::Server;
use pingora::server::configuration::ServerConf;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long)]
    listen: SocketAddr,
    /// The upstream's address (plain HTTP).
    #[arg(long)]
    upstream: SocketAddr,
    /// Worker threads (default: one per core, as `atdp-proxy`).
    #[arg(long)]
    threads: Option<usize>,
}

struct Forward {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for Forward {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut (),
    ) -> pingora::Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let args = Args::parse();
    let conf = ServerConf {
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service(
        &server.configuration,
        Forward {
            upstream: args.upstream,
        },
    );
    service.add_tcp(&args.listen.to_string());
    server.add_service(service);
    server.run_forever();
}
