//! Placeholders rendered as surrogate values of their type for training: the lake stores
//! `<PERSON_0123456789ab>` (the `tokenize` action) or `<PERSON#0123456789abcdef>` (`hash`)
//! where the agent saw a real name, and a model trained on that text learns to write
//! placeholders that it never meets in serving. [`render`] replaces each one with a
//! realistic fake value of its entity type: a name, a city, an e-mail address, a phone
//! number, a card number that passes Luhn, an IBAN that passes mod-97.
//!
//! Invariants:
//! - A surrogate is a function of the tenant and the placeholder only: the same placeholder
//!   gets the same surrogate in every step of a tenant (a person stays one person across a
//!   trajectory), and no vault key or original is needed or read.
//! - It carries nothing of the original (the placeholder is a keyed hash of it). Where a range
//!   is reserved for examples, surrogates are drawn from it, so they are no one's value:
//!   e-mail addresses and URL hosts under `example.com`/`.org`/`.net`, phone numbers
//!   `555-0100`–`555-0199`, IPv4 addresses of the documentation networks, SSNs of areas
//!   900–999 in groups no SSN or ITIN is issued in. Card numbers start with the prefixes
//!   of published test cards.
//! - It is never placeholder-shaped, and never holds `"`, `\`, `<` or `>`, so a surrogate
//!   inside a tool call's JSON arguments keeps them valid JSON.
//! - Names, cities, organizations, IBANs and the digits after a card's prefix have no
//!   reserved range: one can be a real value by chance, as any fake value can, and then says
//!   nothing of the value it replaces.
//! - A reply that held a placeholder loses its recorded completion token ids and log-probs
//!   ([`render_step`]): they are of the stored text, and the rendered reply is tokenized again.
//! - The Python package's `atdp.surrogates` computes the same surrogates with the same
//!   algorithm from the same word lists (`python/src/atdp/surrogates.json`, built in here);
//!   `tests/it/surrogates.rs` checks that both agree.
//!
//! The algorithm, version 1: `seed = SHA-256("atdp-surrogate/1" ‖ 0 ‖ tenant ‖ 0 ‖
//! placeholder)`; a stream of bytes `SHA-256(seed ‖ k)` for `k = 0, 1, …` (4 bytes, big
//! endian); `draw(n)` = the stream's next 8 bytes as a big-endian integer, modulo `n`. Each
//! entity type draws its parts in the order written in `Draw::value`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use atdp_schema::{Message, Step};
use regex::{Captures, Regex};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The word lists, shared with the Python package.
const LISTS_JSON: &str = include_str!("../../../python/src/atdp/surrogates.json");

/// The algorithm's name and version, hashed into every seed.
const DOMAIN: &[u8] = b"atdp-surrogate/1";

/// Characters of random secrets and passwords.
const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// How the trainer renders the placeholders of masked text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Placeholders {
    /// As surrogate values of their type (the default): the text the model meets in serving.
    #[default]
    Surrogate,
    /// As stored (`<PERSON_…>`): the model learns to write placeholders.
    Keep,
}

impl Placeholders {
    /// The setting's name in `train.toml` (`surrogate`, `keep`).
    pub fn name(self) -> &'static str {
        match self {
            Placeholders::Surrogate => "surrogate",
            Placeholders::Keep => "keep",
        }
    }
}

#[derive(Debug, Deserialize)]
struct Lists {
    version: u32,
    given_names: Vec<String>,
    family_names: Vec<String>,
    cities: Vec<String>,
    streets: Vec<String>,
    street_kinds: Vec<String>,
    organization_words: Vec<String>,
    organization_suffixes: Vec<String>,
    email_domains: Vec<String>,
    url_schemes: Vec<String>,
    host_words: Vec<String>,
    code_words: Vec<String>,
    phone_area_codes: Vec<String>,
    card_prefixes: Vec<String>,
    iban_formats: BTreeMap<String, String>,
    ip_prefixes: Vec<String>,
}

static LISTS: LazyLock<std::result::Result<Lists, String>> = LazyLock::new(|| {
    let lists: Lists = serde_json::from_str(LISTS_JSON).map_err(|e| e.to_string())?;
    if lists.version != 1 {
        return Err(format!("version {} is not 1", lists.version));
    }
    Ok(lists)
});

/// A placeholder of the `tokenize` (`_` + 12 hex digits) or `hash` (`#` + 16) action.
static PLACEHOLDER: LazyLock<std::result::Result<Regex, String>> = LazyLock::new(|| {
    Regex::new(r"<([A-Z][A-Z0-9_]*)(?:_[0-9a-f]{12}|#[0-9a-f]{16})>").map_err(|e| e.to_string())
});

fn lists() -> Result<&'static Lists> {
    LISTS.as_ref().map_err(|e| Error::Surrogates(e.clone()))
}

fn placeholder_pattern() -> Result<&'static Regex> {
    PLACEHOLDER
        .as_ref()
        .map_err(|e| Error::Surrogates(e.clone()))
}

/// The deterministic stream of choices behind one surrogate.
struct Draw<'a> {
    seed: [u8; 32],
    block: [u8; 32],
    counter: u32,
    used: usize,
    lists: &'a Lists,
}

impl<'a> Draw<'a> {
    fn new(lists: &'a Lists, tenant: &str, placeholder: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN);
        hasher.update([0]);
        hasher.update(tenant.as_bytes());
        hasher.update([0]);
        hasher.update(placeholder.as_bytes());
        let seed: [u8; 32] = hasher.finalize().into();
        Draw {
            seed,
            block: [0; 32],
            counter: 0,
            used: 32,
            lists,
        }
    }

    fn next_u64(&mut self) -> u64 {
        if self.used + 8 > self.block.len() {
            let mut hasher = Sha256::new();
            hasher.update(self.seed);
            hasher.update(self.counter.to_be_bytes());
            self.block = hasher.finalize().into();
            self.counter += 1;
            self.used = 0;
        }
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&self.block[self.used..self.used + 8]);
        self.used += 8;
        u64::from_be_bytes(bytes)
    }

    /// A number in `0..n` (`n` ≥ 1).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    fn pick<'l>(&mut self, list: &'l [String]) -> &'l str {
        let i = self.below(list.len() as u64) as usize;
        list.get(i).map_or("", String::as_str)
    }

    fn digits(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b'0' + self.below(10) as u8))
            .collect()
    }

    fn alnum(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(ALNUM[self.below(ALNUM.len() as u64) as usize]))
            .collect()
    }

    /// The surrogate of an `entity`, its parts drawn in the order written here.
    fn value(&mut self, entity: &str) -> String {
        let l = self.lists;
        match entity {
            "PERSON" => {
                let given = self.pick(&l.given_names);
                let family = self.pick(&l.family_names);
                format!("{given} {family}")
            }
            "LOCATION" => self.pick(&l.cities).to_owned(),
            "ADDRESS" | "STREET_ADDRESS" => {
                let number = 1 + self.below(9999);
                let street = self.pick(&l.streets);
                let kind = self.pick(&l.street_kinds);
                let city = self.pick(&l.cities);
                format!("{number} {street} {kind}, {city}")
            }
            "ORGANIZATION" => {
                let word = self.pick(&l.organization_words);
                let suffix = self.pick(&l.organization_suffixes);
                format!("{word} {suffix}")
            }
            "EMAIL_ADDRESS" => {
                let given = self.pick(&l.given_names).to_lowercase();
                let family = self.pick(&l.family_names).to_lowercase();
                let domain = self.pick(&l.email_domains);
                format!("{given}.{family}@{domain}")
            }
            "PHONE_NUMBER" => {
                let area = self.pick(&l.phone_area_codes);
                let line = self.digits(2);
                format!("+1 ({area}) 555-01{line}")
            }
            "CREDIT_CARD" => {
                let prefix = self.pick(&l.card_prefixes).to_owned();
                let body = prefix.clone() + &self.digits(15usize.saturating_sub(prefix.len()));
                let number = format!("{body}{}", luhn_check_digit(&body));
                grouped(&number)
            }
            "IBAN_CODE" => {
                let countries: Vec<&String> = l.iban_formats.keys().collect();
                let i = self.below(countries.len() as u64) as usize;
                let Some(&country) = countries.get(i) else {
                    return String::new();
                };
                let format = l.iban_formats.get(country).map_or("", String::as_str);
                let bban: String = format
                    .chars()
                    .map(|c| match c {
                        'a' => char::from(b'A' + self.below(26) as u8),
                        _ => char::from(b'0' + self.below(10) as u8),
                    })
                    .collect();
                let check = 98 - mod97(&format!("{bban}{country}00"));
                grouped(&format!("{country}{check:02}{bban}"))
            }
            "US_SSN" => {
                let area = 900 + self.below(100);
                let group = 1 + self.below(49);
                let serial = 1 + self.below(9999);
                format!("{area}-{group:02}-{serial:04}")
            }
            "IP_ADDRESS" => {
                let network = self.pick(&l.ip_prefixes);
                let host = 1 + self.below(254);
                format!("{network}.{host}")
            }
            "URL" => {
                let scheme = self.pick(&l.url_schemes);
                let user = self.pick(&l.given_names).to_lowercase();
                let password = self.alnum(16);
                let host = self.pick(&l.host_words);
                let domain = self.pick(&l.email_domains);
                format!("{scheme}://{user}:{password}@{host}.{domain}")
            }
            "SECRET" => self.alnum(32),
            _ => {
                let word = self.pick(&l.code_words);
                let number = self.digits(4);
                format!("{word}-{number}")
            }
        }
    }
}

/// `digits` in groups of four separated by spaces, as cards and IBANs are printed.
fn grouped(digits: &str) -> String {
    let chars: Vec<char> = digits.chars().collect();
    chars
        .chunks(4)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The digit that makes `digits` followed by it pass the Luhn check.
fn luhn_check_digit(digits: &str) -> u32 {
    let sum: u32 = digits
        .chars()
        .rev()
        .filter_map(|c| c.to_digit(10))
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 0 {
                let twice = d * 2;
                if twice > 9 { twice - 9 } else { twice }
            } else {
                d
            }
        })
        .sum();
    (10 - sum % 10) % 10
}

/// ISO 7064 mod 97 of `text`, its letters read as 10 (`A`) to 35 (`Z`).
fn mod97(text: &str) -> u32 {
    text.chars()
        .filter_map(|c| c.to_digit(36))
        .fold(0, |acc, v| {
            if v >= 10 {
                (acc * 100 + v) % 97
            } else {
                (acc * 10 + v) % 97
            }
        })
}

/// The surrogate of one placeholder (`<PERSON_0123456789ab>`, `<US_SSN#…>`) for `tenant`;
/// `None` when `placeholder` is not one.
pub fn surrogate(tenant: &str, placeholder: &str) -> Result<Option<String>> {
    let pattern = placeholder_pattern()?;
    let Some(caps) = pattern.captures(placeholder) else {
        return Ok(None);
    };
    if caps.get(0).map(|m| m.as_str()) != Some(placeholder) {
        return Ok(None);
    }
    let entity = caps.get(1).map_or("", |m| m.as_str());
    Ok(Some(Draw::new(lists()?, tenant, placeholder).value(entity)))
}

/// `text` with every placeholder replaced by its surrogate for `tenant`.
pub fn render(tenant: &str, text: &str) -> Result<String> {
    Ok(render_cow(tenant, text)?.into_owned())
}

/// `text` rendered, borrowed when it holds no placeholder.
fn render_cow<'t>(tenant: &str, text: &'t str) -> Result<Cow<'t, str>> {
    let pattern = placeholder_pattern()?;
    if !pattern.is_match(text) {
        return Ok(Cow::Borrowed(text));
    }
    let lists = lists()?;
    Ok(pattern.replace_all(text, |caps: &Captures<'_>| {
        let placeholder = caps.get(0).map_or("", |m| m.as_str());
        let entity = caps.get(1).map_or("", |m| m.as_str());
        Draw::new(lists, tenant, placeholder).value(entity)
    }))
}

/// Renders `text` in place; whether it held a placeholder.
fn render_in_place(tenant: &str, text: &mut String) -> Result<bool> {
    let Cow::Owned(rendered) = render_cow(tenant, text)? else {
        return Ok(false);
    };
    *text = rendered;
    Ok(true)
}

/// Renders a message's content and tool-call arguments; whether any held a placeholder.
fn render_message(tenant: &str, message: &mut Message) -> Result<bool> {
    let mut changed = false;
    if let Some(content) = message.content.as_mut() {
        changed |= render_in_place(tenant, content)?;
    }
    for call in &mut message.tool_calls {
        changed |= render_in_place(tenant, &mut call.arguments)?;
    }
    Ok(changed)
}

/// Renders the placeholders of every text a step's training example is made of: the
/// content and tool-call arguments of its request messages and of its reply, and the
/// descriptions of its tools, each with the surrogates of the step's own tenant.
///
/// When the reply held a placeholder, its recorded completion token ids and log-probs are
/// dropped: they are of another text than the rendered reply, which is tokenized again.
/// (The proxy records none for a masked reply; this holds for rows written otherwise.)
pub fn render_step(step: &mut Step) -> Result<()> {
    let tenant = step.tenant_id.clone();
    for message in &mut step.request_messages {
        render_message(&tenant, message)?;
    }
    if let Some(reply) = step.response_message.as_mut()
        && render_message(&tenant, reply)?
    {
        step.completion_token_ids = None;
        step.completion_logprobs = None;
    }
    for tool in &mut step.tools {
        if let Some(description) = tool.description.as_mut() {
            render_in_place(&tenant, description)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
