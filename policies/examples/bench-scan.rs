//! Scan and scan+mask throughput of the built-in detectors on generated agent traffic (ASCII,
//! and text with accented words whose values are now and then spelled with no-break spaces,
//! Unicode dashes, fullwidth or Arabic-Indic digits), latency for a 2 KB and a 200 KB
//! message, the cost of one support message with names (what the recording thread does to
//! each call's new text), the time to build the scanner, and the time of one Cedar decision.
//!
//! `cargo run --release -p atdp-policies --example bench-scan` (every built-in detector), or with
//! `-- --without-names` (the shaped detectors only: `PERSON`, `LOCATION` and `ORGANIZATION`
//! disabled, as `[detection] disabled` does).

use std::time::{Duration, Instant};

use atdp_detect::{Normalized, Scanner};

use atdp_policies::{AccessPolicy, Action, KeyRing, MaskPolicy, hash_api_key, mask};

const WORDS: &[&str] = &[
    "the",
    "customer",
    "asked",
    "about",
    "their",
    "invoice",
    "and",
    "the",
    "delivery",
    "date",
    "please",
    "check",
    "order",
    "status",
    "for",
    "account",
    "renewal",
    "contract",
    "was",
    "signed",
    "last",
    "week",
    "summary",
    "of",
    "ticket",
    "escalated",
    "to",
    "billing",
    "team",
];
const PII: &[&str] = &[
    "jane.doe@example.com",
    "+44 20 7946 0958",
    "4111 1111 1111 1111",
    "536-22-1234",
    "DE89 3704 0044 0532 0130 00",
    "203.0.113.42",
];

/// Words with letters outside ASCII, as prose in German, French or Polish has them.
const ACCENTED: &[&str] = &[
    "Grüße",
    "für",
    "Lieferung",
    "café",
    "reçu",
    "déjà",
    "zażółć",
    "gęślą",
    "jaźń",
    "Straße",
];
/// The values of `PII` as they are also written: grouped by no-break spaces, with Unicode
/// dashes, in fullwidth or Arabic-Indic digits, a fullwidth `＠`, a zero-width space.
const SPELLED: &[&str] = &[
    "jane.doe＠example.com",
    "jane\u{200B}.doe@example.com",
    "+44\u{A0}20\u{A0}7946\u{A0}0958",
    "４１１１ １１１１ １１１１ １１１１",
    "4111\u{202F}1111\u{202F}1111\u{202F}1111",
    "536\u{2013}22\u{2013}1234",
    "DE89\u{A0}3704\u{A0}0044\u{A0}0532\u{A0}0130\u{A0}00",
    "+٤٤ ٢٠ ٧٩٤٦ ٠٩٥٨",
];

/// About `bytes` of text: English-like sentences with a JSON tool call now and then, and
/// `pii_per_kb` personal values per KB.
fn corpus(bytes: usize, pii_per_kb: usize, seed: &mut u64) -> String {
    mixed_corpus(bytes, pii_per_kb, false, seed)
}

/// [`corpus`], or with `accented`, one accented word in every sentence and every other value
/// spelled as in `SPELLED`.
fn mixed_corpus(bytes: usize, pii_per_kb: usize, accented: bool, seed: &mut u64) -> String {
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let mut out = String::with_capacity(bytes + 256);
    let mut since_pii = 0usize;
    while out.len() < bytes {
        if next() % 20 == 0 {
            out.push_str(r#"{"name":"lookup_order","arguments":"{\"order_ref\":\"SO-10482\",\"limit\":25}"} "#);
        }
        for _ in 0..12 {
            out.push_str(WORDS[(next() % WORDS.len() as u64) as usize]);
            out.push(' ');
        }
        if accented {
            out.push_str(ACCENTED[(next() % ACCENTED.len() as u64) as usize]);
        }
        out.push_str(". ");
        since_pii += 100;
        if pii_per_kb > 0 && since_pii >= 1000 / pii_per_kb {
            let values = if accented && next() % 2 == 0 {
                SPELLED
            } else {
                PII
            };
            out.push_str(values[(next() % values.len() as u64) as usize]);
            out.push_str(". ");
            since_pii = 0;
        }
    }
    out
}

const GIVEN: &[&str] = &[
    "Jane",
    "Wojtek",
    "Marta",
    "Sören",
    "Aoife",
    "Luca",
    "Inès",
    "Pieter",
    "Kaja",
    "Tomás",
    "Brigitte",
    "Oluwaseun",
    "Henrik",
    "Giulia",
    "Ruairí",
    "Zofia",
];
const FAMILY: &[&str] = &[
    "Doe",
    "Kowalczyk",
    "van der Berg",
    "Lindqvist",
    "O'Sullivan",
    "Ferrari",
    "Dubois",
    "Mironiuk",
    "Sandoval",
    "Nørgaard",
    "Brennan",
    "Esposito",
    "Adeyemi",
    "Hartmann",
];
const COMPANIES: &[&str] = &[
    "Brightwave Analytics",
    "Müller & Söhne GmbH",
    "Rossi e figli S.r.l.",
    "Acme Ltd",
    "Nordlys AS",
    "Grupa Berdzik i syn s.c.",
    "Harbour Freight Partners",
];
const ADDRESSES: &[&str] = &[
    "Hauptstraße 12a, 10115 Berlin",
    "221B Baker Street, London NW1 6XE",
    "ul. Wąska 8, 92-170 Łódź",
    "12, rue de la Paix, 75002 Paris",
    "Keizersgracht 123, 1015 CJ Amsterdam",
];
const CITIES: &[&str] = &[
    "Galway", "Tampere", "Brno", "Porto", "Leeds", "Graz", "Sevilla",
];

/// A support message of a few hundred bytes, in one of the shapes agents see: a chat turn,
/// a CRM note, a tool result as JSON; each with a person, and most with a company, a place
/// or an address, and now and then an e-mail or a phone number.
fn support_message(next: &mut impl FnMut() -> u64) -> String {
    let mut pick = |list: &[&'static str]| list[(next() % list.len() as u64) as usize];
    let (given, family, company) = (pick(GIVEN), pick(FAMILY), pick(COMPANIES));
    let (address, city) = (pick(ADDRESSES), pick(CITIES));
    let order = 10_000 + next() % 90_000;
    match next() % 4 {
        0 => format!(
            "Hi, I'm {given} {family} from {company}. My order SO-{order} was supposed to arrive \
             on Tuesday at {address} but the tracking page still says it is in {city}. Could you \
             check what happened and let me know? You can reach me at {}.{}@example.com.",
            given.to_lowercase(),
            family.to_lowercase().replace(' ', ""),
        ),
        1 => format!(
            "Call notes: spoke with {given} ({company}) about the renewal of contract C-{order}. \
             They want the invoice sent to the office in {city} instead of {address}. \
             {given} will confirm the PO number by Friday; follow up if nothing arrives."
        ),
        2 => format!(
            r#"{{"customer":{{"name":"{given} {family}","company":"{company}","phone":"+44 20 7946 0958"}},"shipping_address":"{address}","open_orders":["SO-{order}"],"status":"delayed","notes":"customer asked for a callback before noon"}}"#
        ),
        _ => format!(
            "hey, {} here. the parcel for order {order} never came, i moved to {} last month. \
             can you resend it? thanks",
            given.to_lowercase(),
            city.to_lowercase(),
        ),
    }
}

/// A clock of this thread's CPU time (the kernel's `/proc/thread-self/schedstat`, in
/// nanoseconds, brought up to date every few milliseconds), so that other processes on a
/// shared machine do not count; the wall clock where that file cannot be read.
#[derive(Clone, Copy)]
struct Clock {
    wall: Instant,
    cpu: Option<u64>,
}

impl Clock {
    fn cpu_ns() -> Option<u64> {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        stat.split_whitespace().next()?.parse().ok()
    }

    fn start() -> Clock {
        Clock {
            cpu: Clock::cpu_ns(),
            wall: Instant::now(),
        }
    }

    fn elapsed(&self) -> Duration {
        match (self.cpu, Clock::cpu_ns()) {
            (Some(from), Some(to)) => Duration::from_nanos(to.saturating_sub(from)),
            _ => self.wall.elapsed(),
        }
    }
}

/// MB/s of `work` over `text`, at least `rounds` times and for at least half a second of CPU
/// time (the kernel updates a running thread's CPU time only every few milliseconds, longer
/// than some works take); and what `work` returned on the last round.
fn throughput(text: &str, rounds: usize, work: impl Fn(&str) -> usize) -> (f64, usize) {
    let started = Clock::start();
    let mut found = 0;
    let mut done = 0;
    while done < rounds || started.elapsed() < Duration::from_millis(500) {
        found = work(text);
        done += 1;
    }
    let mb = (text.len() * done) as f64 / 1e6;
    (mb / started.elapsed().as_secs_f64(), found)
}

/// Mean time of `work` over `text`, of CPU time: runs for at least half a second, as the
/// kernel updates a running thread's CPU time only every few milliseconds.
fn latency(text: &str, work: impl Fn(&str) -> usize) -> Duration {
    std::hint::black_box(work(text));
    let started = Clock::start();
    let mut runs = 0u32;
    while runs < 51 || started.elapsed() < Duration::from_millis(500) {
        std::hint::black_box(work(text));
        runs += 1;
    }
    started.elapsed() / runs
}

fn main() -> anyhow::Result<()> {
    let mut config = atdp_detect::DetectionConfig::default();
    if std::env::args().any(|a| a == "--without-names") {
        config.disabled = ["PERSON", "LOCATION", "ORGANIZATION"]
            .map(String::from)
            .to_vec();
    }
    let started = Instant::now();
    let scanner = Scanner::with_config(&config, None)?;
    let built = started.elapsed();
    let mut keys = KeyRing::default();
    keys.generate("acme");
    let policy = MaskPolicy::all(Action::Tokenize);
    let scan = |text: &str| scanner.scan(text).len();
    // What the proxy does to every stored text: find, then tokenize into the vault.
    let scan_mask = |text: &str| {
        let spans = scanner.scan(text);
        mask(text, &spans, &policy, "acme", &keys).map_or(0, |m| m.vault.len() + m.text.len())
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let corpora = [
        ("clean text", corpus(4 << 20, 0, &mut seed)),
        ("1 PII value per KB", corpus(4 << 20, 1, &mut seed)),
        ("2 PII values per KB", corpus(4 << 20, 2, &mut seed)),
        ("3 PII values per KB", corpus(4 << 20, 3, &mut seed)),
        ("accented, clean", mixed_corpus(4 << 20, 0, true, &mut seed)),
        (
            "accented, 2 per KB",
            mixed_corpus(4 << 20, 2, true, &mut seed),
        ),
    ];
    for (name, text) in &corpora {
        let (view_mbps, _) = throughput(text, 3, |t| Normalized::new(t).as_str().len());
        let (scan_mbps, spans) = throughput(text, 3, scan);
        let (mask_mbps, _) = throughput(text, 3, scan_mask);
        println!(
            "{name:<20} 4 MiB   scan {scan_mbps:>7.1} MB/s   scan+mask {mask_mbps:>7.1} MB/s (one core), {spans} spans; normalised view alone {view_mbps:>7.0} MB/s"
        );
    }
    for size in [2 << 10, 200 << 10] {
        let text = corpus(size, 2, &mut seed);
        println!(
            "latency, {:>3} KB message (2 PII/KB)   scan {:>8.1} µs   scan+mask {:>8.1} µs (means of 51, CPU time)",
            size >> 10,
            latency(&text, scan).as_secs_f64() * 1e6,
            latency(&text, scan_mask).as_secs_f64() * 1e6
        );
    }
    // Support messages: the cost per message, as the recording thread pays it for each
    // call's new text, and the share of one core that 1,000 such calls a second take.
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let messages: Vec<String> = (0..4000).map(|_| support_message(&mut next)).collect();
    let bytes: usize = messages.iter().map(String::len).sum();
    for (name, work) in [
        ("scan", &scan as &dyn Fn(&str) -> usize),
        ("scan+mask", &scan_mask),
    ] {
        // The mean from the thread's CPU time over all messages, three times (the kernel
        // updates it only every few milliseconds); the p99 from the wall clock of each.
        let started = Clock::start();
        let mut samples: Vec<Duration> = Vec::with_capacity(messages.len() * 3);
        for _ in 0..3 {
            samples.extend(messages.iter().map(|m| {
                let started = Instant::now();
                std::hint::black_box(work(m));
                started.elapsed()
            }));
        }
        let total = started.elapsed() / 3;
        samples.sort();
        println!(
            "support messages ({} of {} bytes on average), {name:<9}  {:>6.1} µs mean, {:>6.1} µs p99, {:>6.0} messages/s, {:.1} MB/s (one core)",
            messages.len(),
            bytes / messages.len(),
            total.as_secs_f64() * 1e6 / messages.len() as f64,
            samples[samples.len() * 99 / 100].as_secs_f64() * 1e6,
            messages.len() as f64 / total.as_secs_f64(),
            bytes as f64 / 1e6 / total.as_secs_f64(),
        );
    }
    let with_names = scanner
        .scan(&messages[0])
        .iter()
        .filter(|s| matches!(s.entity, "PERSON" | "LOCATION" | "ORGANIZATION"))
        .count();
    println!("  (the first message holds {with_names} name, place or organisation spans)");
    println!(
        "scanner build   {:>8.1} ms (patterns compiled; the name lists and tagger load at the first scan)",
        built.as_secs_f64() * 1e3
    );
    let policy = AccessPolicy::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart"),
    )?;
    let key = hash_api_key("atdp-acme-router-key");
    let context = serde_json::json!({"entities": ["EMAIL_ADDRESS"], "upstream_trust": "external", "request_bytes": 2048, "unscannable": []});
    let mut samples: Vec<Duration> = (0..2001)
        .map(|_| {
            let started = Instant::now();
            let verdict = policy.decide(
                ("ApiKey", &key),
                "invoke_model",
                ("Model", "gpt-4.1-mini"),
                context.clone(),
            );
            let elapsed = started.elapsed();
            std::hint::black_box(verdict);
            elapsed
        })
        .collect();
    samples.sort();
    println!(
        "Cedar decision (quickstart)   {:>8.1} µs median, {:.1} µs p99",
        samples[samples.len() / 2].as_secs_f64() * 1e6,
        samples[samples.len() * 99 / 100].as_secs_f64() * 1e6
    );
    Ok(())
}
