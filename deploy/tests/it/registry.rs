//! The registry on a local lake: publication, the log, races.

use atdp_deploy::{Action, Error, Registry, State};

fn adapter_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("adapter_config.json"), br#"{"r": 4}"#).unwrap();
    std::fs::write(dir.path().join("adapter_model.safetensors"), b"weights").unwrap();
    dir
}

#[tokio::test]
async fn publish_promote_rollback_and_the_log() {
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let adapter = adapter_dir();
    assert_eq!(registry.versions().await.unwrap(), Vec::<u32>::new());
    assert_eq!(
        registry
            .publish(adapter.path(), "ana")
            .await
            .unwrap()
            .version,
        1
    );
    assert_eq!(
        registry
            .publish(adapter.path(), "ana")
            .await
            .unwrap()
            .version,
        2
    );
    assert_eq!(registry.versions().await.unwrap(), vec![1, 2]);
    let published = registry.published(2).await.unwrap();
    assert_eq!(published.files["adapter_model.safetensors"].0, 7);
    assert!(!published.files.contains_key("manifest.json"));

    // Nothing promoted: a rollback has nowhere to go.
    assert!(matches!(
        registry.rollback("ana", "x", None).await,
        Err(Error::Registry(_))
    ));
    assert!(matches!(
        registry.promote(9, "ana", "x", None).await,
        Err(Error::Registry(_))
    ));
    registry.promote(1, "ana", "first", None).await.unwrap();
    assert!(matches!(
        registry.rollback("ana", "x", None).await,
        Err(Error::Registry(_))
    ));
    let second = registry.promote(2, "ana", "better", None).await.unwrap();
    assert_eq!((second.seq, second.previous), (2, Some(1)));
    registry
        .reject(2, "gate", "held-out reward down", None)
        .await
        .unwrap();
    let back = registry
        .rollback("ana", "live reward dropped", None)
        .await
        .unwrap();
    assert_eq!(
        (back.action, back.version, back.previous),
        (Action::Rollback, 1, Some(2))
    );

    let log = registry.log().await.unwrap();
    assert_eq!(
        log.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(State::from_log(&log).serving, Some(1));
    assert_eq!(registry.state().await.unwrap().serving, Some(1));

    // Retiring the served version serves the one before it (here none: the base model);
    // a retired version cannot be promoted or retired again.
    let retired = registry.retire(1, "dpo", "erasure", None).await.unwrap();
    assert_eq!(
        (retired.action, retired.previous),
        (Action::Retire, Some(1))
    );
    assert_eq!(registry.state().await.unwrap().serving, None);
    for refused in [
        registry.promote(1, "ana", "x", None).await,
        registry.retire(1, "dpo", "x", None).await,
        registry.retire(9, "dpo", "x", None).await,
    ] {
        assert!(matches!(refused, Err(Error::Registry(_))), "{refused:?}");
    }
    registry.promote(2, "ana", "again", None).await.unwrap();
    assert_eq!(registry.state().await.unwrap().serving, Some(2));

    // Another policy in the same lake is separate.
    let other = Registry::open(lake.path().to_str().unwrap(), Default::default(), "other").unwrap();
    assert_eq!(other.versions().await.unwrap(), Vec::<u32>::new());
    assert_eq!(other.state().await.unwrap().serving, None);
}

#[tokio::test]
async fn fetch_checks_files_against_the_publication() {
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let adapter = adapter_dir();
    registry.publish(adapter.path(), "ana").await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = registry.fetch(1, cache.path()).await.unwrap();
    assert_eq!(
        std::fs::read(dir.join("adapter_model.safetensors")).unwrap(),
        b"weights"
    );

    // Damaged in storage after publication: refused, and nothing half-written is kept.
    let stored = lake
        .path()
        .join("adapters/agent/v1/adapter_model.safetensors");
    std::fs::write(&stored, b"weightz").unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let err = registry.fetch(1, fresh.path()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("does not match its published checksum"),
        "{err}"
    );
    assert!(
        !fresh
            .path()
            .join("agent/v1/adapter_model.safetensors")
            .exists()
    );
}

#[tokio::test]
async fn a_publication_naming_other_files_than_an_adapters_is_refused_before_any_is_written() {
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    registry.publish(adapter_dir().path(), "ana").await.unwrap();
    let version = lake.path().join("adapters/agent/v1");
    let record = version.join("_published.json");
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let outside = lake.path().join("outside");
    let escaping = format!("/../../../../../../../../..{}", outside.display());
    let weights = original["files"]["adapter_model.safetensors"].clone();
    for name in [
        escaping.as_str(),
        "../v2/adapter_model.safetensors",
        "notes.txt",
    ] {
        let mut tampered = original.clone();
        tampered["files"][name] = weights.clone();
        std::fs::write(&record, serde_json::to_vec(&tampered).unwrap()).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let err = registry.fetch(1, cache.path()).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("which is not a file of an adapter"),
            "{name}: {err}"
        );
        assert!(!outside.exists(), "{name}");
    }
    // A publication without the adapter's weights is refused too.
    let mut missing = original.clone();
    missing["files"]
        .as_object_mut()
        .unwrap()
        .remove("adapter_model.safetensors");
    std::fs::write(&record, serde_json::to_vec(&missing).unwrap()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    assert!(matches!(
        registry.fetch(1, cache.path()).await,
        Err(Error::Adapter { .. })
    ));
    // Such a version can still be retired.
    registry.retire(1, "ana", "tampered", None).await.unwrap();
}

#[tokio::test]
async fn racing_promoters_cannot_both_take_a_log_position() {
    let lake = tempfile::tempdir().unwrap();
    let location = lake.path().to_str().unwrap().to_owned();
    let registry = Registry::open(&location, Default::default(), "agent").unwrap();
    let adapter = adapter_dir();
    registry.publish(adapter.path(), "ana").await.unwrap();
    registry.publish(adapter.path(), "ana").await.unwrap();
    let mut tasks = Vec::new();
    for (i, version) in [(0, 1), (1, 2), (2, 1), (3, 2)] {
        let r = Registry::open(&location, Default::default(), "agent").unwrap();
        tasks.push(tokio::spawn(async move {
            r.promote(version, &format!("p{i}"), "race", None).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(Error::Conflict(_)) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let log = registry.log().await.unwrap();
    assert!(won >= 1);
    assert_eq!(log.len(), won, "each success holds its own position");
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=won as u64).collect::<Vec<_>>());
}
