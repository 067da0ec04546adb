//! The numbers operators watch (`OpsGauges`): queues, slots, agents, rating and Stripe, each
//! one aggregate query over the database, so every replica reports the same truth. `/metrics`
//! reads them at scrape time; the operations panel shows them.

use cp_base::ControlPlane;
use cp_base::error::Result;
use cp_base::ids::{AllocationId, NodeId};
use cp_identity::auth::{Platform, PlatformStaff};
pub use portal_types::ops::{Attention, Failure, OpsGauges, OpsOverview};

/// How long a claimed task may run before it counts as stuck (longer than any phase timeout).
pub const STUCK_AFTER_S: f64 = 1800.0;

#[allow(async_fn_in_trait)]
pub trait OpsApi {
    /// The system's state in numbers: aggregate counts, ages, and node hostnames; nothing of
    /// any tenant. For `/metrics`, whose listener decides who may read it.
    async fn ops_gauges(&self) -> Result<OpsGauges>;

    /// The operations panel: the gauges, what needs attention on which node (GPUs out of
    /// service, cleanup-blocked slots, silent agents, stuck tasks), and the latest failures.
    async fn ops_overview(&self, who: &Platform<PlatformStaff>) -> Result<OpsOverview>;
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
        let reconciliation_open = sqlx::query!(
            r#"SELECT kind, count(*) AS "n!" FROM reconciliation_findings
               WHERE cleared_at IS NULL GROUP BY kind ORDER BY kind"#
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| (r.kind, r.n))
        .collect();
        Ok(OpsGauges {
            reconciliation_open,
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
        })
    }

    #[tracing::instrument(skip_all)]
    async fn ops_overview(&self, _who: &Platform<PlatformStaff>) -> Result<OpsOverview> {
        let gauges = self.ops_gauges().await?;
        let mut conn = self.pool().acquire().await?;
        let counts = sqlx::query!(
            r#"SELECT (SELECT count(*) FROM nodes WHERE last_heartbeat_at IS NOT NULL) AS "reporting!",
                      (SELECT count(*) FROM gpu_health_events
                       WHERE recorded_at > now() - interval '24 hours') AS "events!""#
        )
        .fetch_one(&mut *conn)
        .await?;
        let attention = sqlx::query!(
            r#"SELECT kind AS "kind!", node_id AS "node_id!: NodeId", hostname AS "hostname!",
                      detail AS "detail!", since AS "since!"
               FROM (
                 SELECT 'out_of_service' AS kind, n.id AS node_id, n.hostname,
                        'slot ' || s.slot_index || ' (' || s.gpu_pci_address || '): ' || e.detail AS detail,
                        s.out_of_service_at AS since
                 FROM node_resource_slots s JOIN nodes n ON n.id = s.node_id
                 JOIN gpu_health_events e ON e.id = s.out_of_service_event
                 WHERE s.retired_at IS NULL
                 UNION ALL
                 SELECT 'cleanup_blocked', n.id, n.hostname,
                        'slot ' || s.slot_index || ': ' || coalesce(s.cleanup_detail, 'no cleanup proof'),
                        coalesce((SELECT max(c.released_at) FROM resource_claims c WHERE c.slot_id = s.id),
                                 s.approved_at)
                 FROM node_resource_slots s JOIN nodes n ON n.id = s.node_id
                 WHERE s.retired_at IS NULL AND s.cleanup_state = 'blocked'
                 UNION ALL
                 SELECT 'agent_silent', n.id, n.hostname,
                        'no heartbeat since ' || to_char(n.last_heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
                        n.last_heartbeat_at
                 FROM nodes n
                 WHERE n.last_heartbeat_at < now() - interval '60 seconds' AND n.admin_state <> 'cordoned'
                 UNION ALL
                 SELECT 'task_stuck', n.id, n.hostname, t.kind || ' claimed and not finished', t.claimed_at
                 FROM agent_tasks t JOIN nodes n ON n.id = t.node_id
                 WHERE t.state = 'running' AND t.claimed_at < now() - make_interval(secs => $1)
                 UNION ALL
                 SELECT f.kind, n.id, n.hostname, f.evidence ->> 'summary', f.found_at
                 FROM reconciliation_findings f JOIN nodes n ON n.id = f.node_id
                 WHERE f.cleared_at IS NULL
               ) a
               ORDER BY since, hostname LIMIT 100"#,
            STUCK_AFTER_S
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| Attention {
            kind: r.kind,
            node_id: r.node_id,
            hostname: r.hostname,
            detail: r.detail,
            since: r.since,
        })
        .collect();
        let mut failures: Vec<Failure> = sqlx::query!(
            r#"SELECT t.finished_at AS "at!", t.kind, t.node_id AS "node_id: NodeId", n.hostname,
                      t.allocation_id AS "allocation_id: AllocationId", t.error AS "error!"
               FROM agent_tasks t JOIN nodes n ON n.id = t.node_id
               WHERE t.state = 'failed'
               ORDER BY t.finished_at DESC LIMIT 10"#
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| Failure {
            at: r.at,
            what: r.kind,
            node_id: Some(r.node_id),
            hostname: Some(r.hostname),
            allocation_id: r.allocation_id,
            detail: r.error,
        })
        .collect();
        failures.extend(
            sqlx::query!(
                r#"SELECT available_at AS at, last_error AS "error!"
                   FROM billing_outbox WHERE done_at IS NULL AND last_error IS NOT NULL
                   ORDER BY created_at DESC LIMIT 5"#
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|r| Failure {
                at: r.at,
                what: "stripe.sync".into(),
                node_id: None,
                hostname: None,
                allocation_id: None,
                detail: r.error,
            }),
        );
        // Invoices Stripe holds otherwise (reconciliation): about money, not a host.
        failures.extend(
            sqlx::query!(
                r#"SELECT found_at AS at, evidence ->> 'summary' AS "summary!"
                   FROM reconciliation_findings
                   WHERE kind = 'invoice_mismatch' AND cleared_at IS NULL
                   ORDER BY found_at DESC LIMIT 5"#
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|r| Failure {
                at: r.at,
                what: "invoice_mismatch".into(),
                node_id: None,
                hostname: None,
                allocation_id: None,
                detail: r.summary,
            }),
        );
        failures.sort_by_key(|f| std::cmp::Reverse(f.at));
        Ok(OpsOverview {
            gauges,
            nodes_reporting: counts.reporting,
            gpu_events_24h: counts.events,
            attention,
            failures,
        })
    }
}
