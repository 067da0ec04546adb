//! What the people who run the cloud watch: the fleet's queues, slots, agents and billing
//! health in numbers. `/metrics` serves them to Prometheus; the operations panel shows them.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{AllocationId, NodeId};

/// The state of the whole system, read from the database in one go.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpsGauges {
    /// Outbox rows not yet dispatched, and how long the oldest has waited (seconds).
    pub outbox_pending: i64,
    pub outbox_oldest_s: f64,
    /// Agent tasks waiting for their agent, and the oldest wait (seconds).
    pub tasks_queued: i64,
    pub tasks_queued_oldest_s: f64,
    /// Agent tasks an agent has claimed and not finished.
    pub tasks_running: i64,
    /// Running tasks claimed more than 30 minutes ago (longer than any phase's timeout).
    pub tasks_stuck: i64,
    /// Allocations not yet released, by state.
    pub allocations: Vec<(String, i64)>,
    /// Approved slots by state: `free`, `claimed`, `cleaning`, `blocked`, `out_of_service`,
    /// `drifted`.
    pub slots: Vec<(String, i64)>,
    /// Seconds since each enrolled node's agent was last heard from, by hostname.
    pub heartbeat_age_s: Vec<(String, f64)>,
    /// How long the oldest period that is over has waited to be rated (seconds; 0: none).
    pub rating_lag_s: f64,
    /// Stripe syncs waiting, of which failing (their last try failed), and the oldest wait.
    pub stripe_pending: i64,
    pub stripe_failing: i64,
    pub stripe_oldest_s: f64,
    /// Stripe webhook events received and not yet applied.
    pub webhook_backlog: i64,
    /// Open reconciliation findings, by kind (`orphan_vm`, `missing_vm`, `ledger_gap`).
    pub reconciliation_open: Vec<(String, i64)>,
}

/// Something an operator should look at now that is no one node's: billing's and the
/// queues' health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemAttention {
    pub what: String,
    /// Where to look: a page of the portal.
    pub href: String,
}

impl OpsGauges {
    /// What in these numbers needs an operator: invoices that differ from Stripe's, and syncs
    /// to Stripe whose last try failed. (Stuck tasks are a node's, in [`Attention`]; queues
    /// that run late are alert rules' business, not a to-do.)
    pub fn needing_attention(&self) -> Vec<SystemAttention> {
        let count = |n: i64, one: &str, many: &str| match n {
            1 => format!("1 {one}"),
            n => format!("{n} {many}"),
        };
        let mismatches = self
            .reconciliation_open
            .iter()
            .find(|(k, _)| k == "invoice_mismatch")
            .map_or(0, |(_, n)| *n);
        let mut out = Vec::new();
        if mismatches > 0 {
            out.push(SystemAttention {
                what: format!(
                    "{} unlike Stripe's",
                    count(mismatches, "invoice", "invoices")
                ),
                href: "/admin/billing".into(),
            });
        }
        if self.stripe_failing > 0 {
            out.push(SystemAttention {
                what: format!(
                    "{} to Stripe failing",
                    count(self.stripe_failing, "sync", "syncs")
                ),
                href: "/admin/ops".into(),
            });
        }
        out
    }
}

/// Something an operator should look at now, on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attention {
    /// `out_of_service`, `cleanup_blocked`, `agent_silent`, `task_stuck`, or a reconciliation
    /// finding's kind (`orphan_vm`, `missing_vm`, `ledger_gap`).
    pub kind: String,
    pub node_id: NodeId,
    pub hostname: String,
    pub detail: String,
    /// Since when (the event, the release that left the slot blocked, the last heartbeat, the
    /// claim).
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
}

impl Attention {
    pub fn label(&self) -> &'static str {
        match self.kind.as_str() {
            "out_of_service" => "GPU out of service",
            "cleanup_blocked" => "Cleanup blocked",
            "agent_silent" => "Agent silent",
            "task_stuck" => "Task stuck",
            "orphan_vm" => "Host holds an unknown allocation",
            "missing_vm" => "VM missing on its host",
            "ledger_gap" => "Ledger differs from usage",
            _ => "Other",
        }
    }
}

/// A recent failure: an agent task, or a Stripe sync.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The task's kind, or `stripe.sync`.
    pub what: String,
    pub node_id: Option<NodeId>,
    pub hostname: Option<String>,
    pub allocation_id: Option<AllocationId>,
    pub detail: String,
}

/// The operations panel: the numbers, what needs attention, the latest failures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpsOverview {
    pub gauges: OpsGauges,
    /// Enrolled nodes whose agent has reported, and GPU health events in the last 24 hours.
    pub nodes_reporting: i64,
    pub gpu_events_24h: i64,
    pub attention: Vec<Attention>,
    pub failures: Vec<Failure>,
}

#[cfg(test)]
mod attention_tests {
    use super::*;

    #[test]
    fn an_invoice_unlike_stripes_and_failing_syncs_need_an_operator() {
        let mut g = OpsGauges::default();
        assert_eq!(g.needing_attention(), []);
        g.reconciliation_open = vec![("orphan_vm".into(), 2), ("invoice_mismatch".into(), 1)];
        g.stripe_failing = 3;
        let what: Vec<String> = g.needing_attention().into_iter().map(|a| a.what).collect();
        assert_eq!(
            what,
            ["1 invoice unlike Stripe's", "3 syncs to Stripe failing"]
        );
    }
}
