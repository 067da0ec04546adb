//! The agent's part of a launch's trace: one span per task, a child of the control plane's
//! hand-over span (the task's `traceparent`), and one span per phase under it, timed as the
//! phase reports time them. Exported over OTLP when the standard `OTEL_*` variables ask for it
//! ([`otel::export`]); off otherwise. Either way the task's reports carry a `traceparent`, so
//! the control plane files them in the same trace.

use std::time::{Duration, SystemTime};

use agent_protocol::{PhaseReport, PhaseStatus, Task, TaskOutcome, TraceParent};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use otel::export::Traces;

/// The service name the agent's spans carry unless `OTEL_SERVICE_NAME` says otherwise.
pub const SERVICE_NAME: &str = "gpuaas-node-agent";

/// The exporter (when traces are on).
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
    tracer: Option<SdkTracer>,
    node_id: String,
}

impl Tracing {
    /// As `traces` says, for the node `node_id` (an attribute of every task span).
    pub fn new(traces: &Traces, node_id: &str) -> Result<Self, String> {
        let provider = otel::export::provider(traces, SERVICE_NAME)?;
        Ok(Self {
            tracer: provider.as_ref().map(|p| p.tracer(SERVICE_NAME)),
            provider,
            node_id: node_id.to_string(),
        })
    }

    pub fn is_on(&self) -> bool {
        self.tracer.is_some()
    }

    /// Starts the span of `task` (resumed after a restart: `resumed`).
    pub fn task(&self, task: &Task, resumed: bool) -> TaskTrace<'_> {
        let Some(tracer) = &self.tracer else {
            return TaskTrace {
                tracer: None,
                cx: None,
                passed_on: task.traceparent.clone(),
                started: Default::default(),
            };
        };
        let parent = match &task.traceparent {
            Some(p) => Context::new().with_remote_span_context(otel::span_context(p)),
            None => Context::new(),
        };
        let span = tracer
            .span_builder(format!("agent_task {}", task.spec.kind()))
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("task.id", task.task_id.clone()),
                KeyValue::new("task.kind", task.spec.kind()),
                KeyValue::new("node.id", self.node_id.clone()),
                KeyValue::new("task.resumed", resumed),
            ])
            .start_with_context(tracer, &parent);
        let cx = parent.with_span(span);
        TaskTrace {
            passed_on: otel::traceparent(cx.span().span_context()),
            tracer: Some(tracer),
            cx: Some(cx),
            started: Default::default(),
        }
    }

    /// Sends the spans still buffered (at exit).
    pub fn shutdown(&self) {
        if let Some(p) = &self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("node-agent: flushing traces failed: {e}");
        }
    }
}

/// One task's span, open until [`TaskTrace::finish`].
pub struct TaskTrace<'a> {
    tracer: Option<&'a SdkTracer>,
    cx: Option<Context>,
    passed_on: Option<TraceParent>,
    /// When each phase's `started` report was seen, for its span's start.
    started: std::cell::RefCell<std::collections::HashMap<String, SystemTime>>,
}

impl TaskTrace<'_> {
    /// What the task's reports carry as their `traceparent`: the task's span, or (not
    /// exporting here) the context the task came with.
    pub fn traceparent(&self) -> Option<&TraceParent> {
        self.passed_on.as_ref()
    }

    /// Records a phase once it has ended: from when its `started` report was seen, for as
    /// long as its report says it took (never past now). Reports are seen in order, each
    /// after the previous one was sent to the control plane, so a slow send delays what
    /// follows it; anchoring each span at its own `started` report keeps the phases in their
    /// order (working back from when the end was seen did not: a delayed end put a short
    /// phase's start after the next, longer one's).
    pub fn phase(&self, report: &PhaseReport) {
        let (Some(tracer), Some(cx)) = (self.tracer, &self.cx) else {
            return;
        };
        let now = SystemTime::now();
        if report.status == PhaseStatus::Started {
            self.started.borrow_mut().insert(report.phase.clone(), now);
            return;
        }
        let took = Duration::from_millis(report.elapsed_ms);
        let start = self
            .started
            .borrow_mut()
            .remove(&report.phase)
            .unwrap_or_else(|| now.checked_sub(took).unwrap_or(now));
        let end = (start + took).min(now);
        let mut span = tracer
            .span_builder(report.phase.clone())
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes([KeyValue::new("phase.name", report.phase.clone())])
            .start_with_context(tracer, cx);
        if report.status == PhaseStatus::Failed {
            span.set_status(Status::error(report.detail.clone().unwrap_or_default()));
        }
        span.end_with_timestamp(end);
    }

    /// Ends the task's span with its outcome (`None`: interrupted, to be resumed).
    pub fn finish(self, outcome: Option<&TaskOutcome>) {
        let Some(cx) = self.cx else {
            return;
        };
        let span = cx.span();
        match outcome {
            Some(TaskOutcome::Succeeded { .. }) => span.set_status(Status::Ok),
            Some(TaskOutcome::Failed { error }) => span.set_status(Status::error(error.clone())),
            None => span.add_event("interrupted by shutdown; resumed at the next start", vec![]),
        }
        span.end();
    }
}
