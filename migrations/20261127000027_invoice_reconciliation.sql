-- Reconciliation also compares finalised invoices with what Stripe holds for them (total and
-- status). Such a finding is about an invoice, not a host: no node.
ALTER TABLE reconciliation_findings DROP CONSTRAINT reconciliation_findings_kind_check;
ALTER TABLE reconciliation_findings ADD CONSTRAINT reconciliation_findings_kind_check
    CHECK (kind IN ('orphan_vm', 'missing_vm', 'ledger_gap', 'invoice_mismatch'));
ALTER TABLE reconciliation_findings ADD CONSTRAINT reconciliation_findings_hosts_have_a_node
    CHECK (kind = 'invoice_mismatch' OR node_id IS NOT NULL);
