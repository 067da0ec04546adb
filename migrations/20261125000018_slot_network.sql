-- The slot network (issue #20): where a node's guests are reached, which ports an allocation
-- publishes, whether a project's guests may reach each other, and the operators' limit on
-- published ports.

-- A node's public address (NULL: its hostname) and the first of its public ports. Slot i owns
-- the 8 ports from public_port_base + 8 i: its SSH port, then up to 7 published ports
-- (agent_protocol::identity::public_port). Slots are bounded so the last block fits.
ALTER TABLE nodes
    ADD COLUMN public_host text
        CONSTRAINT nodes_public_host_form CHECK (
            length(public_host) <= 253
            AND public_host ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$'),
    ADD COLUMN public_port_base integer NOT NULL DEFAULT 22000
        CONSTRAINT nodes_public_port_base_range CHECK (public_port_base BETWEEN 1024 AND 64511);

ALTER TABLE node_resource_slots
    ADD CONSTRAINT slots_index_fits_the_port_range CHECK (slot_index < 128);

-- Off by default: guests of one project on one host reach each other only if the project
-- says so; guests of different projects never do.
ALTER TABLE projects
    ADD COLUMN east_west boolean NOT NULL DEFAULT false;

-- Guest TCP ports published besides SSH: at most 7, each 1–65535, not 22, no repeats.
CREATE FUNCTION published_ports_ok(ports integer[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT cardinality(ports) <= 7
       AND coalesce(bool_and(p BETWEEN 1 AND 65535 AND p <> 22), true)
       AND count(DISTINCT p) = count(p)
    FROM unnest(ports) AS p
$$;

ALTER TABLE allocations
    ADD COLUMN published_ports integer[] NOT NULL DEFAULT '{}'
        CONSTRAINT allocations_published_ports_ok CHECK (published_ports_ok(published_ports));

-- The policy key that bounds published ports (0–7).
ALTER TABLE policies
    DROP CONSTRAINT policies_key_check,
    ADD CONSTRAINT policies_key_check CHECK (key IN (
        'max_gpus_in_use', 'allowed_skus', 'allowed_regions',
        'max_allocation_lifetime_hours', 'monthly_budget', 'allowed_listings',
        'max_published_ports')),
    DROP CONSTRAINT policies_value_shape,
    ADD CONSTRAINT policies_value_shape CHECK (CASE key
        WHEN 'max_gpus_in_use' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 100000
        WHEN 'max_allocation_lifetime_hours' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 1
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 8760
        WHEN 'max_published_ports' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 7
        WHEN 'allowed_skus' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_regions' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_listings' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'monthly_budget' THEN
            jsonb_typeof(value) = 'object'
            AND jsonb_typeof(value -> 'amount_minor') = 'number'
            AND (value ->> 'amount_minor')::numeric >= 0
            AND (value ->> 'currency') ~ '^[A-Z]{3}$'
        ELSE false
    END);

-- Each tenant's InfiniBand partition key, assigned the first time one of its allocations is
-- dispatched and kept: its slots' IB virtual functions join only this partition. 15 bits,
-- never 0 or the default partition 0x7fff.
CREATE SEQUENCE ib_partition_keys AS integer START 2 MINVALUE 2 MAXVALUE 32766;

CREATE TABLE tenant_ib_partitions (
    tenant_id   uuid PRIMARY KEY REFERENCES tenants (id),
    pkey        integer NOT NULL UNIQUE DEFAULT nextval('ib_partition_keys')
                CHECK (pkey BETWEEN 1 AND 32766),
    assigned_at timestamptz NOT NULL DEFAULT now()
);

-- Publishing ports on a running allocation: the outbox row and the agent task that re-renders
-- the host's forwarding. An allocation may have many such tasks over its life, but at most one
-- waiting to be claimed (the dispatcher rewrites that one's plan instead of queueing another).
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check,
    ADD CONSTRAINT outbox_kind_check CHECK (kind IN (
        'allocation.provision', 'allocation.release', 'allocation.network_update'));
ALTER TABLE agent_tasks DROP CONSTRAINT agent_tasks_kind_check,
    ADD CONSTRAINT agent_tasks_kind_check CHECK (kind IN (
        'slice.topology_discover', 'slice.vm_provision', 'slice.vm_release',
        'baremetal.provision', 'baremetal.release', 'allocation.network_update'));
DROP INDEX agent_tasks_one_per_allocation;
CREATE UNIQUE INDEX agent_tasks_one_per_allocation ON agent_tasks (allocation_id, kind)
    WHERE allocation_id IS NOT NULL AND state <> 'failed' AND kind <> 'allocation.network_update';
CREATE UNIQUE INDEX agent_tasks_one_queued_network_update ON agent_tasks (allocation_id)
    WHERE kind = 'allocation.network_update' AND state = 'queued';
