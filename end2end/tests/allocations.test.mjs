// The allocation lifecycle in a real browser against a real node agent (simulated driver on
// the PCIe L40S fixture): an operator enrols and approves the node; the public catalog shows
// what could launch; bob launches a 2-GPU slice, watches it reach running, releases it and
// sees it cleaned with its certificate; carol, of another organization, then gets those
// same slots.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, ADMIN_PASSWORD, adminSignIn, enrolApprovedNode, openBrowser, shot, hydrated, sql, stopAgent } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const HOST = `gpu-l40s-${RUN}`;
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';

async function approvedNode(state) {
  const { agent, nodeUrl } = await enrolApprovedNode(state, HOST);
  // The SKU admin's dry run says where a 2-GPU slice would go, and why.
  const b = await openBrowser();
  try {
    const { page } = b;
    await adminSignIn(page);
    await page.goto(`${BASE}/catalog/manage`);
    await hydrated(page);
    const dry = page.locator('section[aria-labelledby="dry-run"]');
    await dry.getByLabel('SKU').selectOption('l40s.2x');
    await dry.getByLabel('Region').fill('us-east-1');
    await dry.getByRole('button', { name: 'Where would it go?' }).click();
    assert.match(await dry.getByRole('status').innerText(), new RegExp(`^${HOST} \\(us-east-1\\): 2 slot\\(s\\) on NUMA node 0 \\(best fit\\)`));
  } finally {
    await b.close();
  }
  return { agent, nodeUrl };
}

async function waitForState(page, want, seconds = 40) {
  const state = page.locator('[data-testid="state"]');
  for (let i = 0; i < seconds * 4; i++) {
    if ((await state.innerText().catch(() => '')) === want) return;
    await page.waitForTimeout(250);
  }
  assert.fail(`allocation never reached ${want}; it is ${await state.innerText()}`);
}

test('bob launches a 2-GPU slice, sees it run, releases it and sees it cleaned; carol then gets those slots', async () => {
  assert.ok(ADMIN_PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  let agent = null;
  try {
    ({ agent } = await approvedNode(state));

    // The catalog is public: prices, an estimate, and live availability per region.
    const anon = await openBrowser();
    try {
      await anon.page.goto(`${BASE}/catalog?hours=10`);
      const row = anon.page.locator('tr[data-sku="l40s.2x"]');
      assert.equal(await row.locator('[data-testid="estimate"]').innerText(), '23.80 USD');
      assert.equal(await row.locator('span[data-region="us-east-1"]').innerText(), 'us-east-1: 2');
      const h100 = anon.page.locator('tr[data-sku="h100.8x"]');
      assert.match(await h100.locator('[data-testid="why-unavailable"]').innerText(), /no node fits 8 × NVIDIA H100 80GB HBM3|no node in eu-west-1, us-east-1 has/);
      await shot(anon.page, 'catalog');
    } finally {
      await anon.close();
    }

    const b = await openBrowser();
    let first = null;
    try {
      const { page } = b;
      await ssoSignIn(page, 'bob@acme.example');
      await page.goto(`${BASE}/catalog`);
      await page.locator('tr[data-sku="l40s.2x"]').getByRole('link', { name: 'Launch' }).click();
      await page.waitForURL(/\/launch\?sku=l40s\.2x$/);
      await hydrated(page);
      const form = page.locator('#launch');
      await form.getByLabel('Region').selectOption('us-east-1');
      await form.locator('select[name="image"]').selectOption('ubuntu-24.04-cuda');
      // The name is checked as it is typed, the message quoting what was typed.
      const nameField = form.getByLabel('Name');
      await nameField.pressSequentially('Train_7');
      await page.locator('#launch-name-live', { hasText: '"Train_7": use 1 to 63 lowercase letters' }).waitFor();
      assert.equal(await nameField.getAttribute('aria-invalid'), 'true');
      await nameField.fill('');
      await nameField.pressSequentially(`train-${RUN}`);
      await page.waitForFunction(() => document.querySelector('#launch-name-live').textContent === '');
      assert.equal(await nameField.getAttribute('aria-invalid'), null);
      // Tags, under the form's more options.
      await form.getByText('Tags and cloud-init user data').click();
      await form.getByLabel('Tags').fill('team=vision, stage=dev');
      // A bad key is refused with a reason; nothing is reserved.
      await form.locator('textarea[name="ssh_public_keys"]').fill('ssh-ed25519 not-base64!');
      await form.getByRole('button', { name: 'Launch' }).click();
      assert.match(await page.getByRole('alert').innerText(), /^Invalid ssh_public_keys: the key data is not valid base64/);
      assert.match(await page.locator('#launch-key-error').innerText(), /^The key data is not valid base64/);
      assert.equal(await form.locator('textarea[name="ssh_public_keys"]').getAttribute('aria-invalid'), 'true');
      await form.locator('textarea[name="ssh_public_keys"]').fill(KEY);
      // SSH is always published; asking for port 22 again is named under the field.
      await form.getByLabel('Publish ports').fill('22');
      await form.getByRole('button', { name: 'Launch' }).click();
      await page.locator('#launch-ports-error', { hasText: 'other than 22' }).waitFor();
      assert.match(await page.locator('#launch-ports-error').innerText(), /^22: give TCP ports from 1 to 65535 other than 22/);
      assert.equal(await form.getByLabel('Publish ports').getAttribute('aria-invalid'), 'true');
      await form.getByLabel('Publish ports').fill('8888');
      await form.getByRole('button', { name: 'Launch' }).click();
      await page.waitForURL(/\/allocations\/[0-9a-f-]{36}$/);
      first = page.url();
      await hydrated(page);
      await waitForState(page, 'running');
      // The ports form comes with the running state, on the page opened while provisioning.
      await page.locator('#publish-ports').waitFor({ timeout: 10000 });
      assert.equal(await page.locator('[data-testid="desired"]').innerText(), 'running');
      assert.equal(await page.locator('[data-testid="observed"]').innerText(), 'running');
      // Reached through the node's public address: SSH on the slot's first public port, the
      // published notebook port on the next.
      const ssh = (await page.locator('[data-testid="ssh"]').innerText()).match(new RegExp(`^ssh -p (\\d+) ubuntu@${HOST}$`));
      assert.ok(ssh, 'the SSH command names the public port and host');
      const sshPort = Number(ssh[1]);
      assert.ok(sshPort >= 22000 && (sshPort - 22000) % 8 === 0, `${sshPort} starts a slot's block`);
      assert.equal(await page.locator('[data-testid="published"]').innerText(), `guest port 8888 at ${HOST}:${sshPort + 1}`);
      assert.equal(await page.getByTestId('tags').innerText(), 'stage=dev, team=vision');
      // How long it has run and what that cost, while it runs.
      assert.match(await page.getByTestId('cost').innerText(), /^Running for \d+ (s|min) · \d[\d,]*\.\d{2} USD so far$/);
      const transitions = await page.locator('[data-testid="transitions"] li').allInnerTexts();
      assert.deepEqual(transitions.map((t) => t.split(' at ')[0]), ['requested', 'requested → placed', 'placed → provisioning', 'provisioning → running']);
      assert.ok((await page.locator('[data-testid="phases"] tr').count()) >= 6, 'provision phases are listed');
      // The simulated guest reports through the node's telemetry sink; the node forwards it.
      const util = page.locator('[data-testid="gpu-utilisation"]');
      await util.waitFor({ timeout: 20000 });
      assert.match(await util.innerText(), /^\d{1,3}% \(reported by the guest, \d{4}-\d\d-\d\d /);
      const slots = await page.locator('[data-testid="slots"]').innerText();
      const node = await page.locator('[data-testid="node"]').innerText();
      assert.equal(node, `us-east-1 / ${HOST}`);
      // Why it landed there, in a tenant's words (the operators' reason is its tooltip).
      const why = page.getByTestId('why-there');
      assert.match(await why.innerText(), /^Your GPUs? and (its|their) CPU cores share one CPU socket, for the fastest host-to-GPU traffic\.$/);
      assert.match(await why.getAttribute('title'), /NUMA node \d \(best fit\)/);
      await shot(page, 'allocation-running');
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.setViewportSize({ width: 390, height: 844 });
      await shot(page, 'allocation-running-phone-dark');
      await page.goto(`${BASE}/allocations`);
      await shot(page, 'allocations-phone-dark');
      await page.emulateMedia({ colorScheme: 'light' });
      await page.setViewportSize({ width: 1280, height: 800 });
      await page.goto(first);
      await hydrated(page);

      // Publish another port while it runs: the node applies it and the page lists both.
      const ports = page.locator('#publish-ports');
      assert.equal(await ports.getByLabel('Guest TCP ports').inputValue(), '8888');
      await ports.getByLabel('Guest TCP ports').fill('8888, 6006');
      await ports.getByRole('button', { name: 'Update ports' }).click();
      await page.getByRole('status').filter({ hasText: 'the node applies it' }).waitFor();
      await page.locator('[data-testid="published"] li', { hasText: 'guest port 6006' }).waitFor({ timeout: 20000 });
      assert.deepEqual(
        await page.locator('[data-testid="published"] li').allInnerTexts(),
        // 8888 keeps the public port it had; 6006 takes the next.
        [`guest port 6006 at ${HOST}:${sshPort + 2}`, `guest port 8888 at ${HOST}:${sshPort + 1}`],
      );

      // Release, with confirmation.
      const release = page.locator('#release');
      await release.getByRole('button', { name: 'Release' }).click();
      assert.equal(await page.locator('[data-testid="state"]').innerText(), 'running', 'unconfirmed: nothing happens');
      await release.getByLabel(/I understand/).check();
      await release.getByRole('button', { name: 'Release' }).click();
      await waitForState(page, 'released');
      assert.equal(await page.locator('[data-testid="projected-state"]').innerText(), 'released');
      assert.equal(await page.locator('[data-testid="certificate"] tbody tr').count(), 2);
      assert.match(await page.locator('[data-testid="certificate"]').innerText(), /overwrite-verify.*wipe verified: yes, GPU reset: yes, firmware: ok/s);
      const path = (await page.locator('[data-testid="transitions"] li').allInnerTexts()).map((t) => t.split(' at ')[0]);
      assert.deepEqual(path.slice(4), ['running → releasing', 'releasing → cleaning', 'cleaning → released']);
      await shot(page, 'allocation-cleaned');

      // Released, the page says what it cost in all, drops the live values, and stops asking.
      assert.match(await page.getByTestId('cost').innerText(), /^Ran for \d+ (s|min) · cost \d[\d,]*\.\d{2} USD in all$/);
      assert.equal(await page.locator('[data-testid="gpu-utilisation"]').count(), 0);
      assert.equal(await page.getByRole('status').filter({ hasText: 'Release requested' }).count(), 0);
      let asked = 0;
      const count = (r) => { if (r.url().includes('/api/get_allocation')) asked += 1; };
      page.on('request', count);
      await page.waitForTimeout(3500);
      page.off('request', count);
      assert.equal(asked, 0, 'a released allocation is not polled');

      // The list shows it under "released", not under "active".
      await page.goto(`${BASE}/allocations?state=released`);
      assert.equal(await page.locator(`tr[data-allocation="train-${RUN}"]`).count(), 1);
      await page.goto(`${BASE}/allocations`);
      assert.equal(await page.locator(`tr[data-allocation="train-${RUN}"]`).count(), 0);

      // Carol, in another organization, gets the same slots now that they are clean.
      const c = await openBrowser();
      try {
        await ssoSignIn(c.page, 'carol@globex.example');
        await c.page.goto(`${BASE}/launch?sku=l40s.2x`);
        await hydrated(c.page);
        const cf = c.page.locator('#launch');
        await cf.getByLabel('Region').selectOption('us-east-1');
        await cf.locator('select[name="image"]').selectOption('ubuntu-24.04-cuda');
        await cf.getByLabel('Name').fill(`eval-${RUN}`);
        await cf.locator('textarea[name="ssh_public_keys"]').fill(KEY);
        await cf.getByRole('button', { name: 'Launch' }).click();
        await c.page.waitForURL(/\/allocations\/[0-9a-f-]{36}$/);
        assert.notEqual(c.page.url(), first);
        assert.equal(await c.page.locator('[data-testid="node"]').innerText(), node);
        assert.equal(await c.page.locator('[data-testid="slots"]').innerText(), slots);
        // Bob can't see carol's allocation.
        await page.goto(c.page.url());
        assert.match(await page.getByRole('alert').innerText(), /Not found/);
      } finally {
        await c.close();
      }
    } finally {
      await b.close();
    }
  } finally {
    await stopAgent(agent, state);
  }
});

test('bob pages through a project\'s allocations, newest first, none missing or repeated, and back to the newest', async () => {
  const RESEARCH = '0a0e0000-0000-4000-8001-000000000001';
  // Every allocation of Research ever (the demo's imported history and the launches above),
  // in the list's order.
  const want = sql(`SELECT string_agg(id::text, ',' ORDER BY created_at DESC, id DESC) FROM allocations WHERE project_id = '${RESEARCH}'`).split(',');
  assert.ok(want.length >= 3, `Research has ${want.length} allocations; the demo history alone has more`);
  const b = await openBrowser();
  try {
    const { page } = b;
    await ssoSignIn(page, 'bob@acme.example');
    const ids = async () =>
      (await page.locator('#allocations tbody tr a').evaluateAll((as) => as.map((a) => a.getAttribute('href')))).map((h) => h.split('/').pop());

    // Two a page (the address takes the API's `limit`; 50 when left out).
    await page.goto(`${BASE}/allocations?project=${RESEARCH}&state=all&limit=2`);
    await hydrated(page);
    assert.equal(await page.getByTestId('page-shown').innerText(), 'The 2 newest instances');
    assert.equal(await page.getByRole('link', { name: '← Newest' }).count(), 0, 'the first page has no way back');
    const first = await ids();
    assert.deepEqual(first, want.slice(0, 2));
    await shot(page, 'allocations-paged');

    // Older, page after page (in the hydrated app, so each is the router's own navigation),
    // until there is no older one.
    const seen = [...first];
    for (let pages = 1; ; pages++) {
      const older = page.getByRole('link', { name: 'Older →' });
      if ((await older.count()) === 0) break;
      assert.ok(pages <= want.length, 'the pages end');
      await older.click();
      await page.getByTestId('page-shown').filter({ hasText: /^(1 older instance|2 older instances)$/ }).waitFor();
      await page.waitForFunction((prev) => {
        const a = document.querySelector('#allocations tbody tr a');
        return a && !prev.includes(a.getAttribute('href').split('/').pop());
      }, seen);
      const got = await ids();
      assert.ok(got.length >= 1 && got.length <= 2, `a page of ${got.length}`);
      assert.match(page.url(), /[?&]after=\d+_[0-9a-f-]{36}/);
      assert.match(page.url(), /[?&]limit=2(&|$)/, 'the page size is kept');
      seen.push(...got);
    }
    assert.deepEqual(seen, want, 'every allocation once, newest first');

    // A later page on a phone, in the dark theme, then back to the newest by keyboard.
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'allocations-paged-phone-dark');
    await page.getByRole('link', { name: '← Newest' }).focus();
    await page.keyboard.press('Enter');
    await page.getByTestId('page-shown').filter({ hasText: 'The 2 newest instances' }).waitFor();
    assert.deepEqual(await ids(), want.slice(0, 2));
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1280, height: 800 });

    // Filtering keeps the page size and starts from the newest again.
    await page.locator('form.filters').getByLabel('State').selectOption('released');
    await page.locator('form.filters').getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/state=released/);
    assert.match(page.url(), /limit=2/);
    assert.doesNotMatch(page.url(), /after=/);
    const released = sql(`SELECT string_agg(id::text, ',' ORDER BY created_at DESC, id DESC) FROM (SELECT id, created_at FROM allocations WHERE project_id = '${RESEARCH}' AND state = 'released' ORDER BY created_at DESC, id DESC LIMIT 2) r`).split(',');
    await page.waitForFunction((w) => document.querySelector('#allocations tbody tr a')?.getAttribute('href').endsWith(w), released[0]);
    assert.deepEqual(await ids(), released);

    // A page size or a cursor that isn't one is refused, saying which.
    await page.goto(`${BASE}/allocations?project=${RESEARCH}&limit=lots`);
    assert.match(await page.getByRole('alert').innerText(), /limit.*"lots" is not a number of allocations/i);
    await page.goto(`${BASE}/allocations?project=${RESEARCH}&limit=501`);
    assert.match(await page.getByRole('alert').innerText(), /limit.*501: ask for 1 to 500 at a time/i);
    await page.goto(`${BASE}/allocations?project=${RESEARCH}&after=yesterday`);
    assert.match(await page.getByRole('alert').innerText(), /cursor: pass back the next cursor of the previous page/i);
  } finally {
    await b.close();
  }
});
