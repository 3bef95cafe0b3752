//! Rate limits: token buckets per API key and per tenant, refilled continuously.
//!
//! Requests are charged before a call is forwarded. Tokens are only known once the upstream
//! has answered, so they are charged afterwards, and a key or tenant whose token bucket is
//! empty is refused until it refills (a call may overshoot by its own size, never more).

use std::collections::HashMap;
use std::sync::Mutex;
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
}
