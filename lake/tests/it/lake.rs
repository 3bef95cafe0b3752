//! The writer and reader against a local-directory lake.

use std::collections::BTreeMap;
use std::time::Duration;

use atdp_lake::synth::{SynthConfig, generate};
use atdp_lake::*;
use atdp_schema::*;

use crate::common::*;

pub fn full_step(tenant: &str, started_at: i64) -> Step {
    Step {
        step_id: new_id(),
        trajectory_id: new_id(),
        parent_step_id: Some(new_id()),
        turn_index: 3,
        tenant_id: tenant.into(),
        agent_id: "extraction".into(),
        started_at,
        ended_at: Some(started_at + 1_500_000),
        api: "openai.chat".into(),
        upstream: "openai".into(),
        model_requested: "gpt-4.1-mini".into(),
        model_served: Some("gpt-4.1-mini-2025-04-14".into()),
        policy_version: Some("v7".into()),
        request_messages: vec![
            Message {
                role: "system".into(),
                content: Some("You extract invoices.".into()),
                ..Message::default()
            },
            Message {
                role: "assistant".into(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "lookup_order".into(),
                    arguments: r#"{"order_ref":"SO-1"}"#.into(),
                }],
                ..Message::default()
            },
            Message {
                role: "tool".into(),
                content: Some("found".into()),
                name: Some("lookup_order".into()),
                tool_call_id: Some("call_1".into()),
                tool_calls: vec![],
            },
        ],
        tools: vec![Tool {
            kind: "function".into(),
            name: "lookup_order".into(),
            description: Some("Look up an order".into()),
            parameters: Some(r#"{"type":"object"}"#.into()),
        }],
        params: Some(r#"{"temperature":0.2}"#.into()),
        response_message: Some(Message {
            role: "assistant".into(),
            content: Some("Mail <EMAIL_ADDRESS_7f3a9c> about it.".into()),
            ..Message::default()
        }),
        finish_reason: Some("stop".into()),
        status: "ok".into(),
        error: None,
        prompt_tokens: Some(120),
        completion_tokens: Some(9),
        completion_token_ids: Some(vec![1, 2, 3]),
        completion_logprobs: Some(vec![-0.5, -0.25, -0.125]),
        pii: vec![PiiSpan {
            field: "response_message.content".into(),
            entity: "EMAIL_ADDRESS".into(),
            token: "<EMAIL_ADDRESS_7f3a9c>".into(),
            action: "tokenize".into(),
        }],
        tags: BTreeMap::from([("session".into(), "s-1".into())]),
        extra_json: Some(r#"{"user":"u-1"}"#.into()),
        training_eligible: Some(true),
        legal_basis: Some("contract".into()),
        retention_until: Some(started_at + 365 * 86_400_000_000),
        consent_source: Some("policy:default".into()),
    }
}

const DAY: i64 = 86_400_000_000;
const T0: i64 = 1_795_910_400_000_000; // 2026-11-29T00:00:00Z

#[tokio::test]
async fn every_field_survives_the_lake_and_filters_prune() {
    let dir = tempfile::tempdir().unwrap();
    let lake_path = dir.path().join("lake");
    let writer = LakeWriter::open(test_config(
        lake_path.to_str().unwrap(),
        &dir.path().join("wal"),
    ))
    .await
    .unwrap();
    let a_today = full_step("acme", T0 + 1_000);
    let a_yesterday = full_step("acme", T0 - DAY + 1_000);
    let g_today = full_step("globex", T0 + 2_000);
    for step in [&a_today, &a_yesterday, &g_today] {
        writer.append(step.clone()).unwrap();
    }
    writer.flush().await.unwrap();

    let reader = LakeReader::new(writer.lake().clone());
    let all = reader.steps(&Filter::default()).await.unwrap();
    assert_eq!(
        all.rows,
        vec![a_yesterday.clone(), a_today.clone(), g_today.clone()]
    );
    let version = all.version.unwrap();

    // Partition layout: tenant_id=…/date=…/
    let globex_dir = lake_path.join("atdp/v1/steps/tenant_id=globex");
    assert!(
        globex_dir.is_dir(),
        "no tenant partition at {}",
        globex_dir.display()
    );

    let by_time = reader
        .steps(&Filter {
            tenant_id: Some("acme".into()),
            since: Some(T0),
            until: Some(T0 + DAY),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_time.rows, vec![a_today.clone()]);

    let by_trajectory = reader
        .steps(&Filter {
            trajectory_id: Some(g_today.trajectory_id.clone()),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_trajectory.rows, vec![g_today.clone()]);

    // Pruning: with globex's data files destroyed, a read filtered to acme still works,
    // because it never opens them; an unfiltered read fails.
    for entry in walk(&globex_dir) {
        if entry.extension().is_some_and(|e| e == "parquet") {
            std::fs::write(&entry, b"not parquet").unwrap();
        }
    }
    let acme = reader
        .steps(&Filter {
            tenant_id: Some("acme".into()),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(acme.rows.len(), 2);
    assert!(reader.steps(&Filter::default()).await.is_err());

    // Time travel: a later commit does not change what version `version` holds.
    writer.append(full_step("acme", T0 + 5_000)).unwrap();
    writer.flush().await.unwrap();
    let pinned = reader
        .steps(&Filter {
            tenant_id: Some("acme".into()),
            version: Some(version),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(pinned.rows.len(), 2);
    assert_eq!(pinned.version, Some(version));
    let latest = reader
        .steps(&Filter {
            tenant_id: Some("acme".into()),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(latest.rows.len(), 3);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn audit_chain_continues_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let wal = dir.path().join("wal");
    let event = |i: i64| AuditEvent {
        event_id: new_id(),
        tenant_id: "acme".into(),
        occurred_at: T0 + i,
        kind: "request_allowed".into(),
        actor: "key-1".into(),
        ..AuditEvent::default()
    };
    let writer = LakeWriter::open(test_config(lake.to_str().unwrap(), &wal))
        .await
        .unwrap();
    let writer_id = writer.writer_id().to_owned();
    for i in 0..5 {
        writer.append(event(i)).unwrap();
    }
    let (_, stored) = writer.append_audit(event(5)).unwrap();
    assert_eq!(stored.chain_seq, 6);
    assert_eq!(stored.chain_id, writer_id);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
    drop(writer);

    let writer = LakeWriter::open(test_config(lake.to_str().unwrap(), &wal))
        .await
        .unwrap();
    assert_eq!(
        writer.writer_id(),
        writer_id,
        "the writer id is kept in the log directory"
    );
    let (_, next) = writer.append_audit(event(6)).unwrap();
    assert_eq!(next.chain_seq, 7);
    assert_eq!(next.prev_hash, stored.hash);
    writer.flush().await.unwrap();

    let reader = LakeReader::new(writer.lake().clone());
    let events = reader.audit(&Filter::default()).await.unwrap().rows;
    assert_eq!(events.len(), 7);
    let head = verify_chain(&events).unwrap().unwrap();
    assert_eq!(head.seq, 7);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}

#[tokio::test]
async fn synthetic_lake_compacts_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(
        dir.path().join("lake").to_str().unwrap(),
        &dir.path().join("wal"),
    );
    config.segment_max_bytes = 256 << 10;
    let writer = LakeWriter::open(config).await.unwrap();
    let summary = generate(
        &SynthConfig {
            steps: 300,
            ..SynthConfig::default()
        },
        |record| writer.append(record).map(|_| ()),
    )
    .unwrap();
    writer.flush().await.unwrap();
    let lake = writer.lake().clone();
    let before = maintenance::stats(&lake).await.unwrap();
    let steps_before = before.iter().find(|s| s.table == "steps").unwrap().clone();
    assert_eq!(steps_before.rows, summary.steps as u64);
    assert!(
        steps_before.files > steps_before.partitions,
        "the test needs several files per partition"
    );

    let report = maintenance::optimize(&lake, Table::Steps, 128 << 20)
        .await
        .unwrap();
    assert!(report.files_removed > report.files_added);
    let after = maintenance::stats(&lake).await.unwrap();
    let steps_after = after.iter().find(|s| s.table == "steps").unwrap();
    assert_eq!(steps_after.rows, summary.steps as u64);
    assert_eq!(steps_after.files, steps_after.partitions);

    let reader = LakeReader::new(lake.clone());
    let steps = reader.steps(&Filter::default()).await.unwrap().rows;
    let ids: Vec<String> = steps.iter().map(|s| s.step_id.clone()).collect();
    assert_exactly_once(&ids, &ids);
    assert_eq!(ids.len(), summary.steps);
    let rewards = reader.rewards(&Filter::default()).await.unwrap().rows;
    assert_eq!(rewards.len(), summary.rewards);
    let vault = reader.vault(&Filter::default()).await.unwrap().rows;
    assert_eq!(vault.len(), summary.vault_entries);
    let audit = reader.audit(&Filter::default()).await.unwrap().rows;
    assert_eq!(audit.len(), summary.audit_events);
    assert!(verify_chain(&audit).is_ok());

    // Vacuum with zero retention removes the replaced files; the data stays whole.
    let vacuumed = maintenance::vacuum(&lake, Table::Steps, Duration::ZERO, false, true)
        .await
        .unwrap();
    assert_eq!(vacuumed.files.len() as u64, report.files_removed);
    let again = reader.steps(&Filter::default()).await.unwrap().rows;
    assert_eq!(again.len(), summary.steps);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}

#[tokio::test]
async fn budget_exhaustion_is_back_pressure() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config("s3://nowhere/lake", &dir.path().join("wal"));
    // An S3 endpoint that refuses connections: nothing can be uploaded.
    config.storage_options = s3_options(free_port());
    config.segment_max_bytes = 16 << 10;
    config.budget_bytes = 64 << 10;
    let writer = LakeWriter::open(config).await.unwrap();
    let mut accepted = 0;
    let error = loop {
        match writer.append(reward("acme", new_id(), 1.0)) {
            Ok(_) => accepted += 1,
            Err(error) => break error,
        }
        assert!(accepted < 100_000, "the budget was never enforced");
    };
    assert!(matches!(error, Error::Backpressure { .. }), "{error}");
    assert!(accepted > 100);
    let stats = writer.stats();
    assert!(stats.held_bytes <= stats.budget_bytes);
    eventually(
        "the store is reported down",
        Duration::from_secs(30),
        || writer.stats().store_down,
    )
    .await;
    assert!(writer.stats().last_error.is_some());
    assert!(!writer.shutdown(Duration::from_millis(200)).await.unwrap());
}

/// The uploader converts a segment to Arrow a chunk of records at a time (4,096 rows); a
/// segment of several chunks must still be one Delta commit per table, holding every record.
#[tokio::test]
async fn a_segment_of_many_chunks_is_one_commit_per_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(
        dir.path().join("lake").to_str().unwrap(),
        &dir.path().join("wal"),
    );
    // One segment for everything: only `flush` seals it.
    config.segment_max_bytes = 256 << 20;
    config.budget_bytes = 512 << 20;
    config.segment_max_age = Duration::from_secs(600);
    let writer = LakeWriter::open(config).await.unwrap();
    let mut steps = Vec::new();
    let summary = generate(
        &SynthConfig {
            steps: 9_000,
            ..SynthConfig::default()
        },
        |record| {
            if let Record::Step(step) = &record {
                steps.push(step.as_ref().clone());
            }
            writer.append(record).map(|_| ())
        },
    )
    .unwrap();
    writer.flush().await.unwrap();
    assert_eq!(writer.stats().committed_segments, 1);

    let reader = LakeReader::new(writer.lake().clone());
    let mut read = reader.steps(&Filter::default()).await.unwrap();
    // Version 0 created the table; version 1 is the segment's only commit.
    assert_eq!(read.version, Some(1));
    read.rows.sort_by(|a, b| a.step_id.cmp(&b.step_id));
    steps.sort_by(|a, b| a.step_id.cmp(&b.step_id));
    assert!(read.rows == steps, "the steps read back differ");
    let audit = reader.audit(&Filter::default()).await.unwrap();
    assert_eq!(audit.version, Some(1));
    assert_eq!(audit.rows.len(), summary.audit_events);
    assert!(verify_chain(&audit.rows).is_ok());
    let rewards = reader.rewards(&Filter::default()).await.unwrap();
    assert_eq!(rewards.rows.len(), summary.rewards);
    let vault = reader.vault(&Filter::default()).await.unwrap();
    assert_eq!(vault.rows.len(), summary.vault_entries);
    assert!(writer.shutdown(Duration::from_secs(10)).await.unwrap());
}
