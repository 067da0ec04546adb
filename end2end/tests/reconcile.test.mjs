// Reconciliation in a real browser, with a real agent: a simulated host is left holding a
// slot lease for an allocation the control plane never made (what a botched manual cleanup or
// a second control plane would leave). Its heartbeat says so; the next reconciliation run
// records the finding, takes that free slot out of placement (audited as the system), and the
// operations panel lists it with its evidence, linked to the node. The host lets go: the
// finding clears, the slot stays blocked until the operator marks it clean, saying what was
// checked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { BASE, ADMIN_PASSWORD, adminSignIn, enrolApprovedNode, hydrated, openBrowser, shot, sql, until, stopAgent } from '../support.mjs';

const RUN = Date.now().toString(36);
const HOST = `gpu-recon-${RUN}`;

test('a host holding what no allocation owns is found, shown, quarantined, and cleared by an operator', async (t) => {
  if (!process.env.PORTAL_TEST_PSQL || !process.env.PORTAL_TEST_DATABASE_URL) return t.skip('SKIPPED: PORTAL_TEST_PSQL/DATABASE_URL are not set (cargo xtask test sets them)');
  assert.ok(ADMIN_PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  let agent = null;
  const admin = await openBrowser();
  try {
    ({ agent } = await enrolApprovedNode(state, HOST, 'ap-south-1'));
    const slot = sql(`SELECT s.id FROM node_resource_slots s JOIN nodes n ON n.id = s.node_id
                      WHERE n.hostname = '${HOST}' AND s.slot_index = 2 AND s.retired_at IS NULL`);
    assert.match(slot, /^[0-9a-f-]{36}$/);

    // The host's lease store gets a lease the control plane knows nothing of.
    const stranger = randomUUID();
    const lease = join(state, 'leases', `${slot}.json`);
    mkdirSync(join(state, 'leases'), { recursive: true });
    writeFileSync(lease, JSON.stringify({
      slot_id: slot, slot_index: 2, allocation_id: stranger, task_id: randomUUID(), kind: 'provision',
      phase: 'running', telemetry_token: 'x'.repeat(32), updated_at: Math.floor(Date.now() / 1000),
    }));

    // The operations panel lists it, with the evidence, linked to the node.
    await adminSignIn(admin.page);
    const { page } = admin;
    const row = page.locator('[data-testid="attention"] tr[data-kind="orphan_vm"]', { hasText: HOST });
    await until('the finding on the operations panel', async () => {
      await page.goto(`${BASE}/admin/ops`);
      return (await row.count()) === 1;
    });
    assert.deepEqual((await row.locator('td').allInnerTexts()).slice(0, 3), [
      'Host holds an unknown allocation', HOST,
      `the host holds 1 slot lease(s) for allocation ${stranger}; no such allocation`,
    ]);
    assert.equal(sql(`SELECT count(*) FROM reconciliation_findings WHERE kind = 'orphan_vm' AND cleared_at IS NULL AND allocation_id = '${stranger}' AND quarantined`), '1');
    await hydrated(page);
    await shot(page, 'ops-reconciliation');
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'ops-reconciliation-phone-dark');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1280, height: 800 });

    // The node page: that slot is out of placement with the reason, the audit trail says who.
    await row.getByRole('link', { name: HOST }).click();
    await page.waitForURL(/\/fleet\/[0-9a-f-]{36}$/);
    await hydrated(page);
    const slotRow = page.locator('[data-testid="slots"] tbody tr').filter({ has: page.locator('td:first-child:text-is("2")') });
    assert.equal(await slotRow.getAttribute('data-slot-state'), 'cleanup blocked');
    assert.match(await slotRow.innerText(), new RegExp(`reconciliation: the host holds 1 slot lease\\(s\\) for allocation ${stranger}`));
    assert.equal(await page.locator('[data-testid="schedulable"]').innerText(), '3 of 4');
    const audit = page.locator('section[aria-labelledby="node-audit"] tbody tr', { hasText: 'node.slot.quarantine' });
    assert.equal(await audit.count(), 1);
    assert.match(await audit.innerText(), /system/);

    // The host lets go: the finding clears; the slot waits for the operator.
    unlinkSync(lease);
    await until('the finding cleared', async () => sql(`SELECT count(*) FROM reconciliation_findings WHERE allocation_id = '${stranger}' AND cleared_at IS NULL`) === '0');
    await page.goto(`${BASE}/admin/ops`);
    assert.equal(await row.count(), 0);
    await page.goBack();
    await hydrated(page);
    assert.equal(await slotRow.getAttribute('data-slot-state'), 'cleanup blocked');
    await slotRow.getByLabel('What you checked', { exact: true }).fill('no VM or lease on the host for that allocation');
    await slotRow.getByRole('button', { name: 'Mark clean' }).click();
    await until('the slot back in placement', async () => {
      await page.reload();
      return (await page.locator('[data-testid="schedulable"]').innerText()) === '4 of 4';
    });
  } finally {
    await admin.close();
    await stopAgent(agent, state);
  }
});
