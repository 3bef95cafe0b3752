//! Your own trainer on our lake: `examples/pytorch/train_lora.py` (PyTorch, PEFT, `atdp.lake`)
//! trains a LoRA adapter from the lake the proxy recorded; the registry takes it, the gate
//! judges it against the served version on its merits, and `atdp-serve` serves it. The
//! examples it trained on are the token ids `atdp-train` makes of the same steps, and its PEFT
//! files give the same policy in our forward pass as in PyTorch's.

use std::path::Path;
use std::process::Command;

use atdp_deploy::{Action, BaseModel, EngineOptions, Registry};
use atdp_loop::{AdapterEvents, Env, GateConfig, GateSetup, gate, record_decision};
use atdp_model_files::ChatFormat;
use atdp_trainer::{Adapter, LoadOptions, Model, load_adapter, token_log_probs};
use candle_core::{Device, Tensor};
use serde_json::Value;

use crate::quickstart::{audited, steps_of, wait_serving};

/// Trains with PyTorch on `lake` (tenant `demo`, reward `routing_correct`) into `out`.
fn train_with_pytorch(lake: &str, model: &Path, out: &Path) -> Value {
    let root = atdp_testkit::repo_root();
    let output = Command::new(atdp_testkit::python())
        .arg(root.join("examples/pytorch/train_lora.py"))
        .args(["--lake", lake, "--tenant", "demo", "--agent", "demo-agent"])
        .args(["--reward", "routing_correct=1.0"])
        .arg("--model")
        .arg(model)
        .arg("--out")
        .arg(out)
        .args(["--epochs", "2", "--batch-size", "16"])
        .args(["--lr", "1e-2", "--rank", "8"])
        .args(["--seed", "7", "--scores", "4"])
        .env("PYTHONPATH", root.join("python/src"))
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "train_lora.py: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap()
}

/// The examples of `scores.json` against ours: the same token ids as `atdp-train` makes of
/// the same recorded steps, and the same log-probabilities under the adapter in `dir` from
/// our forward pass as from PyTorch's.
fn same_examples_and_policy_as_pytorch(lake: &str, model_dir: &Path, dir: &Path) {
    let model = Model::load(model_dir, &LoadOptions::default()).unwrap();
    let lora = load_adapter(dir, &model).unwrap();
    let chat = ChatFormat::load(model_dir).unwrap();
    let steps = steps_of(lake);
    let scores: Vec<Value> =
        serde_json::from_slice(&std::fs::read(dir.join("scores.json")).unwrap()).unwrap();
    assert!(!scores.is_empty());
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| u32::try_from(x.as_u64().unwrap()).unwrap())
            .collect()
    };
    let (mut worst, mut base_gap) = (0f64, 0f64);
    for score in &scores {
        let (prompt, completion) = (ids(&score["prompt_ids"]), ids(&score["completion_ids"]));
        let step_id = score["step_id"].as_str().unwrap();
        let step = steps.iter().find(|s| s.step_id == step_id).unwrap();
        let (prompt_text, completion_text) = chat
            .prompt_and_completion(
                &step.request_messages,
                &step.tools,
                step.response_message.as_ref().unwrap(),
            )
            .unwrap();
        assert_eq!(
            chat.encode(&prompt_text).unwrap(),
            prompt,
            "prompt of {step_id}"
        );
        // A step served by `atdp-serve` carries the completion's own token ids (the model
        // may end on another end-of-turn token than the template writes); both trainers
        // learn from those, and re-tokenize only steps recorded without them.
        let expected = match &step.completion_token_ids {
            Some(recorded) => recorded
                .iter()
                .map(|id| u32::try_from(*id).unwrap())
                .collect(),
            None => chat.encode(&completion_text).unwrap(),
        };
        assert_eq!(expected, completion, "completion of {step_id}");
        // Either way the text is the recorded reply's: only the end token may differ.
        let rendered = chat.encode(&completion_text).unwrap();
        assert_eq!(
            completion[..completion.len().saturating_sub(1)],
            rendered[..rendered.len().saturating_sub(1)],
            "completion text of {step_id}"
        );
        let torch: Vec<f64> = score["log_probs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let all: Vec<u32> = prompt.iter().chain(&completion).copied().collect();
        let input = Tensor::from_vec(all.clone(), (1, all.len()), &Device::Cpu).unwrap();
        let targets =
            Tensor::from_vec(completion.clone(), (1, completion.len()), &Device::Cpu).unwrap();
        let log_probs = |adapter: Adapter<'_>| -> Vec<f32> {
            let logits = model.forward(&input, adapter).unwrap();
            // The token at position t is predicted by the logits at t - 1.
            let logits = logits
                .narrow(1, prompt.len() - 1, completion.len())
                .unwrap();
            token_log_probs(&logits, &targets)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        let (ours, base) = (log_probs(Adapter::On(&lora)), log_probs(Adapter::Off));
        assert_eq!(ours.len(), torch.len());
        for ((a, b), t) in ours.iter().zip(&base).zip(&torch) {
            worst = worst.max((f64::from(*a) - t).abs());
            base_gap = base_gap.max((f64::from(*b) - t).abs());
        }
    }
    // f32 in both, different kernels: a mismatched layout (a transposed or misnamed matrix,
    // a wrong scale) moves these by far more, as the base model alone does.
    assert!(
        worst < 1e-3,
        "log-probs differ from PyTorch's by up to {worst}"
    );
    assert!(
        base_gap > 1e-2,
        "the base model alone is as close ({base_gap}): the comparison shows nothing"
    );
    eprintln!(
        "the PyTorch adapter's log-probs in our forward pass: within {worst:.2e} \
         (the base model alone: {base_gap:.2e})"
    );
}

/// Trains an adapter with PyTorch on the quickstart's lake, publishes it, gates it against the
/// served version, records the decision, and checks that `atdp-serve` served it.
pub async fn a_pytorch_adapter_from_the_lake_is_gated_and_served(
    work: &Path,
    lake: &str,
    registry: &Registry,
    serve_url: &str,
) {
    let model_dir = work.join("qs/model");
    let out = work.join("torch-adapter");
    let run = train_with_pytorch(lake, &model_dir, &out);
    // It read what the proxy recorded, at the versions it names.
    assert!(run["examples"].as_u64().unwrap() >= 100, "{run}");
    assert!(run["versions"]["steps"].as_u64().is_some(), "{run}");
    let steps = run["steps"].as_array().unwrap();
    assert!(steps.len() >= 10, "{run}");
    same_examples_and_policy_as_pytorch(lake, &model_dir, &out);

    let published = registry.publish(&out, "pytorch").await.unwrap();
    let version = published.version;
    let served_before = registry.state().await.unwrap().serving;
    let setup = GateSetup {
        registry: registry.clone(),
        base: BaseModel::open(&model_dir).unwrap(),
        cache: work.join("gate-cache"),
        options: EngineOptions::default(),
    };
    let config = GateConfig {
        episodes: 60,
        train_episodes: 20,
        // The routing task's adapters move the KL far (the quickstart raises the bound).
        max_kl: 20.0,
        ..GateConfig::default()
    };
    let report = gate(&setup, version, &Env::Routing.into(), &config)
        .await
        .unwrap();
    eprintln!(
        "gate of the PyTorch adapter: {} ({} examples, {} steps)",
        report.reason(),
        run["examples"],
        steps.len()
    );
    let name = format!("{}@v{version}", registry.policy());
    // atdp-serve (mistral.rs) loaded the adapter and answered every held-out episode with it.
    assert_eq!(report.candidate, name);
    assert_eq!(report.candidate_heldout.failed, 0);
    assert_eq!(
        report.candidate_heldout.versions.keys().collect::<Vec<_>>(),
        [&name]
    );
    assert_eq!(report.checks.len(), 5, "{:?}", report.checks);
    assert!(
        report.kl_to_base.is_some_and(|kl| kl > 0.0),
        "the adapter did not move the policy"
    );

    // The decision, either way, is in the registry's log and the audit table.
    let trail = AdapterEvents::open(lake, Default::default(), &work.join("torch-wal"), "demo")
        .await
        .unwrap();
    let event = record_decision(registry, &report, version, "pytorch", Some(&trail))
        .await
        .unwrap();
    assert_eq!(event.version, version);
    if report.promote {
        assert_eq!(event.action, Action::Promote);
        audited(lake, "adapter_promote", &name);
        wait_serving(serve_url, &name).await;
    } else {
        assert_eq!(event.action, Action::Reject);
        audited(lake, "adapter_reject", &name);
        assert_eq!(registry.state().await.unwrap().serving, served_before);
    }
}
