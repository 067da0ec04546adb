//! Background workers every replica runs: outbox dispatchers (every 250 ms, for the rows a
//! launch or release did not dispatch itself), the allocation reaper (every 5 s) and billing
//! (rating, month close, Stripe sync; every 10 s) and reconciliation (every 30 s;
//! `control_plane::reconcile`), and the catalog's availability count (lapsed heartbeats and
//! compaction every second, a recount every minute). All are safe to run on any number of
//! replicas at once (`FOR UPDATE SKIP LOCKED`, advisory locks, idempotent consumers).

use control_plane::prelude::*;

use std::time::Duration;

use control_plane::ControlPlane;

/// Concurrent dispatchers per replica (each outbox row is its own short transaction).
const DISPATCHERS: usize = 2;

/// How often reconciliation runs unless configured (`PORTAL_RECONCILE_EVERY_SECS`).
pub const RECONCILE_EVERY: Duration = Duration::from_secs(30);

/// Runs until aborted (which also stops the dispatchers), reconciling every
/// [`RECONCILE_EVERY`]. Errors are logged and the loops go on.
pub async fn run(cp: ControlPlane) {
    run_with(cp, RECONCILE_EVERY).await
}

/// [`run`], reconciling every `reconcile_every`.
pub async fn run_with(cp: ControlPlane, reconcile_every: Duration) {
    let mut dispatchers = tokio::task::JoinSet::new();
    for _ in 0..DISPATCHERS {
        let cp = cp.clone();
        dispatchers.spawn(async move { cp.dispatcher().await });
    }
    dispatchers.spawn(billing(cp.clone()));
    dispatchers.spawn(reconciliation(cp.clone(), reconcile_every));
    dispatchers.spawn(availability(cp.clone()));
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = cp.reap_allocations().await {
            tracing::error!(error.cause = %e, "allocation reaper failed");
        }
    }
}

/// The count the catalog reads: lapsed heartbeats and compaction every second, a recount
/// from the nodes every minute (which also says, as a metric and a warning, if the kept count
/// was ever off).
async fn availability(cp: ControlPlane) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rounds: u64 = 0;
    loop {
        tick.tick().await;
        rounds += 1;
        if let Err(e) = cp.keep_availability().await {
            tracing::error!(error.cause = %e, "keeping the availability count failed");
        }
        if rounds.is_multiple_of(60)
            && let Err(e) = cp.rebase_availability().await
        {
            tracing::error!(error.cause = %e, "recounting availability failed");
        }
    }
}

/// Reconciliation, every `every` (one replica at a time; the others skip the round).
async fn reconciliation(cp: ControlPlane, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match cp.reconcile_once().await {
            Ok(run) if run.new > 0 || run.cleared > 0 => {
                tracing::info!(
                    reconciliation.new = run.new,
                    reconciliation.cleared = run.cleared,
                    reconciliation.quarantined = run.quarantined,
                    "reconciliation run"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error.cause = %e, "reconciliation failed"),
        }
    }
}

/// Billing, every 10 s: rate what is over, close months that ended, sync Stripe.
async fn billing(cp: ControlPlane) {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = control_plane::billing::rating::rate_now(cp.pool(), 5_000).await {
            tracing::error!(error.cause = %e, "rating failed");
            continue;
        }
        let horizon = time::OffsetDateTime::now_utc() - control_plane::billing::rating::HORIZON;
        if let Err(e) = control_plane::billing::invoices::close_months(cp.pool(), horizon).await {
            tracing::error!(error.cause = %e, "closing months failed");
        }
        if cp.stripe_configured()
            && let Err(e) = cp.sync_stripe().await
        {
            tracing::error!(error.cause = %e, "Stripe sync failed");
        }
    }
}

/// The storage worker (`control_plane::volumes::worker`), where `PORTAL_STORAGE` names a
/// backend.
pub async fn storage(cp: ControlPlane, backend: std::sync::Arc<dyn storage::StorageBackend>) {
    control_plane::volumes::worker::run(cp, backend).await
}
