//! How many long-polls (`GET /instances/{id}?wait=…`) each organization holds at once, across
//! all its tokens. A held watch costs a task and a database read every half second, so an
//! organization holds at most [`PER_ORGANIZATION`]; one more is refused (429) until one ends.
//! Counting per organization, not per token, means making more tokens buys no more.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use portal_types::TenantId;

/// The most watches one organization holds at once.
pub const PER_ORGANIZATION: u32 = 16;

static HELD: LazyLock<Mutex<HashMap<TenantId, u32>>> = LazyLock::new(Default::default);

/// One watch held; dropping it lets another start.
pub struct Watch(TenantId);

/// A watch for an organization, or `None` when it holds [`PER_ORGANIZATION`] already.
pub fn hold(token: TenantId) -> Option<Watch> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let n = held.entry(token).or_default();
    if *n >= PER_ORGANIZATION {
        return None;
    }
    *n += 1;
    Some(Watch(token))
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_organization_holds_at_most_its_share_and_gets_it_back() {
        let token = TenantId(uuid::Uuid::from_u128(7));
        let held: Vec<Watch> = (0..PER_ORGANIZATION)
            .map(|_| hold(token).unwrap())
            .collect();
        assert!(hold(token).is_none(), "one more than the share");
        assert!(
            hold(TenantId(uuid::Uuid::from_u128(8))).is_some(),
            "another organization is not affected"
        );
        drop(held);
        assert!(hold(token).is_some());
        assert!(
            !HELD
                .lock()
                .unwrap()
                .contains_key(&TenantId(uuid::Uuid::from_u128(8)))
        );
    }
}
