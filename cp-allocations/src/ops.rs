//! The numbers operators watch (`OpsGauges`): queues, slots, agents, rating and Stripe, each
//! one aggregate query over the database, so every replica reports the same truth. `/metrics`
//! reads them at scrape time; the operations panel shows them.

use crate::ControlPlane;
use crate::error::Result;
pub use portal_types::ops::OpsGauges;

/// How long a claimed task may run before it counts as stuck (longer than any phase timeout).
pub const STUCK_AFTER_S: f64 = 1800.0;

#[allow(async_fn_in_trait)]
pub trait OpsApi {
    /// The system's state in numbers: aggregate counts, ages, and node hostnames; nothing of
    /// any tenant. For `/metrics`, whose listener decides who may read it.
    async fn ops_gauges(&self) -> Result<OpsGauges>;
}

impl OpsApi for ControlPlane {
    #[tracing::instrument(skip_all)]
    async fn ops_gauges(&self) -> Result<OpsGauges> {
        let mut conn = self.pool().acquire().await?;
        let q = sqlx::query!(
            r#"SELECT
                 (SELECT count(*) FROM outbox WHERE done_at IS NULL) AS "outbox_pending!",
                 (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
                  FROM outbox WHERE done_at IS NULL) AS "outbox_oldest_s!",
                 (SELECT count(*) FROM agent_tasks WHERE state = 'queued') AS "tasks_queued!",
                 (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
                  FROM agent_tasks WHERE state = 'queued') AS "tasks_queued_oldest_s!",
                 (SELECT count(*) FROM agent_tasks WHERE state = 'running') AS "tasks_running!",
                 (SELECT count(*) FROM agent_tasks WHERE state = 'running'
                    AND claimed_at < now() - make_interval(secs => $1)) AS "tasks_stuck!",
                 (SELECT coalesce(extract(epoch FROM now() - min(least(
                      date_trunc('hour', coalesce(rated_until, started_at)) + interval '1 hour',
                      coalesce(ended_at, 'infinity')))), 0)::float8
                  FROM usage_intervals
                  WHERE NOT fully_rated
                    AND least(date_trunc('hour', coalesce(rated_until, started_at)) + interval '1 hour',
                              coalesce(ended_at, 'infinity')) < now()) AS "rating_lag_s!",
                 (SELECT count(*) FROM billing_outbox WHERE done_at IS NULL) AS "stripe_pending!",
                 (SELECT count(*) FROM billing_outbox WHERE done_at IS NULL AND last_error IS NOT NULL)
                     AS "stripe_failing!",
                 (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
                  FROM billing_outbox WHERE done_at IS NULL) AS "stripe_oldest_s!",
                 (SELECT count(*) FROM stripe_events WHERE processed_at IS NULL) AS "webhook_backlog!""#,
            STUCK_AFTER_S
        )
        .fetch_one(&mut *conn)
        .await?;
        let allocations = sqlx::query!(
            r#"SELECT state, count(*) AS "n!" FROM allocations WHERE state <> 'released'
               GROUP BY state ORDER BY state"#
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| (r.state, r.n))
        .collect();
        // One state per slot, the first that holds in this order.
        let slots = sqlx::query!(
            r#"SELECT st AS "state!", count(*) AS "n!" FROM (
                 SELECT CASE
                          WHEN s.out_of_service_event IS NOT NULL THEN 'out_of_service'
                          WHEN s.cleanup_state = 'blocked' THEN 'blocked'
                          WHEN s.cleanup_state = 'cleaning' THEN 'cleaning'
                          WHEN EXISTS (SELECT 1 FROM resource_claims c
                                       WHERE c.node_id = s.node_id AND c.released_at IS NULL
                                         AND (c.slot_id = s.id OR c.kind = 'baremetal')) THEN 'claimed'
                          WHEN s.drift IS NOT NULL THEN 'drifted'
                          ELSE 'free'
                        END AS st
                 FROM node_resource_slots s WHERE s.retired_at IS NULL) x
               GROUP BY st ORDER BY st"#
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| (r.state, r.n))
        .collect::<Vec<_>>();
        let heartbeat_age_s = sqlx::query!(
            r#"SELECT hostname, extract(epoch FROM now() - last_heartbeat_at)::float8 AS "age!"
               FROM nodes WHERE last_heartbeat_at IS NOT NULL ORDER BY hostname"#
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| (r.hostname, r.age.max(0.0)))
        .collect();
        let gpu_out_of_service = slots
            .iter()
            .find(|(s, _)| s == "out_of_service")
            .map_or(0, |(_, n)| *n);
        Ok(OpsGauges {
            outbox_pending: q.outbox_pending,
            outbox_oldest_s: q.outbox_oldest_s.max(0.0),
            tasks_queued: q.tasks_queued,
            tasks_queued_oldest_s: q.tasks_queued_oldest_s.max(0.0),
            tasks_running: q.tasks_running,
            tasks_stuck: q.tasks_stuck,
            allocations,
            slots,
            heartbeat_age_s,
            rating_lag_s: q.rating_lag_s.max(0.0),
            stripe_pending: q.stripe_pending,
            stripe_failing: q.stripe_failing,
            stripe_oldest_s: q.stripe_oldest_s.max(0.0),
            webhook_backlog: q.webhook_backlog,
            gpu_out_of_service,
        })
    }
}
