//! What recent texts were found to hold, so that the same text scanned again costs a lookup:
//! a request is scanned once to mask it for the upstream and again to mask it for storage,
//! and a conversation sends its whole history with every turn.
//!
//! Entries are keyed by tenant and text, and a hit compares both byte for byte (a hash
//! collision is a miss, never another text's spans). Keying by tenant keeps one tenant from
//! telling, by timing, whether another sent a given text. The cache holds the texts
//! themselves in the proxy's memory, up to its budget (`[detection] cache_mib`, 0 turns it off);
//! the oldest entries go first.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CacheStats, Span};

/// Texts shorter than this are scanned each time: their scan costs about what a lookup does.
pub(crate) const MIN_BYTES: usize = 128;

/// Locks that the threads of a busy proxy spread over.
const SHARDS: usize = 16;

struct Entry {
    tenant: Box<str>,
    text: Box<str>,
    spans: Box<[Span]>,
}

impl Entry {
    /// Bytes the entry holds, roughly.
    fn bytes(&self) -> usize {
        self.tenant.len()
            + self.text.len()
            + self.spans.len() * std::mem::size_of::<Span>()
            + std::mem::size_of::<Entry>()
            + 32
    }
}

#[derive(Default)]
struct Shard {
    entries: HashMap<u64, Entry>,
    /// Keys in the order they were inserted (a key inserted again appears twice).
    order: VecDeque<u64>,
    bytes: usize,
}

/// A bounded map from (tenant, text) to the spans a scan found.
pub(crate) struct ScanCache {
    hasher: RandomState,
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    lookups: AtomicU64,
    hits: AtomicU64,
    looked_up_bytes: AtomicU64,
    hit_bytes: AtomicU64,
}

impl ScanCache {
    /// A cache of at most `budget_bytes`; `None` for a budget of 0.
    pub(crate) fn new(budget_bytes: usize) -> Option<ScanCache> {
        if budget_bytes == 0 {
            return None;
        }
        Some(ScanCache {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: (budget_bytes / SHARDS).max(1),
            lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            looked_up_bytes: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
        })
    }

    fn key(&self, tenant: &str, text: &str) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        tenant.hash(&mut hasher);
        text.hash(&mut hasher);
        hasher.finish()
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, Shard> {
        let index = (key % SHARDS as u64) as usize;
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The spans found in `text` for `tenant`, if it was scanned recently.
    pub(crate) fn get(&self, tenant: &str, text: &str) -> Option<Vec<Span>> {
        let bytes = text.len() as u64;
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.looked_up_bytes.fetch_add(bytes, Ordering::Relaxed);
        let key = self.key(tenant, text);
        let spans = {
            let shard = self.shard(key);
            let entry = shard.entries.get(&key)?;
            (*entry.tenant == *tenant && *entry.text == *text).then(|| entry.spans.to_vec())?
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.hit_bytes.fetch_add(bytes, Ordering::Relaxed);
        Some(spans)
    }

    /// Lookups and hits since the cache was made.
    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            lookups: self.lookups.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            looked_up_bytes: self.looked_up_bytes.load(Ordering::Relaxed),
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
        }
    }

    /// Remembers what a scan of `text` for `tenant` found, evicting the oldest entries past
    /// the budget. A text larger than a shard's budget is not kept.
    pub(crate) fn put(&self, tenant: &str, text: &str, spans: &[Span]) {
        let entry = Entry {
            tenant: tenant.into(),
            text: text.into(),
            spans: spans.into(),
        };
        let size = entry.bytes();
        if size > self.shard_budget {
            return;
        }
        let key = self.key(tenant, text);
        let mut shard = self.shard(key);
        if let Some(old) = shard.entries.insert(key, entry) {
            shard.bytes -= old.bytes();
        }
        shard.bytes += size;
        shard.order.push_back(key);
        while shard.bytes > self.shard_budget {
            let Some(oldest) = shard.order.pop_front() else {
                break;
            };
            // A key inserted again is also further back in the queue; it goes at its first
            // place, which is early, never wrong.
            if let Some(old) = shard.entries.remove(&oldest) {
                shard.bytes -= old.bytes();
            }
        }
        // Keys whose entries went already: keep the queue from growing without bound.
        if shard.order.len() > 4 * shard.entries.len() + 64 {
            let Shard { entries, order, .. } = &mut *shard;
            order.retain(|key| entries.contains_key(key));
        }
    }

    /// Entries and bytes held, for tests.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, b), shard| {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            (n + shard.entries.len(), b + shard.bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: usize) -> Span {
        Span {
            start,
            end: start + 4,
            entity: "EMAIL_ADDRESS",
            score: 1.0,
        }
    }

    #[test]
    fn a_hit_is_the_same_tenant_and_the_same_text() {
        let cache = ScanCache::new(1 << 20).unwrap();
        let text = "x".repeat(200);
        cache.put("acme", &text, &[span(3)]);
        assert_eq!(cache.get("acme", &text), Some(vec![span(3)]));
        assert_eq!(cache.get("globex", &text), None, "another tenant");
        assert_eq!(cache.get("acme", &format!("{text}y")), None, "another text");
        assert_eq!(
            cache.get("acm", &format!("e{text}")),
            None,
            "the same bytes, split otherwise"
        );
        // One hit of four lookups, counted in texts and in bytes.
        assert_eq!(
            cache.stats(),
            CacheStats {
                lookups: 4,
                hits: 1,
                looked_up_bytes: 200 + 200 + 201 + 201,
                hit_bytes: 200,
            }
        );
    }

    #[test]
    fn the_budget_holds_and_the_oldest_go_first() {
        let cache = ScanCache::new(SHARDS * 4096).unwrap();
        let texts: Vec<String> = (0..2000)
            .map(|i| format!("{i:06}{}", "t".repeat(300)))
            .collect();
        for text in &texts {
            cache.put("acme", text, &[span(0)]);
        }
        let (entries, bytes) = cache.held();
        assert!(bytes <= SHARDS * 4096, "{bytes}");
        assert!(entries > 0 && entries < 2000, "{entries}");
        assert_eq!(
            cache.get("acme", texts.last().unwrap()),
            Some(vec![span(0)])
        );
        assert_eq!(cache.get("acme", &texts[0]), None);
        // The same text again replaces its entry instead of counting twice.
        let before = cache.held();
        cache.put("acme", texts.last().unwrap(), &[span(1)]);
        assert_eq!(cache.held().1, before.1);
        assert_eq!(
            cache.get("acme", texts.last().unwrap()),
            Some(vec![span(1)])
        );
    }

    #[test]
    fn no_budget_is_no_cache_and_a_huge_text_is_not_kept() {
        assert!(ScanCache::new(0).is_none());
        let cache = ScanCache::new(SHARDS * 1024).unwrap();
        let huge = "h".repeat(4096);
        cache.put("acme", &huge, &[]);
        assert_eq!(cache.get("acme", &huge), None);
    }
}
