//! Preview and diff: distributions on a sample, and nothing written.

use atdp_rewards::Selection;

use crate::common::Fixture;

const STOP_OK: &str = r#"
name = "stop_ok"
kind = "sql"
expression = "CASE WHEN finish_reason = 'stop' AND status = 'ok' THEN 1.0 ELSE 0.0 END"
"#;

#[tokio::test]
async fn preview_shows_the_distribution_and_writes_nothing() {
    let f = Fixture::new().await;
    let function = f.spec("stop_ok", STOP_OK);
    let before = f.rewards_version().await;
    let catalog = f.catalog().await;
    let preview = atdp_rewards::preview(&catalog, &function, &Selection::default(), 50, 0)
        .await
        .unwrap();
    assert_eq!((preview.units, preview.values), (50, 50));
    assert!(preview.discrete);
    let labels: Vec<&str> = preview.buckets.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, ["0", "1"]);
    assert_eq!(preview.buckets.iter().map(|b| b.count).sum::<usize>(), 50);
    let ones = preview.buckets[1].count as f64;
    assert!((preview.mean - ones / 50.0).abs() < 1e-12);
    for bucket in &preview.buckets {
        assert!(!bucket.examples.is_empty() && bucket.examples.len() <= 3);
    }
    // Examples of 1 are text replies, examples of 0 are not.
    assert!(
        preview.buckets[1]
            .examples
            .iter()
            .all(|e| !e.reply.starts_with('['))
    );
    let text = preview.to_string();
    assert!(
        text.contains("mean") && text.contains("user:") && text.contains('#'),
        "{text}"
    );
    // The same sample again, and a different seed gives a different one.
    let again = atdp_rewards::sample(&catalog, &function, &Selection::default(), 50, 0)
        .await
        .unwrap();
    let other = atdp_rewards::sample(&catalog, &function, &Selection::default(), 50, 1)
        .await
        .unwrap();
    let ids = |s: &atdp_rewards::Sampled| {
        let mut ids: Vec<_> = s.labels.iter().map(|l| l.step_id.clone()).collect();
        ids.sort();
        ids
    };
    let first = atdp_rewards::sample(&catalog, &function, &Selection::default(), 50, 0)
        .await
        .unwrap();
    assert_eq!(ids(&first), ids(&again));
    assert_ne!(ids(&first), ids(&other));
    assert_eq!(f.rewards_version().await, before, "preview commits nothing");
}

#[tokio::test]
async fn diff_compares_two_versions_on_the_same_sample() {
    let f = Fixture::new().await;
    let a = f.spec("a", STOP_OK);
    let b = f.spec(
        "b",
        "name = \"stop_ok\"\nkind = \"sql\"\nexpression = \"CASE WHEN status = 'ok' THEN 1.0 ELSE 0.0 END\"\n",
    );
    let before = f.rewards_version().await;
    let catalog = f.catalog().await;
    let diff = atdp_rewards::diff(&catalog, &a, &b, &Selection::default(), 80, 0)
        .await
        .unwrap();
    assert_eq!((diff.units, diff.compared), (80, 80));
    // B says 1 wherever A does, and also for tool calls.
    let confusion = diff.confusion.clone().unwrap();
    assert_eq!(confusion.rows, [0.0, 1.0]);
    if let Some(zero) = confusion.columns.iter().position(|v| *v == 0.0) {
        assert_eq!(
            confusion.counts[1][zero], 0,
            "A = 1 and B = 0 never happens"
        );
    }
    let total: usize = confusion.counts.iter().flatten().sum();
    assert_eq!(total, 80);
    assert!(diff.mean_b > diff.mean_a);
    assert!(diff.agreement < 1.0 && diff.agreement > 0.0);
    let same = atdp_rewards::diff(&catalog, &a, &a, &Selection::default(), 80, 0)
        .await
        .unwrap();
    assert_eq!(same.agreement, 1.0);
    assert!(diff.to_string().contains("agreement"));
    assert_eq!(f.rewards_version().await, before);
}

/// The reward specs of `examples/rewards` load and label a sample of a lake.
#[tokio::test]
async fn the_example_reward_specs_label_a_sample() {
    let f = Fixture::new().await;
    let catalog = f.catalog().await;
    let dir = atdp_testkit::repo_root().join("examples/rewards");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let function = atdp_rewards::RewardFn::load(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let preview = atdp_rewards::preview(&catalog, &function, &Selection::default(), 20, 0)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(preview.values > 0, "{}: no values", path.display());
        assert!(
            preview.mean.is_finite() && (0.0..=1.0).contains(&preview.mean),
            "{}: mean {}",
            path.display(),
            preview.mean
        );
        names.push(function.name.clone());
    }
    names.sort();
    assert_eq!(names, ["short_trajectory", "task_success"]);
}
