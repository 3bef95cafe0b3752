//! Tenants are a boundary in training data: a run names the tenants it reads, two tenants with
//! the same trajectory and step ids get the returns of their own rewards, and a step reward that
//! names a step outside its trajectory credits nothing.

use std::collections::BTreeSet;
use std::path::Path;

use atdp_schema::{Record, Reward, Step, new_id};
use atdp_trainer::{
    Error, RawRunConfig, RewardSpec, Selection, StepKey, TrainOptions, read_lake, step_returns,
};

use crate::learning::{BAD, GOOD, Setup, episode, write_lake};

const ONE_STEP: &str = r#"
[rewards]
weights = { ok = 1.0 }
gamma = 0.5
[train]
steps = 1
batch_size = 2
token_budget = 128
max_len = 64
[lora]
r = 2
targets = ["q_proj"]
"#;

fn selecting(tenants: &[&str]) -> String {
    let list: Vec<String> = tenants.iter().map(|t| format!("{t:?}")).collect();
    format!("[select]\ntenants = [{}]\n{ONE_STEP}", list.join(", "))
}

/// acme:   T = S1 → S2 (both replying GOOD); a trajectory reward of +1.
/// globex: T = S1 → {S2, S3}, the same ids, replying BAD; S3 (a later retry) is the most
///         recent leaf; a trajectory reward of −1 and a step reward of 2 on S2.
fn twin_lake(setup: &Setup) -> (Vec<Step>, Vec<Step>) {
    let at = 1_795_910_400_000_000;
    let (s1, acme_reward) = episode(GOOD, 1.0, Some("v1"), at);
    let mut s2 = s1.clone();
    s2.step_id = new_id();
    s2.parent_step_id = Some(s1.step_id.clone());
    s2.turn_index = 1;
    s2.started_at = at + 10;
    let acme = vec![s1, s2];
    let mut globex: Vec<Step> = acme
        .iter()
        .map(|s| {
            let mut g = s.clone();
            g.tenant_id = "globex".into();
            g.response_message.as_mut().unwrap().content = Some(BAD.into());
            g
        })
        .collect();
    let mut s3 = globex[1].clone();
    s3.step_id = new_id();
    s3.started_at = at + 20;
    globex.push(s3);
    let globex_reward = Reward {
        reward_id: new_id(),
        tenant_id: "globex".into(),
        value: -1.0,
        ..acme_reward.clone()
    };
    let globex_step_reward = Reward {
        reward_id: new_id(),
        step_id: Some(globex[1].step_id.clone()),
        value: 2.0,
        terminal: false,
        ..globex_reward.clone()
    };
    let mut records: Vec<Record> = acme
        .iter()
        .chain(&globex)
        .cloned()
        .map(Into::into)
        .collect();
    records.extend([
        acme_reward.into(),
        globex_reward.into(),
        globex_step_reward.into(),
    ]);
    write_lake(&setup.lake(), records);
    (acme, globex)
}

fn lake(setup: &Setup) -> String {
    setup.lake().display().to_string()
}

fn selection(tenants: &[&str]) -> Selection {
    Selection {
        tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        reward_names: BTreeSet::from(["ok".to_owned()]),
        ..Selection::default()
    }
}

#[test]
fn a_run_names_its_tenants_or_is_refused() {
    let setup = Setup::new();
    twin_lake(&setup);
    let path = Path::new("train.toml");
    let text = format!("model = \"m\"\nlake = \"l\"\nout = \"o\"\n{ONE_STEP}");
    let err = RawRunConfig::from_toml_str(&text, path)
        .unwrap()
        .validate(path)
        .unwrap_err();
    assert!(matches!(err, Error::RunConfig { .. }), "{err}");
    assert!(
        err.to_string().contains("`select.tenant` is required"),
        "{err}"
    );
    // The library refuses a selection without a tenant too.
    let err = read_lake(&lake(&setup), Default::default(), &selection(&[])).unwrap_err();
    assert!(err.to_string().contains("names no tenant"), "{err}");
}

#[test]
fn tenants_with_the_same_ids_get_the_returns_of_their_own_rewards() {
    let setup = Setup::new();
    let (acme, globex) = twin_lake(&setup);
    let spec = RewardSpec {
        weights: [("ok".to_owned(), 1.0)].into(),
        gamma: 0.5,
    };
    let both = read_lake(
        &lake(&setup),
        Default::default(),
        &selection(&["acme", "globex"]),
    )
    .unwrap();
    assert_eq!((both.steps.len(), both.rewards.len()), (5, 3));
    let returns = step_returns(&both.steps, &both.rewards, &spec).unwrap();
    let of = |s: &Step| returns.of(&StepKey::of(s));
    // acme: +1 at the leaf S2, discounted to S1.
    assert_eq!(
        acme.iter().map(of).collect::<Vec<_>>(),
        [Some(0.5), Some(1.0)]
    );
    // globex: −1 at its leaf S3 and back to S1; S2 has its own step reward only.
    assert_eq!(
        globex.iter().map(of).collect::<Vec<_>>(),
        [Some(-0.5), Some(2.0), Some(-1.0)]
    );
    assert_eq!(returns.by_step.len(), 5);
    assert_eq!(returns.unmatched_step_rewards, 0);

    // One tenant alone reads only its own rows, with the same returns.
    let alone = read_lake(&lake(&setup), Default::default(), &selection(&["globex"])).unwrap();
    assert!(alone.steps.iter().all(|s| s.tenant_id == "globex"));
    assert!(alone.rewards.iter().all(|r| r.tenant_id == "globex"));
    assert_eq!((alone.steps.len(), alone.rewards.len()), (3, 2));
    let returns = step_returns(&alone.steps, &alone.rewards, &spec).unwrap();
    assert_eq!(
        globex
            .iter()
            .map(|s| returns.of(&StepKey::of(s)))
            .collect::<Vec<_>>(),
        [Some(-0.5), Some(2.0), Some(-1.0)]
    );
    assert_eq!(both.reads[0].version, alone.reads[0].version);
}

#[test]
fn a_run_over_several_tenants_records_them() {
    let setup = Setup::new();
    twin_lake(&setup);
    let config = setup.config("both", &selecting(&["globex", "acme"]));
    let report = atdp_trainer::run(&config, &TrainOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(report.rewarded_examples, 5);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("both").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["hyper_parameters"]["selection"]["tenants"],
        serde_json::json!(["acme", "globex"])
    );
    assert_eq!(manifest["tables"][0]["rows_read"], 5);
    assert_eq!(manifest["tables"][1]["rows_kept"], 3);
}

#[test]
fn a_step_reward_naming_another_trajectorys_step_credits_nothing() {
    let setup = Setup::new();
    let at = 1_795_910_400_000_000;
    let (good, good_reward) = episode(GOOD, 1.0, Some("v1"), at);
    let (bad, _) = episode(BAD, -1.0, Some("v1"), at + 1_000_000);
    // A client posts a step reward on `good`'s trajectory naming `bad`'s step.
    let stray = Reward {
        reward_id: new_id(),
        step_id: Some(bad.step_id.clone()),
        value: 5.0,
        ..good_reward.clone()
    };
    write_lake(
        &setup.lake(),
        vec![good.into(), good_reward.into(), bad.into(), stray.into()],
    );
    let config = setup.config("stray", &selecting(&["acme"]));
    let report = atdp_trainer::run(&config, &TrainOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(report.rewarded_examples, 1, "only `good` has a reward");
    assert_eq!(report.unmatched_step_rewards, 1);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(setup.out("stray").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["rewarded_examples"], 1);
    assert_eq!(manifest["unmatched_step_rewards"], 1);
}
