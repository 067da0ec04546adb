-- A launch placed in a group is written as `provisioning` (#22).
--
-- Group placement inserts a group's allocations as `placed`, writes their claims and their
-- provision tasks, and then moved them to `provisioning` with an update, all in one
-- transaction: no one ever saw them `placed`. The update cost as much as the insert (every
-- index of `allocations` again, since `state` is indexed, and the table's checks). Now such a
-- launch may start `provisioning` at once; its history still reads requested → placed →
-- provisioning. A launch decided alone (the one-launch path, an import) still starts `placed`,
-- and the state machine is otherwise unchanged.

CREATE OR REPLACE FUNCTION allocations_lifecycle() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state = 'placed' THEN
            INSERT INTO allocation_transitions (allocation_id, from_state, to_state, at)
            VALUES (NEW.id, NULL, 'requested', NEW.requested_at),
                   (NEW.id, 'requested', 'placed', clock_timestamp());
        ELSIF NEW.state = 'provisioning' THEN
            INSERT INTO allocation_transitions (allocation_id, from_state, to_state, at)
            VALUES (NEW.id, NULL, 'requested', NEW.requested_at),
                   (NEW.id, 'requested', 'placed', clock_timestamp()),
                   (NEW.id, 'placed', 'provisioning', clock_timestamp());
        ELSE
            RAISE EXCEPTION 'an allocation starts placed or provisioning, not %', NEW.state;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.state = OLD.state THEN
        RETURN NULL;
    END IF;
    IF NOT (OLD.state, NEW.state) IN (
        ('placed', 'provisioning'), ('placed', 'releasing'),
        ('provisioning', 'running'), ('provisioning', 'releasing'), ('provisioning', 'released'),
        ('running', 'releasing'), ('running', 'released'),
        ('releasing', 'cleaning'), ('releasing', 'released'),
        ('cleaning', 'released')
    ) THEN
        RAISE EXCEPTION 'allocation % can''t go from % to %', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO allocation_transitions (allocation_id, from_state, to_state, detail)
    VALUES (NEW.id, OLD.state, NEW.state, NEW.failure);
    RETURN NULL;
END;
$$;
