//! The audit hash chain: each event's `hash` covers its content and the previous event's
//! hash in the same chain (one chain per writer instance), so an edited, removed or
//! reordered event breaks every link after it.
//!
//! `hash = hex(SHA-256(prev_hash ‖ "\n" ‖ content))`, where `content` is the compact JSON
//! array `[event_id, tenant_id, chain_id, chain_seq, occurred_at, kind, actor, subject,
//! decision, policy_id, reason, detail_json]` (absent values as `null`, strings as UTF-8
//! without `\u` escapes beyond JSON's required ones, as `serde_json` and Python's
//! `json.dumps(.., separators=(",", ":"), ensure_ascii=False)` both write it).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::record::AuditEvent;

/// `prev_hash` of the first event of a chain.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash an event must carry, given its content and `prev_hash`.
pub fn event_hash(event: &AuditEvent) -> String {
    let content = serde_json::json!([
        event.event_id,
        event.tenant_id,
        event.chain_id,
        event.chain_seq,
        event.occurred_at,
        event.kind,
        event.actor,
        event.subject,
        event.decision,
        event.policy_id,
        event.reason,
        event.detail_json,
    ]);
    let mut hasher = Sha256::new();
    hasher.update(event.prev_hash.as_bytes());
    hasher.update(b"\n");
    hasher.update(content.to_string().as_bytes());
    hex::encode(hasher.finalize())
}

/// The last link of a chain: the next event gets `seq + 1` and `prev_hash = hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    /// The chain's id (the writer instance id).
    pub chain_id: String,
    /// `chain_seq` of the last event; 0 before the first.
    pub seq: i64,
    /// `hash` of the last event; [`GENESIS_HASH`] before the first.
    pub hash: String,
}

impl ChainHead {
    /// The head of a chain with no events yet.
    pub fn genesis(chain_id: impl Into<String>) -> Self {
        ChainHead {
            chain_id: chain_id.into(),
            seq: 0,
            hash: GENESIS_HASH.to_owned(),
        }
    }

    /// Links `event` after this head (setting its chain fields and hash) and advances.
    pub fn link(&mut self, event: &mut AuditEvent) {
        event.chain_id.clone_from(&self.chain_id);
        event.chain_seq = self.seq + 1;
        event.prev_hash.clone_from(&self.hash);
        event.hash = event_hash(event);
        self.seq = event.chain_seq;
        self.hash.clone_from(&event.hash);
    }
}

/// The first problem found in a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainBreak {
    /// An event's stored hash does not match its content: it was edited.
    HashMismatch {
        /// The event's position.
        seq: i64,
        /// Its id.
        event_id: String,
    },
    /// An event does not point at the previous event's hash.
    BrokenLink {
        /// The event's position.
        seq: i64,
        /// Its id.
        event_id: String,
    },
    /// Positions are missing between two events (deleted events or a lost file).
    Missing {
        /// The first missing position.
        from_seq: i64,
        /// The last missing position.
        to_seq: i64,
    },
    /// The same position appears twice.
    Duplicate {
        /// The repeated position.
        seq: i64,
    },
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainBreak::HashMismatch { seq, event_id } => {
                write!(
                    f,
                    "event {seq} ({event_id}) does not match its hash: edited"
                )
            }
            ChainBreak::BrokenLink { seq, event_id } => {
                write!(
                    f,
                    "event {seq} ({event_id}) does not link to event {}",
                    seq - 1
                )
            }
            ChainBreak::Missing { from_seq, to_seq } => {
                write!(f, "events {from_seq}..={to_seq} are missing")
            }
            ChainBreak::Duplicate { seq } => write!(f, "event {seq} appears more than once"),
        }
    }
}

/// Checks one chain's events (any order; all of one `chain_id`) from its start.
/// Returns the first break, or the chain's head when it is whole.
pub fn verify_chain(events: &[AuditEvent]) -> Result<Option<ChainHead>, ChainBreak> {
    let mut sorted: Vec<&AuditEvent> = events.iter().collect();
    sorted.sort_by_key(|e| e.chain_seq);
    let mut head: Option<ChainHead> = None;
    for event in sorted {
        let (expected_seq, expected_prev) = match &head {
            None => (1, GENESIS_HASH),
            Some(h) => (h.seq + 1, h.hash.as_str()),
        };
        if event.chain_seq < expected_seq {
            return Err(ChainBreak::Duplicate {
                seq: event.chain_seq,
            });
        }
        if event.chain_seq > expected_seq {
            return Err(ChainBreak::Missing {
                from_seq: expected_seq,
                to_seq: event.chain_seq - 1,
            });
        }
        if event_hash(event) != event.hash {
            return Err(ChainBreak::HashMismatch {
                seq: event.chain_seq,
                event_id: event.event_id.clone(),
            });
        }
        if event.prev_hash != expected_prev {
            return Err(ChainBreak::BrokenLink {
                seq: event.chain_seq,
                event_id: event.event_id.clone(),
            });
        }
        head = Some(ChainHead {
            chain_id: event.chain_id.clone(),
            seq: event.chain_seq,
            hash: event.hash.clone(),
        });
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize) -> Vec<AuditEvent> {
        let mut head = ChainHead::genesis("w1");
        (0..n)
            .map(|i| {
                let mut e = AuditEvent {
                    event_id: format!("e{i}"),
                    tenant_id: "t".into(),
                    kind: "request_allowed".into(),
                    actor: "key-1".into(),
                    occurred_at: i as i64,
                    ..AuditEvent::default()
                };
                head.link(&mut e);
                e
            })
            .collect()
    }

    #[test]
    fn whole_chain_verifies() {
        let events = chain(5);
        let head = verify_chain(&events).ok().flatten();
        assert_eq!(head.map(|h| h.seq), Some(5));
    }

    #[test]
    fn known_answer() {
        // Pinned so that a change to the canonical form is noticed (docs/atdp-v1.md shows it).
        let mut e = AuditEvent {
            event_id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
            tenant_id: "acme".into(),
            occurred_at: 1_795_910_400_000_000,
            kind: "reveal".into(),
            actor: "auditor:ana".into(),
            subject: Some("<EMAIL_ADDRESS_7f3a9c>".into()),
            decision: Some("allow".into()),
            policy_id: Some("reveal-by-compliance".into()),
            reason: Some("Subject access request #4411".into()),
            ..AuditEvent::default()
        };
        ChainHead::genesis("writer-a").link(&mut e);
        assert_eq!(e.chain_seq, 1);
        assert_eq!(e.prev_hash, GENESIS_HASH);
        assert_eq!(e.hash, KNOWN_HASH);
    }

    // Computed independently with Python (hashlib + json.dumps), not with this code.
    const KNOWN_HASH: &str = "e3e53f56879c9dd0ced865dce4286a9559ddf15ca70ff7a745462d26b563841a";

    #[test]
    fn edits_deletions_and_duplicates_are_found() {
        let mut edited = chain(4);
        edited[2].actor = "someone-else".into();
        assert!(matches!(
            verify_chain(&edited),
            Err(ChainBreak::HashMismatch { seq: 3, .. })
        ));

        let mut deleted = chain(4);
        deleted.remove(1);
        assert_eq!(
            verify_chain(&deleted),
            Err(ChainBreak::Missing {
                from_seq: 2,
                to_seq: 2
            })
        );

        let mut relinked = chain(4);
        relinked[2].prev_hash = GENESIS_HASH.into();
        relinked[2].hash = event_hash(&relinked[2]);
        assert!(matches!(
            verify_chain(&relinked),
            Err(ChainBreak::BrokenLink { seq: 3, .. })
        ));

        let mut doubled = chain(3);
        doubled.push(doubled[1].clone());
        assert_eq!(
            verify_chain(&doubled),
            Err(ChainBreak::Duplicate { seq: 2 })
        );
    }
}
