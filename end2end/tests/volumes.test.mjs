// Volumes in a real browser, against the portal's storage worker (qemu-storage-daemon serving
// qcow2 files over NBD on loopback) and a real node agent (simulated driver): bob creates a
// volume, attaches it to his running instance, sees it in use and not deletable, detaches it,
// snapshots it and makes a new volume from the snapshot, and deletes them. Phone width and
// both themes are screenshot.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, enrolApprovedNode, hydrated, openBrowser, shot, sql, stopAgent, until } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';

test('bob keeps data on a volume: creates it, attaches it to a running instance, detaches and deletes it', async () => {
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  let agent = null;
  const name = `data-${RUN}`;
  const host = `vol-host-${RUN}`;
  try {
    ({ agent } = await enrolApprovedNode(state, `gpu-vol-${RUN}`, 'eu-west-1'));
    // A node whose agent another test stopped counts as live for a minute: the slice must land
    // on this one, whose agent answers.
    await until('the other eu-west-1 nodes are known to be gone', async () => sql(
      `SELECT count(*) FROM nodes WHERE region = 'eu-west-1' AND hostname <> 'gpu-vol-${RUN}'
          AND NOT ledger_only AND NOT heartbeat_lapsed AND admin_state = 'active'`) === '0', 90);
    const b = await openBrowser();
    try {
      const { page } = b;
      await ssoSignIn(page, 'bob@acme.example');
      await page.goto(`${BASE}/volumes`);
      await hydrated(page);
      const form = page.locator('#new-volume');
      // A bad name is refused by name, on its field; nothing is made.
      await form.getByLabel('Name').fill('my data!');
      // Each region offered says what its storage costs.
      assert.equal(
        await form.getByLabel('Region').locator('option[value="eu-west-1"]').innerText(),
        'eu-west-1 · 0.10 USD/GiB-month',
      );
      await form.getByLabel('Region').selectOption('eu-west-1');
      await form.getByLabel('Size (GiB)').fill('20');
      await form.getByRole('button', { name: 'Create volume' }).click();
      await page.locator('#volume-name-error').filter({ hasText: /my data!/ }).waitFor();
      assert.equal(await form.getByLabel('Name').getAttribute('aria-invalid'), 'true');
      await form.getByLabel('Name').fill(name);
      await form.getByRole('button', { name: 'Create volume' }).click();
      const row = page.locator(`#volumes tr[data-volume="${name}"]`);
      // Made by the storage worker; the list refreshes itself until it is available.
      await row.locator('[data-testid="state"]', { hasText: 'available' }).waitFor({ timeout: 30_000 });
      // 20 GiB at 0.10 USD per GiB-month.
      assert.match(await row.locator('[data-testid="size"]').innerText(), /^20 GiB\s/);
      assert.equal(await row.getByTestId('monthly-cost').innerText(), '2.00 USD a month');
      assert.equal(sql(`SELECT count(*) FROM volumes WHERE name = 'my data!'`), '0');

      // Launched with the volume ticked: the instance starts in its region, with it attached.
      await page.goto(`${BASE}/launch?sku=l40s.1x`);
      await hydrated(page);
      const launch = page.locator('#launch');
      await launch.locator('select[name="image"]').selectOption('ubuntu-24.04-cuda');
      await launch.getByLabel('Name').fill(host);
      await launch.locator('textarea[name="ssh_public_keys"]').fill(KEY);
      await launch.getByLabel(new RegExp(`^${name} \\(20 GiB, eu-west-1\\)`)).check();
      await shot(page, 'launch-with-volume');
      await launch.getByRole('button', { name: 'Launch' }).click();
      await page.waitForURL(/\/allocations\/[0-9a-f-]{36}$/);
      await page.locator('[data-testid="state"]', { hasText: 'running' }).waitFor({ timeout: 40_000 });
      await page.goto(`${BASE}/volumes`);
      await hydrated(page);
      await row.locator('[data-testid="state"]', { hasText: 'in use' }).waitFor({ timeout: 30_000 });
      assert.equal(await row.locator('[data-testid="attached"]').innerText(), host);
      // Detached, to be attached again from this page.
      await row.getByRole('button', { name: `Detach ${name}` }).click();
      await row.locator('[data-testid="state"]', { hasText: 'available' }).waitFor({ timeout: 30_000 });

      // Attached to the running instance of its region: in use, and not deletable.
      await row.getByLabel(`Instance to attach ${name} to`).selectOption({ label: host });
      await row.getByRole('button', { name: 'Attach' }).click();
      await row.locator('[data-testid="state"]', { hasText: 'in use' }).waitFor({ timeout: 30_000 });
      assert.equal(await row.locator('[data-testid="attached"]').innerText(), host);
      assert.equal(await row.getByRole('button', { name: `Delete ${name}` }).count(), 0);
      await shot(page, 'volumes-in-use');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot(page, 'volumes-in-use-phone');
      await page.emulateMedia({ colorScheme: 'dark' });
      await shot(page, 'volumes-in-use-phone-dark');
      await page.setViewportSize({ width: 1280, height: 800 });
      await shot(page, 'volumes-in-use-dark');
      await page.emulateMedia({ colorScheme: 'light' });
      // What the host was asked to plug in is the volume's NBD export.
      const plugged = sql(`SELECT spec->'volumes'->0->'target'->>'protocol' FROM agent_tasks
                            WHERE kind = 'allocation.volumes_update' AND state = 'succeeded'
                            ORDER BY finished_at DESC LIMIT 1`);
      assert.equal(plugged, 'nbd');

      // Detached (after the question).
      await row.getByRole('button', { name: `Detach ${name}` }).click();
      assert.match(b.asked.at(-1), /^Detach data-/);
      await row.locator('[data-testid="state"]', { hasText: 'available' }).waitFor({ timeout: 30_000 });

      // A snapshot of it, then a new volume made from the snapshot, of the same size.
      const snapName = `snap-${RUN}`;
      await row.getByLabel(`Snapshot name for ${name}`).fill(snapName);
      await row.getByRole('button', { name: `Snapshot ${name}` }).click();
      const snap = page.locator(`#snapshots tr[data-snapshot="${snapName}"]`);
      await snap.locator('[data-testid="state"]', { hasText: 'available' }).waitFor({ timeout: 30_000 });
      assert.match(await snap.locator('[data-testid="size"]').innerText(), /^20 GiB\s+2\.00 USD a month$/);
      assert.equal(sql(`SELECT state FROM volume_snapshots WHERE name = '${snapName}'`), 'available');
      // The volume is kept while it has a snapshot, and the page says why.
      await row.getByRole('button', { name: `Delete ${name}` }).click();
      await page.getByText(/has 1 snapshot; delete it first/).waitFor();
      assert.equal(await row.locator('[data-testid="state"]').innerText(), 'available');
      const copyName = `copy-${RUN}`;
      await snap.getByLabel(`Name of the new volume from ${snapName}`).fill(copyName);
      await snap.getByRole('button', { name: 'New volume' }).click();
      const copy = page.locator(`#volumes tr[data-volume="${copyName}"]`);
      await copy.locator('[data-testid="state"]', { hasText: 'available' }).waitFor({ timeout: 30_000 });
      assert.match(await copy.locator('[data-testid="size"]').innerText(), /^20 GiB\s/);
      assert.equal(await copy.locator('[data-testid="from-snapshot"]').innerText(), `from snapshot ${snapName}`);
      assert.equal(
        sql(`SELECT s.name FROM volumes v JOIN volume_snapshots s ON s.id = v.source_snapshot WHERE v.name = '${copyName}'`),
        snapName,
      );
      await shot(page, 'volumes-snapshots');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot(page, 'volumes-snapshots-phone');
      await page.setViewportSize({ width: 1280, height: 800 });
      // The snapshot deleted (after the question): erased, and gone from the list.
      await snap.getByRole('button', { name: `Delete snapshot ${snapName}` }).click();
      assert.match(b.asked.at(-1), /^Delete snapshot snap-/);
      await snap.waitFor({ state: 'detached', timeout: 30_000 });
      await copy.getByRole('button', { name: `Delete ${copyName}` }).click();
      await copy.waitFor({ state: 'detached', timeout: 30_000 });

      // Then the volume deleted: erased, and gone from the list.
      await row.getByRole('button', { name: `Delete ${name}` }).click();
      assert.match(b.asked.at(-1), /erased and can't be recovered/);
      await row.waitFor({ state: 'detached', timeout: 30_000 });
      assert.equal(sql(`SELECT count(*) FROM volume_erasures e JOIN volumes v ON v.id = e.volume_id WHERE v.name = '${name}'`), '1');
    } finally {
      await b.close();
    }
  } finally {
    await stopAgent(agent, state);
  }
});

test('fiona (finance) sees the volumes and cannot change them', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await ssoSignIn(page, 'fiona@acme.example');
    await page.goto(`${BASE}/volumes`);
    await hydrated(page);
    assert.equal(await page.locator('h1').innerText(), 'Volumes');
    assert.equal(await page.locator('#new-volume').count(), 0, 'no create form for who may not create');
    assert.equal(await page.getByRole('button', { name: /^(Attach|Detach|Delete|Snapshot|New volume)/ }).count(), 0);
  } finally {
    await b.close();
  }
});
