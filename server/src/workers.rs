//! Background workers every replica runs: outbox dispatchers (every 250 ms, for the rows a
//! launch or release did not dispatch itself) and the allocation reaper (every 5 s). All are safe to run on any number of replicas at once
//! (`FOR UPDATE SKIP LOCKED`, idempotent consumers).

use std::time::Duration;

use control_plane::ControlPlane;

/// Concurrent dispatchers per replica (each outbox row is its own short transaction).
const DISPATCHERS: usize = 2;

/// Runs until aborted (which also stops the dispatchers). Errors are logged and the loops
/// go on.
pub async fn run(cp: ControlPlane) {
    let mut dispatchers = tokio::task::JoinSet::new();
    for _ in 0..DISPATCHERS {
        let cp = cp.clone();
        dispatchers.spawn(async move { cp.dispatcher().await });
    }
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = cp.reap_allocations().await {
            tracing::error!(error.cause = %e, "allocation reaper failed");
        }
    }
}
