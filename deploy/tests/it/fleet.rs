//! Several policies in one `atdp-serve` process: chosen per request by `model`, swapped on
//! their own under load, pinned versions, and unknown policies refused in OpenAI's format.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use atdp_deploy::Registry;
use serde_json::{Value, json};

use crate::util::{Answer, chat, post, random_adapter, request, start_fleet, tiny_base, wait_for};

const PROMPT: &str = "Which team handles refunds?";

fn asking(policy: &str, stream: bool) -> Value {
    let mut body = request(PROMPT, stream, 8);
    body["model"] = json!(policy);
    body
}

/// The same answer up to the float rounding of batched sums.
fn same(a: &Answer, b: &Answer) -> bool {
    a.header == b.header
        && a.text == b.text
        && a.logprobs.len() == b.logprobs.len()
        && a.logprobs
            .iter()
            .zip(&b.logprobs)
            .all(|(x, y)| (x - y).abs() < 1e-4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_policies_in_one_process_swap_on_their_own_under_load() {
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let open = |policy| Registry::open(lake.path().to_str().unwrap(), Default::default(), policy);
    let (support, reports) = (open("support").unwrap(), open("reports").unwrap());
    let work = tempfile::tempdir().unwrap();
    for (registry, seeds) in [(&support, &[1_u64, 2, 5, 6][..]), (&reports, &[3][..])] {
        for (i, seed) in seeds.iter().enumerate() {
            let dir = work.path().join(format!("{}-{seed}", registry.policy()));
            random_adapter(base.path(), &dir, 0.3, *seed);
            let published = registry.publish(&dir, "test").await.unwrap();
            assert_eq!(published.version as usize, i + 1);
        }
        registry.promote(1, "test", "first", None).await.unwrap();
    }
    let server = start_fleet(vec![support.clone(), reports.clone()], base.path(), None, 2).await;
    let client = reqwest::Client::new();

    // Each policy answers with its own adapter.
    let s1 = chat(&client, server.addr, &asking("support", false)).await;
    let r1 = chat(&client, server.addr, &asking("reports", false)).await;
    assert_eq!(s1.version(), Some("support@v1"));
    assert_eq!(r1.version(), Some("reports@v1"));
    assert_ne!(s1.logprobs, r1.logprobs, "two adapters, two answers");
    let models: Value = client
        .get(format!("http://{}/v1/models", server.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["version"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["reports@v1", "support@v1"]);

    // A model no policy answers to: OpenAI's 404, with nothing served by another policy.
    for model in ["gpt-4o", "", "reports-agent", "nobody@v1"] {
        let (status, body) = post(&client, server.addr, &asking(model, false)).await;
        assert_eq!(status, 404, "{model}: {body}");
        assert_eq!(body["error"]["code"], "model_not_found", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "model");
    }
    let mut without = asking("support", false);
    without.as_object_mut().unwrap().remove("model");
    assert_eq!(post(&client, server.addr, &without).await.0, 404);
    // Pins of versions that were never published, or not written as a pin.
    let (status, body) = post(&client, server.addr, &asking("support@v9", false)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("model_not_found"))
    );
    // A malformed pin of a served policy is answered as one of a policy that is not served.
    for bad in ["support@latest", "support@v01", "support@", "support@v0"] {
        let (status, body) = post(&client, server.addr, &asking(bad, false)).await;
        let unserved = bad.replace("support", "nosuchpolicy");
        let (other, other_body) = post(&client, server.addr, &asking(&unserved, false)).await;
        assert_eq!((status, other), (404, 404), "{bad}: {body}");
        assert_eq!(body["error"]["code"], other_body["error"]["code"], "{bad}");
    }
    // Values outside OpenAI's ranges, and constraints too large to compile on the engine's
    // thread, are 400s naming the parameter.
    let stops: Vec<String> = (0..1000).map(|i| format!("stop{i}")).collect();
    for (param, value) in [
        ("top_p", json!(5)),
        ("top_p", json!(-1)),
        ("frequency_penalty", json!(1e300)),
        ("presence_penalty", json!(-3)),
        ("stop", json!(stops)),
        (
            "grammar",
            json!({"type": "regex", "value": "a".repeat(300_000)}),
        ),
    ] {
        let mut body = asking("support", false);
        body[param] = value;
        let (status, answer) = post(&client, server.addr, &body).await;
        assert_eq!(status, 400, "{param}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
    }
    // A body over the limit, and a method the path does not answer: errors in OpenAI's form.
    let huge = client
        .post(format!("http://{}/v1/chat/completions", server.addr))
        .header("content-type", "application/json")
        .body(vec![b' '; 17 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(huge.status(), 413);
    let answer: serde_json::Value = huge.json().await.unwrap();
    assert_eq!(answer["error"]["type"], "invalid_request_error");
    let get = client
        .get(format!("http://{}/v1/chat/completions", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let answer: serde_json::Value = get.json().await.unwrap();
    assert_eq!(answer["error"]["type"], "invalid_request_error");

    // Load on both policies, streamed and whole, while support alone moves to v2.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..4 {
        let (client, stop, addr) = (client.clone(), stop.clone(), server.addr);
        let body = asking(if i < 2 { "support" } else { "reports" }, i % 2 == 1);
        clients.push(tokio::spawn(async move {
            let mut answers: Vec<Answer> = Vec::new();
            while !stop.load(Ordering::Relaxed) || answers.len() < 3 {
                // `chat` panics on anything but a whole 200 answer.
                answers.push(chat(&client, addr, &body).await);
            }
            answers
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    support.promote(2, "test", "better", None).await.unwrap();
    let supporting = server.fleet.serving("support").unwrap().clone();
    wait_for(&supporting, |s| s.serving == "support@v2").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let s2 = chat(&client, server.addr, &asking("support", false)).await;
    assert_eq!(s2.version(), Some("support@v2"));
    assert_ne!(s2.logprobs, s1.logprobs);
    let mut seen = BTreeMap::new();
    for task in clients {
        for answer in task.await.unwrap() {
            let version = answer
                .version()
                .expect("one version per response")
                .to_owned();
            *seen.entry(version).or_insert(0) += 1;
        }
    }
    assert_eq!(
        seen.keys().map(String::as_str).collect::<Vec<_>>(),
        ["reports@v1", "support@v1", "support@v2"],
        "{seen:?}"
    );
    let status = server.fleet.status();
    assert_eq!(status.policies["support"].swaps, 1);
    assert_eq!(status.policies["reports"].swaps, 0, "reports did not move");
    assert!(
        status.policies.values().all(|s| s.failures == 0),
        "{status:?}"
    );
    assert_eq!(
        chat(&client, server.addr, &asking("reports", false)).await,
        r1
    );

    // A pinned version answers as it did when it was served, next to the promoted one.
    let pinned = chat(&client, server.addr, &asking("support@v1", false)).await;
    assert!(same(&pinned, &s1), "{pinned:?} vs {s1:?}");
    let base_pin = chat(&client, server.addr, &asking("reports@base", true)).await;
    assert_eq!(base_pin.version(), Some("reports@base"));
    assert_eq!(
        chat(&client, server.addr, &asking("support", true))
            .await
            .version(),
        Some("support@v2")
    );
    let status = server.fleet.status();
    assert_eq!(status.pinned, ["support@v1", "reports@base"]);
    // A version the gate refused is never served, pinned or not, and the answer is an
    // unknown model's: it tells nothing of the policy's versions.
    support
        .reject(3, "test", "held-out reward fell", None)
        .await
        .unwrap();
    let not_there = "does not exist or you do not have access to it";
    for model in ["support@v3", "support@v9"] {
        let (status, body) = post(&client, server.addr, &asking(model, false)).await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], "model_not_found");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(not_there), "{body}");
        assert!(
            !message.contains("gate") && !message.contains("reports"),
            "{body}"
        );
    }
    // A pinned version that the gate refuses later leaves within a poll.
    support
        .reject(1, "test", "found wanting", None)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server
        .fleet
        .status()
        .pinned
        .contains(&"support@v1".to_owned())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "support@v1 stayed pinned"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        post(&client, server.addr, &asking("support@v1", false))
            .await
            .0,
        404
    );

    // What a policy serves now is never loaded twice; a third pin pushes out the least
    // recently used.
    let s2_pinned = chat(&client, server.addr, &asking("support@v2", false)).await;
    assert_eq!(s2_pinned.version(), Some("support@v2"));
    assert_eq!(server.fleet.status().pinned, ["reports@base"]);
    let support_base = chat(&client, server.addr, &asking("support@base", false)).await;
    assert_eq!(support_base.version(), Some("support@base"));
    assert_eq!(
        server.fleet.status().pinned,
        ["reports@base", "support@base"]
    );
    let v4 = chat(&client, server.addr, &asking("support@v4", true)).await;
    assert_eq!(v4.version(), Some("support@v4"));
    assert_eq!(server.fleet.status().pinned, ["support@base", "support@v4"]);

    // Rolling one policy back leaves the other as it is.
    support
        .rollback("test", "live reward dropped", None)
        .await
        .unwrap();
    wait_for(&supporting, |s| s.serving == "support@v1").await;
    assert!(same(
        &chat(&client, server.addr, &asking("support", false)).await,
        &s1
    ));
    assert_eq!(
        server.fleet.status().policies["reports"].serving,
        "reports@v1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_policy_takes_requests_that_name_none_and_pins_can_be_turned_off() {
    let base = tempfile::tempdir().unwrap();
    tiny_base(base.path(), None);
    let lake = tempfile::tempdir().unwrap();
    let open = |policy| Registry::open(lake.path().to_str().unwrap(), Default::default(), policy);
    let (a, b) = (open("alpha").unwrap(), open("beta").unwrap());
    let work = tempfile::tempdir().unwrap();
    random_adapter(base.path(), &work.path().join("a1"), 0.3, 1);
    a.publish(&work.path().join("a1"), "test").await.unwrap();
    let server = start_fleet(vec![a.clone(), b], base.path(), Some("beta"), 0).await;
    let client = reqwest::Client::new();
    let answer = chat(&client, server.addr, &asking("gpt-4o-mini", false)).await;
    assert_eq!(answer.version(), Some("beta@base"));
    assert_eq!(
        chat(&client, server.addr, &asking("alpha", false))
            .await
            .version(),
        Some("alpha@base")
    );
    // With pins off, only what a policy serves now can be asked for.
    assert_eq!(
        chat(&client, server.addr, &asking("alpha@base", false))
            .await
            .version(),
        Some("alpha@base")
    );
    let (status, body) = post(&client, server.addr, &asking("alpha@v1", false)).await;
    assert_eq!(status, 404, "{body}");
    // A name with `@` is never taken for the default.
    assert_eq!(
        post(&client, server.addr, &asking("gpt@v1", false)).await.0,
        404
    );
}
