//! A custom environment goes through the gate like a built-in one: a Gymnasium-style Python
//! environment, made a command by `atdp.serve_env_command`, plays the held-out episodes of the
//! served version and of the candidate, each on an engine of its own; the KL to the base is
//! measured on the first messages it reported.

use std::path::Path;

use atdp_deploy::{BaseModel, EngineOptions, Registry};
use atdp_loop::{CommandEnv, Environment, GateConfig, GateReport, GateSetup, gate};
use atdp_model_files::{Arch, LoraConfig};
use atdp_trainer::{InitSpec, LoadOptions, Lora, Model, Rng, save_adapter};
use candle_core::{Device, Tensor};

/// The parity environment (`tests/fixtures/parity_env.py`) as a command, named `parity`.
fn parity(extra: &str) -> Environment {
    let fixture = atdp_testkit::repo_root().join("loop/tests/fixtures/parity_env.py");
    let command = format!(
        "{} {} {extra}",
        shlex::try_quote(&atdp_testkit::python()).unwrap(),
        shlex::try_quote(&fixture.display().to_string()).unwrap()
    );
    CommandEnv::new(&command, "parity_correct")
        .unwrap()
        .named("parity")
        .unwrap()
        .into()
}

/// An adapter of `model` in `dir`: its B matrices zero (the base model's policy exactly) or
/// seeded noise of standard deviation `noise`.
fn adapter(model_dir: &Path, dir: &Path, noise: f64) {
    let model = Model::load(model_dir, &LoadOptions::default()).unwrap();
    let lora = Lora::new(&model, LoraConfig::default()).unwrap();
    if noise > 0.0 {
        for (index, module, layer) in lora.layers() {
            let shape = layer.b().dims().to_vec();
            let mut rng = Rng::stream(23, &module.module_path(index));
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|_| (rng.normal() * noise) as f32)
                .collect();
            layer
                .b()
                .set(&Tensor::from_vec(values, shape, &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    save_adapter(&lora, dir, "custom-env-test").unwrap();
}

fn check<'a>(report: &'a GateReport, name: &str) -> &'a atdp_loop::Check {
    report.checks.iter().find(|c| c.name == name).unwrap()
}

fn failed(report: &GateReport) -> Vec<&str> {
    report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_python_environment_gates_a_candidate_adapter() {
    let work = tempfile::tempdir().unwrap();
    let model_dir = work.path().join("model");
    let mut spec = InitSpec::tiny(Arch::Qwen2);
    spec.init_std = 0.2;
    atdp_trainer::init_model(&model_dir, &spec).unwrap();
    let lake = work.path().join("lake").display().to_string();
    let registry = Registry::open(&lake, Default::default(), "custom").unwrap();
    let same = work.path().join("same");
    adapter(&model_dir, &same, 0.0);
    let damaged = work.path().join("damaged");
    adapter(&model_dir, &damaged, 0.5);
    assert_eq!(registry.publish(&same, "test").await.unwrap().version, 1);
    assert_eq!(registry.publish(&damaged, "test").await.unwrap().version, 2);
    let setup = GateSetup {
        registry: registry.clone(),
        base: BaseModel::open(&model_dir).unwrap(),
        cache: work.path().join("gate-cache"),
        options: EngineOptions::default(),
    };
    // Greedy: the candidate that is the base model answers exactly as the base does.
    let config = GateConfig {
        episodes: 24,
        train_episodes: 8,
        temperature: 0.0,
        concurrency: 2,
        max_kl: 0.05,
        ..GateConfig::default()
    };
    let env = parity("");

    // The base model's policy exactly: every check passes on the Python environment's
    // episodes, and the KL, measured on the messages it reported, is zero.
    let report = gate(&setup, 1, &env, &config).await.unwrap();
    eprintln!("parity, v1: {}", report.reason());
    assert_eq!(failed(&report), Vec::<&str>::new(), "{}", report.reason());
    assert!(report.promote);
    assert_eq!(report.checks.len(), 5);
    for (eval, version) in [
        (&report.candidate_heldout, "custom@v1"),
        (&report.current_heldout, "custom@base"),
    ] {
        assert_eq!(eval.env, "parity");
        assert_eq!((eval.episodes, eval.failed), (24, 0), "{:?}", eval.failures);
        assert_eq!(eval.seeds, [config.heldout_seed, 24]);
        // One model call per episode, each answered by the version under evaluation.
        assert_eq!(eval.versions.get(version), Some(&24), "{:?}", eval.versions);
        assert_eq!(eval.versions.len(), 1);
        assert!(eval.mean_completion_tokens >= 1.0);
        assert_eq!(eval.invalid_rate, 0.0);
    }
    assert_eq!(
        report.candidate_heldout.mean_reward,
        report.current_heldout.mean_reward
    );
    assert_eq!(report.candidate_train.as_ref().unwrap().episodes, 8);
    let kl = report.kl_to_base.unwrap();
    assert!(kl.abs() < 1e-6, "{kl}");

    // A damaged adapter: its KL to the base, measured on the same messages, is far over the
    // bound, and the gate refuses it.
    let config = GateConfig {
        train_episodes: 0,
        ..config
    };
    let report = gate(&setup, 2, &env, &config).await.unwrap();
    eprintln!("parity, v2: {}", report.reason());
    assert!(!report.promote);
    assert!(
        failed(&report).contains(&"kl_to_base"),
        "{}",
        report.reason()
    );
    let kl = check(&report, "kl_to_base").value;
    assert!(kl > config.max_kl, "{kl}");
    assert_eq!(report.candidate_heldout.failed, 0);

    // An environment that reports no prompts cannot show how far the policy moved: the KL
    // check refuses, and says why.
    let report = gate(&setup, 1, &parity("--drop-prompts"), &config)
        .await
        .unwrap();
    assert_eq!(failed(&report), ["kl_to_base"], "{}", report.reason());
    assert_eq!(report.kl_to_base, None);
    assert!(
        check(&report, "kl_to_base").detail.contains("not measured"),
        "{}",
        report.reason()
    );
}
