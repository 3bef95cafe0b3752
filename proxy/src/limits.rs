//! Rate limits: token buckets per API key and per tenant, refilled continuously; and the
//! number of calls each key has in flight.
//!
//! Requests are charged before a call is forwarded. Tokens are only known once the upstream
//! has answered, so they are charged afterwards, and a key or tenant whose token bucket is
//! empty is refused until it refills (a call may overshoot by its own size, never more).
//! A key's calls in flight are bounded so that one key cannot take every connection and
//! buffer of the proxy from the others. Large bodies are parsed and masked off the worker
//! threads, a bounded number at a time ([`HeavyWork`]), so that they cannot take the workers
//! from small calls either. Shadow copies have places of their own ([`ShadowSlots`]), a
//! bounded number per tenant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    at: Instant,
}

/// Buckets by name (`key:<hash>`, `tenant:<id>`, `key-tokens:<hash>`, `tokens:<id>`).
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    fn with_bucket<T>(&self, name: &str, per_minute: f64, f: impl FnOnce(&mut f64) -> T) -> T {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let bucket = buckets.entry(name.to_owned()).or_insert(Bucket {
            level: per_minute,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * per_minute / 60.0;
        bucket.level = (bucket.level + refill).min(per_minute);
        bucket.at = now;
        f(&mut bucket.level)
    }

    /// Takes one request from `name`'s bucket of `per_minute`; `Err(seconds)` to wait when it
    /// is empty. A limit of 0 is no limit.
    pub fn take(&self, name: &str, per_minute: u64) -> Result<(), u64> {
        if per_minute == 0 {
            return Ok(());
        }
        let rate = per_minute as f64;
        self.with_bucket(name, rate, |level| {
            if *level >= 1.0 {
                *level -= 1.0;
                Ok(())
            } else {
                Err(((1.0 - *level) * 60.0 / rate).ceil().max(1.0) as u64)
            }
        })
    }

    /// Returns a request taken by [`RateLimiter::take`] (when a later check refused the call).
    pub fn give_back(&self, name: &str, per_minute: u64) {
        if per_minute == 0 {
            return;
        }
        let rate = per_minute as f64;
        self.with_bucket(name, rate, |level| *level = (*level + 1.0).min(rate));
    }

    /// Whether `name`'s bucket has anything left; `Err(seconds)` until it has.
    pub fn check(&self, name: &str, per_minute: u64) -> Result<(), u64> {
        if per_minute == 0 {
            return Ok(());
        }
        let rate = per_minute as f64;
        self.with_bucket(name, rate, |level| {
            if *level > 0.0 {
                Ok(())
            } else {
                Err(((-*level + 1.0) * 60.0 / rate).ceil().max(1.0) as u64)
            }
        })
    }

    /// Charges `amount` to `name`'s bucket (it may go below zero).
    pub fn charge(&self, name: &str, per_minute: u64, amount: u64) {
        if per_minute == 0 {
            return;
        }
        self.with_bucket(name, per_minute as f64, |level| *level -= amount as f64);
    }
}

/// Calls in flight per key.
#[derive(Debug, Default)]
pub struct InFlight {
    counts: Arc<Mutex<HashMap<String, u32>>>,
}

/// One call in flight; the count goes down when it is dropped.
#[derive(Debug)]
pub struct InFlightSlot {
    counts: Arc<Mutex<HashMap<String, u32>>>,
    key: String,
}

impl InFlight {
    /// A slot for `key` when it has fewer than `limit` calls in flight (0: no limit).
    pub fn enter(&self, key: &str, limit: u32) -> Option<InFlightSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(key.to_owned()).or_insert(0);
        if limit > 0 && *count >= limit {
            return None;
        }
        *count += 1;
        Some(InFlightSlot {
            counts: self.counts.clone(),
            key: key.to_owned(),
        })
    }

    /// Calls in flight for `key`.
    #[cfg(test)]
    pub fn count(&self, key: &str) -> u32 {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(key).copied().unwrap_or(0)
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // Keys with nothing in flight take no memory.
                counts.remove(&self.key);
            }
        }
    }
}

/// Bodies of at least this many bytes are parsed and masked by [`HeavyWork`]: masking reads
/// 10 to 400 MB/s depending on the text (docs/benchmarks.md), so a body this large holds a
/// thread from a fraction of a millisecond to several.
pub const HEAVY_BODY_BYTES: usize = 64 << 10;

/// Work on large bodies, run on the blocking pool instead of the worker threads that serve
/// every connection, at most `at_once` at a time (waiting in arrival order), so that bodies
/// of megabytes use at most that many cores and the workers keep serving small calls.
#[derive(Debug)]
pub struct HeavyWork {
    permits: Arc<tokio::sync::Semaphore>,
}

impl HeavyWork {
    /// At most `at_once` (at least 1) pieces of work at a time.
    pub fn new(at_once: usize) -> HeavyWork {
        HeavyWork {
            permits: Arc::new(tokio::sync::Semaphore::new(at_once.max(1))),
        }
    }

    /// Half the cores (at least 1) for large bodies.
    pub fn for_this_machine() -> HeavyWork {
        HeavyWork::new(std::thread::available_parallelism().map_or(1, |n| n.get() / 2))
    }

    /// Runs `work` on the blocking pool once a permit is free; `None` when it panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .ok()
    }

    /// Runs `work` on the blocking pool when `heavy` (a large body), else here and now;
    /// `None` when it panicked on the pool.
    pub async fn run_if<T: Send + 'static>(
        &self,
        heavy: bool,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        if heavy {
            self.run(work).await
        } else {
            Some(work())
        }
    }
}

/// Most shadow copies in flight at once.
pub const SHADOW_MAX_IN_FLIGHT: usize = 32;

/// Most shadow copies of one tenant in flight at once.
pub const SHADOW_MAX_PER_TENANT: u32 = 8;

/// Places for shadow copies: at most `total` in flight, and at most `per_tenant` of them
/// for one tenant, so that one tenant's traffic cannot take the places of every other.
#[derive(Debug)]
pub struct ShadowSlots {
    total: usize,
    per_tenant: u32,
    in_flight: Arc<AtomicUsize>,
    tenants: InFlight,
}

/// One shadow copy in flight; its places come back when it is dropped.
#[derive(Debug)]
pub struct ShadowSlot {
    in_flight: Arc<AtomicUsize>,
    _tenant: InFlightSlot,
}

impl ShadowSlots {
    /// Places for `total` copies, `per_tenant` of them for one tenant.
    pub fn new(total: usize, per_tenant: u32) -> ShadowSlots {
        ShadowSlots {
            total,
            per_tenant,
            in_flight: Arc::new(AtomicUsize::new(0)),
            tenants: InFlight::default(),
        }
    }

    /// A place for a copy of `tenant`'s, when both the tenant and the whole have one free.
    pub fn enter(&self, tenant: &str) -> Option<ShadowSlot> {
        let tenant = self.tenants.enter(tenant, self.per_tenant)?;
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.total).then_some(n + 1)
            })
            .ok()?;
        Some(ShadowSlot {
            in_flight: self.in_flight.clone(),
            _tenant: tenant,
        })
    }

    /// Copies in flight, of every tenant.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

impl Default for ShadowSlots {
    /// [`SHADOW_MAX_IN_FLIGHT`] places, [`SHADOW_MAX_PER_TENANT`] of them for one tenant.
    fn default() -> ShadowSlots {
        ShadowSlots::new(SHADOW_MAX_IN_FLIGHT, SHADOW_MAX_PER_TENANT)
    }
}

impl Drop for ShadowSlot {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_run_out_then_wait() {
        let limiter = RateLimiter::default();
        for _ in 0..3 {
            assert!(limiter.take("k", 3).is_ok());
        }
        let wait = limiter.take("k", 3).unwrap_err();
        assert!((1..=20).contains(&wait), "{wait}");
        assert!(limiter.take("other", 3).is_ok(), "buckets are separate");
        assert!(limiter.take("k", 0).is_ok(), "0 is unlimited");
        limiter.give_back("k", 3);
        assert!(
            limiter.take("k", 3).is_ok(),
            "a request given back can be taken again"
        );
    }

    #[test]
    fn tokens_are_charged_after_the_fact() {
        let limiter = RateLimiter::default();
        assert!(limiter.check("t", 100).is_ok());
        limiter.charge("t", 100, 150);
        assert!(limiter.check("t", 100).is_err());
    }

    #[test]
    fn a_key_has_at_most_its_limit_in_flight_and_slots_come_back() {
        let slots = InFlight::default();
        let first = slots.enter("k", 2).unwrap();
        let second = slots.enter("k", 2).unwrap();
        assert!(slots.enter("k", 2).is_none());
        assert!(slots.enter("other", 2).is_some(), "keys are separate");
        drop(first);
        assert_eq!(slots.count("k"), 1);
        let third = slots.enter("k", 2);
        assert!(third.is_some());
        drop((second, third));
        assert_eq!(slots.count("k"), 0);
        assert!(slots.counts.lock().unwrap().is_empty());
        for _ in 0..10 {
            std::mem::forget(slots.enter("unlimited", 0).unwrap());
        }
        assert_eq!(slots.count("unlimited"), 10);
    }

    #[test]
    fn one_tenant_cannot_take_every_shadow_place() {
        let slots = ShadowSlots::new(3, 2);
        let a1 = slots.enter("a").unwrap();
        let a2 = slots.enter("a").unwrap();
        assert!(slots.enter("a").is_none(), "a has its two places");
        let b1 = slots.enter("b").unwrap();
        assert_eq!(slots.in_flight(), 3);
        assert!(slots.enter("c").is_none(), "all three places are taken");
        assert_eq!(
            slots.tenants.count("c"),
            0,
            "a refused tenant holds no place"
        );
        drop(a1);
        let c1 = slots.enter("c").unwrap();
        assert!(slots.enter("a").is_none());
        drop((a2, b1, c1));
        assert_eq!(slots.in_flight(), 0);
        assert!(slots.tenants.counts.lock().unwrap().is_empty());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn heavy_work_runs_off_the_calling_thread_a_bounded_number_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let heavy = Arc::new(HeavyWork::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let caller = std::thread::current().id();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (heavy, running, most) = (heavy.clone(), running.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                heavy
                    .run(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        running.fetch_sub(1, Ordering::SeqCst);
                        std::thread::current().id()
                    })
                    .await
            }));
        }
        for task in tasks {
            let ran_on = task.await.unwrap().unwrap();
            assert_ne!(ran_on, caller);
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        // A panic is an answer, not a lost permit.
        assert!(heavy.run(|| panic!("boom")).await.is_none());
        assert_eq!(heavy.run(|| 7).await, Some(7));
    }
}
