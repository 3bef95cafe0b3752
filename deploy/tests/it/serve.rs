//! `atdp-serve` on a tiny random Qwen2: hot swap under load, rollback, refused adapters, and
//! agreement between mistral.rs and the trainer's forward pass.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use atdp_deploy::{Adapter, BaseModel, Engine, EngineOptions, Registry, Version};
use atdp_trainer::{Adapter as Weights, LoadOptions, Model, load_adapter, token_log_probs};
use candle_core::{Device, Tensor};
use serde_json::json;

use crate::util::{
    Answer, DEMO_KEY, chat, post, random_adapter, read_steps, recorded_steps, request, start,
    start_proxy, tiny_base, wait_for,
};

const PROMPT: &str = "Which team handles refunds?";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_swap_under_load_rollback_and_refusals() {
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let work = tempfile::tempdir().unwrap();
    for (n, scale) in [(1, 0.3), (2, 0.3)] {
        let dir = work.path().join(format!("a{n}"));
        random_adapter(base.path(), &dir, scale, u64::from(n));
        assert_eq!(registry.publish(&dir, "test").await.unwrap().version, n);
    }
    registry.promote(1, "test", "first", None).await.unwrap();
    let server = start(registry.clone(), base.path()).await;
    assert_eq!(server.serving.status().serving, "agent@v1");
    let client = reqwest::Client::new();

    let whole = request(PROMPT, false, 8);
    let streamed = request(PROMPT, true, 8);
    let v1 = chat(&client, server.addr, &whole).await;
    assert_eq!(v1.version(), Some("agent@v1"));
    assert_eq!(v1.logprobs.len(), 8);
    let v1_streamed = chat(&client, server.addr, &streamed).await;
    assert_eq!(v1_streamed.version(), Some("agent@v1"));
    // The random model emits arbitrary bytes. mistral.rs sends no chunk for a token that
    // ends inside a UTF-8 character (and drops such a tail at the end), so a stream may
    // carry less text and fewer log-probabilities than the whole answer; what it carries
    // is the same.
    assert!(!v1_streamed.text.is_empty() && v1.text.starts_with(&v1_streamed.text));
    assert!(v1_streamed.logprobs.iter().all(|l| v1.logprobs.contains(l)));

    // Load: four clients, streamed and whole, while v2 is promoted.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..4 {
        let (client, stop, addr) = (client.clone(), stop.clone(), server.addr);
        let body = if i % 2 == 0 {
            whole.clone()
        } else {
            streamed.clone()
        };
        clients.push(tokio::spawn(async move {
            let mut answers: Vec<Answer> = Vec::new();
            while !stop.load(Ordering::Relaxed) || answers.len() < 3 {
                answers.push(chat(&client, addr, &body).await);
            }
            answers
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    registry.promote(2, "test", "better", None).await.unwrap();
    let status = wait_for(&server.serving, |s| s.serving == "agent@v2").await;
    let swap = status.last_swap.clone().unwrap();
    assert_eq!(
        (swap.from.as_str(), swap.to.as_str(), swap.left_draining),
        ("agent@v1", "agent@v2", 0)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let v2 = chat(&client, server.addr, &whole).await;
    assert_eq!(v2.version(), Some("agent@v2"));
    assert_ne!(
        v2.logprobs, v1.logprobs,
        "the two adapters should answer differently"
    );

    // Every answer came whole from one version: it names one, and it is that version's
    // answer exactly (text and log-probabilities).
    let mut seen = BTreeMap::new();
    for task in clients {
        let answers = task.await.unwrap();
        for answer in &answers {
            let version = answer.version().expect("one version per response");
            let reference = if version == "agent@v1" { &v1 } else { &v2 };
            assert!(version == "agent@v1" || version == "agent@v2", "{version}");
            if answer.models.len() == 1 {
                // Batched with other requests, the sums run in another order: equal to
                // float rounding, not bit for bit.
                assert_eq!(answer.text, reference.text);
                assert_eq!(answer.logprobs.len(), reference.logprobs.len());
                for (a, b) in answer.logprobs.iter().zip(&reference.logprobs) {
                    assert!((a - b).abs() < 1e-4, "{answer:?} vs {reference:?}");
                }
            } else {
                assert!(
                    reference.text.starts_with(&answer.text),
                    "{answer:?} vs {reference:?}"
                );
            }
            *seen.entry(version.to_owned()).or_insert(0) += 1;
        }
        // After the swap, a client's requests are on v2.
        assert_eq!(answers.last().unwrap().version(), Some("agent@v2"));
    }
    assert!(seen.len() == 2, "load ran on both versions: {seen:?}");
    assert_eq!(server.serving.status().failures, 0);

    // Rollback: v1's answers again, exactly.
    registry
        .rollback("test", "live reward dropped", None)
        .await
        .unwrap();
    wait_for(&server.serving, |s| s.serving == "agent@v1").await;
    let back = chat(&client, server.addr, &whole).await;
    assert_eq!(back, v1);

    // A damaged adapter (truncated weights) is refused; v1 stays.
    let damaged = work.path().join("damaged");
    random_adapter(base.path(), &damaged, 0.3, 3);
    let weights = damaged.join("adapter_model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(registry.publish(&damaged, "test").await.unwrap().version, 3);
    registry.promote(3, "test", "oops", None).await.unwrap();
    let status = wait_for(&server.serving, |s| s.last_refusal.is_some()).await;
    let refusal = status.last_refusal.unwrap();
    assert!(
        refusal.starts_with("v3: adapter agent@v3 refused") && refusal.contains("damaged"),
        "{refusal}"
    );
    assert_eq!(status.serving, "agent@v1");
    assert_eq!(chat(&client, server.addr, &whole).await, v1);

    // An adapter made for another base model (other hidden size) is refused too.
    let other_base = tempfile::tempdir().unwrap();
    tiny_base(other_base.path(), Some(32));
    let foreign = work.path().join("foreign");
    random_adapter(other_base.path(), &foreign, 0.3, 4);
    assert_eq!(registry.publish(&foreign, "test").await.unwrap().version, 4);
    registry
        .promote(4, "test", "wrong base", None)
        .await
        .unwrap();
    let status = wait_for(&server.serving, |s| {
        s.last_refusal
            .as_deref()
            .is_some_and(|r| r.starts_with("v4"))
    })
    .await;
    assert!(
        status.last_refusal.as_deref().unwrap().contains("shape"),
        "{status:?}"
    );
    assert_eq!(status.serving, "agent@v1");
    assert_eq!(chat(&client, server.addr, &whole).await, v1);

    // Retiring the broken versions leaves v1 served; retiring v1 too (it learned from erased
    // data, say) serves the base model, while a client keeps sending, with no request failed.
    for version in [4, 3] {
        registry
            .retire(version, "dpo", "erasure", None)
            .await
            .unwrap();
    }
    assert_eq!(registry.state().await.unwrap().serving, Some(1));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (client, stop, addr, body) = (client.clone(), stop.clone(), server.addr, whole.clone());
        tokio::spawn(async move {
            let mut answers: Vec<Answer> = Vec::new();
            while !stop.load(Ordering::Relaxed) || answers.len() < 3 {
                answers.push(chat(&client, addr, &body).await);
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    registry.retire(1, "dpo", "erasure", None).await.unwrap();
    wait_for(&server.serving, |s| s.serving == "agent@base").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let answers = load.await.unwrap();
    assert_eq!(answers.last().unwrap().version(), Some("agent@base"));
    assert_eq!(server.serving.status().failures, 0);
    assert_ne!(chat(&client, server.addr, &whole).await, v1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistral_rs_and_the_trainer_agree_on_the_same_weights() {
    let base_dir = tempfile::tempdir().unwrap();
    tiny_base(base_dir.path(), None);
    let adapter_dir = tempfile::tempdir().unwrap();
    random_adapter(base_dir.path(), adapter_dir.path(), 0.3, 5);
    let base = BaseModel::open(base_dir.path()).unwrap();
    let adapter = Adapter::check(adapter_dir.path(), &base, "test").unwrap();
    for with_adapter in [false, true] {
        let version = Version {
            policy: "agent".into(),
            number: Some(1),
        };
        let engine = Engine::load(
            &base,
            with_adapter.then_some(&adapter),
            version,
            &EngineOptions::default(),
        )
        .await
        .unwrap();

        // mistral.rs: the prompt's token ids (its own chat template rendering) and a greedy
        // continuation with the chosen tokens' ids and log-probabilities.
        let messages =
            mistralrs::TextMessages::new().add_message(mistralrs::TextMessageRole::User, PROMPT);
        let prompt: Vec<u32> = engine
            .model
            .tokenize(either::Either::Left(messages), None, true, true, None)
            .await
            .unwrap();
        let request = mistralrs::RequestBuilder::new()
            .add_message(mistralrs::TextMessageRole::User, PROMPT)
            .set_sampling(mistralrs::SamplingParams {
                max_len: Some(6),
                top_n_logprobs: 1,
                ..mistralrs::SamplingParams::deterministic()
            })
            .return_logprobs(true);
        let response = engine.model.send_chat_request(request).await.unwrap();
        let entries = response.choices[0]
            .logprobs
            .as_ref()
            .unwrap()
            .content
            .clone()
            .unwrap();
        let generated: Vec<u32> = entries.iter().map(|e| e.top_logprobs[0].token).collect();
        // mistral.rs reports log10 probabilities; the API converts them to natural logs.
        let served: Vec<f64> = entries
            .iter()
            .map(|e| f64::from(e.logprob) * std::f64::consts::LN_10)
            .collect();
        assert!(!generated.is_empty());

        // The trainer: the same sequence through its own forward pass with the adapter on.
        let model = Model::load(base_dir.path(), &LoadOptions::default()).unwrap();
        let lora = load_adapter(adapter_dir.path(), &model).unwrap();
        let weights = if with_adapter {
            Weights::On(&lora)
        } else {
            Weights::Off
        };
        let all: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
        let ids = Tensor::from_vec(all.clone(), (1, all.len()), &Device::Cpu).unwrap();
        let logits = model.forward(&ids, weights).unwrap();
        let n = all.len();
        let targets = Tensor::from_vec(all[1..].to_vec(), (1, n - 1), &Device::Cpu).unwrap();
        let lp = token_log_probs(&logits.narrow(1, 0, n - 1).unwrap(), &targets).unwrap();
        let lp: Vec<f32> = lp.flatten_all().unwrap().to_vec1().unwrap();
        let trained: Vec<f64> = lp[prompt.len() - 1..]
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        // And the argmax of the trainer's logits is the token mistral.rs chose.
        let argmax: Vec<u32> = logits
            .narrow(1, prompt.len() - 1, generated.len())
            .unwrap()
            .argmax(2)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(argmax, generated);
        assert_eq!(trained.len(), served.len());
        for (i, (a, b)) in trained.iter().zip(&served).enumerate() {
            assert!(
                (a - b).abs() < 2e-3,
                "adapter {with_adapter}, token {i}: trainer {a} vs mistral.rs {b}; prompt {prompt:?} generated {generated:?}"
            );
        }
    }
}

#[test]
fn adapters_with_non_finite_values_or_another_base_are_refused_before_loading() {
    let base_dir = tempfile::tempdir().unwrap();
    tiny_base(base_dir.path(), None);
    let base = BaseModel::open(base_dir.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    random_adapter(base_dir.path(), dir.path(), 0.3, 6);
    assert!(Adapter::check(dir.path(), &base, "v1").is_ok());

    // A NaN in one B matrix.
    let weights = dir.path().join("adapter_model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.shape().to_vec(), view.data().to_vec()))
        .collect();
    let b = tensors
        .iter_mut()
        .find(|(name, ..)| name.ends_with("lora_B.weight"))
        .unwrap();
    b.2[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .unwrap();
            (name.clone(), view)
        })
        .collect();
    std::fs::write(&weights, safetensors::serialize(views, None).unwrap()).unwrap();
    let err = Adapter::check(dir.path(), &base, "v2")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("adapter v2 refused") && err.contains("NaN"),
        "{err}"
    );

    // A trainer manifest naming other base weights.
    random_adapter(base_dir.path(), dir.path(), 0.3, 7);
    let manifest = serde_json::json!({
        "format": "atdp-trainer/manifest-v1",
        "base_model": {"path": "/elsewhere", "sha256": "0".repeat(64), "files": {}},
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    let err = Adapter::check(dir.path(), &base, "v3")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("trained on base weights 000000000000"),
        "{err}"
    );
    // The same manifest naming these weights passes.
    let manifest = serde_json::json!({"base_model": {"sha256": base.sha256}});
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    assert!(Adapter::check(dir.path(), &base, "v4").is_ok());
}

/// A regex `grammar` (mistral.rs's extension) and OpenAI's `response_format` restrict what a
/// random model samples: every reply is one of the allowed answers, and sampling at
/// temperature 1 reaches more than one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constrained_decoding_keeps_replies_in_the_allowed_set() {
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let server = start(registry, base.path()).await;
    let client = reqwest::Client::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..24 {
        let body = serde_json::json!({
            "model": "default",
            "messages": [{"role": "user", "content": format!("Route ticket {i}: A, B, C or D?")}],
            "max_tokens": 4,
            "temperature": 1.0,
            "grammar": {"type": "regex", "value": "[ABCD]"},
        });
        let answer = chat(&client, server.addr, &body).await;
        assert!(
            ["A", "B", "C", "D"].contains(&answer.text.as_str()),
            "{answer:?}"
        );
        seen.insert(answer.text);
    }
    assert!(seen.len() > 1, "sampling reached only {seen:?}");
    // Log-probabilities are those of the constrained distribution, and tokens the
    // constraint forbids are no alternatives.
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "A or B?"}],
        "max_tokens": 2,
        "temperature": 0,
        "logprobs": true,
        "top_logprobs": 5,
        "grammar": {"type": "regex", "value": "[AB]"},
    });
    let raw: serde_json::Value = client
        .post(format!("http://{}/v1/chat/completions", server.addr))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let entry = raw.pointer("/choices/0/logprobs/content/0").unwrap();
    let chosen = entry["logprob"].as_f64().unwrap();
    let top = entry["top_logprobs"].as_array().unwrap();
    assert!(!top.is_empty() && top.len() <= 2, "{top:?}");
    for alt in top {
        let token = alt["token"].as_str().unwrap();
        assert!(["A", "B"].contains(&token), "{top:?}");
        assert!(alt["logprob"].as_f64().unwrap() <= 0.0);
    }
    // Greedy picks the likelier of two: at least one half of the constrained mass.
    assert!(chosen >= 0.5f64.ln() - 1e-6 && chosen <= 0.0, "{chosen}");
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Pick one."}],
        "max_tokens": 8,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "pick",
            "schema": {"type": "string", "enum": ["yes", "no"]}}},
    });
    let answer = chat(&client, server.addr, &body).await;
    assert!(
        ["\"yes\"", "\"no\""].contains(&answer.text.as_str()),
        "{answer:?}"
    );
}

/// A chat body whose user turn is `n` letters, asking for exactly `letters` letters back.
fn long_prompt(n: usize, letters: usize) -> serde_json::Value {
    serde_json::json!({
        "model": "default",
        "messages": [{"role": "user", "content": "q".repeat(n)}],
        "max_tokens": letters,
        "temperature": 0,
        "grammar": {"type": "regex", "value": format!("[a-z]{{{letters}}}")},
    })
}

/// The user-turn length whose prompt is `tokens` tokens long, found by asking.
async fn user_length_for(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    tokens: usize,
) -> usize {
    let mut n = tokens;
    for _ in 0..8 {
        let (status, body) = crate::util::post(client, addr, &long_prompt(n, 1)).await;
        assert_eq!(status, 200, "{body}");
        let got = body["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
        if got == tokens {
            return n;
        }
        n = (n + tokens).checked_sub(got).unwrap();
    }
    panic!("no user turn gives a {tokens}-token prompt");
}

/// The prompt and the completion share the model's context (2,048 positions for the tiny
/// model): a completion asked for that does not fit is OpenAI's 400
/// `context_length_exceeded`, the default length is shortened to fit, and concurrent
/// requests near the end of the context never fail inside the model (mistral.rs fails a
/// sequence that runs past its positions, and used to answer with its internals).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completions_are_held_inside_the_context() {
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let server = start(registry, base.path()).await;
    let client = reqwest::Client::new();
    let n = user_length_for(&client, server.addr, 2000).await;

    let (status, body) = crate::util::post(&client, server.addr, &long_prompt(n, 100)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("maximum context length is 2048 tokens")
            && message.contains("2100 tokens (2000 in the messages, 100 in the completion)"),
        "{message}"
    );
    let mut default_length = long_prompt(n, 100);
    for key in ["max_tokens", "grammar"] {
        default_length.as_object_mut().unwrap().remove(key);
    }
    let (status, body) = crate::util::post(&client, server.addr, &default_length).await;
    assert_eq!(status, 200, "{body}");
    let total = body["usage"]["total_tokens"].as_u64().unwrap();
    assert!(total <= 2048, "{body}");
    let (status, body) = crate::util::post(&client, server.addr, &long_prompt(n + 60, 1)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");

    // Eight clients, prompts of 1,490 to 1,580 letters, every other one 200 letters shorter
    // with a forced tool call (the tool's definition brings it near the end of the context)
    // and the default length.
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (client, addr) = (client.clone(), server.addr);
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for round in 0..4 {
                let n = 1490 + (worker * 13 + round * 7) % 90;
                let tool_round = round % 2 == 0;
                let mut body = long_prompt(if tool_round { n - 200 } else { n }, 20);
                if tool_round {
                    let object = body.as_object_mut().unwrap();
                    object.remove("grammar");
                    object.remove("max_tokens");
                    body["tools"] = serde_json::json!([{"type": "function", "function": {
                        "name": "refund", "strict": true,
                        "description": "Refund an order. ".repeat(4),
                        "parameters": {"type": "object",
                            "properties": {"reference": {"type": "string", "enum": ["12345", "67890"]}},
                            "required": ["reference"], "additionalProperties": false}}}]);
                    body["tool_choice"] = serde_json::json!("required");
                }
                statuses.push(crate::util::post(&client, addr, &body).await);
            }
            statuses
        }));
    }
    for task in tasks {
        for (status, body) in task.await.unwrap() {
            assert_eq!(status, 200, "{body}");
        }
    }
    assert_eq!(server.serving.status().failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canary_takes_its_share_and_is_rejected_or_promoted_without_a_failed_request() {
    let (base, _lake, registry) = published(3).await;
    registry.promote(1, "test", "first", None).await.unwrap();
    let server = start(registry.clone(), base.path()).await;
    let client = reqwest::Client::new();
    let body = request(PROMPT, false, 2);
    // Versions of `n` requests in a row (nothing else is in flight).
    let versions = async |n: usize| -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(chat(&client, server.addr, &body).await.header);
        }
        out
    };

    registry
        .canary(2, 0.25, "test", "gate passed", None)
        .await
        .unwrap();
    let status = wait_for(&server.serving, |s| s.canary.is_some()).await;
    assert_eq!(
        (status.canary.as_deref(), status.canary_share),
        (Some("agent@v2"), Some(0.25))
    );
    let run = versions(40).await;
    assert_eq!(
        run.iter().filter(|v| *v == "agent@v2").count(),
        10,
        "{run:?}"
    );
    assert_eq!(
        run.iter().filter(|v| *v == "agent@v1").count(),
        30,
        "{run:?}"
    );
    assert_eq!(server.serving.status().canary_requests, 10);

    // Clients keep calling while the canary is rejected, a second one starts and is
    // promoted: every request is answered.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..3 {
        let (client, stop, addr) = (client.clone(), stop.clone(), server.addr);
        let body = request(PROMPT, i % 2 == 1, 2);
        clients.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                seen.push(chat(&client, addr, &body).await.header);
            }
            seen
        }));
    }
    registry
        .reject(2, "test", "live reward below v1's", None)
        .await
        .unwrap();
    wait_for(&server.serving, |s| s.canary.is_none()).await;
    registry
        .canary(3, 0.5, "test", "gate passed", None)
        .await
        .unwrap();
    wait_for(&server.serving, |s| s.canary.as_deref() == Some("agent@v3")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    registry
        .promote(3, "test", "live reward held", None)
        .await
        .unwrap();
    let status = wait_for(&server.serving, |s| s.serving == "agent@v3").await;
    // The canary's engine was promoted as it was: no second load.
    let swap = status.last_swap.unwrap();
    assert_eq!((swap.from.as_str(), swap.load_ms), ("agent@v1", 0));
    assert_eq!(status.canary, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = std::collections::BTreeSet::new();
    for task in clients {
        seen.extend(task.await.unwrap());
    }
    assert!(seen.contains("agent@v3"), "{seen:?}");
    assert_eq!(server.serving.status().failures, 0);
    assert!(versions(8).await.iter().all(|v| v == "agent@v3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_in_shadow_answers_copies_through_the_proxy_that_are_recorded_and_never_returned()
{
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    let work = tempfile::tempdir().unwrap();
    for n in 1..=2 {
        let dir = work.path().join(format!("a{n}"));
        random_adapter(base.path(), &dir, 0.3, n);
        registry.publish(&dir, "test").await.unwrap();
    }
    registry.promote(1, "test", "first", None).await.unwrap();
    let server = start(registry.clone(), base.path()).await;
    registry
        .shadow(2, 0.5, "test", "gate passed", None)
        .await
        .unwrap();
    let status = wait_for(&server.serving, |s| s.canary.is_some()).await;
    assert_eq!(
        (status.canary.as_deref(), status.canary_shadow),
        (Some("agent@v2"), true)
    );
    let proxy = start_proxy(lake.path(), server.addr).await;
    let client = reqwest::Client::new();
    let mut served = Vec::new();
    for stream in [false, true, false, true] {
        let response = client
            .post(format!("http://{proxy}/v1/chat/completions"))
            .bearer_auth(DEMO_KEY)
            .json(&request(PROMPT, stream, 4))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let headers = response.headers().clone();
        assert_eq!(headers["x-atdp-policy-version"], "agent@v1");
        assert!(headers.get("x-atdp-shadow").is_none(), "{headers:?}");
        served.push(headers["x-atdp-step-id"].to_str().unwrap().to_owned());
        response.bytes().await.unwrap();
    }

    // Half the requests were copied to v2; its replies are recorded, never trained on.
    let steps = read_steps(lake.path().join("lake"), 6, true).await;
    let shadows: Vec<_> = steps
        .iter()
        .filter(|s| s.tags.contains_key("shadow_of"))
        .collect();
    assert_eq!(shadows.len(), 2, "{steps:#?}");
    for shadow in &shadows {
        assert!(served.contains(&shadow.tags["shadow_of"]));
        assert_eq!(shadow.policy_version.as_deref(), Some("agent@v2"));
        assert_eq!(shadow.training_eligible, Some(false));
        assert_eq!(shadow.status, "ok");
        assert!(shadow.response_message.is_some());
    }
    let trainable = recorded_steps(lake.path().join("lake"), 4).await;
    assert_eq!(trainable.len(), 4);
    assert!(trainable.iter().all(|s| served.contains(&s.step_id)));
    let status = server.serving.status();
    assert_eq!((status.canary_requests, status.failures), (2, 0));
    // A copy is answered by the running shadow alone: any other version it names is a 404,
    // never a load.
    for model in ["agent@v1", "agent@v3", "agent@base", "agent", "other@v2"] {
        let mut body = request(PROMPT, false, 2);
        body["model"] = serde_json::json!(model);
        let response = client
            .post(format!("http://{}/v1/chat/completions", server.addr))
            .header("x-atdp-shadow-copy", "1")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{model}");
    }
    assert!(server.fleet.status().pinned.is_empty());

    // Its next stage, a canary of the same version, keeps the loaded engine.
    registry
        .canary(2, 0.5, "test", "shadow held", None)
        .await
        .unwrap();
    let status = wait_for(&server.serving, |s| !s.canary_shadow).await;
    assert_eq!(status.canary.as_deref(), Some("agent@v2"));
    assert_eq!(status.swaps, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_streaming_client_that_leaves_fails_no_request_beside_it() {
    use futures::StreamExt;
    let (base, _lake, registry) = published(1).await;
    registry.promote(1, "test", "first", None).await.unwrap();
    let server = start(registry, base.path()).await;
    let client = reqwest::Client::new();
    // Replies held to their length by a grammar, so that none ends early.
    let forced = |stream: bool, tokens: usize| {
        let mut body = request(PROMPT, stream, tokens);
        body["grammar"] = json!({"type": "regex", "value": format!("[a-z]{{{}}}", tokens - 1)});
        body
    };
    let others: Vec<_> = (0..3)
        .map(|_| {
            let (client, addr, body) = (client.clone(), server.addr, forced(false, 1800));
            tokio::spawn(async move { post(&client, addr, &body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A streamed request joins their batch; then its client goes away.
    let leaving = client
        .post(format!("http://{}/v1/chat/completions", server.addr))
        .json(&forced(true, 1000))
        .send()
        .await
        .unwrap();
    assert_eq!(leaving.status(), 200);
    let mut leaving = leaving.bytes_stream();
    assert!(leaving.next().await.is_some());
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(leaving);
    for other in others {
        let (status, body) = other.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let after = chat(&client, server.addr, &request(PROMPT, false, 4)).await;
    assert_eq!(after.version(), Some("agent@v1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retired_version_stops_serving_even_when_its_successor_cannot_be_loaded() {
    let (base, lake, registry) = published(2).await;
    registry.promote(1, "test", "first", None).await.unwrap();
    registry.promote(2, "test", "next", None).await.unwrap();
    let server = start(registry.clone(), base.path()).await;
    assert_eq!(server.serving.status().serving, "agent@v2");
    // v3 is promoted but damaged in storage: refused, v2 stays. Then v2 is retired, while the
    // log still names the refused v3.
    let dir = lake.path().join("a3");
    random_adapter(base.path(), &dir, 0.3, 3);
    registry.publish(&dir, "test").await.unwrap();
    std::fs::write(
        lake.path()
            .join("adapters/agent/v3/adapter_model.safetensors"),
        b"damaged",
    )
    .unwrap();
    registry.promote(3, "test", "next", None).await.unwrap();
    wait_for(&server.serving, |s| s.last_refusal.is_some()).await;
    assert_eq!(server.serving.status().serving, "agent@v2");
    registry
        .retire(2, "test", "trained on erased data", None)
        .await
        .unwrap();
    let status = wait_for(&server.serving, |s| s.serving != "agent@v2").await;
    assert_eq!(status.serving, "agent@base", "{status:?}");
    let client = reqwest::Client::new();
    let mut pinned = request(PROMPT, false, 4);
    pinned["model"] = "agent@v2".into();
    let (code, body) = post(&client, server.addr, &pinned).await;
    assert_eq!(code, 404, "{body}");
    let answer = chat(&client, server.addr, &request(PROMPT, false, 4)).await;
    assert_eq!(answer.version(), Some("agent@base"));
}

/// A tiny base model, and a registry of policy `agent` on a fresh lake with `n` random
/// adapters published (v1 to vN, none promoted).
async fn published(n: u64) -> (tempfile::TempDir, tempfile::TempDir, Registry) {
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let registry =
        Registry::open(lake.path().to_str().unwrap(), Default::default(), "agent").unwrap();
    for version in 1..=n {
        let dir = lake.path().join(format!("a{version}"));
        random_adapter(base.path(), &dir, 0.3, version);
        registry.publish(&dir, "test").await.unwrap();
    }
    (base, lake, registry)
}
