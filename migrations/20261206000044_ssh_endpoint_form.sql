-- Where a tenant connects is checked like every other name the platform hands out.
--
-- A host's provision result used to be stored as it came: a compromised host could report an
-- SSH user such as `u -oProxyCommand=…`, and the command shown to tenants (and split into
-- `gpuctl ssh`'s argv) carried it to their machines. The control plane now stores what it
-- planned (the node's public address, the slot's port, the listing's SSH user); these rules
-- refuse anything else, whoever writes it: the host is a DNS name (the rule `nodes.public_host`
-- keeps) or an IP address literal, the user is the listing's user rule, the port a TCP port.
--
-- As in 20261129000037_checks_on_write.sql, checked only when these columns are written (the
-- hot updates of `allocations` write its states), refusing as a CHECK named for the rule.
-- Rows written before this rule are not re-checked; their endpoint is shown as stored.

CREATE FUNCTION allocations_reached_well_formed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (length(NEW.ssh_host) <= 253
            AND (NEW.ssh_host ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$'
                 OR NEW.ssh_host ~ '^[0-9]{1,3}(\.[0-9]{1,3}){3}$'
                 OR NEW.ssh_host ~ '^[0-9a-f]{0,4}(:[0-9a-f]{0,4}){2,7}$')) THEN
        PERFORM refuse_check('allocations', 'allocations_ssh_host_form');
    END IF;
    IF NOT (NEW.ssh_user ~ '^[a-z_][a-z0-9_-]{0,31}$') THEN
        PERFORM refuse_check('allocations', 'allocations_ssh_user_form');
    END IF;
    IF NOT (NEW.ssh_port BETWEEN 1 AND 65535) THEN
        PERFORM refuse_check('allocations', 'allocations_ssh_port_range');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER allocations_reached_well_formed
    BEFORE INSERT OR UPDATE OF ssh_host, ssh_port, ssh_user
    ON allocations FOR EACH ROW EXECUTE FUNCTION allocations_reached_well_formed();
