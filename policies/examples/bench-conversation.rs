//! The scan cache on multi-turn agent traffic: conversations whose every call sends the
//! system prompt, the tool definitions and the whole history again, each call masked twice
//! (for the upstream and for storage, as the proxy does for an `external` upstream). Prints
//! the share of texts and bytes the cache answered, and the masking time per call with the
//! cache and without it.
//!
//! `cargo run -p atdp-policies --example bench-conversation -- [conversations] [turns]` (add
//! `--release` for timings)

use std::time::{Duration, Instant};

use atdp_detect::{DetectionConfig, Scanner};

use atdp_policies::{Action, JsonMasker, KeyRing, MaskPolicy};
use serde_json::{Value, json};

const SYSTEM: &str = "You are the support agent of Northwind Outfitters. Answer in at most \
    three sentences. Look up orders with lookup_order before saying anything about a delivery, \
    refund only through issue_refund and only for orders that arrived damaged or never \
    arrived, and hand the case to a person with escalate when the customer asks for one or \
    mentions a lawyer. Never read card numbers back. Quote the order number in every answer. \
    Do not promise dates the carrier has not confirmed, and say so when a tool fails. Office \
    hours are 8:00 to 18:00 CET on weekdays; outside them, say a person will call back.";

const FIRST: [&str; 8] = [
    "Maria", "Jonas", "Aiko", "Tomasz", "Leila", "Pieter", "Grace", "Mateo",
];
const LAST: [&str; 8] = [
    "Jansen",
    "Kowalski",
    "Tanaka",
    "Haddad",
    "de Vries",
    "Okafor",
    "Lindqvist",
    "Ferreira",
];

fn tools() -> Value {
    let tool = |name: &str, description: &str, argument: &str| {
        json!({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object",
                "properties": {argument: {"type": "string", "description": format!("The {argument} from the ticket.")}},
                "required": [argument]}}})
    };
    json!([
        tool(
            "lookup_order",
            "Look up an order: its items, carrier, tracking number and delivery status.",
            "order_number"
        ),
        tool(
            "issue_refund",
            "Refund an order in full to the card it was paid with; returns the refund id.",
            "order_number"
        ),
        tool(
            "escalate",
            "Hand the conversation to a person of the support team, with a one-line summary.",
            "summary"
        ),
    ])
}

/// The message of `turn` in conversation `c`: the customer, the agent's tool call and its
/// result, the agent's answer.
fn turn_messages(c: usize, turn: usize) -> Vec<Value> {
    let (first, last) = (FIRST[c % 8], LAST[(c / 8 + turn) % 8]);
    let order = 40_000 + c * 97 + turn;
    let user = format!(
        "Hi, this is {first} {last} ({}.{}@example.com, +44 20 7946 0{:03}). Order {order} \
         still shows as in transit after nine days and the tracking page has not changed \
         since Monday. Can you tell me where it is, or refund it if it is lost?",
        first.to_lowercase(),
        last.to_lowercase().replace(' ', ""),
        (c * 7 + turn) % 1000
    );
    let call_id = format!("call_{c}_{turn}");
    vec![
        json!({"role": "user", "content": user}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": call_id, "type": "function",
            "function": {"name": "lookup_order", "arguments": format!("{{\"order_number\": \"{order}\"}}")}}]}),
        json!({"role": "tool", "tool_call_id": call_id, "content": format!(
            "{{\"order\": \"{order}\", \"status\": \"in_transit\", \"carrier\": \"DHL\", \"tracking\": \"JD01460000{:05}\", \
             \"ship_to\": \"{first} {last}, 221B Baker Street, London NW1 6XE\", \"last_scan\": \"Leipzig hub, 3 days ago\"}}",
            c * 31 + turn)}),
        json!({"role": "assistant", "content": format!(
            "Thank you, {first}. Order {order} was last scanned at the Leipzig hub three days ago; \
             I have asked DHL to trace it and will refund it in full if it is not found by Friday.")}),
    ]
}

/// One call's masking, both passes; returns the time taken.
fn call(masker: &JsonMasker<'_>, body: &Value) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for _ in 0..2 {
        let mut copy = body.clone();
        masker.mask(&mut copy)?;
        std::hint::black_box(copy);
    }
    Ok(started.elapsed())
}

/// Masks every call of `conversations` conversations of `turns` turns; returns the mean time
/// per call, and the cache's figures.
fn run(
    cache_mib: usize,
    conversations: usize,
    turns: usize,
) -> anyhow::Result<(Duration, usize, Option<atdp_detect::CacheStats>)> {
    let config = DetectionConfig {
        cache_bytes: cache_mib << 20,
        ..DetectionConfig::default()
    };
    let scanner = Scanner::with_config(&config, None)?;
    let mut keys = KeyRing::default();
    keys.generate("acme");
    let policy = MaskPolicy::all(Action::Tokenize);
    let masker = JsonMasker {
        scanner: &scanner,
        policy: &policy,
        tenant: "acme",
        keys: &keys,
        known: None,
    };
    let (mut total, mut calls, mut bytes) = (Duration::ZERO, 0, 0);
    for c in 0..conversations {
        let mut messages = vec![json!({"role": "system", "content": SYSTEM})];
        for turn in 0..turns {
            let new = turn_messages(c, turn);
            // The call carries the history and the customer's new message; the agent's
            // call, the tool's result and its answer follow in the next calls.
            messages.push(new[0].clone());
            let body = json!({"model": "gpt-4.1-mini", "messages": messages, "tools": tools()});
            bytes += body.to_string().len();
            total += call(&masker, &body)?;
            calls += 1;
            messages.extend(new.into_iter().skip(1));
        }
    }
    Ok((total / calls as u32, bytes / calls, scanner.cache_stats()))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let conversations: usize = args.next().map_or(Ok(40), |a| a.parse())?;
    let turns: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    // Warm the lazy DFA and the allocator.
    run(16, 2, 2)?;
    let (cached, bytes, stats) = run(16, conversations, turns)?;
    let (uncached, _, _) = run(0, conversations, turns)?;
    let stats = stats.unwrap_or_default();
    let share = |part: u64, all: u64| 100.0 * part as f64 / all.max(1) as f64;
    println!(
        "{conversations} conversations of {turns} calls, {bytes} bytes per call on average, each call masked twice (upstream and storage)"
    );
    println!(
        "scan cache: {} of {} texts of 128 bytes or more answered ({:.1}%), {:.1}% of their bytes",
        stats.hits,
        stats.lookups,
        share(stats.hits, stats.lookups),
        share(stats.hit_bytes, stats.looked_up_bytes)
    );
    println!(
        "masking per call, both passes: {:.0} µs with the cache (16 MiB), {:.0} µs without",
        cached.as_secs_f64() * 1e6,
        uncached.as_secs_f64() * 1e6
    );
    Ok(())
}
