-- Continuous reconciliation: what the hosts hold against what the control plane believes, and
-- the metered time against the charged time. A finding is recorded with its evidence, counted,
-- shown to operators, and (for a slot a host still holds) takes that slot out of placement by
-- blocking it until an operator clears it. Nothing here changes money.

-- What each node's agent last reported holding (agent_protocol::Holding), and when.
ALTER TABLE nodes ADD COLUMN holding jsonb
    CHECK (jsonb_typeof(holding -> 'leases') = 'array' AND jsonb_typeof(holding -> 'vms') = 'array');
ALTER TABLE nodes ADD COLUMN holding_at timestamptz;
ALTER TABLE nodes ADD CONSTRAINT nodes_holding_has_time CHECK ((holding IS NULL) = (holding_at IS NULL));

CREATE TABLE reconciliation_findings (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('orphan_vm', 'missing_vm', 'ledger_gap')),
    -- What the finding is about, stable across runs: one open finding per (kind, subject).
    subject       text NOT NULL CHECK (subject ~ '^[a-z0-9:-]{1,200}$'),
    node_id       uuid REFERENCES nodes (id),
    slot_id       uuid REFERENCES node_resource_slots (id),
    -- Not a foreign key: a host may hold a VM for an allocation this control plane never had.
    allocation_id uuid,
    evidence      jsonb NOT NULL CHECK (jsonb_typeof(evidence) = 'object'),
    -- Whether the run that found it blocked the slot.
    quarantined   boolean NOT NULL DEFAULT false CHECK (NOT quarantined OR slot_id IS NOT NULL),
    found_at      timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now() CHECK (last_seen_at >= found_at),
    -- Set when a run no longer sees it. A blocked slot stays blocked: an operator clears it.
    cleared_at    timestamptz CHECK (cleared_at >= found_at)
);
CREATE UNIQUE INDEX reconciliation_findings_open ON reconciliation_findings (kind, subject)
    WHERE cleared_at IS NULL;
CREATE INDEX reconciliation_findings_recent ON reconciliation_findings (found_at DESC);

-- A finding's facts never change; a run only notes it again or clears it (once).
CREATE FUNCTION reconciliation_findings_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'reconciliation findings are never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.kind, NEW.subject, NEW.node_id, NEW.slot_id, NEW.allocation_id, NEW.found_at)
       IS DISTINCT FROM (OLD.kind, OLD.subject, OLD.node_id, OLD.slot_id, OLD.allocation_id, OLD.found_at)
       OR (OLD.quarantined AND NOT NEW.quarantined)
       OR (OLD.cleared_at IS NOT NULL AND NEW.cleared_at IS DISTINCT FROM OLD.cleared_at) THEN
        RAISE EXCEPTION 'reconciliation finding % can''t change what was found', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER reconciliation_findings_guard BEFORE UPDATE OR DELETE ON reconciliation_findings
    FOR EACH ROW EXECUTE FUNCTION reconciliation_findings_guard();
