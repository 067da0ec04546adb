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

/// The storage worker: does each queued volume step on the backend, outside any
/// transaction, and records the outcome. First it serves again every volume an instance has
/// (a restarted storage daemon serves nothing until told). Several may run, on any replicas
/// that reach the backend: a step is claimed for [`control_plane::volumes::jobs::JOB_LEASE`].
pub async fn storage(cp: ControlPlane, backend: std::sync::Arc<dyn storage::StorageBackend>) {
    use control_plane::volumes::jobs::VolumeJobs;
    tracing::info!(storage.backend = %backend.describe(), "storage worker started");
    match cp.served_volumes().await {
        Ok(keys) => {
            for key in keys {
                let b = backend.clone();
                let k = key.clone();
                match tokio::task::spawn_blocking(move || b.export(&k)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::error!(volume = %key, error.cause = %e, "serving a volume again failed")
                    }
                    Err(e) => tracing::error!(error.cause = %e, "serving a volume again panicked"),
                }
            }
        }
        Err(e) => tracing::error!(error.cause = %e, "listing the volumes to serve failed"),
    }
    loop {
        let job = match cp.claim_volume_job().await {
            Ok(Some(job)) => job,
            Ok(None) => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error.cause = %e, "claiming a volume job failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let b = backend.clone();
        let j = job.clone();
        let outcome = match tokio::task::spawn_blocking(move || run_volume_job(&*b, &j)).await {
            Ok(outcome) => outcome,
            Err(e) => {
                control_plane::volumes::jobs::Outcome::Retry(format!("the step panicked: {e}"))
            }
        };
        if let Err(e) = cp.finish_volume_job(&job, outcome).await {
            tracing::error!(volume.id = %job.volume, error.cause = %e, "recording a volume job failed");
        }
    }
}

/// The tries a step gets before the volume records it as failed.
const VOLUME_JOB_TRIES: i32 = 10;

/// One step on the backend, and what it means for the volume.
fn run_volume_job(
    backend: &dyn storage::StorageBackend,
    job: &control_plane::volumes::jobs::VolumeJob,
) -> control_plane::volumes::jobs::Outcome {
    use control_plane::volumes::jobs::{JobKind, Outcome};
    let done = match job.kind {
        JobKind::Create => match &job.source {
            Some((from, snapshot)) => backend.create_from(&job.key, from, snapshot, job.size),
            None => backend.create(&job.key, job.size),
        }
        .map(|()| Outcome::Done),
        JobKind::Grow => backend.grow(&job.key, job.size).map(|()| Outcome::Done),
        JobKind::Export => backend.export(&job.key).map(Outcome::Exported),
        JobKind::Withdraw => backend.withdraw(&job.key).map(|()| Outcome::Done),
        JobKind::Erase => backend.erase(&job.key).map(|erasure| Outcome::Erased {
            backend: backend.describe(),
            erasure,
        }),
        JobKind::Snapshot | JobKind::EraseSnapshot => {
            let Some((_, snapshot)) = &job.snapshot else {
                return Outcome::Failed("a snapshot step names no snapshot".into());
            };
            if job.kind == JobKind::Snapshot {
                backend.snapshot(&job.key, snapshot).map(|()| Outcome::Done)
            } else {
                backend
                    .erase_snapshot(&job.key, snapshot)
                    .map(|erasure| Outcome::Erased {
                        backend: backend.describe(),
                        erasure,
                    })
            }
        }
    };
    match done {
        Ok(outcome) => outcome,
        Err(storage::StorageError::Refused(why)) => Outcome::Failed(why),
        Err(storage::StorageError::Backend(why)) if job.attempts >= VOLUME_JOB_TRIES => {
            Outcome::Failed(format!("after {} tries: {why}", job.attempts))
        }
        Err(storage::StorageError::Backend(why)) => Outcome::Retry(why),
    }
}
