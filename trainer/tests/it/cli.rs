//! The `atdp-train` command: `init-model` writes loadable, deterministic models.

use std::path::Path;
use std::process::Command;
use std::str::FromStr;

use atdp_model_files::ModelConfig;

use atdp_trainer::{Adapter, LoadOptions, Model};
use serde_json::Value;

use crate::util::batch;

const FILES: [&str; 5] = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
];

fn atdp_train(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_atdp-train"))
        .args(args)
        .output()
        .unwrap()
}

fn init(arch: &str, seed: &str, dir: &Path) {
    let out = atdp_train(&[
        "init-model",
        "--arch",
        arch,
        "--tiny",
        dir.to_str().unwrap(),
        "--seed",
        seed,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("random {arch} model")));
}

#[test]
fn init_model_is_deterministic_per_seed_and_loads() {
    let root = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        root.path().join("a"),
        root.path().join("b"),
        root.path().join("c"),
    );
    init("qwen3", "5", &a);
    init("qwen3", "5", &b);
    init("qwen3", "6", &c);
    for file in FILES {
        assert_eq!(
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
            "{file}"
        );
    }
    assert_ne!(
        std::fs::read(a.join("model.safetensors")).unwrap(),
        std::fs::read(c.join("model.safetensors")).unwrap()
    );

    let config = ModelConfig::from_file(&a).unwrap();
    assert_eq!(
        (config.head_dim, config.vocab_size, config.num_hidden_layers),
        (32, 300, 2)
    );
    let model = Model::load(&a, &LoadOptions::default()).unwrap();
    let logits = model
        .forward(&batch(&[&[296, 1, 2, 297]]), Adapter::Off)
        .unwrap();
    assert_eq!(logits.dims(), &[1, 4, 300]);
}

#[test]
fn init_model_writes_a_working_tokenizer_and_chat_settings() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("qwen2");
    init("qwen2", "0", &dir);

    let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let ids = tok
        .encode("Hello, world", false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(tok.decode(&ids, false).unwrap(), "Hello, world");
    let chat = "<|im_start|>user\nHello, world<|im_end|>\n";
    let ids = tok.encode(chat, false).unwrap().get_ids().to_vec();
    assert_eq!((ids[0], ids[ids.len() - 2]), (296, 297));
    assert_eq!(tok.decode(&ids, false).unwrap(), chat);

    let read = |f: &str| Value::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap();
    let tc = read("tokenizer_config.json");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["pad_token"], "<|endoftext|>");
    assert!(tc["chat_template"].as_str().unwrap().contains("tool_call"));
    assert_eq!(tc["added_tokens_decoder"]["296"]["content"], "<|im_start|>");
    let gc = read("generation_config.json");
    assert_eq!(gc["eos_token_id"], serde_json::json!([297, 295]));
    let config = read("config.json");
    assert_eq!(
        config["architectures"],
        serde_json::json!(["Qwen2ForCausalLM"])
    );
    assert_eq!(
        (
            config["eos_token_id"].as_u64(),
            config["tie_word_embeddings"].as_bool()
        ),
        (Some(297), Some(true))
    );
}

#[test]
fn init_model_learns_merges_from_a_corpus() {
    let root = tempfile::tempdir().unwrap();
    let corpus = root.path().join("corpus.txt");
    let call = "<tool_call>\n{\"name\": \"refund_order\", \"arguments\": {\"order\": \"8812\"}}\n</tool_call>\n";
    std::fs::write(&corpus, call.repeat(30)).unwrap();
    let dir = root.path().join("m");
    let out = atdp_train(&[
        "init-model",
        "--arch",
        "qwen2",
        "--tiny",
        "--corpus",
        corpus.to_str().unwrap(),
        "--merges",
        "40",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let config = ModelConfig::from_file(&dir).unwrap();
    // Up to 40: learning stops once no pair occurs twice.
    assert!(
        (310..=340).contains(&config.vocab_size),
        "{}",
        config.vocab_size
    );
    assert_eq!(tok.get_vocab_size(true), config.vocab_size);
    // The built-in ids stay; the corpus's words are single tokens now.
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(296));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(297));
    let ids = tok.encode(call, false).unwrap().get_ids().to_vec();
    assert!(ids.len() < 30, "{} tokens", ids.len());
    assert!(ids.iter().any(|&id| id >= 300));
    assert_eq!(tok.decode(&ids, false).unwrap(), call);
    let model = Model::load(&dir, &LoadOptions::default()).unwrap();
    let logits = model.forward(&batch(&[&ids]), Adapter::Off).unwrap();
    assert_eq!(logits.dims(), &[1, ids.len(), config.vocab_size]);

    // A corpus without a count, or a count without a corpus, is refused.
    let out = atdp_train(&[
        "init-model",
        "--arch",
        "qwen2",
        "--tiny",
        "--merges",
        "4",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--corpus"));
}

#[test]
fn init_model_size_flags_override_the_preset() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m");
    let out = atdp_train(&[
        "init-model",
        "--arch",
        "llama",
        "--tiny",
        "--hidden",
        "32",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--layers",
        "1",
        "--vocab",
        "320",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = ModelConfig::from_file(&dir).unwrap();
    assert_eq!(
        (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.num_hidden_layers,
            c.vocab_size
        ),
        (32, 2, 1, 16, 1, 320)
    );
    Model::load(&dir, &LoadOptions::default()).unwrap();
}

#[test]
fn init_model_refuses_bad_requests() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m");
    // No preset.
    let out = atdp_train(&["init-model", "--arch", "qwen2", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tiny"));
    // Unknown architecture.
    let out = atdp_train(&[
        "init-model",
        "--arch",
        "gpt2",
        "--tiny",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("llama, qwen2, qwen3"));
    // Heads that do not fit, then an existing model.
    let out = atdp_train(&[
        "init-model",
        "--arch",
        "qwen2",
        "--tiny",
        "--kv-heads",
        "3",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("num_key_value_heads"));
    init("qwen2", "0", &dir);
    let out = atdp_train(&[
        "init-model",
        "--arch",
        "qwen2",
        "--tiny",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds a model"));
}

#[test]
fn run_check_validates_the_example_configuration_without_training() {
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        )
        .join("..");
    let example = root.join("examples/train.toml");
    let out = atdp_train(&["run", "--config", example.to_str().unwrap(), "--check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("is valid"), "{stdout}");
    assert!(stdout.contains("runs/research-assistant-v1"), "{stdout}");
    assert!(stdout.contains("Steps(200)"), "{stdout}");
    assert!(stdout.contains("placeholders surrogate"), "{stdout}");

    // `--placeholders` and ATDP_TRAIN_PLACEHOLDERS override the file; a bad value is named.
    let config = example.to_str().unwrap();
    let out = atdp_train(&[
        "run",
        "--config",
        config,
        "--check",
        "--placeholders",
        "keep",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("placeholders keep"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_atdp-train"))
        .args(["run", "--config", config, "--check"])
        .env("ATDP_TRAIN_PLACEHOLDERS", "keep")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("placeholders keep"));
    let out = atdp_train(&[
        "run",
        "--config",
        config,
        "--check",
        "--placeholders",
        "fake",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`train.placeholders` = \"fake\""));

    // The same file with a setting out of range is refused, naming it.
    let text = std::fs::read_to_string(&example)
        .unwrap()
        .replace("gamma = 0.9", "gamma = 1.5");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("train.toml");
    std::fs::write(&bad, text).unwrap();
    let out = atdp_train(&["run", "--config", bad.to_str().unwrap(), "--check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rewards.gamma"));
}
