//! Against a real S3-protocol server on loopback (moto): an outage in the middle of a run,
//! and three writer processes appending to the same tables at once.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use atdp_lake::*;
use atdp_schema::*;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::common::*;

/// A TCP relay in front of the S3 server: stopping it makes the server unreachable (every
/// connection refused, open ones cut) without losing the server's data.
struct Relay {
    port: u16,
    target: u16,
    task: Option<JoinHandle<()>>,
}

impl Relay {
    async fn start(target: u16) -> Relay {
        let mut relay = Relay {
            port: free_port(),
            target,
            task: None,
        };
        relay.resume().await;
        relay
    }

    /// Listens on the relay's port again. While the relay was stopped, the port may have been
    /// taken as the local port of an outgoing connection (it is in the ephemeral range), so
    /// binding is retried until that connection ends.
    async fn resume(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let listener = loop {
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            match socket.bind(([127, 0, 0, 1], self.port).into()) {
                Ok(()) => break socket.listen(128).unwrap(),
                Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the relay's port stayed in use"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("cannot bind the relay: {error}"),
            }
        };
        let target = self.target;
        self.task = Some(tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    /// Closes the listener and cuts every open connection.
    async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

fn reward_ids(rows: Vec<Reward>) -> Vec<String> {
    rows.into_iter().map(|r| r.reward_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_then_recovery_loses_and_duplicates_nothing() {
    let moto = Moto::start();
    moto.create_bucket("atdp-outage");
    let mut relay = Relay::start(moto.port).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config("s3://atdp-outage/lake", &dir.path().join("wal"));
    config.storage_options = s3_options(relay.port);
    let writer = LakeWriter::open(config).await.unwrap();

    let mut expected = append_rewards(&writer, "acme", 200).await;
    tokio::time::timeout(Duration::from_secs(60), writer.flush())
        .await
        .unwrap()
        .unwrap();

    relay.stop().await;
    expected.extend(append_rewards(&writer, "acme", 150).await);
    expected.extend(append_rewards(&writer, "globex", 150).await);
    eventually("the outage is reported", Duration::from_secs(60), || {
        writer.stats().store_down
    })
    .await;
    assert!(
        writer.stats().held_bytes > 0,
        "records wait in the log during the outage"
    );

    relay.resume().await;
    tokio::time::timeout(Duration::from_secs(120), writer.flush())
        .await
        .unwrap()
        .unwrap();
    assert!(!writer.stats().store_down);

    let reader = LakeReader::new(writer.lake().clone());
    let found = reward_ids(reader.rewards(&Filter::default()).await.unwrap().rows);
    assert_exactly_once(&found, &expected);
    assert_eq!(found.len(), expected.len());
    let globex = reader
        .rewards(&Filter {
            tenant_id: Some("globex".into()),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(globex.rows.len(), 150);
    assert!(writer.shutdown(Duration::from_secs(30)).await.unwrap());
}

const CHILD_ENV: &str = "ATDP_S3_WRITER_CHILD";

/// One of the concurrent writers: appends rewards and audit events in 10 rounds, flushing
/// after each (so commits from the three processes interleave), then prints the ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of three_writer_processes_share_the_tables"]
async fn writer_child() {
    let spec =
        std::env::var(CHILD_ENV).expect("started by three_writer_processes_share_the_tables");
    let (port, rest) = spec.split_once(':').unwrap();
    let (tenant, wal) = rest.split_once(':').unwrap();
    let mut config = test_config("s3://atdp-shared/lake", std::path::Path::new(wal));
    config.storage_options = s3_options(port.parse().unwrap());
    let writer = LakeWriter::open(config).await.unwrap();
    let mut ids = Vec::new();
    for round in 0..10 {
        ids.extend(append_rewards(&writer, tenant, 30).await);
        writer
            .append(AuditEvent {
                event_id: new_id(),
                tenant_id: tenant.into(),
                occurred_at: now_micros(),
                kind: "reward_written".into(),
                actor: format!("writer-{tenant}"),
                detail_json: Some(format!(r#"{{"round":{round}}}"#)),
                ..AuditEvent::default()
            })
            .unwrap();
        writer.flush().await.unwrap();
    }
    assert!(writer.shutdown(Duration::from_secs(30)).await.unwrap());
    for id in ids {
        println!("ACK {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_writer_processes_share_the_tables() {
    let moto = Moto::start();
    moto.create_bucket("atdp-shared");
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<_> = ["acme", "globex", "initech"]
        .iter()
        .map(|tenant| {
            let wal = dir.path().join(format!("wal-{tenant}"));
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "s3::writer_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(
                    CHILD_ENV,
                    format!("{}:{tenant}:{}", moto.port, wal.display()),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut expected = Vec::new();
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "a writer failed: {}\n{}",
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
        let ids: Vec<String> = stdout
            .lines()
            .filter_map(acked_id)
            .map(str::to_owned)
            .collect();
        assert_eq!(ids.len(), 300);
        expected.extend(ids);
    }

    let lake = Lake::new("s3://atdp-shared/lake", s3_options(moto.port)).unwrap();
    let reader = LakeReader::new(lake);
    let found = reward_ids(reader.rewards(&Filter::default()).await.unwrap().rows);
    assert_exactly_once(&found, &expected);
    assert_eq!(found.len(), 900);

    // Three audit chains, one per writer instance, each whole.
    let events = reader.audit(&Filter::default()).await.unwrap().rows;
    let mut chains: BTreeMap<String, Vec<AuditEvent>> = BTreeMap::new();
    for event in events {
        chains
            .entry(event.chain_id.clone())
            .or_default()
            .push(event);
    }
    assert_eq!(chains.len(), 3);
    for (chain, events) in chains {
        let head = verify_chain(&events).unwrap_or_else(|b| panic!("chain {chain}: {b}"));
        assert_eq!(head.map(|h| h.seq), Some(10));
    }
}
