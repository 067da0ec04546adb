//! Rate limits for what is unauthenticated or expensive: a token bucket per key, in process.
//!
//! Each replica keeps its own buckets, so N replicas allow N times the rate; the limits are
//! set for one replica with that in mind (they stop guessing, not a determined distributed
//! attacker, whom the front proxy must stop). The number of keys is bounded: a flood of
//! fresh keys (random emails, say) cannot grow memory without bound.
//!
//! Why not `governor`: its keyed limiter has no way to give an attempt back (sign-in counts
//! only failures, [`Limiter::give_back`]) and no bound on its keys (it grows until someone
//! calls `retain_recent`). Replace this with it if both stop mattering: the limits that give
//! back move to counting failures in the database, and a bounded store is offered.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys held at most. Full buckets are forgotten first; when every bucket is still draining,
/// new keys are refused until some refill (the per-address limit, checked first, is what a
/// flood of fresh emails from one place meets).
const MAX_KEYS: usize = 100_000;

/// `burst` attempts at once, then one more every `period / burst`.
#[derive(Debug)]
pub struct Limiter {
    burst: f64,
    /// Tokens per second.
    rate: f64,
    max_keys: usize,
    buckets: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    by_key: HashMap<String, Bucket>,
    /// When the full table was last swept for full buckets: at most once per [`SWEEP_EVERY`],
    /// so a flood of fresh keys while every bucket drains meets a refusal, not a scan of
    /// [`MAX_KEYS`] buckets under the lock on each request.
    swept_at: Option<Instant>,
}

/// How often a full table may be swept: a sweep of 100,000 buckets took 0.9 ms here (release
/// build, nothing freed), all of it under the lock.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Limiter {
    pub fn new(burst: u32, period: Duration) -> Self {
        assert!(burst > 0 && !period.is_zero(), "a limit allows something");
        Self {
            burst: f64::from(burst),
            rate: f64::from(burst) / period.as_secs_f64(),
            max_keys: MAX_KEYS,
            buckets: Mutex::default(),
        }
    }

    /// Takes one attempt for `key`, or says how long until the next one is allowed.
    pub fn take(&self, key: &str) -> Result<(), Duration> {
        self.take_at(key, Instant::now())
    }

    /// Gives back the attempt just taken for `key`: for limits that count only failures
    /// (a sign-in that succeeded doesn't count against its account).
    pub fn give_back(&self, key: &str) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = buckets.by_key.get_mut(key) {
            b.tokens = (b.tokens + 1.0).min(self.burst);
        }
    }

    /// Forgets `key`: its next attempt starts a full bucket (an admin cleared a lock).
    pub fn forget(&self, key: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_key
            .remove(key);
    }

    fn take_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.by_key.contains_key(key) && buckets.by_key.len() >= self.max_keys {
            self.make_room(&mut buckets, now)?;
        }
        let bucket = buckets.by_key.entry(key.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let tokens = refilled(*bucket, now, self.burst, self.rate);
        // (The epsilon: whoever waits exactly the time we said must not be refused by rounding.)
        if tokens >= 1.0 - 1e-9 {
            *bucket = Bucket {
                tokens: (tokens - 1.0).max(0.0),
                at: now,
            };
            Ok(())
        } else {
            *bucket = Bucket { tokens, at: now };
            Err(Duration::from_secs_f64((1.0 - tokens) / self.rate))
        }
    }
}

impl Limiter {
    /// Forgets the buckets that are full again (a key with a full bucket is as good as new),
    /// sweeping at most once per [`SWEEP_EVERY`]; refuses a new key while none can go.
    fn make_room(&self, buckets: &mut Buckets, now: Instant) -> Result<(), Duration> {
        let wait = Duration::from_secs_f64(1.0 / self.rate).min(SWEEP_EVERY);
        if buckets
            .swept_at
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
        {
            return Err(wait);
        }
        let (burst, rate) = (self.burst, self.rate);
        buckets
            .by_key
            .retain(|_, b| refilled(*b, now, burst, rate) < burst);
        buckets.swept_at = Some(now);
        if buckets.by_key.len() >= self.max_keys {
            return Err(wait);
        }
        Ok(())
    }
}

fn refilled(b: Bucket, now: Instant, burst: f64, rate: f64) -> f64 {
    let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
    (b.tokens + elapsed * rate).min(burst)
}

/// The limits on break-glass sign-in (an argon2 hash per attempt, and a password to guess).
/// Only failed attempts count: a successful sign-in gives its attempt back.
#[derive(Debug)]
pub struct SignInLimits {
    /// Per account: 5 failures, then one try a minute.
    pub per_email: Limiter,
    /// Per client address: 30 failures, then one try every 10 seconds.
    pub per_address: Limiter,
    /// Single sign-on starts per client address (each fetches the provider's discovery and
    /// writes a session): 30, then one every 2 seconds.
    pub sso_starts: Limiter,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            per_email: Limiter::new(5, Duration::from_secs(5 * 60)),
            per_address: Limiter::new(30, Duration::from_secs(5 * 60)),
            sso_starts: Limiter::new(30, Duration::from_secs(60)),
        }
    }
}

/// The key for a client's address ("unknown" when the server has no connection info).
pub fn address_key(client: Option<std::net::IpAddr>) -> String {
    client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string())
}

/// The refusal for an attempt `what` (logged at info with the key) that must wait `wait`.
pub fn refused(what: &str, key: &str, wait: Duration) -> crate::Error {
    tracing::info!(rate_limit.key = %key, "{what} rate limited");
    crate::Error::RateLimited {
        retry_after_secs: retry_after_secs(wait),
    }
}

/// Whole seconds to wait, at least one (what `Retry-After` carries).
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval_per_key() {
        let l = Limiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        for _ in 0..3 {
            l.take_at("a", t0).unwrap();
        }
        let wait = l.take_at("a", t0).unwrap_err();
        assert_eq!(retry_after_secs(wait), 20, "one token per 20 s");
        // Another key is not affected.
        l.take_at("b", t0).unwrap();
        // Refused attempts don't push the next one further away.
        assert_eq!(
            retry_after_secs(l.take_at("a", t0 + Duration::from_secs(5)).unwrap_err()),
            15
        );
        l.take_at("a", t0 + Duration::from_secs(20)).unwrap();
        assert!(l.take_at("a", t0 + Duration::from_secs(21)).is_err());
        // Idle long enough, the bucket is full again, and no fuller than the burst.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            l.take_at("a", later).unwrap();
        }
        assert!(l.take_at("a", later).is_err());
    }

    #[test]
    fn a_given_back_attempt_is_not_counted() {
        let l = Limiter::new(2, Duration::from_secs(60));
        for _ in 0..10 {
            l.take("a").unwrap();
            l.give_back("a");
        }
        l.take("a").unwrap();
        l.take("a").unwrap();
        assert!(l.take("a").is_err());
        l.give_back("a");
        l.give_back("a");
        l.give_back("a");
        l.take("a").unwrap();
        l.take("a").unwrap();
        assert!(l.take("a").is_err(), "no fuller than the burst");
    }

    #[test]
    fn keys_are_bounded_and_full_buckets_are_forgotten_first() {
        let mut l = Limiter::new(2, Duration::from_secs(10));
        l.max_keys = 3;
        let t0 = Instant::now();
        for k in ["a", "b", "c"] {
            l.take_at(k, t0).unwrap();
        }
        // All three still draining: a fourth key waits for a refill.
        assert!(l.take_at("d", t0).is_err());
        // After a refill the full buckets are dropped and the new key gets its own.
        let t1 = t0 + Duration::from_secs(10);
        l.take_at("d", t1).unwrap();
        assert_eq!(l.buckets.lock().unwrap().by_key.len(), 1);
    }

    #[test]
    fn a_full_table_is_swept_at_most_once_a_second() {
        let mut l = Limiter::new(2, Duration::from_secs(2));
        l.max_keys = 2;
        let t0 = Instant::now();
        l.take_at("a", t0).unwrap();
        l.take_at("b", t0).unwrap();
        // Full and draining: swept once, nothing can go.
        assert!(l.take_at("c", t0).is_err());
        // "a" and "b" are full again 1 s later, but the table was swept less than a second
        // ago at 0.5 s: still refused, without a scan.
        assert!(l.take_at("c", t0 + Duration::from_millis(500)).is_err());
        assert_eq!(l.buckets.lock().unwrap().swept_at, Some(t0));
        // A second after the sweep, the next new key sweeps and gets in.
        l.take_at("c", t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(l.buckets.lock().unwrap().by_key.len(), 1);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(7)), 7);
        assert_eq!(retry_after_secs(Duration::from_millis(7001)), 8);
    }
}
