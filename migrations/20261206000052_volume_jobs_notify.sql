-- A queued storage step wakes the storage workers at once (#73).
--
-- The storage worker looked for steps every 250 ms when idle, and a volume's attach takes
-- two steps of its (export, then withdraw on detach) around the host's plug-in: the
-- volumes benchmark measured those waits as most of an attach's latency. A NOTIFY is sent
-- only when the transaction that queued the step commits, so a woken worker always finds it,
-- and it reaches every replica's worker, not only the one in the process that queued it.
-- The worker still looks every few seconds, for a notification lost while it reconnected.

CREATE FUNCTION volume_jobs_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('volume_jobs', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER volume_jobs_queued AFTER INSERT ON volume_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION volume_jobs_queued();
