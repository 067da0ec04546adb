-- A node that only carries usage from before this portal metered it (`billing::history`): it is
-- not a host, so the fleet, its counts and placement leave it out. It was told apart by its
-- hostname, which a real host could also be enrolled under.
ALTER TABLE nodes ADD COLUMN ledger_only boolean NOT NULL DEFAULT false;

UPDATE nodes SET ledger_only = true
WHERE hostname = 'imported-usage' AND last_heartbeat_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM node_resource_slots s WHERE s.node_id = nodes.id);

-- Nothing is ever placed on it: it stays cordoned, and at most one exists.
ALTER TABLE nodes ADD CONSTRAINT ledger_only_nodes_stay_cordoned
    CHECK (NOT ledger_only OR admin_state = 'cordoned');
CREATE UNIQUE INDEX nodes_one_ledger_only ON nodes (ledger_only) WHERE ledger_only;
