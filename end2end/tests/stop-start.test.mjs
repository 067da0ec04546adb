// Stop and start in a real browser, against the portal's storage worker (qemu-storage-daemon
// serving qcow2 files over NBD on loopback) and a real node agent (simulated driver, real
// qemu-img): bob stops his running instance, whose disk the agent copies onto a root volume
// before the wipe; the page says what the kept disk costs; he starts it again under the same
// address, and the agent restores the disk. Phone width and both themes are screenshot.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, enrolApprovedNode, hydrated, openBrowser, shot, sql, stopAgent, until } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';

test('bob stops his instance, keeping its disk, and starts it again under the same id', async () => {
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  let agent = null;
  const name = `paused-${RUN}`;
  const nodeName = `gpu-stop-${RUN}`;
  try {
    ({ agent } = await enrolApprovedNode(state, nodeName, 'eu-west-1'));
    await until('the other eu-west-1 nodes are known to be gone', async () => sql(
      `SELECT count(*) FROM nodes WHERE region = 'eu-west-1' AND hostname <> '${nodeName}'
          AND NOT ledger_only AND NOT heartbeat_lapsed AND admin_state = 'active'`) === '0', 90);
    const b = await openBrowser();
    try {
      const { page } = b;
      await ssoSignIn(page, 'bob@acme.example');
      await page.goto(`${BASE}/launch?sku=l40s.1x&region=eu-west-1`);
      await hydrated(page);
      const launch = page.locator('#launch');
      await launch.locator('select[name="image"]').selectOption('ubuntu-24.04-cuda');
      await launch.getByLabel('Name').fill(name);
      await launch.locator('textarea[name="ssh_public_keys"]').fill(KEY);
      await launch.getByRole('button', { name: 'Launch' }).click();
      await page.waitForURL(/\/allocations\/[0-9a-f-]{36}$/);
      const url = page.url();
      const id = url.split('/').at(-1);
      const lifecycle = page.locator('[data-testid="state"]');
      await lifecycle.filter({ hasText: 'running' }).waitFor({ timeout: 40_000 });
      assert.equal(await page.locator('#start').count(), 0, 'a running instance has no Start');

      // Before stopping, the page says what the kept disk will cost.
      assert.match(
        await page.getByTestId('stop-keeps').innerText(),
        /keeps its disk \([\d,]+ GiB for [\d,]+\.\d{2} USD a month\)/,
      );
      // Stopped: the agent saves the disk before the wipe, and the page says what it keeps.
      await page.locator('#stop').getByRole('button', { name: 'Stop' }).click();
      await lifecycle.filter({ hasText: 'stopped' }).waitFor({ timeout: 60_000 });
      assert.match(
        await page.getByTestId('stopped-disk').innerText(),
        /^Its disk is kept on the region's storage: [\d,]+ GiB for [\d,]+\.\d{2} USD a month\. Its GPUs are free for others\.$/,
      );
      assert.equal(await page.getByTestId('desired').innerText(), 'stopped');
      assert.equal(await page.getByText('Desired and observed differ').count(), 0);
      assert.equal(await page.getByTestId('ssh').count(), 0, 'nothing to connect to while stopped');
      assert.equal(await page.locator('#stop').count(), 0);
      const saved = sql(`SELECT p.status FROM agent_task_phases p JOIN agent_tasks t ON t.id = p.task_id
                          WHERE t.allocation_id = '${id}' AND p.phase = 'save_root_disk' AND p.status = 'succeeded'`);
      assert.equal(saved, 'succeeded', 'the host copied the disk');
      assert.equal(sql(`SELECT state FROM volumes WHERE root_of = '${id}'`), 'available');
      await shot(page, 'instance-stopped');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot(page, 'instance-stopped-phone');
      await page.emulateMedia({ colorScheme: 'dark' });
      await shot(page, 'instance-stopped-phone-dark');
      await page.setViewportSize({ width: 1280, height: 800 });
      await shot(page, 'instance-stopped-dark');
      await page.emulateMedia({ colorScheme: 'light' });

      // The list shows it among the active ones, stopped.
      await page.goto(`${BASE}/allocations`);
      await hydrated(page);
      await page.locator(`#allocations tr[data-allocation="${name}"] .state`, { hasText: 'stopped' }).waitFor();

      // Started again: the same page, running, its disk restored and the root volume erased.
      await page.goto(url);
      await hydrated(page);
      await page.locator('#start').getByRole('button', { name: 'Start' }).click();
      await lifecycle.filter({ hasText: 'running' }).waitFor({ timeout: 60_000 });
      assert.equal(page.url(), url);
      assert.match(await page.getByTestId('ssh').innerText(), /^ssh -p \d+ ubuntu@/);
      assert.equal(await page.getByTestId('stopped-disk').count(), 0);
      const restored = sql(`SELECT count(*) FROM agent_tasks WHERE kind = 'slice.vm_provision'
                             AND state = 'succeeded' AND spec ? 'restore_from'
                             AND allocation_id IN (SELECT id FROM allocations WHERE instance_id = '${id}')`);
      assert.equal(restored, '1', 'the start restored the saved disk');
      await until('the saved disk is erased', async () =>
        sql(`SELECT state FROM volumes WHERE root_of = '${id}'`) === 'deleted', 30);
      await shot(page, 'instance-started-again');

      // Released for good.
      const release = page.locator('#release');
      await release.getByLabel(/I understand/).check();
      await release.getByRole('button', { name: 'Release' }).click();
      await lifecycle.filter({ hasText: 'released' }).waitFor({ timeout: 60_000 });
    } finally {
      await b.close();
    }
  } finally {
    await stopAgent(agent, state);
  }
});
