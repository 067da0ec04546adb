// The marketplace in a real browser: anyone finds PyTorch and reads its page (SKUs it fits,
// with SKU + fee); bob launches it from there on a 1-GPU L40S slice of a real (simulated)
// node agent and sees the combined price; the operator deprecates that version, after which
// it can't be launched while bob's allocation keeps running. carol, Globex's publisher,
// drafts a listing and submits it; the operator rejects it with a reason, she resubmits, the
// operator approves and publishes it, and it appears to everyone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, adminSignIn, enrolApprovedNode, hydrated, openBrowser, shot, stopAgent } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';

/** Opens a version's review page from the queue (`row` is "slug version"). */
async function review(page, row) {
  await page.goto(`${BASE}/admin/marketplace`);
  await hydrated(page);
  await page.locator(`#review-queue tr[data-version="${row}"]`).getByRole('link', { name: `Review ${row}` }).click();
  await page.waitForURL(/\/admin\/marketplace\/versions\/[0-9a-f-]{36}$/);
  await hydrated(page);
}

/** What `sha256sum` printed for the (imaginary) Triton image. */
const TRITON_SHA256 = '5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03';

/** Approving and rejecting happen on the review page, where the content is shown; the rest
 *  from the queue. */
async function curate(page, row, action, reason = '') {
  let form;
  if (action === 'approve' || action === 'reject') {
    await review(page, row);
    form = page.locator('#curate');
  } else {
    await page.goto(`${BASE}/admin/marketplace`);
    await hydrated(page);
    form = page.locator(`#review-queue tr[data-version="${row}"]`);
    assert.ok(!(await form.locator('option').allInnerTexts()).includes('Approve'), 'no blind approval from the queue');
  }
  await form.getByLabel('Action').selectOption(action);
  if (reason) await form.getByLabel('Reason').fill(reason);
  await form.getByRole('button', { name: 'Apply' }).click();
  await page.getByRole('status').filter({ hasText: `Done: ${action}.` }).waitFor();
}

test('bob finds PyTorch, launches it on a 1-GPU SKU at SKU + fee; once deprecated it can no longer be launched', async () => {
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  let agent = null;
  try {
    // Anyone can browse: search, then the listing page with the SKUs it fits.
    const anon = await openBrowser();
    try {
      const { page } = anon;
      await page.goto(`${BASE}/marketplace`);
      await page.getByLabel('Search').fill('PyTorch torchrun');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(/\/marketplace\?q=PyTorch\+torchrun/);
      const cards = page.locator('#listings li');
      assert.deepEqual(await cards.evaluateAll((els) => els.map((e) => e.dataset.listing)), ['pytorch']);
      await shot(page, 'marketplace-search');
      await cards.getByRole('link', { name: 'PyTorch' }).click();
      await page.waitForURL(`${BASE}/marketplace/pytorch`);
      assert.equal(await page.locator('#listing-fee').innerText(), '0.25 USD per hour');
      // Markdown is rendered (a heading, a list), on the page's own terms.
      assert.equal(await page.locator('.prose h2').innerText(), 'PyTorch, ready to train');
      const l40s = page.locator('#fitting-skus tr[data-sku="l40s.1x"]');
      assert.deepEqual((await l40s.locator('td').allInnerTexts()).slice(3, 5), ['1.19 USD', '1.44 USD']);
      assert.deepEqual(await page.locator('#version-list li').evaluateAll((els) => els.map((e) => e.dataset.version)), ['2.5', '2.4']);
      await shot(page, 'marketplace-listing');
    } finally {
      await anon.close();
    }

    // In eu-west-1, where no other L40S node is: the allocations test's node (us-east-1) still
    // counts as live for a minute after its agent stopped.
    ({ agent } = await enrolApprovedNode(state, `gpu-mkt-${RUN}`, 'eu-west-1'));

    const b = await openBrowser();
    let allocation = null;
    try {
      const { page } = b;
      await ssoSignIn(page, 'bob@acme.example');
      await page.goto(`${BASE}/marketplace?q=PyTorch`);
      await page.locator('#listings').getByRole('link', { name: 'PyTorch' }).click();
      await page.waitForURL(`${BASE}/marketplace/pytorch`);
      await page.locator('#fitting-skus tr[data-sku="l40s.1x"]').getByRole('link', { name: 'Launch on this' }).click();
      await page.waitForURL(/\/launch\?listing=pytorch&sku=l40s\.1x$/);
      await hydrated(page);
      const form = page.locator('#launch');
      // Only SKUs PyTorch fits, each with SKU + fee; the 1-GPU L40S is preselected.
      const sku = form.locator('select[name="sku"]');
      assert.equal(await sku.inputValue(), 'l40s.1x');
      assert.equal(
        (await sku.locator('option:checked').innerText()).trim(),
        '1× L40S 48GB — 1.19 USD + 0.25 USD fee = 1.44 USD per hour',
      );
      assert.equal(await form.locator('select[name="version"]').inputValue(), '2.5');
      await form.getByLabel('Region').selectOption('eu-west-1');
      await form.getByLabel('Name').fill(`torch-${RUN}`);
      await form.locator('textarea[name="ssh_public_keys"]').fill(KEY);
      await form.getByRole('button', { name: 'Launch' }).click();
      await page.waitForURL(/\/allocations\/[0-9a-f-]{36}$/);
      allocation = page.url();
      assert.equal(await page.locator('[data-testid="software"]').innerText(), 'PyTorch 2.5');
      assert.equal(await page.locator('[data-testid="price"]').innerText(), '1.44 USD per hour (1.19 USD SKU + 0.25 USD listing fee)');
      await page.locator('[data-testid="state"]', { hasText: 'running' }).waitFor({ timeout: 40_000 });
      await shot(page, 'marketplace-launched');
    } finally {
      await b.close();
    }

    // The operator deprecates PyTorch 2.5.
    const ops = await openBrowser();
    try {
      await adminSignIn(ops.page);
      await curate(ops.page, 'pytorch 2.5', 'deprecate');
      assert.match(await ops.page.locator('#review-queue tr[data-version="pytorch 2.5"]').innerText(), /deprecated/);
      // What is owed to publishers: the demo history ran Globex Labs' vLLM last month, and
      // Globex Labs gets 70 % of those fees.
      const owed = await ops.page.locator('#payable-table tr[data-publisher="Globex Labs"] td').allInnerTexts();
      assert.equal(owed[1], '70%');
      const [fees, payable] = [owed[2], owed[3]].map((t) => Number(t.split(' ')[0]));
      assert.ok(fees > 0 && Math.abs(payable - fees * 0.7) < 0.00001 * 3000, owed.join(' | '));
    } finally {
      await ops.close();
    }

    // It can't be launched any more (only 2.4 is offered, and a forged post is refused);
    // bob's allocation keeps running.
    const again = await openBrowser();
    try {
      const { page } = again;
      await ssoSignIn(page, 'bob@acme.example');
      await page.goto(`${BASE}/launch?listing=pytorch&sku=l40s.1x`);
      await hydrated(page);
      const versions = page.locator('#launch select[name="version"] option');
      assert.deepEqual(await versions.evaluateAll((os) => os.map((o) => o.value)), ['2.4']);
      await page.evaluate(() => {
        const select = document.querySelector('#launch-version');
        select.add(new Option('PyTorch 2.5', '2.5'));
        select.value = '2.5';
      });
      const form = page.locator('#launch');
      await form.getByLabel('Region').selectOption('eu-west-1');
      await form.getByLabel('Name').fill(`torch-again-${RUN}`);
      await form.locator('textarea[name="ssh_public_keys"]').fill(KEY);
      await form.getByRole('button', { name: 'Launch' }).click();
      assert.equal(
        await page.getByRole('alert').innerText(),
        'Invalid version: PyTorch 2.5 is deprecated; only published versions can be launched (the current one is 2.4).',
      );
      await page.goto(allocation);
      assert.equal(await page.locator('[data-testid="state"]').innerText(), 'running');
      await page.goto(`${BASE}/marketplace/pytorch`);
      assert.deepEqual(await page.locator('#version-list li').evaluateAll((els) => els.map((e) => e.dataset.version)), ['2.4']);
    } finally {
      await again.close();
    }
  } finally {
    await stopAgent(agent, state);
  }
});

test('an operator reviews vLLM 0.6.5 against 0.6.4, the version in force, field by field', async () => {
  const ops = await openBrowser();
  try {
    await adminSignIn(ops.page);
    await review(ops.page, 'vllm 0.6.5');
    const page = ops.page;
    assert.equal(await page.locator('h1').innerText(), 'vLLM inference server 0.6.5');
    assert.match(await page.locator('#version-facts').innerText(), /Globex Labs/);
    const diff = page.locator('#version-diff');
    assert.match(await diff.locator('thead').innerText(), /In force \(0\.6\.4\)\s+This version \(0\.6\.5\)/);
    const changed = await diff.locator('tbody th').allInnerTexts();
    assert.deepEqual(changed, ['Summary', 'Description (Markdown)', 'Release notes', 'Image source', 'Cloud-init', 'Hourly fee']);
    const fee = diff.locator('tr[data-field="Hourly fee"]');
    assert.equal(await fee.locator('td.before').innerText(), '0.40 USD');
    assert.equal(await fee.locator('td.after').innerText(), '0.45 USD');
    assert.equal(await diff.locator('tr[data-field="Cloud-init"] td.before').innerText(), '(none)');
    assert.match(await diff.locator('tr[data-field="Cloud-init"] td.after').innerText(), /"packages": \[\s*"nvtop"\s*\]/);
    // Unchanged fields are listed once, below, with everything else.
    assert.equal(await page.locator('#version-fields tr[data-field="SSH user"] td').innerText(), 'ubuntu');
    assert.equal(await page.locator('#version-fields tr[data-field="Published ports"] td').innerText(), '8000');
    assert.deepEqual(await page.locator('#curate select[name="action"] option').allInnerTexts(), ['Approve', 'Reject']);
    await shot(page, 'marketplace-version-review');
  } finally {
    await ops.close();
  }
});

test('the launch form publishes the ports a listing listens on, and follows the listing chosen', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await ssoSignIn(page, 'bob@acme.example');
    // From vLLM's page: its server listens on 8000, so 8000 is filled in and the hint says why.
    await page.goto(`${BASE}/launch?listing=vllm`);
    await hydrated(page);
    const ports = page.locator('#launch-ports');
    assert.equal(await ports.inputValue(), '8000');
    assert.match(await page.locator('#launch-ports-hint').innerText(), /listens on 8000/);
    await shot(page, 'launch-listing-ports');
    // From the plain launch form: choosing an image refills the field with that image's ports.
    await page.goto(`${BASE}/launch`);
    await hydrated(page);
    assert.equal(await ports.inputValue(), '', 'Ubuntu publishes nothing by itself');
    const image = page.locator('#launch-image');
    const vllm = await image.locator('option', { hasText: 'vLLM' }).getAttribute('value');
    await image.selectOption(vllm);
    assert.equal(await ports.inputValue(), '8000');
    await ports.fill('8000, 8888');
    await image.selectOption({ index: 0 });
    assert.equal(await ports.inputValue(), '', 'another listing, its own ports');
  } finally {
    await b.close();
  }
});

test('carol submits a listing; the operator rejects it with a reason, then approves and publishes it', async () => {
  const slug = `triton-${RUN}`;
  const carol = await openBrowser();
  const ops = await openBrowser();
  try {
    const { page } = carol;
    await ssoSignIn(page, 'carol@globex.example');
    await page.goto(`${BASE}/marketplace/publish`);
    await hydrated(page);
    assert.match(await page.locator('#publisher-status').innerText(), /Status: approved · your share of listing fees: 70%/);
    const form = page.locator('section[aria-labelledby="new-listing"]');
    await form.getByLabel('Name').fill('Triton inference server');
    await form.getByLabel('Slug').fill(slug);
    await form.getByLabel('Category').selectOption('ml_stack');
    await form.getByLabel('Version', { exact: true }).fill('24.10');
    await form.getByLabel('Summary').fill('NVIDIA Triton serving ONNX, TensorRT and PyTorch models.');
    await form.getByLabel('Image source').fill('/var/lib/gpuaas/images/triton-24.10.qcow2');
    await form.getByLabel('Hourly fee').fill('0.30 USD');
    // Bad cloud-init is refused by name; nothing is saved.
    await form.getByLabel(/Cloud-init fragment/).fill('{"users": []}');
    await form.getByRole('button', { name: 'Save draft' }).click();
    assert.match(await form.getByRole('alert').innerText(), /^Invalid cloud_init: "users" is set by the platform/);
    assert.match(await page.locator('#new-listing-cloud_init-error').innerText(), /^"users" is set by the platform/);
    assert.equal(await form.getByLabel(/Cloud-init fragment/).getAttribute('aria-invalid'), 'true');
    // Commands would run as root in every tenant's VM: refused by name, with what is allowed.
    await form.getByLabel(/Cloud-init fragment/).fill('{"runcmd": [["systemctl", "start", "tritonserver"]]}');
    await form.getByRole('button', { name: 'Save draft' }).click();
    await page.locator('#new-listing-cloud_init-error').filter({ hasText: /^"runcmd" is not allowed: a listing's cloud-init may set only packages, / }).waitFor();
    await form.getByLabel(/Cloud-init fragment/).fill('{"packages": ["nvtop"], "final_message": "Triton listens on port 8000."}');
    // Hosts launch a publisher's image only if the file is the one reviewed: its checksum is
    // part of the version.
    await form.getByRole('button', { name: 'Save draft' }).click();
    await page.locator('#new-listing-image_sha256-error').filter({ hasText: /^Give the SHA-256 of the image file/ }).waitFor();
    await form.getByLabel('Image SHA-256').fill(TRITON_SHA256);
    // Tenants may bring their own user data to this one; the review shows it.
    await form.getByLabel(/Tenants may add their own cloud-init user data/).check();
    // Triton serves HTTP on 8000 and gRPC on 8001; SSH's port is not the listing's to take.
    await form.getByLabel('Ports to publish').fill('8000 22');
    await form.getByRole('button', { name: 'Save draft' }).click();
    await page.locator('#new-listing-published_ports-error').filter({ hasText: /^22: give TCP ports from 1 to 65535 other than 22/ }).waitFor();
    await form.getByLabel('Ports to publish').fill('8001, 8000');
    await shot(page, 'marketplace-publish-form');
    await form.getByRole('button', { name: 'Save draft' }).click();
    await form.getByRole('status').filter({ hasText: `Drafted ${slug}.` }).waitFor();
    const row = page.locator(`#my-versions tr[data-version="${slug} 24.10"]`);
    await row.getByRole('button', { name: 'Submit for review' }).click();
    await row.getByText('in review').waitFor();

    await adminSignIn(ops.page);
    await curate(ops.page, `${slug} 24.10`, 'reject', 'Pin the CUDA version in the summary.');
    await page.goto(`${BASE}/marketplace/publish`);
    await hydrated(page);
    assert.match(await row.innerText(), /rejected\s+Reason: Pin the CUDA version in the summary\./);
    await row.getByRole('button', { name: 'Submit for review' }).click();
    await row.getByText('in review').waitFor();

    // Not visible to anyone until published.
    await ops.page.goto(`${BASE}/marketplace/${slug}`);
    assert.equal(await ops.page.getByRole('alert').innerText(), 'Not found.');
    // The review page shows everything the version runs, before the decision.
    await review(ops.page, `${slug} 24.10`);
    const fields = ops.page.locator('#version-fields');
    assert.equal(await fields.locator('tr[data-field="Image source"] td').innerText(), '/var/lib/gpuaas/images/triton-24.10.qcow2');
    assert.equal(await fields.locator('tr[data-field="Image SHA-256"] td').innerText(), TRITON_SHA256);
    assert.match(await fields.locator('tr[data-field="Cloud-init"] td').innerText(), /"final_message": "Triton listens on port 8000\."/);
    assert.equal(await fields.locator('tr[data-field="Hourly fee"] td').innerText(), '0.30 USD');
    assert.equal(await fields.locator('tr[data-field="Tenant user data"] td').innerText(), 'accepted');
    assert.equal(await fields.locator('tr[data-field="Published ports"] td').innerText(), '8000, 8001');
    assert.match(await ops.page.locator('#version-diff').innerText(), /The first version of this listing/);
    await curate(ops.page, `${slug} 24.10`, 'approve');
    await curate(ops.page, `${slug} 24.10`, 'publish');
    await shot(ops.page, 'marketplace-review');

    const anon = await openBrowser();
    try {
      await anon.page.goto(`${BASE}/marketplace?category=ml_stack`);
      const card = anon.page.locator(`#listings li[data-listing="${slug}"]`);
      assert.match(await card.innerText(), /by Globex Labs · v24\.10/);
      assert.match(await card.innerText(), /Fee 0\.30 USD per hour/);
    } finally {
      await anon.close();
    }
  } finally {
    await carol.close();
    await ops.close();
  }
});
