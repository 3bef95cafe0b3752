//! Rust → Arrow → Parquet → Arrow → Rust keeps every field of every table.

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use atdp_lake::*;
use atdp_schema::*;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, including quotes, newlines, NULs and non-BMP characters.
    any::<String>()
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    (text(), text(), text()).prop_map(|(id, name, arguments)| ToolCall {
        id,
        name,
        arguments,
    })
}

fn message() -> impl Strategy<Value = Message> {
    (
        text(),
        option::of(text()),
        option::of(text()),
        option::of(text()),
        vec(tool_call(), 0..3),
    )
        .prop_map(|(role, content, name, tool_call_id, tool_calls)| Message {
            role,
            content,
            name,
            tool_call_id,
            tool_calls,
        })
}

fn tool() -> impl Strategy<Value = Tool> {
    (text(), text(), option::of(text()), option::of(text())).prop_map(
        |(kind, name, description, parameters)| Tool {
            kind,
            name,
            description,
            parameters,
        },
    )
}

fn pii() -> impl Strategy<Value = PiiSpan> {
    (text(), text(), text(), text()).prop_map(|(field, entity, token, action)| PiiSpan {
        field,
        entity,
        token,
        action,
    })
}

/// Microsecond timestamps from year 1900 to 2200.
fn micros() -> impl Strategy<Value = i64> {
    -2_208_988_800_000_000i64..7_258_118_400_000_000i64
}

prop_compose! {
    fn step()(
        ids in (text(), text(), option::of(text()), any::<i32>(), text(), text()),
        times in (micros(), option::of(micros())),
        names in (text(), text(), text(), option::of(text()), option::of(text())),
        request_messages in vec(message(), 0..4),
        tools in vec(tool(), 0..3),
        params in option::of(text()),
        response_message in option::of(message()),
        outcome in (option::of(text()), text(), option::of(text())),
        tokens in (option::of(any::<i64>()), option::of(any::<i64>())),
        completion_token_ids in option::of(vec(any::<i32>(), 0..8)),
        completion_logprobs in option::of(vec(-100.0f32..0.0, 0..8)),
        pii in vec(pii(), 0..3),
        tags in btree_map(text(), text(), 0..3),
        extra_json in option::of(text()),
        governance in (option::of(any::<bool>()), option::of(text()), option::of(micros()), option::of(text())),
    ) -> Step {
        Step {
            step_id: ids.0, trajectory_id: ids.1, parent_step_id: ids.2, turn_index: ids.3,
            tenant_id: ids.4, agent_id: ids.5,
            started_at: times.0, ended_at: times.1,
            api: names.0, upstream: names.1, model_requested: names.2,
            model_served: names.3, policy_version: names.4,
            request_messages, tools, params, response_message,
            finish_reason: outcome.0, status: outcome.1, error: outcome.2,
            prompt_tokens: tokens.0, completion_tokens: tokens.1,
            completion_token_ids, completion_logprobs, pii, tags, extra_json,
            training_eligible: governance.0, legal_basis: governance.1,
            retention_until: governance.2, consent_source: governance.3,
        }
    }
}

prop_compose! {
    fn reward()(
        ids in (text(), text(), option::of(text()), text()),
        name in text(), value in any::<f64>().prop_filter("NaN never equals itself", |v| !v.is_nan()),
        source in text(), version in option::of(text()), terminal in any::<bool>(),
        created_at in micros(), tags in btree_map(text(), text(), 0..3),
    ) -> Reward {
        Reward {
            reward_id: ids.0, trajectory_id: ids.1, step_id: ids.2, tenant_id: ids.3,
            name, value, source, reward_fn_version: version, terminal, created_at, tags,
        }
    }
}

prop_compose! {
    fn audit()(
        ids in (text(), text(), text(), any::<i64>(), micros()),
        what in (text(), text(), option::of(text()), option::of(text()), option::of(text())),
        detail in (option::of(text()), option::of(text()), text(), text()),
    ) -> AuditEvent {
        AuditEvent {
            event_id: ids.0, tenant_id: ids.1, chain_id: ids.2, chain_seq: ids.3, occurred_at: ids.4,
            kind: what.0, actor: what.1, subject: what.2, decision: what.3, policy_id: what.4,
            reason: detail.0, detail_json: detail.1, prev_hash: detail.2, hash: detail.3,
        }
    }
}

prop_compose! {
    fn vault()(
        ids in (text(), text(), text(), text()),
        nonce in vec(any::<u8>(), 0..16), ciphertext in vec(any::<u8>(), 0..64),
        created_at in micros(),
    ) -> VaultEntry {
        VaultEntry { tenant_id: ids.0, token: ids.1, entity: ids.2, key_id: ids.3, nonce, ciphertext, created_at }
    }
}

/// Writes the batch to Parquet in memory and reads it back.
fn through_parquet(batch: &RecordBatch) -> RecordBatch {
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
    arrow::compute::concat_batches(&batch.schema(), &batches).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn steps_round_trip(rows in vec(step(), 0..6)) {
        let batch = steps_to_batch(&rows).unwrap();
        prop_assert_eq!(batch.schema(), arrow_schema(Table::Steps));
        prop_assert_eq!(steps_from_batch(&through_parquet(&batch)).unwrap(), rows);
    }

    #[test]
    fn rewards_round_trip(rows in vec(reward(), 0..6)) {
        let batch = rewards_to_batch(&rows).unwrap();
        prop_assert_eq!(rewards_from_batch(&through_parquet(&batch)).unwrap(), rows);
    }

    #[test]
    fn audit_round_trip(rows in vec(audit(), 0..6)) {
        let batch = audit_to_batch(&rows).unwrap();
        prop_assert_eq!(audit_from_batch(&through_parquet(&batch)).unwrap(), rows);
    }

    #[test]
    fn vault_round_trip(rows in vec(vault(), 0..6)) {
        let batch = vault_to_batch(&rows).unwrap();
        prop_assert_eq!(vault_from_batch(&through_parquet(&batch)).unwrap(), rows);
    }
}

#[test]
fn date_column_is_derived_from_event_time() {
    let rows = vec![Reward {
        created_at: 1_795_910_400_000_000 + 5,
        tags: BTreeMap::new(),
        ..Reward::default()
    }];
    let batch = rewards_to_batch(&rows).unwrap();
    let dates = batch
        .column_by_name("date")
        .and_then(|c| {
            c.as_any()
                .downcast_ref::<arrow::array::Date32Array>()
                .cloned()
        })
        .unwrap();
    assert_eq!(dates.value(0), 20_786);
}

#[test]
fn readers_ignore_unknown_columns_and_fill_missing_nullable_ones() {
    use arrow::array::{ArrayRef, StringArray};
    use std::sync::Arc;
    let rows = vec![Reward {
        reward_id: "r".into(),
        step_id: Some("s".into()),
        reward_fn_version: Some("v1".into()),
        ..Reward::default()
    }];
    let batch = rewards_to_batch(&rows).unwrap();
    // A newer writer added a column; an older one lacked `reward_fn_version`.
    let schema = batch.schema();
    let mut columns: Vec<(&str, ArrayRef)> = Vec::new();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if field.name() != "reward_fn_version" {
            columns.push((field.name().as_str(), column.clone()));
        }
    }
    columns.push((
        "added_in_v1_1",
        Arc::new(StringArray::from(vec!["x"])) as ArrayRef,
    ));
    let evolved = RecordBatch::try_from_iter(columns).unwrap();
    let read = rewards_from_batch(&evolved).unwrap();
    assert_eq!(read[0].reward_id, "r");
    assert_eq!(read[0].step_id.as_deref(), Some("s"));
    assert_eq!(read[0].reward_fn_version, None);
}
