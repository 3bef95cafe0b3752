//! Login throttling: a token bucket per client address and per auditor, in bounded memory.
//!
//! Each bucket is one instant, its "theoretical arrival time" (the generic cell rate
//! algorithm): a try is allowed while that instant is at most `(burst - 1) × interval` ahead
//! of now, and each allowed try moves it `interval` further. A bucket whose instant has passed
//! is full and tells nothing a new bucket would not, so it is the first to be forgotten when
//! the table is full; when no bucket can be forgotten, new keys share one overflow bucket
//! (an attacker with many addresses slows down everyone new, and opens no gap).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Login tries a client address (or an auditor key) has before it must wait.
pub(crate) const BURST: u32 = 5;
/// One more try every this long: 5 a minute.
pub(crate) const INTERVAL: Duration = Duration::from_secs(12);
/// Most client addresses (or auditors) tracked at once.
pub(crate) const MAX_TRACKED: usize = 10_000;

/// Token buckets keyed by `K`, at most `cap` of them plus one shared overflow bucket.
#[derive(Debug)]
pub(crate) struct Buckets<K> {
    due: HashMap<K, Instant>,
    overflow: Instant,
    cap: usize,
    burst: u32,
    interval: Duration,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    pub(crate) fn new(cap: usize, burst: u32, interval: Duration, now: Instant) -> Buckets<K> {
        Buckets {
            due: HashMap::new(),
            overflow: now,
            cap,
            burst: burst.max(1),
            interval,
        }
    }

    /// Takes one try for `key` at `now`; `Err` says how long until the next try is allowed.
    pub(crate) fn take(&mut self, key: &K, now: Instant) -> Result<(), Duration> {
        if !self.due.contains_key(key) {
            if self.due.len() >= self.cap {
                self.forget_full(now);
            }
            if self.due.len() < self.cap {
                self.due.insert(key.clone(), now);
            }
        }
        let due = match self.due.get_mut(key) {
            Some(due) => due,
            None => &mut self.overflow,
        };
        let tolerance = self.interval * (self.burst - 1);
        let start = (*due).max(now);
        let ahead = start.saturating_duration_since(now);
        if ahead > tolerance {
            return Err(ahead - tolerance);
        }
        *due = start + self.interval;
        Ok(())
    }

    /// Forgets the buckets that are full again at `now`.
    pub(crate) fn forget_full(&mut self, now: Instant) {
        self.due.retain(|_, due| *due > now);
    }

    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.due.len()
    }
}

/// The address a client is throttled and reported by: IPv4 as is (IPv4-mapped IPv6 too),
/// IPv6 by its /64 prefix, the block one subscriber usually holds whole.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                for s in segments.iter_mut().skip(4) {
                    *s = 0;
                }
                IpAddr::V6(segments.into())
            }
        },
    }
}

/// Seconds for `Retry-After`: `wait` rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(cap: usize) -> (Buckets<u32>, Instant) {
        let now = Instant::now();
        (Buckets::new(cap, 5, Duration::from_secs(12), now), now)
    }

    #[test]
    fn a_burst_then_one_try_per_interval() {
        let (mut b, now) = buckets(10);
        for _ in 0..5 {
            assert_eq!(b.take(&1, now), Ok(()));
        }
        assert_eq!(b.take(&1, now), Err(Duration::from_secs(12)));
        assert_eq!(
            b.take(&1, now + Duration::from_secs(5)),
            Err(Duration::from_secs(7))
        );
        assert_eq!(b.take(&1, now + Duration::from_secs(12)), Ok(()));
        assert_eq!(
            b.take(&1, now + Duration::from_secs(12)),
            Err(Duration::from_secs(12))
        );
        // Refused tries do not push the next allowed one further away.
        for _ in 0..1000 {
            assert!(b.take(&1, now + Duration::from_secs(13)).is_err());
        }
        assert_eq!(b.take(&1, now + Duration::from_secs(24)), Ok(()));
        // Another key has its own bucket; a minute later the first is full again.
        assert_eq!(b.take(&2, now), Ok(()));
        for _ in 0..5 {
            assert_eq!(b.take(&1, now + Duration::from_secs(100)), Ok(()));
        }
    }

    #[test]
    fn memory_is_capped_and_keys_beyond_it_share_one_bucket() {
        let (mut b, now) = buckets(3);
        for key in 0..3 {
            assert_eq!(b.take(&key, now), Ok(()));
        }
        // The table is full of buckets that are not full again: new keys share the
        // overflow bucket, which a flood of new keys empties like any other.
        let mut allowed = 0;
        for key in 3..10_003 {
            if b.take(&key, now).is_ok() {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 5);
        assert_eq!(b.tracked(), 3);
        // Once the tracked buckets are full again they are forgotten for new keys.
        let later = now + Duration::from_secs(13);
        assert_eq!(b.take(&20_000, later), Ok(()));
        assert_eq!(b.tracked(), 1);
    }

    #[test]
    fn ipv6_clients_count_by_their_64_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(client_key(mapped), "10.1.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(11_001)), 12);
        assert_eq!(retry_after_secs(Duration::from_secs(12)), 12);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
