//! Time of one `JsonMasker::mask` call on a realistic chat request: a system prompt, three
//! tool definitions, an assistant tool call whose arguments are JSON, a tool result holding
//! JSON, and a couple of personal values; and on the same request without personal values
//! (the path most requests take).
//!
//! `cargo run --release -p atdp-policies --example bench-json`

use std::time::{Duration, Instant};

use atdp_detect::Scanner;

use atdp_policies::{Action, JsonMasker, KeyRing, MaskPolicy};
use serde_json::{Value, json};

/// A chat request of about 5 KB. With `pii`, an email in the tool call, an email and a card
/// number in the tool result, and a phone number in the last user message.
fn request(pii: bool) -> Value {
    let (email, card, phone) = if pii {
        (
            "jane.doe@example.com",
            "4111 1111 1111 1111",
            "+44 20 7946 0958",
        )
    } else {
        (
            "the customer on file",
            "the card on file",
            "the number on file",
        )
    };
    let system = "You are the support assistant of an online shop. Answer in the customer's \
        language, keep answers short, never promise refunds above the order value, and escalate \
        to a human when the customer asks for one. Use the tools to look up orders, shipments \
        and invoices; never guess an order status. When a tool fails, say so and offer to \
        retry. Quote order references exactly as the tools return them. ";
    let tool = |name: &str, description: &str| {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_ref": {"type": "string", "description": "The order reference, SO- and digits."},
                        "customer": {"type": "string", "description": "Who asks: an email address or a customer id."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                        "include_history": {"type": "boolean", "default": false}
                    },
                    "required": ["order_ref"],
                    "additionalProperties": false
                }
            }
        })
    };
    let arguments = json!({"order_ref": "SO-10482", "customer": email, "limit": 5}).to_string();
    let result = json!({
        "order": {
            "ref": "SO-10482",
            "status": "shipped",
            "placed_at": "2026-11-02T09:14:00Z",
            "total": {"amount": 149.9, "currency": "EUR"},
            "items": [
                {"sku": "KB-204", "name": "Mechanical keyboard", "qty": 1, "price": 119.9},
                {"sku": "MS-110", "name": "Wireless mouse", "qty": 1, "price": 30.0}
            ],
            "customer": {"contact": email, "payment": format!("card {card}"), "tier": "gold"},
            "shipment": {"carrier": "DHL", "tracking": "JD014600006281234567", "eta": "2026-11-05"}
        },
        "history": [
            {"at": "2026-11-02T09:14:00Z", "event": "placed"},
            {"at": "2026-11-02T11:40:00Z", "event": "paid"},
            {"at": "2026-11-03T08:02:00Z", "event": "shipped"}
        ]
    })
    .to_string();
    json!({
        "model": "gpt-4.1-mini",
        "temperature": 0.2,
        "max_tokens": 512,
        "stream": true,
        "messages": [
            {"role": "system", "content": system.repeat(3)},
            {"role": "user", "content": "Hi, where is my order SO-10482? It was supposed to arrive yesterday and I need it for a present."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": arguments}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
            {"role": "assistant", "content": "Your order SO-10482 shipped on 3 November with DHL and should arrive by 5 November."},
            {"role": "user", "content": format!("Thanks. Can the courier call me on {phone} before delivering? I am not home on Wednesday afternoons.")}
        ],
        "tools": [
            tool("lookup_order", "Looks up an order by its reference and returns its status, items and shipment."),
            tool("list_invoices", "Lists the invoices of an order, newest first."),
            tool("request_callback", "Asks the carrier to call the customer before delivery.")
        ],
        "tool_choice": "auto",
        "metadata": {"session": "c0ffee-42", "channel": "web", "locale": "en-GB"}
    })
}

/// Median and 99th percentile of one masking call over `runs` fresh copies of `document`.
fn time(
    masker: &JsonMasker<'_>,
    document: &Value,
    runs: usize,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let mut samples = Vec::with_capacity(runs);
    let mut spans = 0;
    for _ in 0..runs {
        let mut copy = document.clone();
        let started = Instant::now();
        let masked = masker.mask(&mut copy)?;
        samples.push(started.elapsed());
        spans = masked.spans.len();
        std::hint::black_box(copy);
    }
    samples.sort();
    Ok((samples[runs / 2], samples[runs * 99 / 100], spans))
}

fn main() -> anyhow::Result<()> {
    let scanner = Scanner::new(None)?;
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
    for (name, pii) in [("no personal values", false), ("4 personal values", true)] {
        let document = request(pii);
        // Warm the lazy DFA and the allocator.
        time(&masker, &document, 200)?;
        let (median, p99, spans) = time(&masker, &document, 5001)?;
        println!(
            "{name:<20} {:>5} bytes   {:>7.1} µs median   {:>7.1} µs p99   {spans} spans",
            document.to_string().len(),
            median.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
    }
    // For scale: writing the same request back to bytes, as the proxy does when it changed.
    let document = request(false);
    let mut samples: Vec<Duration> = (0..5001)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(serde_json::to_vec(&document).map(|b| b.len()).unwrap_or(0));
            started.elapsed()
        })
        .collect();
    samples.sort();
    println!(
        "serde_json::to_vec of the request   {:>7.1} µs median",
        samples[samples.len() / 2].as_secs_f64() * 1e6
    );
    Ok(())
}
