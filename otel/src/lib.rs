//! OpenTelemetry traces for the server and the node agent.
//!
//! One launch is one trace, across processes: the server's request span, the placement
//! transaction, the agent task row (which stores the context as a W3C
//! [`TraceParent`](agent_protocol::TraceParent)), the claim that hands the task to the agent
//! (the task carries it on), and the agent's task and phase spans on the host. This crate is
//! the one conversion between that header and OpenTelemetry's [`SpanContext`], and, with the
//! `export` feature, the exporter both binaries configure from the standard `OTEL_*`
//! variables.

use agent_protocol::TraceParent;
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

#[cfg(feature = "export")]
pub mod export;

/// The context of a span, when it belongs to a trace (not the empty context of a process
/// that doesn't export traces).
pub fn traceparent(span: &SpanContext) -> Option<TraceParent> {
    if !span.is_valid() {
        return None;
    }
    TraceParent::from_parts(
        &span.trace_id().to_string(),
        &span.span_id().to_string(),
        span.trace_flags().to_u8(),
    )
    .ok()
}

/// The remote span `parent` names, to parent local spans on.
pub fn span_context(parent: &TraceParent) -> SpanContext {
    SpanContext::new(
        TraceId::from_hex(parent.trace_id()).unwrap_or(TraceId::INVALID),
        SpanId::from_hex(parent.span_id()).unwrap_or(SpanId::INVALID),
        TraceFlags::new(parent.flags()),
        true,
        TraceState::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_survives_the_round_trip_through_a_span_context() {
        let t =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let sc = span_context(&t);
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc).unwrap(), t);
        assert_eq!(traceparent(&SpanContext::empty_context()), None);
    }
}
