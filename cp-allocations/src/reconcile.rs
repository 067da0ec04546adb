//! Continuous reconciliation: compares what the control plane believes with what the hosts
//! report and what the ledger charged, and records every difference it cannot explain.
//!
//! | kind | what was compared | what happens |
//! | --- | --- | --- |
//! | `orphan_vm` | a host's leases and VMs (its heartbeat's `holding`) against the allocations live on it | recorded; each slot the host holds that is free here is blocked until an operator clears it |
//! | `missing_vm` | each running allocation against its host's leases and VMs | recorded |
//! | `ledger_gap` | each usage interval's metered time (start to what rating has reached) against the time its charges cover | recorded; no money moves |
//! | `invoice_mismatch` | each of the latest finalised invoices against what Stripe holds for it (total, status), read before the run's transaction | recorded; no money moves |
//!
//! A run holds an advisory lock, so with any number of replicas one run happens at a time and
//! the others skip. A finding is noted again by each run that still sees
//! it and cleared (not deleted) by the first that doesn't; a blocked slot stays blocked until an
//! operator looks (the node page's "mark clean", audited). Host reports are used only while
//! fresh, and never about an allocation whose state changed in the last half minute (a report
//! read before a release finished is not an orphan).

use serde_json::json;
use sqlx::{Connection, PgConnection};

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, NodeId, SlotId};
use cp_billing::stripe::{StripeApi, StripeInvoiceView};
use portal_types::Money;

/// Every kind of finding (the table's CHECK says the same).
pub const FINDING_KINDS: [&str; 4] = ["orphan_vm", "missing_vm", "ledger_gap", "invoice_mismatch"];

/// How old a host's report may be and still count.
pub const HOLDING_FRESH_S: f64 = 120.0;
/// How long after an allocation's last change its host's report may disagree with it.
pub const SETTLE_S: f64 = 30.0;

/// The advisory lock key of a reconciliation run (any constant no other lock uses).
const RUN_LOCK: i64 = 0x7265_636f_6e63_696c; // "reconcil"

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileRun {
    /// Whether this replica ran (false: another one was running).
    pub ran: bool,
    /// Findings seen now, of which new.
    pub seen: usize,
    pub new: usize,
    /// Findings no longer seen, now cleared.
    pub cleared: usize,
    /// Slots this run took out of placement.
    pub quarantined: usize,
}

/// One difference, as a run sees it.
#[derive(Clone, Debug)]
struct Observation {
    kind: &'static str,
    subject: String,
    /// The host it is about (none for an invoice).
    node: Option<NodeId>,
    allocation: Option<uuid::Uuid>,
    /// Slots the host holds that should be taken out of placement.
    slots: Vec<SlotId>,
    evidence: serde_json::Value,
}

#[allow(async_fn_in_trait)]
pub trait ReconcileApi {
    /// One reconciliation run (the workers call it every 30 s; tests call it directly).
    async fn reconcile_once(&self) -> Result<ReconcileRun>;
}

impl ReconcileApi for ControlPlane {
    #[tracing::instrument(skip_all)]
    async fn reconcile_once(&self) -> Result<ReconcileRun> {
        // A session lock on a connection of its own, held through Stripe's answers (read with
        // no transaction open) and the transaction that records the run; a replica that dies
        // drops the connection and with it the lock.
        let mut conn = self.pool().acquire().await?;
        let locked =
            sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "locked!""#, RUN_LOCK)
                .fetch_one(&mut *conn)
                .await?;
        if !locked {
            return Ok(ReconcileRun::default());
        }
        let run = reconcile_locked(self, &mut conn).await;
        let unlocked =
            sqlx::query_scalar!(r#"SELECT pg_advisory_unlock($1) AS "unlocked!""#, RUN_LOCK)
                .fetch_one(&mut *conn)
                .await;
        if !matches!(unlocked, Ok(true)) {
            // Never back into the pool holding the lock.
            let _ = conn.close().await;
        }
        run
    }
}

/// How many of the latest finalised invoices each run compares with Stripe.
pub const INVOICES_PER_RUN: i64 = 100;

/// One run, under the lock: Stripe's invoices first, then one transaction.
async fn reconcile_locked(cp: &ControlPlane, conn: &mut PgConnection) -> Result<ReconcileRun> {
    let views = cp.stripe_invoice_views(INVOICES_PER_RUN).await?;
    let mut tx = conn.begin().await?;
    let run_started = sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
        .fetch_one(&mut *tx)
        .await?;
    let mut seen = orphans(&mut tx).await?;
    seen.extend(missing(&mut tx).await?);
    seen.extend(ledger_gaps(&mut tx).await?);
    seen.extend(invoice_mismatches(&mut tx, &views).await?);
    let mut run = ReconcileRun {
        ran: true,
        seen: seen.len(),
        ..ReconcileRun::default()
    };
    for o in &seen {
        let row = sqlx::query!(
            r#"INSERT INTO reconciliation_findings
                   (kind, subject, node_id, allocation_id, slot_id, evidence)
               VALUES ($1, $2, $3, $4, $5, $6)
               ON CONFLICT (kind, subject) WHERE cleared_at IS NULL
               DO UPDATE SET last_seen_at = now(), evidence = EXCLUDED.evidence
               RETURNING id, (xmax = 0) AS "inserted!", quarantined"#,
            o.kind,
            o.subject,
            o.node as Option<NodeId>,
            o.allocation,
            o.slots.first().copied() as Option<SlotId>,
            o.evidence,
        )
        .fetch_one(&mut *tx)
        .await?;
        if row.inserted {
            run.new += 1;
            tracing::warn!(reconciliation.kind = o.kind, reconciliation.subject = %o.subject,
                           node.id = ?o.node, evidence = %o.evidence, "reconciliation finding");
        }
        if !o.slots.is_empty() && !row.quarantined {
            let blocked = quarantine(&mut tx, cp, o).await?;
            if blocked > 0 {
                run.quarantined += blocked;
                sqlx::query!(
                    "UPDATE reconciliation_findings SET quarantined = true WHERE id = $1",
                    row.id
                )
                .execute(&mut *tx)
                .await?;
            }
        }
    }
    // An invoice Stripe wasn't asked about this run is neither seen nor cleared.
    let compared: Vec<String> = views.iter().map(|v| v.invoice.to_string()).collect();
    run.cleared = sqlx::query!(
        "UPDATE reconciliation_findings SET cleared_at = now()
         WHERE cleared_at IS NULL AND last_seen_at < $1
           AND (kind <> 'invoice_mismatch' OR subject = ANY($2))",
        run_started,
        &compared
    )
    .execute(&mut *tx)
    .await?
    .rows_affected() as usize;
    tx.commit().await?;
    Ok(run)
}

/// Leases and VMs a host holds for an allocation that isn't live on it.
async fn orphans(conn: &mut PgConnection) -> Result<Vec<Observation>> {
    let rows = sqlx::query!(
        r#"WITH held AS (
               SELECT n.id AS node_id, l.allocation_id, l.slot_id, n.holding_at
               FROM nodes n,
                    jsonb_to_recordset(n.holding -> 'leases') AS l(slot_id uuid, allocation_id uuid)
               WHERE n.holding_at > now() - make_interval(secs => $1)
               UNION ALL
               SELECT n.id, v.alloc::uuid, NULL, n.holding_at
               FROM nodes n, jsonb_array_elements_text(n.holding -> 'vms') AS v(alloc)
               WHERE n.holding_at > now() - make_interval(secs => $1)
           )
           SELECT h.node_id AS "node!: NodeId", h.allocation_id AS "allocation!",
                  array_remove(array_agg(DISTINCT h.slot_id), NULL) AS "leased!: Vec<uuid::Uuid>",
                  array_remove(array_agg(DISTINCT s.id), NULL) AS "slots!: Vec<SlotId>",
                  bool_or(h.slot_id IS NULL) AS "vm!",
                  a.state AS "state?", a.node_id AS "on_node?: NodeId"
           FROM held h LEFT JOIN allocations a ON a.id = h.allocation_id
                -- Only this node's own slots are recorded and quarantined: a report naming
                -- any other id is evidence, not a slot to act on.
                LEFT JOIN node_resource_slots s
                       ON s.id = h.slot_id AND s.node_id = h.node_id AND s.retired_at IS NULL
           WHERE (a.id IS NULL OR a.node_id <> h.node_id
                  OR a.state NOT IN ('placed', 'provisioning', 'running', 'releasing', 'cleaning'))
             AND NOT EXISTS (SELECT 1 FROM allocation_transitions t
                             WHERE t.allocation_id = h.allocation_id
                               AND t.at > h.holding_at - make_interval(secs => $2))
           GROUP BY h.node_id, h.allocation_id, a.state, a.node_id
           ORDER BY h.node_id, h.allocation_id"#,
        HOLDING_FRESH_S,
        SETTLE_S
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let believed = match (&r.state, r.on_node) {
                (None, _) => "no such allocation".to_string(),
                (Some(s), Some(n)) if n != r.node => format!("the allocation is {s} on another node"),
                (Some(s), _) => format!("the allocation is {s}"),
            };
            let holds = match (r.vm, r.leased.len()) {
                (true, 0) => "a VM".to_string(),
                (true, n) => format!("a VM and {n} slot lease(s)"),
                (false, n) => format!("{n} slot lease(s)"),
            };
            Observation {
                kind: "orphan_vm",
                subject: format!("{}:{}", r.node, r.allocation),
                node: Some(r.node),
                allocation: Some(r.allocation),
                evidence: json!({
                    "summary": format!("the host holds {holds} for allocation {}; {believed}", r.allocation),
                    "vm": r.vm,
                    "leased_slots": r.leased,
                    "allocation_state": r.state,
                }),
                slots: r.slots,
            }
        })
        .collect())
}

/// Running allocations whose host, reporting since they settled, holds no VM (or, for bare
/// metal, no lease) for them.
async fn missing(conn: &mut PgConnection) -> Result<Vec<Observation>> {
    let rows = sqlx::query!(
        r#"SELECT a.id AS "id: AllocationId", a.node_id AS "node!: NodeId", a.shape,
                  (n.holding -> 'vms') @> to_jsonb(ARRAY[a.id::text]) AS "vm!",
                  EXISTS (SELECT 1 FROM jsonb_to_recordset(n.holding -> 'leases')
                                        AS l(slot_id uuid, allocation_id uuid)
                          WHERE l.allocation_id = a.id) AS "leased!"
           FROM allocations a JOIN nodes n ON n.id = a.node_id
           WHERE a.state = 'running'
             AND n.holding_at > now() - make_interval(secs => $1)
             AND n.holding_at > (SELECT max(t.at) FROM allocation_transitions t
                                 WHERE t.allocation_id = a.id) + make_interval(secs => $2)
           ORDER BY a.id"#,
        HOLDING_FRESH_S,
        SETTLE_S
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|r| !r.leased || (r.shape != "baremetal" && !r.vm))
        .map(|r| {
            let lacks = match (r.shape != "baremetal" && !r.vm, !r.leased) {
                (true, true) => "neither its VM nor a lease",
                (true, false) => "no VM",
                _ => "no lease",
            };
            Observation {
                kind: "missing_vm",
                subject: r.id.to_string(),
                node: Some(r.node),
                allocation: Some(r.id.0),
                slots: Vec::new(),
                evidence: json!({
                    "summary": format!("allocation {} is running, and its host holds {lacks} for it", r.id),
                    "vm": r.vm,
                    "leased": r.leased,
                }),
            }
        })
        .collect())
}

/// Usage intervals whose charges don't cover exactly the time rating says it has rated.
async fn ledger_gaps(conn: &mut PgConnection) -> Result<Vec<Observation>> {
    let rows = sqlx::query!(
        r#"SELECT i.allocation_id AS "id: AllocationId", a.node_id AS "node?: NodeId",
                  (extract(epoch FROM least(i.rated_until, coalesce(i.ended_at, i.rated_until))
                                      - i.started_at) * 1000000)::bigint AS "metered_us!",
                  coalesce(c.charged_us, 0)::bigint AS "charged_us!"
           FROM usage_intervals i JOIN allocations a ON a.id = i.allocation_id
           LEFT JOIN (SELECT allocation_id, sum(rated_us) AS charged_us
                      FROM usage_charges GROUP BY allocation_id) c
                  ON c.allocation_id = i.allocation_id
           WHERE i.rated_until IS NOT NULL
             AND (extract(epoch FROM least(i.rated_until, coalesce(i.ended_at, i.rated_until))
                                    - i.started_at) * 1000000)::bigint
                 IS DISTINCT FROM coalesce(c.charged_us, 0)::bigint
           ORDER BY i.allocation_id"#
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            let node = r
                .node
                .ok_or_else(|| Error::Corrupt(format!("rated allocation {} has no node", r.id)))?;
            Ok(Observation {
                kind: "ledger_gap",
                subject: r.id.to_string(),
                node: Some(node),
                allocation: Some(r.id.0),
                slots: Vec::new(),
                evidence: json!({
                    "summary": format!(
                        "allocation {}: {:.6} s metered, {:.6} s charged ({:+.6} s)",
                        r.id,
                        r.metered_us as f64 / 1e6,
                        r.charged_us as f64 / 1e6,
                        (r.charged_us - r.metered_us) as f64 / 1e6
                    ),
                    "metered_us": r.metered_us,
                    "charged_us": r.charged_us,
                }),
            })
        })
        .collect()
}

/// Finalised invoices whose total or status Stripe holds otherwise. A status Stripe changed in
/// the last half minute, or whose webhook is still to be applied, is not a difference yet.
async fn invoice_mismatches(
    conn: &mut PgConnection,
    views: &[StripeInvoiceView],
) -> Result<Vec<Observation>> {
    if views.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<uuid::Uuid> = views.iter().map(|v| v.invoice).collect();
    let ours = sqlx::query!(
        r#"SELECT i.id, i.number AS "number!", i.total_minor, i.status, i.currency,
                  EXISTS (SELECT 1 FROM stripe_events e
                          WHERE e.stripe_invoice_id = i.stripe_invoice_id
                            AND e.processed_at IS NULL) AS "pending!",
                  extract(epoch FROM now())::bigint AS "now!"
           FROM invoices i WHERE i.id = ANY($1) AND i.status <> 'draft'"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out = Vec::new();
    for r in ours {
        let Some(v) = views.iter().find(|v| v.invoice == r.id) else {
            continue;
        };
        let settled = !r.pending && v.changed_at.is_none_or(|t| (r.now - t) as f64 >= SETTLE_S);
        let status_differs = settled && v.status.as_deref() != Some(r.status.as_str());
        if v.total_minor == r.total_minor && !status_differs {
            continue;
        }
        let theirs = v.status.as_deref().unwrap_or("(none)");
        out.push(Observation {
            kind: "invoice_mismatch",
            subject: r.id.to_string(),
            node: None,
            allocation: None,
            slots: Vec::new(),
            evidence: json!({
                "summary": format!(
                    "invoice {}: ours {} {}, Stripe's {} {theirs} ({})",
                    r.number,
                    Money::new(r.total_minor, r.currency.as_str()),
                    r.status,
                    Money::new(v.total_minor, r.currency.as_str()),
                    v.stripe_invoice
                ),
                "stripe_invoice": v.stripe_invoice,
                "ours": {"total_minor": r.total_minor, "status": r.status},
                "stripe": {"total_minor": v.total_minor, "status": v.status},
            }),
        });
    }
    Ok(out)
}

/// Blocks the slots of `o` that are free here (clean, unclaimed), so placement can't put a
/// tenant where the host still holds something; audited as the system. How many it blocked.
async fn quarantine(tx: &mut PgConnection, cp: &ControlPlane, o: &Observation) -> Result<usize> {
    let Some(node) = o.node else {
        return Ok(0);
    };
    let detail = format!(
        "reconciliation: {}",
        o.evidence["summary"]
            .as_str()
            .unwrap_or("the host holds this slot")
    );
    let blocked = sqlx::query!(
        r#"UPDATE node_resource_slots s SET cleanup_state = 'blocked', cleanup_detail = $3
           WHERE s.id = ANY($1) AND s.node_id = $2 AND s.retired_at IS NULL
             AND s.cleanup_state = 'clean'
             AND NOT EXISTS (SELECT 1 FROM resource_claims c
                             WHERE c.node_id = s.node_id AND c.released_at IS NULL
                               AND (c.slot_id = s.id OR c.kind = 'baremetal'))
           RETURNING s.slot_index"#,
        &o.slots.iter().map(|s| s.0).collect::<Vec<_>>(),
        node as NodeId,
        detail.chars().take(1000).collect::<String>(),
    )
    .fetch_all(&mut *tx)
    .await?;
    if blocked.is_empty() {
        return Ok(0);
    }
    let region = sqlx::query_scalar!("SELECT region FROM nodes WHERE id = $1", node as NodeId)
        .fetch_one(&mut *tx)
        .await?;
    let slots: Vec<i32> = blocked.iter().map(|b| b.slot_index).collect();
    audit::record(
        &mut *tx,
        AuditEntry {
            actor: Actor::System,
            action: "node.slot.quarantine",
            resource: &cp.naming().node(&region, node)?,
            before: Some(json!({ "slots": slots, "cleanup_state": "clean" })),
            after: Some(json!({ "slots": slots, "cleanup_state": "blocked", "reason": detail })),
            request_id: None,
        },
    )
    .await?;
    Ok(slots.len())
}
