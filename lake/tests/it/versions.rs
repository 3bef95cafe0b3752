//! Tables of protocol version 1 (no governance columns on `steps`) read, and are brought to
//! version 1.1 by the first append; a table of a version the reader does not know is refused.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use atdp_lake::*;
use atdp_schema::*;
use deltalake::DeltaTable;
use deltalake::kernel::StructType;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::protocol::SaveMode;

use crate::common::*;
use crate::lake::full_step;

const GOVERNANCE: [&str; 4] = [
    "training_eligible",
    "legal_basis",
    "retention_until",
    "consent_source",
];
const T0: i64 = 1_795_910_400_000_000; // 2026-11-29T00:00:00Z

/// `batch` without the governance columns: a `steps` batch as protocol version 1 wrote it.
fn version_1(batch: &RecordBatch) -> RecordBatch {
    let keep: Vec<usize> = (0..batch.num_columns())
        .filter(|&i| !GOVERNANCE.contains(&batch.schema().field(i).name().as_str()))
        .collect();
    batch.project(&keep).unwrap()
}

/// Creates the `steps` table as a version 1 writer did (its schema, `atdp.protocolVersion` =
/// `version`) and appends `steps` with delta-rs.
async fn write_old_table(lake: &Lake, version: &str, steps: &[Step]) {
    let batch = version_1(&steps_to_batch(steps).unwrap());
    let schema: &Schema = &batch.schema();
    let kernel: StructType = schema.try_into_kernel().unwrap();
    let url = lake.table_url(Table::Steps).unwrap();
    std::fs::create_dir_all(url.to_file_path().unwrap()).unwrap();
    let table = DeltaTable::try_from_url_with_storage_options(url, HashMap::new())
        .await
        .unwrap();
    let table = table
        .create()
        .with_columns(kernel.fields().cloned())
        .with_partition_columns(PARTITION_COLUMNS)
        .with_configuration([(PROTOCOL_VERSION_KEY, Some(version))])
        .with_raise_if_key_not_exists(false)
        .with_save_mode(SaveMode::ErrorIfExists)
        .await
        .unwrap();
    table
        .write(vec![batch])
        .with_save_mode(SaveMode::Append)
        .with_partition_columns(PARTITION_COLUMNS)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_version_1_table_reads_unmarked_and_is_upgraded_by_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("lake");
    let lake = Lake::new(location.to_str().unwrap(), HashMap::new()).unwrap();
    let old: Vec<Step> = (0..3).map(|i| full_step("acme", T0 + i)).collect();
    write_old_table(&lake, "1", &old).await;

    let reader = LakeReader::new(lake.clone());
    let read = reader.steps(&Filter::default()).await.unwrap();
    let unmarked: Vec<Step> = old
        .iter()
        .map(|s| Step {
            training_eligible: None,
            legal_basis: None,
            retention_until: None,
            consent_source: None,
            ..s.clone()
        })
        .collect();
    assert_eq!(read.rows, unmarked);
    // No training reader selects them unless told to.
    let (kept, excluded) = trainable_steps(read.rows.clone(), T0, Unmarked::Excluded);
    assert!(kept.is_empty());
    assert_eq!(excluded.get("unmarked"), Some(&3));

    // A writer of this version appends: the table gains the columns and the version.
    let writer = LakeWriter::open(test_config(
        location.to_str().unwrap(),
        &dir.path().join("wal"),
    ))
    .await
    .unwrap();
    let new = full_step("acme", T0 + 10);
    assert_eq!(new.training_eligible, Some(true));
    writer.append(new.clone()).unwrap();
    writer.flush().await.unwrap();

    let table = lake.open_table(Table::Steps).await.unwrap().unwrap();
    assert_eq!(table_version(&table).as_deref(), Some(PROTOCOL_VERSION));
    let columns: Vec<String> = table
        .snapshot()
        .unwrap()
        .schema()
        .fields()
        .map(|f| f.name().clone())
        .collect();
    for column in GOVERNANCE {
        assert!(
            columns.iter().any(|c| c == column),
            "{column} in {columns:?}"
        );
    }
    let read = reader.steps(&Filter::default()).await.unwrap();
    let mut expected = unmarked.clone();
    expected.push(new.clone());
    assert_eq!(read.rows, expected);
    // The version 1 table's first version still reads (time travel over the upgrade).
    let first = reader
        .steps(&Filter {
            version: Some(1),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(first.rows, unmarked);
    let (kept, _) = trainable_steps(read.rows, T0 + 20, Unmarked::Excluded);
    assert_eq!(kept, [new]);
}

#[tokio::test]
async fn a_table_of_an_unknown_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::new(dir.path().join("lake").to_str().unwrap(), HashMap::new()).unwrap();
    write_old_table(&lake, "2", &[full_step("acme", T0)]).await;
    let error = LakeReader::new(lake)
        .steps(&Filter::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Version { ref found, .. } if found == "2"),
        "{error}"
    );
    assert!(error.to_string().contains("upgrade atdp"), "{error}");
}

#[test]
fn the_schema_has_the_governance_columns_last_before_date() {
    let schema = arrow_schema(Table::Steps);
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names[names.len() - 5..names.len() - 1], GOVERNANCE);
    assert!(
        GOVERNANCE
            .iter()
            .all(|c| schema.field_with_name(c).unwrap().is_nullable())
    );
}

#[tokio::test]
async fn the_training_read_leaves_out_ineligible_unmarked_and_expired_steps_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("lake");
    let lake = Lake::new(location.to_str().unwrap(), HashMap::new()).unwrap();
    // A version 1 table first: its rows are unmarked.
    write_old_table(&lake, "1", &[full_step("acme", T0)]).await;
    let reader = LakeReader::new(lake.clone());
    let now = T0 + 1_000;
    let read = reader
        .trainable_steps(&Filter::default(), now, Unmarked::Excluded)
        .await
        .unwrap();
    assert!(read.steps.rows.is_empty());
    assert_eq!(read.excluded, [("unmarked".to_owned(), 1)].into());
    let read = reader
        .trainable_steps(&Filter::default(), now, Unmarked::Eligible)
        .await
        .unwrap();
    assert_eq!(read.steps.rows.len(), 1);
    assert!(read.excluded.is_empty());

    let writer = LakeWriter::open(test_config(
        location.to_str().unwrap(),
        &dir.path().join("wal"),
    ))
    .await
    .unwrap();
    let marked = |i: i64, eligible: Option<bool>, until: Option<i64>| Step {
        step_id: format!("s{i}"),
        training_eligible: eligible,
        retention_until: until,
        ..full_step("acme", T0 + i)
    };
    let steps = [
        marked(1, Some(true), None),
        marked(2, Some(true), Some(now + 1)),
        marked(3, Some(false), None),
        marked(4, Some(true), Some(now)),
        marked(5, None, None),
        marked(6, Some(false), Some(now - 1)),
    ];
    for step in &steps {
        writer.append(step.clone()).unwrap();
    }
    writer.flush().await.unwrap();
    let read = reader
        .trainable_steps(&Filter::default(), now, Unmarked::Excluded)
        .await
        .unwrap();
    let ids: Vec<&str> = read.steps.rows.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2"]);
    assert_eq!(read.steps.rows[0], steps[0]);
    assert_eq!(
        read.excluded,
        [
            ("not_eligible".to_owned(), 2),
            ("retention_expired".to_owned(), 1),
            ("unmarked".to_owned(), 2),
        ]
        .into()
    );
    // The same rule as `trainable_steps` over every row.
    let all = reader.steps(&Filter::default()).await.unwrap().rows;
    let (kept, excluded) = trainable_steps(all, now, Unmarked::Excluded);
    assert_eq!(kept, read.steps.rows);
    assert_eq!(excluded, read.excluded);
}
