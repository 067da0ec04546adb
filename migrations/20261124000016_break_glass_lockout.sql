-- Break-glass accounts lock after repeated failures (security finding 4), in the database so
-- the lock holds across replicas and restarts, and so another platform admin can see and
-- clear it (audited `auth.unlock`). The in-process limits (ratelimit.rs) still slow every
-- email, known or not; this is the durable part, for accounts that exist.
ALTER TABLE break_glass_credentials
    ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0 CHECK (failed_attempts >= 0),
    ADD COLUMN locked_until    timestamptz,
    ADD CONSTRAINT break_glass_locked_after_failures
        CHECK (locked_until IS NULL OR failed_attempts > 0);
