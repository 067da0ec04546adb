-- Billing: metered running intervals, the double-entry ledger, rated usage charges, invoices
-- and credit notes, the Stripe sync outbox and Stripe's webhook events.
--
-- Money in the ledger is in micro-units (10^-6 of the currency unit, 10^-4 of a cent): rating
-- per second never rounds to cents. Invoices are in minor units (cents); the rounding to cents
-- happens once, per invoice line, when the invoice is finalised, and the difference is posted
-- as its own entry so the ledger and the invoice agree to the cent.

-- One Stripe customer per tenant, created by the sync worker.
ALTER TABLE tenants ADD COLUMN stripe_customer_id text UNIQUE
    CHECK (stripe_customer_id ~ '^cus_[A-Za-z0-9_]{1,200}$');

-- What is metered: an allocation's running interval (running → releasing, or → released on a
-- failure branch), with the price in force at launch. Kept by a trigger on the lifecycle log.
CREATE TABLE usage_intervals (
    allocation_id        uuid PRIMARY KEY REFERENCES allocations (id),
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    project_id           uuid NOT NULL,
    sku_id               uuid NOT NULL REFERENCES skus (id),
    gpu_count            integer NOT NULL CHECK (gpu_count > 0),
    price_per_hour_minor bigint NOT NULL CHECK (price_per_hour_minor > 0),
    currency             text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    started_at           timestamptz NOT NULL,
    ended_at             timestamptz CHECK (ended_at >= started_at),
    -- Rating's progress: every period before this instant has its charge.
    rated_until          timestamptz,
    fully_rated          boolean NOT NULL GENERATED ALWAYS AS (coalesce(rated_until >= ended_at, false)) STORED,
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id)
);
CREATE INDEX usage_intervals_unrated ON usage_intervals (allocation_id) WHERE NOT fully_rated;
CREATE INDEX usage_intervals_unrated_tenant ON usage_intervals (tenant_id) WHERE NOT fully_rated;
CREATE INDEX usage_intervals_tenant ON usage_intervals (tenant_id, started_at);

CREATE FUNCTION usage_intervals_from_lifecycle() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.to_state = 'running' THEN
        INSERT INTO usage_intervals (allocation_id, tenant_id, project_id, sku_id, gpu_count,
                                     price_per_hour_minor, currency, started_at)
        SELECT a.id, a.tenant_id, a.project_id, a.sku_id, a.gpu_count,
               a.price_per_hour_minor, a.currency, NEW.at
        FROM allocations a WHERE a.id = NEW.allocation_id;
    ELSIF NEW.from_state = 'running' THEN
        UPDATE usage_intervals SET ended_at = NEW.at
        WHERE allocation_id = NEW.allocation_id AND ended_at IS NULL;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER usage_intervals_from_lifecycle AFTER INSERT ON allocation_transitions
    FOR EACH ROW EXECUTE FUNCTION usage_intervals_from_lifecycle();

-- An interval's facts never change once written; only its end (once) and rating's progress.
CREATE FUNCTION usage_intervals_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'usage intervals are never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.allocation_id, NEW.tenant_id, NEW.project_id, NEW.sku_id, NEW.gpu_count,
        NEW.price_per_hour_minor, NEW.currency, NEW.started_at)
       IS DISTINCT FROM
       (OLD.allocation_id, OLD.tenant_id, OLD.project_id, OLD.sku_id, OLD.gpu_count,
        OLD.price_per_hour_minor, OLD.currency, OLD.started_at)
       OR (OLD.ended_at IS NOT NULL AND NEW.ended_at IS DISTINCT FROM OLD.ended_at)
       OR NEW.rated_until < OLD.rated_until THEN
        RAISE EXCEPTION 'usage interval of allocation % can''t change what was metered',
            OLD.allocation_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER usage_intervals_guard BEFORE UPDATE OR DELETE ON usage_intervals
    FOR EACH ROW EXECUTE FUNCTION usage_intervals_guard();

-- Ledger accounts. Tenant accounts are per tenant; publisher accounts per publisher (the
-- marketplace); the rest are the platform's. All per currency.
CREATE TABLE ledger_accounts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN (
        'tenant_receivable', 'prepaid_credit', 'publisher_payable',
        'platform_revenue', 'credits_granted', 'cash', 'bad_debt')),
    tenant_id    uuid REFERENCES tenants (id),
    publisher_id uuid,
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    CHECK ((kind IN ('tenant_receivable', 'prepaid_credit')) = (tenant_id IS NOT NULL)),
    CHECK ((kind = 'publisher_payable') = (publisher_id IS NOT NULL))
);
CREATE UNIQUE INDEX ledger_accounts_key ON ledger_accounts
    (kind, coalesce(tenant_id, publisher_id, '00000000-0000-0000-0000-000000000000'), currency);

-- The account's id, created on first use.
CREATE FUNCTION ledger_account(p_kind text, p_owner uuid, p_currency text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    found bigint;
BEGIN
    SELECT id INTO found FROM ledger_accounts
    WHERE kind = p_kind AND currency = p_currency
      AND coalesce(tenant_id, publisher_id, '00000000-0000-0000-0000-000000000000')
          = coalesce(p_owner, '00000000-0000-0000-0000-000000000000');
    IF found IS NOT NULL THEN
        RETURN found;
    END IF;
    INSERT INTO ledger_accounts (kind, tenant_id, publisher_id, currency)
    VALUES (p_kind,
            CASE WHEN p_kind IN ('tenant_receivable', 'prepaid_credit') THEN p_owner END,
            CASE WHEN p_kind = 'publisher_payable' THEN p_owner END,
            p_currency)
    ON CONFLICT DO NOTHING
    RETURNING id INTO found;
    IF found IS NULL THEN
        SELECT id INTO found FROM ledger_accounts
        WHERE kind = p_kind AND currency = p_currency
          AND coalesce(tenant_id, publisher_id, '00000000-0000-0000-0000-000000000000')
              = coalesce(p_owner, '00000000-0000-0000-0000-000000000000');
    END IF;
    RETURN found;
END;
$$;

CREATE TABLE journal_entries (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN (
        'usage', 'credit_grant', 'invoice_rounding', 'credit_applied', 'credit_note',
        'payment', 'void', 'uncollectible', 'reversal')),
    tenant_id  uuid REFERENCES tenants (id),
    currency   text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    invoice_id uuid,
    -- A correction names the entry it reverses.
    reverses   bigint REFERENCES journal_entries (id),
    memo       text NOT NULL CHECK (length(memo) BETWEEN 1 AND 500),
    created_by uuid REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX journal_entries_tenant ON journal_entries (tenant_id, created_at);
CREATE INDEX journal_entries_invoice ON journal_entries (invoice_id) WHERE invoice_id IS NOT NULL;

-- Signed amounts: debits positive, credits negative. An entry's postings sum to zero.
CREATE TABLE postings (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entry_id     bigint NOT NULL REFERENCES journal_entries (id),
    account_id   bigint NOT NULL REFERENCES ledger_accounts (id),
    amount_micro bigint NOT NULL
);
CREATE INDEX postings_entry ON postings (entry_id);
CREATE INDEX postings_account ON postings (account_id);

-- Every entry balances, in its own currency, with at least two postings: checked at commit,
-- when the entry and all its postings exist.
CREATE FUNCTION journal_entry_balances() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    entry   bigint := (to_jsonb(NEW) ->> CASE TG_TABLE_NAME WHEN 'postings' THEN 'entry_id' ELSE 'id' END)::bigint;
    n       integer;
    total   numeric;
    foreign_currency integer;
BEGIN
    SELECT count(*), coalesce(sum(p.amount_micro), 0),
           count(*) FILTER (WHERE a.currency <> e.currency)
    INTO n, total, foreign_currency
    FROM journal_entries e
    LEFT JOIN postings p ON p.entry_id = e.id
    LEFT JOIN ledger_accounts a ON a.id = p.account_id
    WHERE e.id = entry;
    IF n < 2 OR total <> 0 OR foreign_currency > 0 THEN
        RAISE EXCEPTION 'journal entry % does not balance: % postings summing to % micro-units (% in another currency)',
            entry, n, total, foreign_currency USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER journal_entries_balance AFTER INSERT ON journal_entries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION journal_entry_balances();
CREATE CONSTRAINT TRIGGER postings_balance AFTER INSERT ON postings
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION journal_entry_balances();

-- Rated usage: one row per allocation and hourly period, the subledger behind the usage
-- entries. `amount_micro` telescopes: floor(price × seconds to the period's end) minus the
-- same up to its start, so an allocation's charges sum to its exact cost, floored once.
CREATE TABLE usage_charges (
    allocation_id        uuid NOT NULL REFERENCES usage_intervals (allocation_id),
    period_start         timestamptz NOT NULL CHECK (extract(epoch FROM period_start) % 3600 = 0),
    tenant_id            uuid NOT NULL,
    project_id           uuid NOT NULL,
    sku_id               uuid NOT NULL,
    gpu_count            integer NOT NULL,
    price_per_hour_minor bigint NOT NULL,
    currency             text NOT NULL,
    -- Running time inside the period, in microseconds (exact; no rounding).
    rated_us             bigint NOT NULL CHECK (rated_us > 0 AND rated_us <= 3600000000),
    amount_micro         bigint NOT NULL CHECK (amount_micro >= 0),
    entry_id             bigint NOT NULL REFERENCES journal_entries (id),
    rated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (allocation_id, period_start)
);
CREATE INDEX usage_charges_tenant_period ON usage_charges (tenant_id, period_start);

-- Rated spend per project and month, kept by rating in the statement that writes the charges:
-- what a launch's budget check and the billing page read, instead of summing a month of
-- hourly charges. `rating_is_exact_balanced_and_idempotent` checks it against the charges.
CREATE TABLE usage_month_totals (
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    project_id   uuid NOT NULL,
    month        date NOT NULL CHECK (extract(day FROM month) = 1),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_micro bigint NOT NULL CHECK (amount_micro >= 0),
    PRIMARY KEY (tenant_id, project_id, month, currency)
);

-- Invoices: one per tenant, calendar month and currency. Numbers come from one sequence.
CREATE SEQUENCE invoice_numbers;
CREATE TABLE invoices (
    id                   uuid PRIMARY KEY,
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    month                date NOT NULL CHECK (extract(day FROM month) = 1),
    currency             text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status               text NOT NULL DEFAULT 'draft'
                         CHECK (status IN ('draft', 'open', 'paid', 'void', 'uncollectible')),
    number               text UNIQUE CHECK (number ~ '^GPU-[0-9]{6}-[0-9]{4,}$'),
    subtotal_minor       bigint NOT NULL CHECK (subtotal_minor >= 0),
    credit_applied_minor bigint NOT NULL DEFAULT 0,
    total_minor          bigint NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    finalized_at         timestamptz,
    -- Stripe's side, filled by the sync worker and the webhook.
    stripe_invoice_id    text UNIQUE CHECK (stripe_invoice_id ~ '^in_[A-Za-z0-9_]{1,200}$'),
    hosted_invoice_url   text CHECK (hosted_invoice_url ~ '^https?://'),
    stripe_status        text,
    paid_at              timestamptz,
    payment_failed_at    timestamptz,
    payment_error        text CHECK (length(payment_error) <= 500),
    closed_at            timestamptz,
    UNIQUE (tenant_id, month, currency),
    CHECK (credit_applied_minor BETWEEN 0 AND subtotal_minor),
    CHECK (total_minor = subtotal_minor - credit_applied_minor),
    CHECK ((status = 'draft') = (number IS NULL)),
    CHECK ((status = 'draft') = (finalized_at IS NULL)),
    CHECK ((status = 'paid') = (paid_at IS NOT NULL))
);
CREATE INDEX invoices_status ON invoices (status, month);

CREATE TABLE invoice_lines (
    invoice_id      uuid NOT NULL REFERENCES invoices (id),
    line_no         integer NOT NULL CHECK (line_no > 0),
    kind            text NOT NULL CHECK (kind IN ('usage', 'credit')),
    project_id      uuid,
    sku_id          uuid REFERENCES skus (id),
    description     text NOT NULL CHECK (length(description) BETWEEN 1 AND 500),
    -- GPU-seconds × 10^6 (exact), shown as GPU-hours.
    gpu_us          bigint NOT NULL DEFAULT 0 CHECK (gpu_us >= 0),
    -- Micro-units per GPU-hour (exact: SKU prices are whole cents per hour, GPU counts divide 10^4).
    unit_price_micro bigint NOT NULL DEFAULT 0,
    -- What rating posted for this line, before rounding.
    rated_micro     bigint NOT NULL DEFAULT 0,
    amount_minor    bigint NOT NULL,
    stripe_invoice_item_id text UNIQUE,
    PRIMARY KEY (invoice_id, line_no),
    CHECK ((kind = 'usage') = (project_id IS NOT NULL AND sku_id IS NOT NULL)),
    CHECK (kind <> 'credit' OR amount_minor < 0)
);

-- A finalised invoice never changes: its number and amounts are fixed, and its status only
-- moves forward (open → paid, void or uncollectible; uncollectible → paid or void).
CREATE FUNCTION invoices_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN
            RAISE EXCEPTION 'invoice % is finalised and can''t be deleted', OLD.number
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status <> 'draft' AND (NEW.tenant_id, NEW.month, NEW.currency, NEW.number,
            NEW.subtotal_minor, NEW.credit_applied_minor, NEW.total_minor, NEW.finalized_at)
        IS DISTINCT FROM (OLD.tenant_id, OLD.month, OLD.currency, OLD.number,
            OLD.subtotal_minor, OLD.credit_applied_minor, OLD.total_minor, OLD.finalized_at) THEN
        RAISE EXCEPTION 'invoice % is finalised; its number and amounts never change (issue a credit note)',
            OLD.number USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.status <> OLD.status AND NOT (OLD.status, NEW.status) IN (
        ('draft', 'open'), ('open', 'paid'), ('open', 'void'), ('open', 'uncollectible'),
        ('uncollectible', 'paid'), ('uncollectible', 'void')) THEN
        RAISE EXCEPTION 'invoice % can''t go from % to %', coalesce(OLD.number, OLD.id::text),
            OLD.status, NEW.status USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.stripe_invoice_id IS NOT NULL AND NEW.stripe_invoice_id IS DISTINCT FROM OLD.stripe_invoice_id THEN
        RAISE EXCEPTION 'invoice % is already linked to Stripe invoice %', OLD.number,
            OLD.stripe_invoice_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER invoices_guard BEFORE UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION invoices_guard();

-- Lines change only while their invoice is a draft (the Stripe item id is recorded once).
CREATE FUNCTION invoice_lines_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    inv record;
BEGIN
    SELECT status, number INTO inv FROM invoices
    WHERE id = CASE TG_OP WHEN 'DELETE' THEN OLD.invoice_id ELSE NEW.invoice_id END;
    IF inv.status = 'draft' THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.stripe_invoice_item_id IS NULL
       AND (NEW.invoice_id, NEW.line_no, NEW.kind, NEW.project_id, NEW.sku_id, NEW.description,
            NEW.gpu_us, NEW.unit_price_micro, NEW.rated_micro, NEW.amount_minor)
           IS NOT DISTINCT FROM
           (OLD.invoice_id, OLD.line_no, OLD.kind, OLD.project_id, OLD.sku_id, OLD.description,
            OLD.gpu_us, OLD.unit_price_micro, OLD.rated_micro, OLD.amount_minor) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'invoice % is finalised; its lines never change', inv.number
        USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER invoice_lines_guard BEFORE INSERT OR UPDATE OR DELETE ON invoice_lines
    FOR EACH ROW EXECUTE FUNCTION invoice_lines_guard();

-- Usage can't be rated into a month whose invoice is final: late charges would make the
-- invoice and the ledger disagree.
CREATE FUNCTION usage_charges_month_open() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM invoices i
               WHERE i.tenant_id = NEW.tenant_id AND i.currency = NEW.currency
                 AND i.month = date_trunc('month', NEW.period_start AT TIME ZONE 'UTC')::date
                 AND i.status <> 'draft') THEN
        RAISE EXCEPTION 'usage of allocation % in % is after that month was invoiced',
            NEW.allocation_id, to_char(NEW.period_start AT TIME ZONE 'UTC', 'YYYY-MM')
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER usage_charges_month_open BEFORE INSERT ON usage_charges
    FOR EACH ROW EXECUTE FUNCTION usage_charges_month_open();

-- Credit notes reverse part of a finalised invoice, never more than its total.
CREATE TABLE credit_notes (
    id           uuid PRIMARY KEY,
    invoice_id   uuid NOT NULL REFERENCES invoices (id),
    amount_minor bigint NOT NULL CHECK (amount_minor > 0),
    reason       text NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 500),
    entry_id     bigint NOT NULL REFERENCES journal_entries (id),
    created_by   uuid NOT NULL REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_notes_invoice ON credit_notes (invoice_id);

CREATE FUNCTION credit_notes_within_invoice() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    inv record;
    noted bigint;
BEGIN
    SELECT * INTO inv FROM invoices WHERE id = NEW.invoice_id FOR UPDATE;
    IF inv.status NOT IN ('open', 'paid') THEN
        RAISE EXCEPTION 'invoice % is %; credit notes are for open or paid invoices',
            coalesce(inv.number, inv.id::text), inv.status USING ERRCODE = 'check_violation';
    END IF;
    SELECT coalesce(sum(amount_minor), 0) INTO noted FROM credit_notes WHERE invoice_id = NEW.invoice_id;
    IF noted + NEW.amount_minor > inv.total_minor THEN
        RAISE EXCEPTION 'credit notes on invoice % would total % of a % invoice',
            inv.number, noted + NEW.amount_minor, inv.total_minor USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER credit_notes_within_invoice BEFORE INSERT ON credit_notes
    FOR EACH ROW EXECUTE FUNCTION credit_notes_within_invoice();

-- The ledger is append-only: corrections are reversing entries.
CREATE FUNCTION ledger_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: post a reversing entry instead', TG_TABLE_NAME
        USING ERRCODE = 'check_violation';
END;
$$;
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['journal_entries', 'postings', 'usage_charges', 'credit_notes'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I
                        FOR EACH ROW EXECUTE FUNCTION ledger_is_append_only()', t || '_append_only', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I
                        FOR EACH STATEMENT EXECUTE FUNCTION ledger_is_append_only()', t || '_no_truncate', t);
    END LOOP;
END;
$$;

-- Stripe calls wait here, written in the transaction that decides them: an invoice's sync,
-- or a credit note's (which waits until its invoice is on Stripe).
CREATE TABLE billing_outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           text NOT NULL CHECK (kind IN ('stripe.invoice', 'stripe.credit_note')),
    invoice_id     uuid NOT NULL REFERENCES invoices (id),
    credit_note_id uuid REFERENCES credit_notes (id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    available_at   timestamptz NOT NULL DEFAULT now(),
    attempts       integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error     text,
    done_at        timestamptz,
    CHECK ((kind = 'stripe.credit_note') = (credit_note_id IS NOT NULL))
);
CREATE UNIQUE INDEX billing_outbox_one_per_object ON billing_outbox (kind, invoice_id, credit_note_id) NULLS NOT DISTINCT;
CREATE INDEX billing_outbox_pending ON billing_outbox (available_at) WHERE done_at IS NULL;

-- A credit note's Stripe twin (credit notes themselves are append-only).
CREATE TABLE stripe_credit_notes (
    credit_note_id        uuid PRIMARY KEY REFERENCES credit_notes (id),
    stripe_credit_note_id text NOT NULL UNIQUE CHECK (stripe_credit_note_id ~ '^cn_[A-Za-z0-9_]{1,200}$'),
    created_at            timestamptz NOT NULL DEFAULT now()
);

-- Stripe's webhook events, by id: each is processed once, whatever the delivery.
CREATE TABLE stripe_events (
    id                text PRIMARY KEY CHECK (id ~ '^evt_[A-Za-z0-9_]{1,200}$'),
    type              text NOT NULL,
    stripe_invoice_id text,
    -- Stripe's `created` (seconds): orders events that arrive out of order.
    created           timestamptz NOT NULL,
    payload           jsonb NOT NULL,
    received_at       timestamptz NOT NULL DEFAULT now(),
    processed_at      timestamptz,
    outcome           text
);
CREATE INDEX stripe_events_pending ON stripe_events (stripe_invoice_id, created) WHERE processed_at IS NULL;
