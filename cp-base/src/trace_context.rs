//! The trace a piece of work belongs to, carried through the database.
//!
//! A launch's request span is where its trace starts. The rows that hand work on — an
//! `agent_tasks` row, an `outbox` row — store the [`TraceParent`] of the span that wrote
//! them ([`current`]); whoever picks the row up later, in this process or another replica,
//! opens its span as a child of it ([`follow`]). When the process exports no traces the
//! current span has no context, nothing is stored, and following is a no-op.

use agent_protocol::TraceParent;
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context of the current span, if it is being traced.
pub fn current() -> Option<TraceParent> {
    of(&tracing::Span::current())
}

/// The trace context of `span`, if it is being traced. (This starts the span's OpenTelemetry
/// side: [`follow`] must come first.)
pub fn of(span: &tracing::Span) -> Option<TraceParent> {
    otel::traceparent(&span.context().span().span_context().clone())
}

/// Makes `span` (just created, not yet entered) a child of `parent`, the stored context of
/// the work it continues; returns it for chaining.
pub fn follow(span: tracing::Span, parent: Option<&TraceParent>) -> tracing::Span {
    if let Some(p) = parent {
        let cx = opentelemetry::Context::new().with_remote_span_context(otel::span_context(p));
        // Refused only when no OpenTelemetry layer is installed: then there is no trace.
        let _ = span.set_parent(cx);
    }
    span
}
