//! `verify` finds an edited byte, a deleted file and an edited event, and names the file.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::common::*;

fn audit_cli(f: &Fixture) -> std::process::Output {
    f.command("wal-cli").arg("verify").output().unwrap()
}

/// Where the `hash` column's chunk of the first row group ends in the file.
fn hash_column_end(file: &[u8]) -> usize {
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file.to_vec())).unwrap();
    let group = builder.metadata().row_group(0);
    let chunk = group
        .columns()
        .iter()
        .find(|c| c.column_path().string() == "hash")
        .unwrap();
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or(chunk.data_page_offset());
    usize::try_from(start + chunk.compressed_size()).unwrap()
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Rewrites the Parquet file with the `actor` of its first row changed: a valid file whose
/// content no longer matches its hash.
fn edit_actor(path: &std::path::Path) {
    let bytes = bytes::Bytes::from(std::fs::read(path).unwrap());
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let schema = batches[0].schema();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), None).unwrap();
    for (i, batch) in batches.iter().enumerate() {
        let index = schema.index_of("actor").unwrap();
        let actors = batch
            .column(index)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let edited: StringArray = actors
            .iter()
            .enumerate()
            .map(|(row, v)| {
                if i == 0 && row == 0 {
                    Some("someone-else")
                } else {
                    v
                }
            })
            .collect();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[index] = Arc::new(edited);
        writer
            .write(&RecordBatch::try_new(schema.clone(), columns).unwrap())
            .unwrap();
    }
    writer.close().unwrap();
    std::fs::write(path, out).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_the_edited_or_missing_file() {
    let f = fixture().await;
    // A second chain: the console's own events.
    let trail = f.trail("console").await;
    for _ in 0..3 {
        trail
            .record(atdp_audit::event(
                "login",
                "auditor:x",
                atdp_audit::SYSTEM_TENANT,
            ))
            .await
            .unwrap();
    }
    trail.close().await.unwrap();

    let report = atdp_audit::verify(&f.lake, None).await.unwrap();
    assert!(report.ok(), "{:?}", report.first_problem());
    assert_eq!(report.events, 5);
    assert_eq!(report.chains.len(), 2);
    assert!(report.chains.iter().all(|c| c.head.is_some()));
    let ok = audit_cli(&f);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stderr).contains("intact"));

    // One flipped byte in a file: inside the compressed values of the `hash` column (the
    // end of its last page), where any change alters a value or fails to decompress.
    let files = f.audit_file_paths();
    assert!(!files.is_empty());
    let target = files[0].clone();
    let original = std::fs::read(&target).unwrap();
    let mut flipped = original.clone();
    flipped[hash_column_end(&original) - 2] ^= 0x5a;
    std::fs::write(&target, &flipped).unwrap();
    let report = atdp_audit::verify(&f.lake, None).await.unwrap();
    assert!(!report.ok());
    let problem = report.first_problem().unwrap();
    assert!(problem.contains(&file_name(&target)), "{problem}");
    let broken = audit_cli(&f);
    assert_eq!(broken.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(stderr.contains(&file_name(&target)), "{stderr}");

    // A deleted file.
    std::fs::remove_file(&target).unwrap();
    let report = atdp_audit::verify(&f.lake, None).await.unwrap();
    assert_eq!(report.file_problems.len(), 1, "{report:?}");
    assert!(report.file_problems[0].file.ends_with(&file_name(&target)));
    assert!(report.file_problems[0].problem.starts_with("missing"));
    // Its chain's events were all in that file: the chain is gone from the report.
    assert_eq!(report.chains.len(), 1);

    // An event edited into a valid file: its hash no longer matches.
    std::fs::write(&target, &original).unwrap();
    assert!(atdp_audit::verify(&f.lake, None).await.unwrap().ok());
    edit_actor(&target);
    let report = atdp_audit::verify(&f.lake, None).await.unwrap();
    // The file still reads; at most the log's statistics of it no longer hold.
    assert!(
        report
            .file_problems
            .iter()
            .all(|p| p.file.ends_with(&file_name(&target)) && p.problem.starts_with("the log's")),
        "{report:?}"
    );
    let chain = report.chains.iter().find(|c| c.problem.is_some()).unwrap();
    assert!(
        chain
            .problem
            .as_ref()
            .unwrap()
            .contains("does not match its hash"),
        "{chain:?}"
    );
    assert!(chain.file.as_ref().unwrap().ends_with(&file_name(&target)));
}

/// A change to a Delta `add` action.
type Edit = fn(&mut serde_json::Value);

/// Appends a commit to the `audit` table's log that adds its first file again with `edit`
/// applied to the add action: the file's bytes stay as they were.
fn recommit_first_file(f: &Fixture, edit: impl Fn(&mut serde_json::Value)) {
    let log = f.lake_root().join("atdp/v1/audit/_delta_log");
    let mut commits: Vec<std::path::PathBuf> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    let last = commits.last().unwrap();
    let version: u64 = file_name(last).trim_end_matches(".json").parse().unwrap();
    let add = commits
        .iter()
        .flat_map(|c| {
            std::fs::read_to_string(c)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .find_map(|action| action.get("add").cloned())
        .unwrap();
    let mut edited = add.clone();
    edit(&mut edited);
    let commit = serde_json::json!({"add": edited}).to_string();
    std::fs::write(log.join(format!("{:020}.json", version + 1)), commit + "\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_finds_a_log_entry_that_misstates_a_files_tenant_day_or_statistics() {
    let edits: [(&str, Edit); 4] = [
        ("tenant_id", |add| {
            add["partitionValues"]["tenant_id"] = "zzz".into();
        }),
        ("date", |add| {
            add["partitionValues"]["date"] = "1999-01-01".into();
        }),
        ("kind", |add| {
            let stats = add["stats"].as_str().unwrap();
            let mut stats: serde_json::Value = serde_json::from_str(stats).unwrap();
            stats["minValues"]["kind"] = "zzz".into();
            stats["maxValues"]["kind"] = "zzz".into();
            add["stats"] = stats.to_string().into();
        }),
        ("records", |add| {
            let stats = add["stats"].as_str().unwrap();
            let mut stats: serde_json::Value = serde_json::from_str(stats).unwrap();
            stats["numRecords"] = 0.into();
            add["stats"] = stats.to_string().into();
        }),
    ];
    for (what, edit) in edits {
        let f = fixture().await;
        assert!(atdp_audit::verify(&f.lake, None).await.unwrap().ok());
        recommit_first_file(&f, edit);
        let report = atdp_audit::verify(&f.lake, None).await.unwrap();
        assert!(!report.ok(), "{what}: {report:?}");
        assert_eq!(report.file_problems.len(), 1, "{what}: {report:?}");
        // The events and their chain are untouched: only the log lies about them.
        assert!(report.chains.iter().all(|c| c.problem.is_none()), "{what}");
        let broken = audit_cli(&f);
        assert_eq!(broken.status.code(), Some(1), "{what}");
    }
}
