//! Restoring a streamed reply against a call with many placeholders: the cost of telling,
//! fragment by fragment, whether held text may still become a placeholder.
//!
//! `cargo run --release -p atdp-wire --example bench-restore -- [--values 40000] [--fragments 4000] [--choices 0]`
//!
//! The call masked `--values` distinct e-mail addresses (so its vault holds that many
//! placeholders); the reply is an OpenAI chat stream of `--fragments` content deltas, each
//! holding a `<` (`a < b`, an HTML tag, a placeholder cut across two deltas) and every tenth a
//! whole placeholder. With `--choices N` the reply is instead one chunk that opens `N` choices,
//! each ending in a cut placeholder that is held back, then one chunk ending each choice (the
//! held text written before it): the cost of many open fields. Prints one JSON line: the
//! vault's size, the fragments (or choices), the time to restore the stream, and that time per
//! fragment (or choice).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use atdp_policies::{KeyRing, VaultItem};
use atdp_wire::{ApiKind, SseRestorer};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn chunk(text: &str) -> String {
    let data = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
    });
    format!("data: {data}\n\n")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let values = arg("--values", 40_000);
    let choices = arg("--choices", 0);
    let fragments = if choices > 0 {
        choices
    } else {
        arg("--fragments", 4_000)
    };
    let tenant = "acme";
    let mut keys = KeyRing::default();
    keys.generate(tenant);
    let mut vault = HashMap::with_capacity(values);
    let mut tokens = Vec::with_capacity(values);
    for i in 0..values {
        let value = format!("person{i}@example.com");
        let token = keys.token(tenant, "EMAIL_ADDRESS", &value)?;
        let sealed = keys.seal(tenant, "EMAIL_ADDRESS", &value)?;
        tokens.push(token.clone());
        vault.insert(
            token.clone(),
            VaultItem {
                token,
                entity: "EMAIL_ADDRESS".to_owned(),
                sealed,
            },
        );
    }
    let mut stream = String::new();
    if choices > 0 {
        stream = many_choices(&tokens, choices);
    }
    for i in 0..fragments * usize::from(choices == 0) {
        let token = &tokens[i % tokens.len().max(1)];
        let text = match i % 10 {
            0 => format!("write to {token} today"),
            1 => format!("then {}", &token[..token.len() / 2]),
            2 => format!("{} and ", &token[token.len() / 2..]),
            3 => "<EMAIL_ADDRESS_".to_owned(),
            4 => "0123 <div>".to_owned(),
            5 => "if a <".to_owned(),
            6 => " b then <".to_owned(),
            7 => "EMAIL".to_owned(),
            _ => "x <y".to_owned(),
        };
        stream.push_str(&chunk(&text));
    }
    stream.push_str("data: [DONE]\n\n");
    let keys = Arc::new(keys);
    let vault = Arc::new(vault);
    let started = Instant::now();
    let mut restorer = SseRestorer::new(ApiKind::OpenAiChat, tenant.to_owned(), vault, keys);
    let mut out = 0usize;
    for piece in stream.as_bytes().chunks(512) {
        out += restorer.push(piece)?.len();
    }
    out += restorer.finish()?.len();
    let elapsed = started.elapsed();
    println!(
        "{}",
        serde_json::json!({
            "values": values,
            "choices": choices,
            "fragments": fragments,
            "bytes_in": stream.len(),
            "bytes_out": out,
            "restore_ms": elapsed.as_secs_f64() * 1e3,
            "per_fragment_us": elapsed.as_secs_f64() * 1e6 / fragments.max(1) as f64,
        })
    );
    Ok(())
}

/// One chunk opening `choices` choices, each holding the first half of a placeholder, then a
/// chunk ending each choice.
fn many_choices(tokens: &[String], choices: usize) -> String {
    let opening: Vec<serde_json::Value> = (0..choices)
        .map(|i| {
            let token = &tokens[i % tokens.len().max(1)];
            let text = format!("choice {i}: {}", &token[..token.len() / 2]);
            serde_json::json!({"index": i, "delta": {"content": text}, "finish_reason": null})
        })
        .collect();
    let data = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": opening
    });
    let mut stream = format!("data: {data}\n\n");
    for i in 0..choices {
        let data = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": i, "delta": {}, "finish_reason": "stop"}]
        });
        stream.push_str(&format!("data: {data}\n\n"));
    }
    stream
}
