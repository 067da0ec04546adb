//! Why a SKU can't be placed, kept for a moment.
//!
//! The explanation a refused launch (and the catalog's "unavailable because") carries is a
//! count over the whole fleet: every node of the SKU's GPU model, classified. That costs
//! 16 ms on 10,000 nodes when the machine is idle and grows with the fleet (hundreds of
//! milliseconds at 100,000); under load, when refusals come in bursts (a full fleet),
//! recomputing it for each one was most of the database's time (#22). So each handle keeps
//! the last answer per SKU and region set:
//!
//! - younger than [`REASONS_TTL`], it is the answer;
//! - older, but younger than [`STALE_TTLS`] TTLs, it is still the answer, and the first caller
//!   to find it so is told to count again ([`Recent::Stale`] with `refresh`), off the caller's
//!   path (`cp_inventory::placement::explain_recent` counts on a connection of its own in a
//!   task of its own). Until that count is in, every other caller gets the older answer at
//!   once. Counting inline stalled a placement group's turn for the whole count, and every
//!   launch waiting behind it: at 100,000 nodes a full fleet answered 129 launches a second at
//!   p99 1 s;
//! - older still, or never counted, the caller counts.
//!
//! An answer's TTL is [`REASONS_TTL`] or [`COST_TTLS`] times what counting it took, whichever
//! is longer: at 100,000 nodes a count took ~560 ms under load, and recounting every SKU
//! every second would have kept a core busy for explanations alone.
//!
//! So a refusal says why as of at most one TTL ago, or, while a newer count is being made,
//! the count before it; and the count runs at most once per SKU and TTL per handle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an explanation is the answer without being counted again.
pub const REASONS_TTL: Duration = Duration::from_secs(1);
/// For how many TTLs an older explanation is still answered while a newer one is counted.
pub const STALE_TTLS: u32 = 30;
/// An answer is kept for at least this many times what counting it took.
pub const COST_TTLS: u32 = 10;
/// The most explanations kept; past it, the oldest are dropped (the keys come from the
/// catalog, so this is never reached in practice).
const KEEP: usize = 1024;

/// The explanations a handle keeps; clones share them (a refresh runs in a task of its own).
#[derive(Debug, Clone)]
pub struct RefusalReasons {
    ttl: Duration,
    /// Where a refresh takes its connection from; without one, the caller counts.
    pool: Option<sqlx::PgPool>,
    recent: Arc<Mutex<HashMap<String, Kept>>>,
}

#[derive(Debug)]
struct Kept {
    at: Instant,
    /// How long this answer is fresh: the handle's TTL, or longer for a costly count.
    ttl: Duration,
    why: String,
    /// Since when a caller has been counting it again, if one is.
    refreshing_since: Option<Instant>,
}

/// What [`RefusalReasons::recent`] has for a key.
#[derive(Debug, PartialEq, Eq)]
pub enum Recent {
    /// Counted less than a TTL ago.
    Fresh(String),
    /// Counted longer ago: answer it. `refresh`: this caller is the one to count it again
    /// (one at a time per key; another may take over once a refresh has run for as long as an
    /// answer may be stale).
    Stale { why: String, refresh: bool },
    /// Nothing that may still be answered: count it now.
    Missing,
}

impl RefusalReasons {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            pool: None,
            recent: Arc::default(),
        }
    }

    /// Refreshes take their connections from `pool`.
    pub fn refreshing_from(mut self, pool: sqlx::PgPool) -> Self {
        self.pool = Some(pool);
        self
    }

    pub fn pool(&self) -> Option<&sqlx::PgPool> {
        self.pool.as_ref()
    }

    /// What is kept for `key`, and whether the caller should count it again.
    pub fn recent(&self, key: &str) -> Recent {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let Some(kept) = recent.get_mut(key) else {
            return Recent::Missing;
        };
        let age = kept.at.elapsed();
        if age < kept.ttl {
            return Recent::Fresh(kept.why.clone());
        }
        let stale_after = kept.ttl * STALE_TTLS;
        if age >= stale_after {
            return Recent::Missing;
        }
        let refresh = kept
            .refreshing_since
            .is_none_or(|since| since.elapsed() >= stale_after);
        if refresh {
            kept.refreshing_since = Some(Instant::now());
        }
        Recent::Stale {
            why: kept.why.clone(),
            refresh,
        }
    }

    /// The explanation for `key` counted now, which took `took`.
    pub fn put(&self, key: String, why: String, took: Duration) {
        if self.ttl.is_zero() {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= KEEP {
            recent.retain(|_, k| k.at.elapsed() < k.ttl * STALE_TTLS);
            if recent.len() >= KEEP {
                recent.clear();
            }
        }
        recent.insert(
            key,
            Kept {
                at: Instant::now(),
                ttl: self.ttl.max(took * COST_TTLS),
                why,
                refreshing_since: None,
            },
        );
    }

    /// A refresh of `key` failed: the next caller to find it stale counts it again.
    pub fn refresh_failed(&self, key: &str) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = recent.get_mut(key) {
            kept.refreshing_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stale(why: &str, refresh: bool) -> Recent {
        Recent::Stale {
            why: why.into(),
            refresh,
        }
    }

    #[test]
    fn an_explanation_is_fresh_within_the_ttl_then_stale_and_counted_again_by_one_caller() {
        let r = RefusalReasons::new(Duration::from_millis(50));
        assert_eq!(r.recent("h100.8x|eu"), Recent::Missing);
        r.put("h100.8x|eu".into(), "full".into(), Duration::ZERO);
        assert_eq!(r.recent("h100.8x|eu"), Recent::Fresh("full".into()));
        assert_eq!(r.recent("h100.8x|us"), Recent::Missing, "keys don't mix");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            r.recent("h100.8x|eu"),
            stale("full", true),
            "the first counts"
        );
        assert_eq!(
            r.recent("h100.8x|eu"),
            stale("full", false),
            "the others don't"
        );
        r.put("h100.8x|eu".into(), "cordoned".into(), Duration::ZERO);
        assert_eq!(r.recent("h100.8x|eu"), Recent::Fresh("cordoned".into()));
    }

    #[test]
    fn a_failed_refresh_lets_the_next_caller_count_and_a_clone_shares_what_is_kept() {
        let r = RefusalReasons::new(Duration::from_millis(20));
        let clone = r.clone();
        r.put("k".into(), "full".into(), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(clone.recent("k"), stale("full", true));
        assert_eq!(r.recent("k"), stale("full", false));
        clone.refresh_failed("k");
        assert_eq!(r.recent("k"), stale("full", true));
    }

    #[test]
    fn past_its_stale_ttls_an_explanation_is_counted_by_the_caller() {
        let r = RefusalReasons::new(Duration::from_millis(2));
        r.put("k".into(), "full".into(), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2) * STALE_TTLS + Duration::from_millis(5));
        assert_eq!(r.recent("k"), Recent::Missing);
    }

    #[test]
    fn a_costly_count_is_kept_for_ten_times_what_it_took() {
        let r = RefusalReasons::new(Duration::from_millis(10));
        r.put("k".into(), "full".into(), Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            r.recent("k"),
            Recent::Fresh("full".into()),
            "fresh for 500 ms"
        );
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(r.recent("k"), stale("full", true));
    }

    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let r = RefusalReasons::new(Duration::ZERO);
        r.put("k".into(), "why".into(), Duration::ZERO);
        assert_eq!(r.recent("k"), Recent::Missing);
    }
}
