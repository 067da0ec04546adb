//! How many long-polls (`GET /instances/{id}?wait=…`) each token holds at once. A held watch
//! costs a task and a database read every half second, so a token holds at most
//! [`PER_TOKEN`]; one more is refused (429) until one ends.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use portal_types::ApiTokenId;

/// The most watches one token holds at once.
pub const PER_TOKEN: u32 = 8;

static HELD: LazyLock<Mutex<HashMap<ApiTokenId, u32>>> = LazyLock::new(Default::default);

/// One watch held; dropping it lets another start.
pub struct Watch(ApiTokenId);

/// A watch for `token`, or `None` when it holds [`PER_TOKEN`] already.
pub fn hold(token: ApiTokenId) -> Option<Watch> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let n = held.entry(token).or_default();
    if *n >= PER_TOKEN {
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
    fn a_token_holds_at_most_its_share_and_gets_it_back() {
        let token = ApiTokenId(uuid::Uuid::from_u128(7));
        let held: Vec<Watch> = (0..PER_TOKEN).map(|_| hold(token).unwrap()).collect();
        assert!(hold(token).is_none(), "one more than the share");
        assert!(
            hold(ApiTokenId(uuid::Uuid::from_u128(8))).is_some(),
            "another token is not affected"
        );
        drop(held);
        assert!(hold(token).is_some());
        assert!(
            !HELD
                .lock()
                .unwrap()
                .contains_key(&ApiTokenId(uuid::Uuid::from_u128(8)))
        );
    }
}
