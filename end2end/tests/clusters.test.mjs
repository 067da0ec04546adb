// Clusters in a real browser, with two real node agents (simulated driver): the platform
// admin imports a topology.conf on the fleet page and sees the tree with each leaf's free
// GPUs; bob asks for five nodes on one leaf and is told what fits, launches four (two per
// node, both under one leaf), follows the cluster page until every member runs, reads the
// topology for his own Slurm, finds the cluster above his instances, and releases it whole;
// fiona (finance) finds what its members cost under its name on the billing page; the admin
// then moves a node to another leaf on its own page.
// The fleet's fabric and the cluster page are screenshot at desktop and phone width, in both
// themes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, adminSignIn, enrolApprovedNode, hydrated, openBrowser, shot, sql, stopAgent } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';

/** Desktop and phone, light and dark. */
async function shots(page, name) {
  await shot(page, name);
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, `${name}-phone`);
  await page.emulateMedia({ colorScheme: 'dark' });
  await shot(page, `${name}-phone-dark`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await shot(page, `${name}-dark`);
  await page.emulateMedia({ colorScheme: 'light' });
}

test('an admin places nodes on the fabric; bob launches a 4-node cluster on one leaf, follows it and releases it', async () => {
  const hosts = [`fab-a-${RUN}`, `fab-b-${RUN}`];
  const states = hosts.map(() => mkdtempSync(join(tmpdir(), 'node-agent-')));
  const agents = [];
  const fabric = `ib-${RUN}`;
  const name = `ring-${RUN}`;
  try {
    for (const [i, host] of hosts.entries()) {
      const { agent } = await enrolApprovedNode(states[i], host, 'us-east-1');
      agents.push(agent);
    }

    // The admin imports where the two nodes hang: one leaf under one spine.
    const a = await openBrowser();
    try {
      const { page } = a;
      await adminSignIn(page);
      await page.goto(`${BASE}/fleet`);
      await hydrated(page);
      const form = page.locator('#fabric-import');
      // A bad fabric name is refused on its field; nothing is placed.
      await form.getByLabel('Fabric').fill('ib 0!');
      await form.locator('textarea[name="topology"]').fill(`SwitchName=l1 Nodes=${hosts.join(',')}\nSwitchName=s1 Switches=l1\n`);
      await form.getByRole('button', { name: 'Import' }).click();
      await page.locator('#fabric-name-error').waitFor();
      assert.equal(sql(`SELECT count(*) FROM node_fabric_places p JOIN nodes n ON n.id = p.node_id
                         WHERE n.hostname LIKE 'fab-%-${RUN}'`), '0');
      await form.getByLabel('Fabric').fill(fabric);
      await form.getByRole('button', { name: 'Import' }).click();
      await page.locator('#fabric-import-result', { hasText: 'Placed 2 node(s)' }).waitFor();
      const leaf = page.locator(`#fabric-tree li[data-fabric="${fabric}"] li[data-leaf="l1"]`);
      await leaf.waitFor();
      // Two 4-GPU L40S nodes, all free.
      assert.equal(await leaf.getByTestId('leaf-free').innerText(), '8 of 8 GPUs free');
      await leaf.locator('summary').click();
      await shots(page, 'fleet-fabric');
    } finally {
      await a.close();
    }

    const b = await openBrowser();
    try {
      const { page } = b;
      await ssoSignIn(page, 'bob@acme.example');
      await page.goto(`${BASE}/launch?sku=l40s.2x`);
      await hydrated(page);
      const launch = page.locator('#launch');
      await launch.getByLabel('Region').selectOption('us-east-1');
      await launch.locator('select[name="image"]').selectOption('ubuntu-24.04-cuda');
      await launch.getByLabel('Name').fill(name);
      await launch.locator('textarea[name="ssh_public_keys"]').fill(KEY);
      // The locality appears once more than one node is asked for.
      assert.equal(await page.locator('#launch-locality').isVisible(), false);
      await launch.getByLabel('Nodes').fill('5');
      await page.locator('#launch-locality').waitFor();
      await launch.getByLabel('Within').selectOption('leaf');
      await launch.getByLabel(/Only there/).check();
      assert.match(await page.locator('#launch-estimate').innerText(), /For 5 nodes/);
      await launch.getByRole('button', { name: 'Launch' }).click();
      await page.locator('.form-error[role="alert"]', { hasText: /5 members don't fit on one leaf now: one leaf holds at most 4/ }).waitFor();
      assert.equal(sql(`SELECT count(*) FROM clusters WHERE name = '${name}'`), '0');

      // Four fit on the one leaf: two on each node.
      await launch.getByLabel('Nodes').fill('4');
      await launch.getByRole('button', { name: 'Launch' }).click();
      await page.waitForURL(/\/clusters\/[0-9a-f-]{36}$/);
      await page.locator('[data-testid="cluster-state"]', { hasText: 'running' }).waitFor({ timeout: 60_000 });
      const members = page.locator('#cluster-members-table tbody tr');
      assert.equal(await members.count(), 4);
      for (let i = 0; i < 4; i++) {
        const row = members.nth(i);
        assert.equal(await row.getByTestId('member-leaf').innerText(), 'l1');
        assert.equal(await row.getByTestId('member-state').innerText(), 'running');
        assert.match(await row.getByTestId('member-ssh').innerText(), /^ssh /);
        // Bob's project keeps east-west traffic off: no private network, and the page says so.
        assert.equal(await row.getByTestId('member-private').innerText(), '—');
      }
      await page.getByTestId('no-private-network').waitFor();
      assert.match(await page.getByTestId('cluster-why').innerText(), new RegExp(`^4 members on leaf l1 \\(spine s1, fabric ${fabric}\\)$`));
      assert.equal(
        await page.getByTestId('topology').innerText(),
        `# topology.conf for cluster ${name} (4 members of l40s.2x, fabric ${fabric})\n` +
          `SwitchName=l1 Nodes=${name}-1,${name}-2,${name}-3,${name}-4\nSwitchName=s1 Switches=l1\n`,
      );
      assert.equal(sql(`SELECT count(DISTINCT node_id) FROM allocations a JOIN clusters c ON c.id = a.cluster_id
                         WHERE c.name = '${name}'`), '2');
      await shots(page, 'cluster-running');
      const clusterUrl = page.url();

      // Above the instances, with each member among them.
      await page.goto(`${BASE}/allocations`);
      await hydrated(page);
      const row = page.locator(`#cluster-list tr[data-cluster="${name}"]`);
      assert.match(await row.innerText(), /running[\s\S]*4 × l40s\.2x · 4 of 4 running/);

      // Finance sees what the members cost together, under the cluster's name.
      const f = await openBrowser();
      try {
        await ssoSignIn(f.page, 'fiona@acme.example');
        await f.page.goto(`${BASE}/billing`);
        await hydrated(f.page);
        const spend = f.page.locator('[data-testid="cluster-spend"]', { hasText: name });
        const project = sql(`SELECT p.slug FROM clusters c JOIN projects p ON p.id = c.project_id WHERE c.name = '${name}'`);
        assert.match(await spend.innerText(), new RegExp(`^${name}\\s+${project}\\s+4\\s+running\\s+\\d{1,3}(,\\d{3})*\\.\\d{2} USD$`));
        await f.page.locator('#cluster-spend').scrollIntoViewIfNeeded();
        await shots(f.page, 'billing-clusters');
      } finally {
        await f.close();
      }

      // Released whole, after the question.
      await page.goto(clusterUrl);
      await hydrated(page);
      await page.getByRole('button', { name: 'Release cluster' }).click();
      assert.match(b.asked.at(-1), new RegExp(`^Release every member of ${name}\\?`));
      await page.locator('[data-testid="cluster-state"]', { hasText: /releasing|released/ }).waitFor({ timeout: 30_000 });
      assert.equal(sql(`SELECT count(*) FROM allocations a JOIN clusters c ON c.id = a.cluster_id
                         WHERE c.name = '${name}' AND a.desired_state <> 'released'`), '0');
      await page.locator('[data-testid="cluster-state"]', { hasText: 'released' }).waitFor({ timeout: 60_000 });
    } finally {
      await b.close();
    }

    // The admin recables the second node by hand on its page: a bad name is refused on its
    // field, then it moves to leaf l2, and the fleet's tree shows it there.
    const c = await openBrowser();
    try {
      const { page } = c;
      await adminSignIn(page);
      const node = sql(`SELECT id FROM nodes WHERE hostname = '${hosts[1]}'`);
      await page.goto(`${BASE}/fleet/${node}`);
      await hydrated(page);
      assert.equal(await page.getByTestId('fabric-place').innerText(), `Leaf l1 of spine group s1 on fabric ${fabric} (set by a topology.conf import)`);
      const form = page.locator('#node-fabric-place');
      await form.getByLabel('Leaf switch').fill('l 2');
      await form.getByRole('button', { name: 'Set place' }).click();
      await page.locator('#place-leaf-error').waitFor();
      await form.getByLabel('Leaf switch').fill('l2');
      await form.getByRole('button', { name: 'Set place' }).click();
      await page.getByTestId('fabric-place').filter({ hasText: 'Leaf l2 of spine group s1' }).waitFor();
      assert.match(await page.getByTestId('fabric-place').innerText(), /\(set by an operator\)$/);
      await page.locator('#fabric-place').scrollIntoViewIfNeeded();
      await shots(page, 'node-fabric-place');
      await page.goto(`${BASE}/fleet`);
      await hydrated(page);
      await page.locator(`#fabric-tree li[data-fabric="${fabric}"] li[data-leaf="l2"]`, { hasText: hosts[1] }).waitFor();
    } finally {
      await c.close();
    }
  } finally {
    for (const [i, agent] of agents.entries()) await stopAgent(agent, states[i]);
  }
});
