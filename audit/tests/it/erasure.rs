//! Reveal, then erase, then reveal fails; the masked trajectory stays readable; the vault's
//! ciphertext is gone from storage.

use atdp_audit::{Error, RevealRequest};

use crate::common::*;

fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if std::fs::read(&path)
            .map(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
            .unwrap_or(false)
        {
            found.push(path);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reveal_then_erase_then_reveal_fails() {
    let f = fixture().await;
    let officer = f.auditor(DEMO_AUDITOR);
    let analyst = f.auditor(DEMO_ANALYST);
    let trail = f.trail("officer").await;
    let email = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let card = f.token_of("CREDIT_CARD", CARD).await;
    let reveal = |token: String, reason: &'static str| {
        let f = &f;
        let officer = &officer;
        let trail = &trail;
        async move {
            let catalog = f.catalog().await;
            atdp_audit::reveal(
                &catalog,
                &f.policy,
                &f.keys,
                trail,
                officer,
                &RevealRequest {
                    trajectory_id: &f.demo_trajectory,
                    tenant: Some("demo"),
                    token: &token,
                    reason,
                },
            )
            .await
        }
    };

    let revealed = reveal(
        email.clone(),
        "Subject access request #4411 from jane.doe@example.com",
    )
    .await
    .unwrap();
    assert_eq!(revealed.value, EMAIL);
    assert_eq!(revealed.entity, "EMAIL_ADDRESS");
    assert_eq!(
        reveal(card.clone(), "chargeback").await.unwrap().value,
        CARD
    );
    assert!(matches!(
        reveal(email.clone(), " ").await,
        Err(Error::Invalid(_))
    ));
    // A token that is not in this trajectory is not revealable through it.
    let foreign = f.token_of("EMAIL_ADDRESS", "someone@else.example").await;
    assert!(matches!(
        reveal(foreign, "fishing").await,
        Err(Error::NotFound(_))
    ));

    // The email's ciphertext, as stored, before erasure.
    let catalog = f.catalog().await;
    let rows = catalog
        .sql(&format!(
            "SELECT ciphertext FROM pii_vault WHERE token = '{email}'"
        ))
        .await
        .unwrap();
    let column =
        arrow::compute::cast(rows[0].column(0), &arrow::datatypes::DataType::Binary).unwrap();
    let ciphertext = column
        .as_any()
        .downcast_ref::<arrow::array::BinaryArray>()
        .unwrap()
        .value(0)
        .to_vec();
    let vault_dir = f.lake_root().join("atdp/v1/pii_vault");
    assert!(!files_containing(&vault_dir, &ciphertext).is_empty());

    // An analyst may not erase.
    let denied = atdp_audit::erase(
        &f.lake,
        &f.policy,
        &f.keys,
        &trail,
        &analyst,
        "demo",
        Some(EMAIL),
        "tidy up",
    )
    .await;
    assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");

    // The registry: v1 learned from the subject's trajectory, v2 from another trajectory
    // only, v3 records no lineage; `triage` learned from the other tenant's trajectory of
    // the same id.
    let manifest = |policy: &str, version: &str, lineage: Option<serde_json::Value>| {
        let dir = f.lake_root().join("adapters").join(policy).join(version);
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = serde_json::json!({"format": "atdp-trainer/manifest-v1"});
        if let Some(l) = lineage {
            m["lineage"] = l;
        }
        std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
    };
    let demo = &f.demo_trajectory;
    manifest(
        "support",
        "v1",
        Some(serde_json::json!({"trajectories": {"demo": ["a", demo]}})),
    );
    manifest(
        "support",
        "v2",
        Some(serde_json::json!({"trajectories": {"demo": ["a", "b"]}})),
    );
    manifest("support", "v3", None);
    // v4 was published without a manifest (trained by another stack): unknown too.
    let v4 = f.lake_root().join("adapters/support/v4");
    std::fs::create_dir_all(&v4).unwrap();
    std::fs::write(v4.join("_published.json"), b"{}").unwrap();
    manifest(
        "triage",
        "v1",
        Some(serde_json::json!({"trajectories": {"other": [demo]}})),
    );

    // An operator has switched Delta's change data feed on for the vault: a delete then
    // writes the rows it removes to change files too, which must not keep them.
    let vault = f
        .lake
        .open_table(atdp_schema::Table::PiiVault)
        .await
        .unwrap()
        .unwrap();
    vault
        .set_tbl_properties()
        .with_properties(std::collections::HashMap::from([(
            "delta.enableChangeDataFeed".to_owned(),
            "true".to_owned(),
        )]))
        .await
        .unwrap();

    let report = atdp_audit::erase(
        &f.lake,
        &f.policy,
        &f.keys,
        &trail,
        &officer,
        "demo",
        Some(EMAIL),
        "Erasure request #4412 (GDPR art. 17)",
    )
    .await
    .unwrap();
    assert_eq!(report.scope, "subject");
    let trained: Vec<(String, u32, Option<usize>)> = report
        .trained_adapters
        .clone()
        .unwrap()
        .into_iter()
        .map(|a| (a.policy, a.version, a.trajectories))
        .collect();
    assert_eq!(
        trained,
        vec![
            ("support".into(), 1, Some(1)),
            ("support".into(), 3, None),
            ("support".into(), 4, None)
        ],
        "{report:?}"
    );
    assert!(report.vault_files_removed >= 1, "{report:?}");
    assert!(report.files_deleted >= 1, "{report:?}");
    assert!(matches!(
        reveal(email.clone(), "again").await,
        Err(Error::NotFound(_))
    ));
    // Gone from storage, not only from the current table version, change files included.
    let log = std::fs::read_dir(vault_dir.join("_delta_log"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect::<String>();
    assert!(log.contains("\"cdc\""), "the delete wrote change files");
    assert_eq!(
        files_containing(&vault_dir, &ciphertext),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(report.vault_files_rewritten >= 1, "{report:?}");

    // The receipt: the deletion is done, but the versions that learned from the subject
    // still serve, so it is not complete; an analyst may not ask for it.
    let erasure = report.event_id.clone();
    assert!(matches!(
        atdp_audit::issue_receipt(&f.lake, &f.policy, &trail, &analyst, &erasure).await,
        Err(Error::Denied(_))
    ));
    let (receipt, _) = atdp_audit::issue_receipt(&f.lake, &f.policy, &trail, &officer, &erasure)
        .await
        .unwrap();
    assert!(!receipt.complete);
    assert_eq!(receipt.deleted, Some(true));
    assert_eq!(receipt.files_vacuumed, report.files_deleted);
    assert_eq!(
        receipt.pending,
        [
            "support@v1 learned from the data and is not retired",
            "support@v3 learned from the data and is not retired",
            "support@v4 learned from the data and is not retired"
        ]
    );
    // `atdp-loop` retires them, each an `adapter_retire` event naming the erasure.
    for version in [1, 3, 4] {
        let mut retire = atdp_audit::event("adapter_retire", "atdp-loop", "demo");
        retire.subject = Some(format!("support@v{version}"));
        retire.decision = Some("retire".into());
        retire.detail_json = Some(
            serde_json::json!({"policy": "support", "version": version, "previous": null,
                "registry_log_seq": version, "detail": {"erasure": erasure}})
            .to_string(),
        );
        trail.record_committed(retire).await.unwrap();
    }
    let (receipt, receipt_event) =
        atdp_audit::issue_receipt(&f.lake, &f.policy, &trail, &officer, &erasure)
            .await
            .unwrap();
    assert!(receipt.complete, "{:?}", receipt.pending);
    assert_eq!(receipt.cites.len(), 5);
    assert!(!serde_json::to_string(&receipt).unwrap().contains(EMAIL));
    let check = atdp_audit::check_receipt(&f.lake, &receipt_event)
        .await
        .unwrap();
    assert!(check.ok(), "{:?}", check.problems);
    assert_eq!(check.receipt, receipt);

    // Other values of the tenant are still revealable.
    assert_eq!(
        reveal(card.clone(), "chargeback").await.unwrap().value,
        CARD
    );

    // Erasing the tenant shreds the rest.
    let report = atdp_audit::erase(
        &f.lake,
        &f.policy,
        &f.keys,
        &trail,
        &officer,
        "demo",
        None,
        "Tenant offboarded",
    )
    .await
    .unwrap();
    assert!(report.keys_erased);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f.keys).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file stays owner-only");
    }
    assert!(matches!(
        reveal(card.clone(), "chargeback").await,
        Err(Error::NotFound(_))
    ));
    // The other tenant's keys are untouched.
    assert!(
        atdp_policies::KeyRing::load(&f.keys)
            .unwrap()
            .has_tenant("other")
    );

    // The masked trajectory is still there for training and review.
    let (steps, _) = atdp_audit::load(
        &f.catalog().await,
        &f.policy.access,
        &officer,
        &f.demo_trajectory,
        None,
    )
    .await
    .unwrap();
    assert_eq!(steps.len(), 2);
    assert!(
        steps[0..]
            .iter()
            .any(|s| s.pii.iter().any(|p| p.token == email))
    );

    trail.close().await.unwrap();
    let text = f.sql_table("SELECT kind, decision, reason FROM audit WHERE kind IN ('reveal', 'erase', 'erase_completed') ORDER BY chain_seq").await;
    for expected in [
        "Subject access request #4411 from [EMAIL_ADDRESS]",
        "erase_completed",
        "Erasure request #4412 (GDPR art. 17)",
        "Tenant offboarded",
        "tidy up",
    ] {
        assert!(text.contains(expected), "{expected} not in\n{text}");
    }
    assert!(!text.contains(EMAIL));
    let report = atdp_audit::verify(&f.lake, None).await.unwrap();
    assert!(report.ok(), "{:?}", report.first_problem());
    assert_eq!(report.chains.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_old_values_revealable_and_is_audited() {
    let f = fixture().await;
    let officer = f.auditor(DEMO_AUDITOR);
    let analyst = f.auditor(DEMO_ANALYST);
    let trail = f.trail("rotate").await;
    let denied =
        atdp_audit::rotate_key(&f.policy, &f.keys, &trail, &analyst, "demo", "routine").await;
    assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");
    let report = atdp_audit::rotate_key(&f.policy, &f.keys, &trail, &officer, "demo", "routine")
        .await
        .unwrap();
    assert_eq!(report.key_id, "k2");
    // New values are sealed under k2; the old entry (k1) still opens.
    let ring = atdp_policies::KeyRing::load(&f.keys).unwrap();
    assert_eq!(
        ring.seal("demo", "EMAIL_ADDRESS", "x@y.example")
            .unwrap()
            .key_id,
        "k2"
    );
    let token = f.token_of("EMAIL_ADDRESS", EMAIL).await;
    let revealed = atdp_audit::reveal(
        &f.catalog().await,
        &f.policy,
        &f.keys,
        &trail,
        &officer,
        &RevealRequest {
            trajectory_id: &f.demo_trajectory,
            tenant: None,
            token: &token,
            reason: "after rotation",
        },
    )
    .await
    .unwrap();
    assert_eq!(revealed.value, EMAIL);
    trail.close().await.unwrap();
    let text = f.sql_table("SELECT decision, detail_json FROM audit WHERE kind = 'key_rotation' ORDER BY chain_seq").await;
    assert!(
        text.contains("deny") && text.contains(r#"{"key_id":"k2"}"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_erasure_reaches_values_stored_hashed_or_in_the_clear() {
    let f = fixture().await;
    let trail = f.trail("wal-erase-forms").await;
    let officer = f.auditor(DEMO_AUDITOR);
    let keys = atdp_policies::KeyRing::load(&f.keys).unwrap();
    // Where the storage policy hashes a type, the span carries the keyed hash; where it
    // allows one in the clear, the value itself, as it was spelled.
    let span = |entity: &str, token: String, action: &str| atdp_schema::PiiSpan {
        field: "request_messages[0].content".into(),
        entity: entity.into(),
        token,
        action: action.into(),
    };
    let mut hashed = step("demo", "support", "t-hashed", None, 0);
    hashed.pii = vec![span(
        "EMAIL_ADDRESS",
        keys.keyed_hash("demo", "EMAIL_ADDRESS", EMAIL).unwrap(),
        "hash",
    )];
    let mut clear = step("demo", "support", "t-clear", None, 0);
    clear.pii = vec![span("CREDIT_CARD", "4111-1111-1111-1111".into(), "allow")];
    let mut unrelated = step("demo", "support", "t-unrelated", None, 0);
    unrelated.pii = vec![span("CREDIT_CARD", "5500 0000 0000 0004".into(), "allow")];
    f.append("wal-forms", vec![hashed, clear, unrelated], vec![], vec![])
        .await;

    let reader = atdp_lake::LakeReader::new(f.lake.clone());
    let erased = |reader: atdp_lake::LakeReader| async move {
        reader.erased_trajectories("demo", None).await.unwrap()
    };
    assert!(erased(reader.clone()).await.is_empty());
    for subject in [EMAIL, CARD] {
        atdp_audit::erase(
            &f.lake,
            &f.policy,
            &f.keys,
            &trail,
            &officer,
            "demo",
            Some(subject),
            "Erasure request #5120 (GDPR art. 17)",
        )
        .await
        .unwrap();
    }
    let reached = erased(reader).await;
    for trajectory in ["t-hashed", "t-clear"] {
        assert!(reached.contains(trajectory), "{trajectory}: {reached:?}");
    }
    assert!(!reached.contains("t-unrelated"), "{reached:?}");
    trail.close().await.unwrap();
    // The erasure records what it reached, never the value: a step that later leaves the
    // lake (expiry) takes its spans along, and its trajectory stays left out.
    let details = f.audit_details("kind = 'erase'").await;
    let recorded: Vec<String> = details
        .iter()
        .flat_map(|d| d["trajectories"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    for trajectory in ["t-hashed", "t-clear"] {
        assert!(recorded.iter().any(|t| t == trajectory), "{details:?}");
    }
    let text = serde_json::to_string(&details).unwrap();
    assert!(!text.contains(EMAIL) && !text.contains(CARD), "{text}");
    assert!(!text.contains("4111-1111-1111-1111"), "{text}");
}
