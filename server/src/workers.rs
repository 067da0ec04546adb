//! Background workers every replica runs: the outbox dispatcher (every 250 ms, and at once
//! when this replica commits an outbox row) and the
//! allocation reaper (every 5 s). Both are safe to run on any number of replicas at once
//! (`FOR UPDATE SKIP LOCKED`, idempotent consumers).

use std::time::Duration;

use control_plane::ControlPlane;

/// Runs until aborted. Errors are logged and the loop goes on.
pub async fn run(cp: ControlPlane) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = cp.wakeups().outbox.notified() => {}
        }
        if let Err(e) = cp.dispatch_outbox(100).await {
            tracing::error!(error.cause = %e, "outbox dispatch failed");
        }
        n += 1;
        if n.is_multiple_of(20)
            && let Err(e) = cp.reap_allocations().await
        {
            tracing::error!(error.cause = %e, "allocation reaper failed");
        }
    }
}
