// Invoices against Stripe, in a real browser: someone changes a finalised invoice in Stripe's
// dashboard (the local Stripe test server's `/_test/invoices/{id}`, which sends no event). The
// next reconciliation run records it with both sides; the operations panel counts it under
// Billing and lists it among the failures; our invoice and its money stay as they were. Put
// right in Stripe, the finding clears.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, ADMIN_PASSWORD, adminSignIn, hydrated, openBrowser, shot, sql, until } from '../support.mjs';

const STRIPE = (process.env.STRIPE_API ?? '').replace(/\/$/, '');

async function editInStripe(id, patch) {
  const r = await fetch(`${STRIPE}/_test/invoices/${id}`, { method: 'POST', body: JSON.stringify(patch) });
  assert.equal(r.status, 204, await r.text());
}

test('an invoice changed in Stripe is found, shown to operators, and changes no money', async (t) => {
  if (!process.env.PORTAL_TEST_PSQL || !process.env.PORTAL_TEST_DATABASE_URL) return t.skip('SKIPPED: PORTAL_TEST_PSQL/DATABASE_URL are not set (cargo xtask test sets them)');
  if (!STRIPE) return t.skip('SKIPPED: STRIPE_API is not set (cargo xtask test starts the Stripe test server)');
  assert.ok(ADMIN_PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');

  // A finalised invoice the sync worker has brought to Stripe.
  let row = '';
  await until('an invoice synced to Stripe', async () => {
    row = sql(`SELECT id || ' ' || stripe_invoice_id || ' ' || number || ' ' || total_minor || ' ' || status || ' ' || currency
               FROM invoices WHERE stripe_invoice_id IS NOT NULL AND status <> 'draft' ORDER BY finalized_at LIMIT 1`);
    return row !== '';
  });
  const [invoice, stripeId, number, total, status, currency] = row.split(' ');
  const before = sql(`SELECT total_minor || ' ' || status || ' ' || (SELECT count(*) FROM journal_entries WHERE invoice_id = '${invoice}') FROM invoices WHERE id = '${invoice}'`);

  const admin = await openBrowser();
  try {
    await editInStripe(stripeId, {
      total: 1,
      status: 'void',
      status_transitions: { voided_at: Math.floor(Date.now() / 1000) - 3600 },
    });
    await adminSignIn(admin.page);
    const { page } = admin;
    const failure = page.locator('[data-testid="failures"] tr', { hasText: 'invoice_mismatch' });
    await until('the mismatch on the operations panel', async () => {
      await page.goto(`${BASE}/admin/ops`);
      return (await failure.count()) === 1;
    });
    const cells = await failure.locator('td').allInnerTexts();
    const money = (minor) => `${(Number(minor) / 100).toFixed(2)} ${currency}`;
    assert.deepEqual(cells.slice(1), [
      'invoice_mismatch', 'Stripe',
      `invoice ${number}: ours ${money(total)} ${status}, Stripe's ${money(1)} void (${stripeId})`,
    ]);
    assert.equal(await page.locator('[data-testid="invoice-mismatches"]').innerText(), '1');
    assert.equal(
      sql(`SELECT total_minor || ' ' || status || ' ' || (SELECT count(*) FROM journal_entries WHERE invoice_id = '${invoice}') FROM invoices WHERE id = '${invoice}'`),
      before, 'our invoice and its ledger are untouched');
    await hydrated(page);
    await shot(page, 'ops-invoice-mismatch');
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'ops-invoice-mismatch-phone-dark');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1280, height: 800 });

    // Put right in Stripe: cleared, and nothing left on the panel.
    await editInStripe(stripeId, { total: Number(total), status, status_transitions: { voided_at: null } });
    await until('the finding cleared', async () => sql(`SELECT count(*) FROM reconciliation_findings WHERE kind = 'invoice_mismatch' AND subject = '${invoice}' AND cleared_at IS NULL`) === '0');
    await page.goto(`${BASE}/admin/ops`);
    assert.equal(await failure.count(), 0);
    assert.equal(await page.locator('[data-testid="invoice-mismatches"]').innerText(), '0');
  } finally {
    await admin.close();
  }
});
