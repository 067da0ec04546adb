// An operator enrols a node; a real node-agent process (simulated driver on the HGX H100
// fixture) enrols with the shown token and discovers; the operator sees the proposal with its
// problems, fixes the missing wipe policy, approves, and sees 8 schedulable slots.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, ADMIN_PASSWORD, adminSignIn, openBrowser, shot, hydrated, waitForProposal, stopAgent } from '../support.mjs';

const AGENT = process.env.NODE_AGENT_BIN ?? 'target/debug/node-agent';
const FIXTURE = 'node-agent/fixtures/hgx-h100-8x';
const HOST = `gpu-hgx-${Date.now().toString(36)}`;

test('enrol, discover an HGX host, fix the wipe policy, approve, and see 8 schedulable slots', async () => {
  assert.ok(ADMIN_PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  const b = await openBrowser();
  let agent = null;
  try {
    const { page } = b;
    await adminSignIn(page);

    await page.goto(`${BASE}/fleet`);
    await hydrated(page);
    const enrol = page.locator('section[aria-labelledby="enrol"]');
    // Bad input is refused with a message naming the field.
    await enrol.getByLabel('Hostname').fill('not a hostname');
    await enrol.getByLabel('Region').fill('eu-west-1');
    await enrol.getByLabel('Rack').fill('r12');
    await enrol.getByLabel('Node family').fill('hgx-h100-8x');
    await enrol.getByRole('button', { name: 'Enrol' }).click();
    assert.match(await enrol.getByRole('alert').innerText(), /^Invalid hostname: use letters, digits and hyphens/);

    await enrol.getByLabel('Hostname').fill(HOST);
    await enrol.getByRole('button', { name: 'Enrol' }).click();
    const tokenBox = enrol.locator('[data-testid="bootstrap-token"]');
    await tokenBox.waitFor();
    const token = (await tokenBox.innerText()).trim();
    assert.match(token, /^gpb_[A-Za-z0-9_-]{43}$/);
    await shot(page, 'fleet-enrolled');

    // The agent exchanges the token for its credential (0600 in its state directory).
    const enrolled = spawnSync(AGENT, ['enroll', '--server', BASE, '--state-dir', state, '--hostname', HOST], {
      env: { ...process.env, NODE_AGENT_BOOTSTRAP_TOKEN: token },
      encoding: 'utf8',
    });
    assert.equal(enrolled.status, 0, enrolled.stderr);
    assert.equal(statSync(join(state, 'credential')).mode & 0o777, 0o600);
    // The token works once.
    const again = spawnSync(AGENT, ['enroll', '--server', BASE, '--state-dir', mkdtempSync(join(tmpdir(), 'node-agent-')), '--hostname', HOST], {
      env: { ...process.env, NODE_AGENT_BOOTSTRAP_TOKEN: token },
      encoding: 'utf8',
    });
    assert.notEqual(again.status, 0);
    assert.match(again.stderr, /already used/);

    agent = spawn(AGENT, ['run', '--state-dir', state, '--driver', 'simulated', '--fixture', FIXTURE], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });

    // The node page shows the proposal once the agent has discovered the host.
    await enrol.getByRole('link', { name: HOST }).click();
    await page.waitForURL(/\/fleet\/[0-9a-f-]{36}$/);
    const nodeUrl = page.url();
    const status = await waitForProposal(page, nodeUrl);
    assert.equal(await status.innerText(), 'pending');
    await hydrated(page);
    const proposal = page.locator('[data-testid="proposal"]');
    assert.equal(await proposal.locator('tr[data-proposed-slot]').count(), 8);
    assert.match(await proposal.innerText(), /4 NVSwitches; NVLink partitions of 8, 4, 4, 2, 2, 2, 2, 1/);
    const problems = await proposal.locator('ul.problems li').allInnerTexts();
    assert.equal(problems.length, 8);
    assert.ok(problems.every((p) => p.startsWith('destructive_wipe_policy is empty; choose one of nvme-format-crypto')), problems.join('\n'));
    assert.equal(await page.locator('[data-testid="schedulable"]').innerText(), '0 of 0');
    await shot(page, 'fleet-proposal');

    // Approving as proposed is refused, slot by slot.
    const approve = proposal.locator('.decision form').first();
    await approve.getByRole('button', { name: 'Approve' }).click();
    const refusal = proposal.getByRole('alert');
    await refusal.waitFor();
    assert.match(await refusal.innerText(), /slot 0: destructive_wipe_policy is empty.*slot 7: destructive_wipe_policy is empty/s);

    // Fix the wipe policy and approve all.
    await approve.getByLabel('Destructive wipe policy').selectOption('nvme-format-crypto');
    await approve.getByRole('button', { name: 'Approve' }).click();
    await page.locator('[data-testid="proposal-status"]', { hasText: 'approved' }).waitFor();
    assert.equal(await page.locator('[data-testid="schedulable"]').innerText(), '8 of 8');
    assert.equal(await page.locator('table[data-testid="slots"] tr[data-slot-state="schedulable"]').count(), 8);
    assert.equal(await page.locator('[data-testid="posture"]').innerText(), 'Fully available');
    const trail = await page.locator('#node-audit').locator('xpath=..').locator('td code').allInnerTexts();
    for (const action of ['node.enrol', 'node.agent.enrol', 'node.discovery.record', 'node.slot_map.approve']) {
      assert.ok(trail.includes(action), `audit trail lacks ${action}: ${trail.join(', ')}`);
    }
    await shot(page, 'fleet-approved');

    // Where tenants reach its guests: the hostname until an operator says otherwise; 8 public
    // ports per slot from the base. A bad address is named under its field; a good one is
    // saved, shown and audited.
    const network = page.locator('#node-network');
    assert.equal(await page.locator('[data-testid="public-host"]').innerText(), `${HOST} (the hostname)`);
    assert.equal(await page.locator('[data-testid="public-ports"]').innerText(), '22000–22063');
    await network.getByLabel('Public address').fill('not a host');
    await network.getByRole('button', { name: 'Save network' }).click();
    await page.locator('#network-host-error', { hasText: 'is not a host name or IPv4 address' }).waitFor();
    assert.equal(await network.getByLabel('Public address').getAttribute('aria-invalid'), 'true');
    await network.getByLabel('Public address').fill(`${HOST}.gpu.example.com`);
    await network.getByLabel('First public port').fill('30000');
    await network.getByRole('button', { name: 'Save network' }).click();
    await page.locator('[data-testid="public-host"]', { hasText: `${HOST}.gpu.example.com` }).waitFor();
    assert.equal(await page.locator('[data-testid="public-ports"]').innerText(), '30000–30063');
    await page.reload();
    assert.ok(
      (await page.locator('#node-audit').locator('xpath=..').locator('td code').allInnerTexts()).includes('node.network'),
      'the change is audited',
    );
    await shot(page, 'fleet-node-network');
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'fleet-node-network-phone-dark');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1280, height: 800 });

    // Drain asks first: refused, nothing changes.
    b.dialogs = 'dismiss';
    await page.getByRole('button', { name: 'Drain' }).click();
    assert.match(b.asked.at(-1), new RegExp(`^Drain ${HOST}\\? Nothing new is placed on it`));
    await page.waitForTimeout(500);
    assert.equal(await page.locator('[data-testid="admin-state"]').innerText(), 'active', 'not drained without a yes');
    // Agreed to, it shows in the posture; the fleet page counts it.
    b.dialogs = 'accept';
    await page.getByRole('button', { name: 'Drain' }).click();
    await page.locator('[data-testid="admin-state"]', { hasText: 'draining' }).waitFor();
    assert.equal(await page.locator('[data-testid="posture"]').innerText(), 'Draining');
    await page.goto(`${BASE}/fleet?posture=draining`);
    assert.equal(await page.locator(`tr[data-node="${HOST}"]`).count(), 1);
    await page.goto(`${BASE}/fleet?posture=fully_available`);
    assert.equal(await page.locator(`tr[data-node="${HOST}"]`).count(), 0);
  } finally {
    await stopAgent(agent, state);
    await b.close();
  }
});
