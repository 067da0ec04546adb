//! What the control plane counts as it works, for Prometheus: launches and placements by
//! outcome and refusal reason with their latency, how long a queued task waited for its agent,
//! tasks by kind and outcome, Stripe sync failures and webhook events by type.
//!
//! Every label takes its value from a fixed set (an outcome, a policy key, a task kind, an
//! allowlisted event type), never from an id or anything a caller typed, so a series count is
//! bounded whatever the traffic. What is a state of the database (queues, slots, allocations)
//! is not counted here: the server reads it at scrape time (`OpsApi::gauges`), so every
//! replica reports the same truth.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::error::Error;

/// Latency buckets for work that should take milliseconds (seconds, Prometheus's unit).
const FAST: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchLabels {
    /// `placed`, `replayed` (an idempotent retry of a launch already made) or `refused`.
    pub outcome: &'static str,
    /// Why a refused launch was refused (see [`refusal_reason`]); empty otherwise.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    /// `slice.vm_provision`, `slice.vm_release`, … (the agent protocol's task kinds).
    pub kind: &'static str,
    /// `succeeded` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventTypeLabel {
    pub r#type: &'static str,
}

/// The control plane's counters. Cheap to clone (the metrics are shared).
#[derive(Clone, Debug)]
pub struct Metrics {
    launches: Family<LaunchLabels, Counter>,
    launch_seconds: Family<OutcomeLabel, Histogram>,
    launch_groups: Histogram,
    /// The most launches one group transaction has placed (for tests and the benchmark).
    largest_group: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Group transactions that placed something, and the launches they placed.
    groups: std::sync::Arc<[std::sync::atomic::AtomicUsize; 2]>,
    dispatch_lag: Histogram,
    claim_checks: Counter,
    tasks: Family<TaskLabels, Counter>,
    stripe_failures: Counter,
    webhook_events: Family<EventTypeLabel, Counter>,
    gpu_events: Family<GpuEventLabels, Counter>,
    availability_corrected: Counter,
    session_reads: Family<SourceLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// `kept` (this process's cache) or `database`.
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuEventLabels {
    /// `xid`, `ecc_uncorrectable` or `thermal`.
    pub kind: &'static str,
    /// Whether the fleet's policy took the slot out of service for it.
    pub out_of_service: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            launches: Family::default(),
            launch_seconds: Family::new_with_constructor(|| Histogram::new(FAST)),
            launch_groups: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            largest_group: Default::default(),
            groups: Default::default(),
            dispatch_lag: Histogram::new(FAST),
            claim_checks: Counter::default(),
            tasks: Family::default(),
            stripe_failures: Counter::default(),
            webhook_events: Family::default(),
            gpu_events: Family::default(),
            availability_corrected: Counter::default(),
            session_reads: Family::default(),
        }
    }
}

/// The bounded label a refusal is counted under: the policy that refused it, or the kind of
/// refusal.
pub fn refusal_reason(e: &Error) -> &'static str {
    match e {
        Error::SkuUnavailable(_) => "sku_unavailable",
        Error::PolicyDenied(d) => d.key.as_str(),
        Error::Invalid { .. } | Error::ResourceName(_) => "invalid",
        Error::NotFound { .. } => "not_found",
        Error::Forbidden { .. } | Error::Unauthenticated => "forbidden",
        Error::Conflict(_) => "conflict",
        Error::VolumeInUse(_) => "volume_in_use",
        Error::RateLimited { .. } => "rate_limited",
        _ => "error",
    }
}

/// The agent protocol's task kinds (`agent_protocol::TaskSpec::kind`).
const TASK_KINDS: &[&str] = &[
    "slice.topology_discover",
    "slice.vm_provision",
    "slice.vm_release",
    "baremetal.provision",
    "baremetal.release",
    "allocation.network_update",
    "allocation.volumes_update",
];

/// Stripe's event types the billing webhook acts on; every other type is counted as `other`.
const WEBHOOK_TYPES: &[&str] = &[
    "invoice.created",
    "invoice.finalized",
    "invoice.paid",
    "invoice.payment_failed",
    "invoice.payment_succeeded",
    "invoice.voided",
    "invoice.marked_uncollectible",
    "invoice.updated",
];

impl Metrics {
    /// Registers every metric under `registry` (names follow Prometheus's conventions: the
    /// unit in the name, `_total` on counters).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpuaas_launches",
            "Launch requests decided, by outcome and refusal reason",
            self.launches.clone(),
        );
        registry.register_with_unit(
            "gpuaas_launch_duration",
            "Time to decide a launch: policy, quota, budget and placement, to the commit",
            Unit::Seconds,
            self.launch_seconds.clone(),
        );
        registry.register(
            "gpuaas_launch_group_size",
            "Launches placed together by one transaction of group placement",
            self.launch_groups.clone(),
        );
        registry.register_with_unit(
            "gpuaas_dispatch_lag",
            "From a task being queued to its agent claiming it",
            Unit::Seconds,
            self.dispatch_lag.clone(),
        );
        registry.register(
            "gpuaas_agent_claim_checks",
            "Times an agent's claim looked in the database for a queued task (once when it \
             starts, then only when nudged)",
            self.claim_checks.clone(),
        );
        registry.register(
            "gpuaas_agent_tasks",
            "Agent tasks finished, by kind and outcome",
            self.tasks.clone(),
        );
        registry.register(
            "gpuaas_stripe_sync_failures",
            "Calls to Stripe from the billing outbox that failed (retried later)",
            self.stripe_failures.clone(),
        );
        registry.register(
            "gpuaas_stripe_webhook_events",
            "Stripe webhook events accepted, by type (other types as `other`)",
            self.webhook_events.clone(),
        );
        registry.register(
            "gpuaas_gpu_health_events",
            "GPU health events reported by agents, by kind and whether the slot left service",
            self.gpu_events.clone(),
        );
        registry.register(
            "gpuaas_availability_corrections",
            "Launches by which the catalog's kept availability count differed from a recount of \
             the nodes (corrected when found; anything above 0 is a bug to report)",
            self.availability_corrected.clone(),
        );
        registry.register(
            "gpuaas_session_reads",
            "Signed-in sessions read, by where from: `kept` by this process (dropped as the \
             database announces a change) or the `database`",
            self.session_reads.clone(),
        );
    }

    /// A session was read, from this process's cache (`kept`) or the database.
    pub fn session_read(&self, kept: bool) {
        let source = if kept { "kept" } else { "database" };
        self.session_reads
            .get_or_create(&SourceLabel { source })
            .inc();
    }

    /// Sessions read from this process's cache since start.
    pub fn session_reads_kept(&self) -> u64 {
        self.session_reads
            .get_or_create(&SourceLabel { source: "kept" })
            .get()
    }

    /// Launches by which recounts found the kept availability count off, since start.
    pub fn availability_corrections(&self) -> u64 {
        self.availability_corrected.get()
    }

    /// A recount of availability found the kept count off by `off` launches (and fixed it).
    pub fn availability_recounted(&self, off: i64) {
        self.availability_corrected.inc_by(off.max(0) as u64);
    }

    /// Counts one launch's outcome: `Ok(true)` placed, `Ok(false)` an idempotent replay.
    pub fn launch_decided(&self, outcome: &Result<bool, &Error>, took: Duration) {
        let labels = match outcome {
            Ok(true) => LaunchLabels {
                outcome: "placed",
                reason: "",
            },
            Ok(false) => LaunchLabels {
                outcome: "replayed",
                reason: "",
            },
            Err(e) => LaunchLabels {
                outcome: "refused",
                reason: refusal_reason(e),
            },
        };
        self.launch_seconds
            .get_or_create(&OutcomeLabel {
                outcome: labels.outcome,
            })
            .observe(took.as_secs_f64());
        self.launches.get_or_create(&labels).inc();
    }

    /// One group transaction placed `placed` launches together.
    pub fn launch_group(&self, placed: usize) {
        self.launch_groups.observe(placed as f64);
        self.largest_group
            .fetch_max(placed, std::sync::atomic::Ordering::Relaxed);
        self.groups[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.groups[1].fetch_add(placed, std::sync::atomic::Ordering::Relaxed);
    }

    /// Group transactions that placed something so far, and the launches they placed.
    pub fn launch_groups(&self) -> (usize, usize) {
        (
            self.groups[0].load(std::sync::atomic::Ordering::Relaxed),
            self.groups[1].load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The most launches one group transaction of this handle has placed so far.
    pub fn largest_launch_group(&self) -> usize {
        self.largest_group
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A task reached its agent `waited` after it was queued.
    pub fn task_claimed(&self, waited: Duration) {
        self.dispatch_lag.observe(waited.as_secs_f64());
    }

    /// A claim looked for a queued task.
    pub fn claim_checked(&self) {
        self.claim_checks.inc();
    }

    /// Claim checks since start.
    pub fn claim_checks(&self) -> u64 {
        self.claim_checks.get()
    }

    pub fn task_finished(&self, kind: &str, succeeded: bool) {
        let kind = TASK_KINDS
            .iter()
            .find(|k| **k == kind)
            .copied()
            .unwrap_or("other");
        self.tasks
            .get_or_create(&TaskLabels {
                kind,
                outcome: if succeeded { "succeeded" } else { "failed" },
            })
            .inc();
    }

    pub fn stripe_call_failed(&self) {
        self.stripe_failures.inc();
    }

    pub fn webhook_event(&self, event_type: &str) {
        let r#type = WEBHOOK_TYPES
            .iter()
            .find(|t| **t == event_type)
            .copied()
            .unwrap_or("other");
        self.webhook_events
            .get_or_create(&EventTypeLabel { r#type })
            .inc();
    }

    pub fn gpu_event(&self, kind: &'static str, out_of_service: bool) {
        self.gpu_events
            .get_or_create(&GpuEventLabels {
                kind,
                out_of_service: if out_of_service { "true" } else { "false" },
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: &Metrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn refusals_are_counted_by_a_bounded_reason() {
        let m = Metrics::default();
        m.launch_decided(&Ok(true), Duration::from_millis(3));
        m.launch_decided(
            &Err(&Error::SkuUnavailable("no node".into())),
            Duration::from_millis(1),
        );
        m.webhook_event("invoice.paid");
        m.webhook_event("made.up.by.someone");
        let out = text(&m);
        assert!(
            out.contains(r#"gpuaas_launches_total{outcome="placed",reason=""} 1"#),
            "{out}"
        );
        assert!(
            out.contains(r#"gpuaas_launches_total{outcome="refused",reason="sku_unavailable"} 1"#),
            "{out}"
        );
        assert!(out.contains(r#"gpuaas_stripe_webhook_events_total{type="other"} 1"#));
        assert!(!out.contains("made.up"));
        assert!(out.contains("gpuaas_launch_duration_seconds_bucket"));
    }
}
