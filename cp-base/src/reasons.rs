//! Why a SKU can't be placed, kept for a moment.
//!
//! The explanation a refused launch (and the catalog's "unavailable because") carries is a
//! count over the whole fleet: every node of the SKU's GPU model, classified. That costs
//! 16 ms on 10,000 nodes when the machine is idle and grows with the fleet; under load, when
//! refusals come in bursts (a full fleet), recomputing it for each one was most of the
//! database's time (#22). So each handle keeps the last answer per SKU and region set for
//! [`REASONS_TTL`]: a refusal says why as of at most that long ago, and the count is never
//! recomputed more than once per SKU per interval.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an explanation is reused.
pub const REASONS_TTL: Duration = Duration::from_secs(1);
/// The most explanations kept; past it, the oldest are dropped (the keys come from the
/// catalog, so this is never reached in practice).
const KEEP: usize = 1024;

#[derive(Debug)]
pub struct RefusalReasons {
    ttl: Duration,
    recent: Mutex<HashMap<String, (Instant, String)>>,
}

impl RefusalReasons {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            recent: Mutex::default(),
        }
    }

    /// The explanation for `key` computed less than the TTL ago.
    pub fn get(&self, key: &str) -> Option<String> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, why)| why.clone())
    }

    pub fn put(&self, key: String, why: String) {
        if self.ttl.is_zero() {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= KEEP {
            let ttl = self.ttl;
            recent.retain(|_, (at, _)| at.elapsed() < ttl);
            if recent.len() >= KEEP {
                recent.clear();
            }
        }
        recent.insert(key, (Instant::now(), why));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explanation_is_reused_within_the_ttl_and_not_after() {
        let r = RefusalReasons::new(Duration::from_millis(50));
        assert_eq!(r.get("h100.8x|eu"), None);
        r.put("h100.8x|eu".into(), "full".into());
        assert_eq!(r.get("h100.8x|eu").as_deref(), Some("full"));
        assert_eq!(r.get("h100.8x|us"), None, "keys don't mix");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(r.get("h100.8x|eu"), None);
    }

    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let r = RefusalReasons::new(Duration::ZERO);
        r.put("k".into(), "why".into());
        assert_eq!(r.get("k"), None);
    }
}
