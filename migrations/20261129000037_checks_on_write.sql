-- The same rules on the four hottest tables, checked only when what they check is written (#22).
--
-- PostgreSQL checks every CHECK constraint of a table on every UPDATE, whatever columns it
-- sets, and before it can check one it reads the constraint's stored expression back into a
-- tree and prepares it, once per statement. `perf` of the dispatch benchmark (200 launches/s)
-- put 10% of the database's CPU in `ExecConstraints`, three quarters of it that preparation:
-- `allocations` has 20 checks, `node_resource_slots` 16, `nodes` 15, `agent_tasks` 7, and
-- the hot statements (a state change, a slot's cleanup state, a task's claim, a heartbeat)
-- touch one or two columns that almost none of them is about.
--
-- So the checks about columns that are written when the row is made (and seldom or never
-- after) move into one BEFORE INSERT OR UPDATE OF <those columns> trigger per table, in
-- PL/pgSQL, which prepares its expressions once per session. Each refuses with SQLSTATE
-- 23514 (check_violation) naming the same constraint as before, with PostgreSQL's own
-- message, so a refusal reads exactly as it did. A NULL passes, as it passes a CHECK.
-- The checks about columns the hot statements write (states, times, cleanup) stay CHECKs.
--
-- Each trigger is named to fire after the table's other BEFORE triggers (they fire in name
-- order), so, like a CHECK, it sees the row as they leave it; none of those writes a column
-- checked here except `allocations_listing_fits`, which sets `fee_per_hour_minor` on insert,
-- when this trigger always runs.

CREATE FUNCTION refuse_check(rel text, con text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', rel, con
        USING ERRCODE = 'check_violation', CONSTRAINT = con, TABLE = rel;
END;
$$;

-- allocations ---------------------------------------------------------------------------------

CREATE FUNCTION allocations_well_formed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.currency ~ '^[A-Z]{3}$') THEN
        PERFORM refuse_check('allocations', 'allocations_currency_check');
    END IF;
    IF NOT (NEW.fee_per_hour_minor >= 0) THEN
        PERFORM refuse_check('allocations', 'allocations_fee_per_hour_minor_check');
    END IF;
    IF NOT (NEW.gpu_count > 0) THEN
        PERFORM refuse_check('allocations', 'allocations_gpu_count_check');
    END IF;
    IF NOT (length(NEW.idempotency_key) BETWEEN 8 AND 200) THEN
        PERFORM refuse_check('allocations', 'allocations_idempotency_key_check');
    END IF;
    IF NOT (NEW.name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$') THEN
        PERFORM refuse_check('allocations', 'allocations_name_check');
    END IF;
    IF NOT (NEW.price_per_hour_minor > 0) THEN
        PERFORM refuse_check('allocations', 'allocations_price_per_hour_minor_check');
    END IF;
    IF NOT published_ports_ok(NEW.published_ports) THEN
        PERFORM refuse_check('allocations', 'allocations_published_ports_ok');
    END IF;
    IF NOT (NEW.shape IN ('baremetal', 'gpu_slice')) THEN
        PERFORM refuse_check('allocations', 'allocations_shape_check');
    END IF;
    IF NOT (length(NEW.ssh_public_key) BETWEEN 1 AND 16384
            AND array_length(string_to_array(NEW.ssh_public_key, E'\n'), 1) <= 10) THEN
        PERFORM refuse_check('allocations', 'allocations_ssh_public_key_lines');
    END IF;
    IF NOT (jsonb_typeof(NEW.tags) = 'object' AND octet_length(NEW.tags::text) <= 4096) THEN
        PERFORM refuse_check('allocations', 'allocations_tags_check');
    END IF;
    IF NOT (octet_length(NEW.user_data) BETWEEN 1 AND 16384
            AND (NEW.user_data LIKE '#cloud-config%' OR NEW.user_data LIKE '#!%')) THEN
        PERFORM refuse_check('allocations', 'allocations_user_data');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER allocations_well_formed
    BEFORE INSERT OR UPDATE OF currency, fee_per_hour_minor, gpu_count, idempotency_key, name,
        price_per_hour_minor, published_ports, shape, ssh_public_key, tags, user_data
    ON allocations FOR EACH ROW EXECUTE FUNCTION allocations_well_formed();

ALTER TABLE allocations
    DROP CONSTRAINT allocations_currency_check,
    DROP CONSTRAINT allocations_fee_per_hour_minor_check,
    DROP CONSTRAINT allocations_gpu_count_check,
    DROP CONSTRAINT allocations_idempotency_key_check,
    DROP CONSTRAINT allocations_name_check,
    DROP CONSTRAINT allocations_price_per_hour_minor_check,
    DROP CONSTRAINT allocations_published_ports_ok,
    DROP CONSTRAINT allocations_shape_check,
    DROP CONSTRAINT allocations_ssh_public_key_lines,
    DROP CONSTRAINT allocations_tags_check,
    DROP CONSTRAINT allocations_user_data;

-- node_resource_slots -------------------------------------------------------------------------

CREATE FUNCTION node_resource_slots_well_formed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    pci CONSTANT text := '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$';
BEGIN
    IF NOT (NEW.cpu_set ~ '^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$') THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_cpu_set_check');
    END IF;
    IF NOT (length(NEW.gpu_model) BETWEEN 1 AND 100) THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_gpu_model_check');
    END IF;
    IF NOT (NEW.gpu_pci_address ~ pci) THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_gpu_pci_address_check');
    END IF;
    IF NOT (NEW.ib_vf_pci_address ~ pci) THEN
        PERFORM refuse_check('node_resource_slots',
                             'node_resource_slots_ib_vf_pci_address_check');
    END IF;
    IF NOT (NEW.memory_mib > 0) THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_memory_mib_check');
    END IF;
    IF NOT (NEW.numa_node >= 0) THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_numa_node_check');
    END IF;
    IF NOT (NEW.nvme_namespace ~ '^nvme[0-9]+n[0-9]+$') THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_nvme_namespace_check');
    END IF;
    IF NOT (NEW.nvme_pci_address ~ pci) THEN
        PERFORM refuse_check('node_resource_slots',
                             'node_resource_slots_nvme_pci_address_check');
    END IF;
    IF NOT (NEW.nvme_size_bytes > 0) THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_nvme_size_bytes_check');
    END IF;
    IF NOT (NEW.slot_index >= 0) THEN
        PERFORM refuse_check('node_resource_slots', 'node_resource_slots_slot_index_check');
    END IF;
    IF NOT (NEW.slot_index < 128) THEN
        PERFORM refuse_check('node_resource_slots', 'slots_index_fits_the_port_range');
    END IF;
    IF NOT (NEW.capacity_metadata ->> 'storage_ownership' = 'slice'
            AND NEW.capacity_metadata ->> 'fabric_claim_mode' = 'per_slot_vf'
            AND NEW.capacity_metadata ->> 'fabric_vf_pci_address' = NEW.ib_vf_pci_address
            AND length(trim(coalesce(NEW.capacity_metadata ->> 'destructive_wipe_policy', '')))
                > 0) THEN
        PERFORM refuse_check('node_resource_slots', 'slot_capacity_metadata_complete');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER node_resource_slots_well_formed
    BEFORE INSERT OR UPDATE OF cpu_set, gpu_model, gpu_pci_address, ib_vf_pci_address,
        memory_mib, numa_node, nvme_namespace, nvme_pci_address, nvme_size_bytes, slot_index,
        capacity_metadata
    ON node_resource_slots FOR EACH ROW EXECUTE FUNCTION node_resource_slots_well_formed();

ALTER TABLE node_resource_slots
    DROP CONSTRAINT node_resource_slots_cpu_set_check,
    DROP CONSTRAINT node_resource_slots_gpu_model_check,
    DROP CONSTRAINT node_resource_slots_gpu_pci_address_check,
    DROP CONSTRAINT node_resource_slots_ib_vf_pci_address_check,
    DROP CONSTRAINT node_resource_slots_memory_mib_check,
    DROP CONSTRAINT node_resource_slots_numa_node_check,
    DROP CONSTRAINT node_resource_slots_nvme_namespace_check,
    DROP CONSTRAINT node_resource_slots_nvme_pci_address_check,
    DROP CONSTRAINT node_resource_slots_nvme_size_bytes_check,
    DROP CONSTRAINT node_resource_slots_slot_index_check,
    DROP CONSTRAINT slots_index_fits_the_port_range,
    DROP CONSTRAINT slot_capacity_metadata_complete;

-- nodes (a heartbeat writes its times, health and holding; these are about the rest) ----------

CREATE FUNCTION nodes_well_formed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    dns_name CONSTANT text :=
        '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$';
BEGIN
    IF NOT (cardinality(NEW.capacity_shapes) > 0
            AND NEW.capacity_shapes <@ ARRAY['baremetal', 'gpu_slice']) THEN
        PERFORM refuse_check('nodes', 'nodes_capacity_shapes_check');
    END IF;
    IF NOT (NEW.family ~ '^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]$') THEN
        PERFORM refuse_check('nodes', 'nodes_family_check');
    END IF;
    IF NOT (length(NEW.hostname) <= 253 AND NEW.hostname ~ dns_name) THEN
        PERFORM refuse_check('nodes', 'nodes_hostname_check');
    END IF;
    IF NOT (length(NEW.public_host) <= 253 AND NEW.public_host ~ dns_name) THEN
        PERFORM refuse_check('nodes', 'nodes_public_host_form');
    END IF;
    IF NOT (NEW.public_port_base BETWEEN 1024 AND 64511) THEN
        PERFORM refuse_check('nodes', 'nodes_public_port_base_range');
    END IF;
    IF NOT (length(NEW.rack) BETWEEN 1 AND 64 AND NEW.rack !~ '[[:cntrl:]]') THEN
        PERFORM refuse_check('nodes', 'nodes_rack_check');
    END IF;
    IF NOT (NEW.region ~ '^[a-z][a-z0-9-]{0,30}[a-z0-9]$') THEN
        PERFORM refuse_check('nodes', 'nodes_region_check');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER nodes_well_formed
    BEFORE INSERT OR UPDATE OF capacity_shapes, family, hostname, public_host, public_port_base,
        rack, region
    ON nodes FOR EACH ROW EXECUTE FUNCTION nodes_well_formed();

ALTER TABLE nodes
    DROP CONSTRAINT nodes_capacity_shapes_check,
    DROP CONSTRAINT nodes_family_check,
    DROP CONSTRAINT nodes_hostname_check,
    DROP CONSTRAINT nodes_public_host_form,
    DROP CONSTRAINT nodes_public_port_base_range,
    DROP CONSTRAINT nodes_rack_check,
    DROP CONSTRAINT nodes_region_check;

-- agent_tasks (a claim and a result write the state and its times) ----------------------------

CREATE FUNCTION agent_tasks_well_formed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((NEW.kind = 'slice.topology_discover') = (NEW.allocation_id IS NULL)) THEN
        PERFORM refuse_check('agent_tasks', 'agent_tasks_allocation_kinds');
    END IF;
    IF NOT (NEW.kind IN ('slice.topology_discover', 'slice.vm_provision', 'slice.vm_release',
                         'baremetal.provision', 'baremetal.release',
                         'allocation.network_update')) THEN
        PERFORM refuse_check('agent_tasks', 'agent_tasks_kind_check');
    END IF;
    IF NOT (NEW.traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            AND NEW.traceparent !~ '^00-0{32}-'
            AND NEW.traceparent !~ '^00-[0-9a-f]{32}-0{16}-') THEN
        PERFORM refuse_check('agent_tasks', 'agent_tasks_traceparent_check');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER agent_tasks_well_formed
    BEFORE INSERT OR UPDATE OF kind, allocation_id, traceparent
    ON agent_tasks FOR EACH ROW EXECUTE FUNCTION agent_tasks_well_formed();

ALTER TABLE agent_tasks
    DROP CONSTRAINT agent_tasks_allocation_kinds,
    DROP CONSTRAINT agent_tasks_kind_check,
    DROP CONSTRAINT agent_tasks_traceparent_check;
