//! The storage worker: does each queued volume step on the backend, outside any transaction,
//! and records the outcome. The server runs it where `PORTAL_STORAGE` names a backend; the
//! volumes benchmark runs the same loop.

use std::sync::Arc;
use std::time::Duration;

use cp_base::ControlPlane;

use super::jobs::{JobKind, Outcome, VolumeJob, VolumeJobs};

/// The tries a step gets before the volume records it as failed.
pub const VOLUME_JOB_TRIES: i32 = 10;

/// The channel a queued step is announced on, when its transaction commits (the trigger
/// `volume_jobs_queued`, migration 0052).
pub const CHANNEL: &str = "volume_jobs";

/// How long an idle worker waits for an announcement before it looks anyway: for a step whose
/// retry came due, or one announced while its listener reconnected. Without a listener (the
/// database refused one) it looks this often, and a step waits up to this long.
pub const IDLE_LOOK: Duration = Duration::from_secs(2);

/// Without a listener, the idle worker looks this often.
pub const IDLE_POLL: Duration = Duration::from_millis(250);

/// Runs until the process ends. First it serves again every volume an instance has (a
/// restarted storage daemon serves nothing until told). Several may run, on any replicas that
/// reach the backend: a step is claimed for [`super::jobs::JOB_LEASE`].
pub async fn run(cp: ControlPlane, backend: Arc<dyn storage::StorageBackend>) {
    tracing::info!(storage.backend = %backend.describe(), "storage worker started");
    serve_again(&cp, &backend).await;
    let mut listener = listen(&cp).await;
    let mut tried_at = std::time::Instant::now();
    loop {
        match cp.claim_volume_job().await {
            Ok(Some(job)) => do_job(&cp, &backend, job).await,
            Ok(None) => idle(&cp, &mut listener, &mut tried_at).await,
            Err(e) => {
                tracing::error!(error.cause = %e, "claiming a volume job failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A connection of its own (outside the pool's budget) that hears [`CHANNEL`]; none when the
/// database refuses one, and the worker polls.
async fn listen(cp: &ControlPlane) -> Option<sqlx::postgres::PgListener> {
    let options = cp.pool().sqlx().connect_options().as_ref().clone();
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options);
    let listening = async {
        let mut l = sqlx::postgres::PgListener::connect_with(&own).await?;
        l.listen(CHANNEL).await?;
        Ok::<_, sqlx::Error>(l)
    };
    match listening.await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error.cause = %e, "the storage worker can't listen for queued steps; it polls");
            None
        }
    }
}

/// Waits until a step is announced, or [`IDLE_LOOK`] (with a listener) or [`IDLE_POLL`]
/// (without) has passed. Announcements that came while a step ran are taken at once: the
/// next look finds their steps.
async fn idle(
    cp: &ControlPlane,
    listener: &mut Option<sqlx::postgres::PgListener>,
    tried_at: &mut std::time::Instant,
) {
    let Some(l) = listener else {
        tokio::time::sleep(IDLE_POLL).await;
        // Listening again at most every [`IDLE_LOOK`]: a database that refuses listeners
        // (behind a pooler in transaction mode, say) is not asked four times a second.
        if tried_at.elapsed() >= IDLE_LOOK {
            *tried_at = std::time::Instant::now();
            *listener = listen(cp).await;
        }
        return;
    };
    match tokio::time::timeout(IDLE_LOOK, l.try_recv()).await {
        Ok(Ok(_)) | Err(_) => {}
        // The connection was lost (and announcements with it) or can't be restored: the next
        // look finds what was queued meanwhile.
        Ok(Err(e)) => {
            tracing::warn!(error.cause = %e, "the storage worker's listener failed; listening again");
            *tried_at = std::time::Instant::now();
            *listener = listen(cp).await;
        }
    }
}

async fn serve_again(cp: &ControlPlane, backend: &Arc<dyn storage::StorageBackend>) {
    let keys = match cp.served_volumes().await {
        Ok(keys) => keys,
        Err(e) => {
            tracing::error!(error.cause = %e, "listing the volumes to serve failed");
            return;
        }
    };
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

/// One claimed step: done on the backend (blocking, off the async threads), then recorded.
async fn do_job(cp: &ControlPlane, backend: &Arc<dyn storage::StorageBackend>, job: VolumeJob) {
    let b = backend.clone();
    let j = job.clone();
    let outcome = match tokio::task::spawn_blocking(move || run_on(&*b, &j)).await {
        Ok(outcome) => outcome,
        Err(e) => Outcome::Retry(format!("the step panicked: {e}")),
    };
    if let Err(e) = cp.finish_volume_job(&job, outcome).await {
        tracing::error!(volume.id = %job.volume, error.cause = %e, "recording a volume job failed");
    }
}

/// One step on the backend, and what it means for the volume.
pub fn run_on(backend: &dyn storage::StorageBackend, job: &VolumeJob) -> Outcome {
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
