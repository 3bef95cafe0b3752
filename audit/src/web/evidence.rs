//! Refused requests as aggregated audit evidence: failed and throttled logins, and posts
//! refused for a missing or wrong security token or a foreign origin. Anyone can send those
//! without a key, so they are counted in memory, per client address, actor and kind, and
//! written as one event per count every [`WINDOW`] (and when the console stops). At most
//! [`MAX_TALLIES`] counts are kept; refusals beyond them are counted under client `other`.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use atdp_schema::{AuditEvent, now_micros};

use crate::trail::{SYSTEM_TENANT, event};

/// How often the counts are written.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Most distinct (kind, client, actor) counts kept in memory per window.
pub(crate) const MAX_TALLIES: usize = 1_000;

/// The event kind of failed and throttled logins.
pub(crate) const LOGIN: &str = "login";
/// The event kind of posts refused by the security-token or origin check.
pub(crate) const FORGED: &str = "forged_request";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    kind: &'static str,
    /// `None`: a client beyond the cap.
    client: Option<IpAddr>,
    actor: String,
}

#[derive(Debug)]
struct Tally {
    first_at: i64,
    last_at: i64,
    outcomes: BTreeMap<&'static str, u64>,
}

/// Counts of refused requests since the last [`Evidence::drain`].
#[derive(Debug)]
pub(crate) struct Evidence {
    tallies: HashMap<Key, Tally>,
    cap: usize,
}

impl Evidence {
    pub(crate) fn new(cap: usize) -> Evidence {
        Evidence {
            tallies: HashMap::new(),
            cap,
        }
    }

    /// Counts one refusal of `kind` from `client` by `actor` (`unknown` without a login),
    /// with its `outcome` (a fixed word: `wrong_key`, `throttled`, or the refused form).
    pub(crate) fn note(
        &mut self,
        kind: &'static str,
        client: IpAddr,
        actor: &str,
        outcome: &'static str,
    ) {
        let mut key = Key {
            kind,
            client: Some(client),
            actor: actor.to_owned(),
        };
        if !self.tallies.contains_key(&key) && self.tallies.len() >= self.cap {
            key.client = None;
        }
        let now = now_micros();
        let tally = self.tallies.entry(key).or_insert(Tally {
            first_at: now,
            last_at: now,
            outcomes: BTreeMap::new(),
        });
        tally.last_at = now;
        *tally.outcomes.entry(outcome).or_default() += 1;
    }

    /// The counts as audit events (one per kind, client and actor), leaving none behind.
    pub(crate) fn drain(&mut self) -> Vec<AuditEvent> {
        let mut tallies: Vec<_> = self.tallies.drain().collect();
        tallies.sort_by_key(|(_, t)| t.first_at);
        tallies
            .into_iter()
            .map(|(key, tally)| {
                let client = key
                    .client
                    .map_or_else(|| "other".to_owned(), |ip| ip.to_string());
                let mut record = event(key.kind, &key.actor, SYSTEM_TENANT);
                record.subject = Some(format!("client:{client}"));
                record.decision = Some("deny".into());
                record.detail_json = Some(
                    serde_json::json!({
                        "client": client,
                        "count": tally.outcomes.values().sum::<u64>(),
                        "outcomes": tally.outcomes,
                        "first_at": tally.first_at,
                        "last_at": tally.last_at,
                    })
                    .to_string(),
                );
                record
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn detail(e: &AuditEvent) -> serde_json::Value {
        serde_json::from_str(e.detail_json.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn one_event_per_client_and_kind_with_the_counts() {
        let mut evidence = Evidence::new(100);
        for _ in 0..3 {
            evidence.note(LOGIN, ip(1), "unknown", "wrong_key");
        }
        for _ in 0..2_000 {
            evidence.note(LOGIN, ip(1), "unknown", "throttled");
        }
        evidence.note(FORGED, ip(1), "auditor:abc", "reveal");
        evidence.note(LOGIN, ip(2), "unknown", "wrong_key");
        let events = evidence.drain();
        assert_eq!(events.len(), 3);
        let flood = events
            .iter()
            .find(|e| e.kind == LOGIN && e.subject.as_deref() == Some("client:10.0.0.1"))
            .unwrap();
        assert_eq!(flood.actor, "unknown");
        assert_eq!(flood.tenant_id, SYSTEM_TENANT);
        assert_eq!(flood.decision.as_deref(), Some("deny"));
        let d = detail(flood);
        assert_eq!(d["count"], 2_003);
        assert_eq!(d["outcomes"]["wrong_key"], 3);
        assert_eq!(d["outcomes"]["throttled"], 2_000);
        let forged = events.iter().find(|e| e.kind == FORGED).unwrap();
        assert_eq!(forged.actor, "auditor:abc");
        assert_eq!(detail(forged)["outcomes"]["reveal"], 1);
        assert!(evidence.drain().is_empty(), "a window is written once");
    }

    #[test]
    fn clients_beyond_the_cap_are_counted_together() {
        let mut evidence = Evidence::new(10);
        for last in 0..=255 {
            for _ in 0..4 {
                evidence.note(LOGIN, ip(last), "unknown", "wrong_key");
            }
        }
        let events = evidence.drain();
        assert_eq!(events.len(), 11);
        let other = events
            .iter()
            .find(|e| e.subject.as_deref() == Some("client:other"))
            .unwrap();
        assert_eq!(detail(other)["count"], (256 - 10) * 4);
        let total: u64 = events
            .iter()
            .map(|e| detail(e)["count"].as_u64().unwrap())
            .sum();
        assert_eq!(total, 256 * 4, "no refusal goes uncounted");
    }
}
