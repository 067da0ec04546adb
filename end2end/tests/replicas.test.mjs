// Two server replicas on one database, as a deployment behind a load balancer runs them: bob
// signs in on one, launches on the other, watches it run there (the agent talks only to the
// first replica), releases it on the first, and sees it released and cleaned on the second.
// Sessions, the task queue, the agents' reports and the pages are all shared.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, ADMIN_PASSWORD, enrolApprovedNode, hydrated, launchSlice, openBrowser, shot, until, stopAgent } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const HOST = `gpu-replicas-${RUN}`;
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';
const SECOND = process.env.PORTAL_URL_REPLICA;

test('launched on one replica, released on the other: both see the whole lifecycle', async (t) => {
  if (!SECOND) return t.skip('SKIPPED: PORTAL_URL_REPLICA is not set (cargo xtask test starts a second replica)');
  assert.ok(ADMIN_PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  assert.notEqual(SECOND, BASE);
  for (const base of [BASE, SECOND]) {
    assert.equal((await fetch(`${base}/readyz`)).status, 200, `${base} is ready`);
  }
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  let agent = null;
  const b = await openBrowser();
  try {
    ({ agent } = await enrolApprovedNode(state, HOST, 'us-east-1'));
    const { page } = b;
    // Only this node sells L40S in us-east-1 once earlier tests' agents have gone silent.
    await until('us-east-1 selling only this node', async () => {
      await page.goto(`${SECOND}/catalog`);
      return (await page.locator('tr[data-sku="l40s.1x"] span[data-region="us-east-1"]').innerText()) === 'us-east-1: 4';
    }, 90);

    // Signed in on the first replica; the session is the database's, so the second knows bob.
    await ssoSignIn(page, 'bob@acme.example');
    const path = new URL(await launchSlice(page, SECOND, { sku: 'l40s.1x', region: 'us-east-1', name: `replicas-${RUN}`, key: KEY })).pathname;

    // The second replica queued the task; the agent, talking to the first, runs it.
    await until('running, on the second replica', async () => {
      await page.goto(SECOND + path);
      return (await page.locator('[data-testid="state"]').innerText()) === 'running';
    });
    assert.equal(await page.locator('[data-testid="node"]').innerText(), `us-east-1 / ${HOST}`);
    await page.goto(BASE + path);
    assert.equal(await page.locator('[data-testid="state"]').innerText(), 'running', 'the first replica agrees');

    // Released on the first replica; the second sees it released and cleaned.
    await hydrated(page);
    const release = page.locator('#release');
    await release.getByLabel(/I understand/).check();
    await release.getByRole('button', { name: 'Release' }).click();
    await until('released, on the second replica', async () => {
      await page.goto(SECOND + path);
      return (await page.locator('[data-testid="state"]').innerText()) === 'released';
    });
    await shot(page, 'allocation-released-on-replica');
  } finally {
    await b.close();
    await stopAgent(agent, state);
  }
});
