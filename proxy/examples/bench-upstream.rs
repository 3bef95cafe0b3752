//! A fast stand-in provider for the proxy benchmark (the Python fake is too slow to measure a
//! proxy against): HTTP/1.1 with keep-alive, answering `POST /v1/chat/completions` at once
//! with a fixed small completion, or with an SSE stream of `--chunks` deltas when the body
//! asks for `"stream": true`. No masking-relevant content.
//!
//! `cargo run --release -p atdp-proxy --example bench-upstream -- --port 9101 [--chunks 20]`

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const COMPLETION: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1764400000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"The order shipped on Tuesday and should arrive by Friday.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":42,"completion_tokens":12,"total_tokens":54}}"#;

fn stream_body(chunks: usize) -> String {
    let mut body = String::new();
    for i in 0..chunks {
        body.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764400000,\"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    body.push_str("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764400000,\"model\":\"gpt-4.1-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    body
}

async fn serve(mut stream: TcpStream, sse: Arc<String>) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(16 << 10);
    let mut chunk = [0u8; 16 << 10];
    loop {
        // Read one request: head, then Content-Length bytes.
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = &buf[head_end..head_end + length];
        let streaming = body.windows(14).any(|w| w == b"\"stream\":true")
            || body.windows(15).any(|w| w == b"\"stream\": true");
        if streaming {
            // Chunked, one write per event, as providers stream.
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
                .await?;
            for event in sse.split_inclusive("\n\n") {
                stream
                    .write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
                    .await?;
            }
            stream.write_all(b"0\r\n\r\n").await?;
            buf.drain(..head_end + length);
            continue;
        }
        let response = {
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{COMPLETION}",
                COMPLETION.len()
            )
        };
        stream.write_all(response.as_bytes()).await?;
        buf.drain(..head_end + length);
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let port: u16 = flag("--port").map_or(Ok(9101), |p| p.parse())?;
    let chunks: usize = flag("--chunks").map_or(Ok(20), |c| c.parse())?;
    let threads: usize = flag("--threads").map_or(Ok(1), |c| c.parse())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        println!("{{\"port\": {}}}", listener.local_addr()?.port());
        let sse = Arc::new(stream_body(chunks));
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(serve(stream, sse.clone()));
        }
    })
}
