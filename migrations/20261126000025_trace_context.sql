-- Traces: the rows that hand work on carry the W3C trace context of the span that wrote
-- them, so the dispatcher (any replica) and the agent continue the launch's trace.
-- NULL when the writer exported no traces. Version 00 only, as otel::TraceParent checks.
ALTER TABLE agent_tasks ADD COLUMN traceparent text
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
           AND traceparent !~ '^00-0{32}-' AND traceparent !~ '^00-[0-9a-f]{32}-0{16}-');
ALTER TABLE outbox ADD COLUMN traceparent text
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
           AND traceparent !~ '^00-0{32}-' AND traceparent !~ '^00-[0-9a-f]{32}-0{16}-');
