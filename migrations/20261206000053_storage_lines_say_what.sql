-- An invoice's storage line says what it stores, volumes or their snapshots (#73), so the
-- invoice's SKU column can name it as the line's description does. Older storage lines keep
-- no value and read as block storage, which is what they were billed as.

ALTER TABLE invoice_lines
    ADD COLUMN storage_of text CHECK (storage_of IN ('volumes', 'snapshots')),
    ADD CONSTRAINT invoice_lines_storage_of_storage CHECK (storage_of IS NULL OR kind = 'storage');

-- The same guard as 0050's, with the new column among what a finalised line never changes.
CREATE OR REPLACE FUNCTION invoice_lines_guard() RETURNS trigger
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
            NEW.gpu_us, NEW.unit_price_micro, NEW.rated_micro, NEW.amount_minor,
            NEW.listing_version_id, NEW.run_us, NEW.region, NEW.gib_us, NEW.storage_of)
           IS NOT DISTINCT FROM
           (OLD.invoice_id, OLD.line_no, OLD.kind, OLD.project_id, OLD.sku_id, OLD.description,
            OLD.gpu_us, OLD.unit_price_micro, OLD.rated_micro, OLD.amount_minor,
            OLD.listing_version_id, OLD.run_us, OLD.region, OLD.gib_us, OLD.storage_of) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'invoice % is finalised; its lines never change', inv.number
        USING ERRCODE = 'check_violation';
END;
$$;
