-- Rating, measured again (#22, auto_explain of a 5,000-charge batch, 246 ms): the foreign key
-- from each charge to its usage interval took 58 ms (5,000 per-row checks, each a key-share
-- lock on an interval row), and the one from each posting to its journal entry 25 ms for 100
-- postings. Neither row can go away: usage intervals are never deleted (their guard) and now
-- never truncated (below), and journal entries are append-only. So all either key guards is
-- that the row exists when the charge or posting is written, and one check per statement,
-- over the statement's new rows, does that with the same refusal.

CREATE OR REPLACE FUNCTION charges_checked() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    late record;
    orphan bigint;
    unmetered uuid;
BEGIN
    SELECT c.entry_id INTO orphan
    FROM new_charges c
    WHERE NOT EXISTS (SELECT 1 FROM journal_entries e WHERE e.id = c.entry_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a charge names journal entry %, which does not exist', orphan
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT c.allocation_id INTO unmetered
    FROM new_charges c
    WHERE NOT EXISTS (SELECT 1 FROM usage_intervals u WHERE u.allocation_id = c.allocation_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a charge names allocation %, which has no usage interval', unmetered
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT c.allocation_id, c.period_start INTO late
    FROM new_charges c
    JOIN invoices i ON i.tenant_id = c.tenant_id AND i.currency = c.currency
                   AND i.month = date_trunc('month', c.period_start AT TIME ZONE 'UTC')::date
                   AND i.status <> 'draft'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'usage of allocation % in % is after that month was invoiced',
            late.allocation_id, to_char(late.period_start AT TIME ZONE 'UTC', 'YYYY-MM')
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
ALTER TABLE usage_charges DROP CONSTRAINT usage_charges_allocation_id_fkey;

-- The key kept TRUNCATE away from intervals with charges; this keeps it away from all.
CREATE FUNCTION usage_intervals_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'usage intervals are never deleted' USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER usage_intervals_no_truncate BEFORE TRUNCATE ON usage_intervals
    FOR EACH STATEMENT EXECUTE FUNCTION usage_intervals_kept();

CREATE FUNCTION postings_checked() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    orphan bigint;
BEGIN
    SELECT p.entry_id INTO orphan
    FROM new_postings p
    WHERE NOT EXISTS (SELECT 1 FROM journal_entries e WHERE e.id = p.entry_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a posting names journal entry %, which does not exist', orphan
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;
ALTER TABLE postings DROP CONSTRAINT postings_entry_id_fkey;
CREATE TRIGGER postings_checked AFTER INSERT ON postings
    REFERENCING NEW TABLE AS new_postings
    FOR EACH STATEMENT EXECUTE FUNCTION postings_checked();

-- What was left of a batch's time was mostly its commit (~110 ms of ~280): the deferred balance
-- check runs once per entry and once per posting (~150 calls a batch), and `perf` put 43% of
-- the database's work there, in a hash join over sequential scans of `postings` and
-- `ledger_accounts`. PL/pgSQL caches a plan per connection; made while the ledger was small,
-- a three-way join's plan kept scanning whole tables long after they had grown, until an
-- ANALYZE happened to invalidate it. The same check as three lookups leaves the planner no
-- join to get wrong: the entry by its key, its postings by `postings_entry`, and each
-- posting's account by its key. Same refusal, same message.
CREATE OR REPLACE FUNCTION journal_entry_balances() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    entry   bigint := (to_jsonb(NEW) ->> CASE TG_TABLE_NAME WHEN 'postings' THEN 'entry_id' ELSE 'id' END)::bigint;
    entry_currency text;
    n       integer := 0;
    total   numeric := 0;
    foreign_currency integer := 0;
BEGIN
    SELECT e.currency INTO entry_currency FROM journal_entries e WHERE e.id = entry;
    IF FOUND THEN
        SELECT count(*), coalesce(sum(p.amount_micro), 0),
               count(*) FILTER (WHERE (SELECT a.currency FROM ledger_accounts a
                                       WHERE a.id = p.account_id) IS DISTINCT FROM entry_currency)
        INTO n, total, foreign_currency
        FROM postings p
        WHERE p.entry_id = entry;
    END IF;
    IF n < 2 OR total <> 0 OR foreign_currency > 0 THEN
        RAISE EXCEPTION 'journal entry % does not balance: % postings summing to % micro-units (% in another currency)',
            entry, n, total, foreign_currency USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
