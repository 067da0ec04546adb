// The launch form as a tenant meets it: saved SSH keys on the account page (a private key and a
// malformed key refused with the reason), the launch form defaulting to a plain OS image, a
// cost estimate that follows the choices (and works without JavaScript), a submit button that
// says why nothing can launch, and a launch with a saved key plus a pasted one it offers to save.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, enrolApprovedNode, openBrowser, shot, hydrated } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
// Made with `ssh-keygen -t ed25519`; `ssh-keygen -l` prints the fingerprint below.
const LAPTOP = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEorqTlXDEue8uPXrBC/J2mGhCVSlB9xbL3JVhwex5yy bob@laptop';
const LAPTOP_FP = 'SHA256:PkWeU4s/wEXKkVZfEiNTf04tZrBbB/fELrKhI2lIpKc';
const DESKTOP = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@desktop';

test('bob keeps SSH keys, sees the cost as he chooses, and launches with a saved and a pasted key', async () => {
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  const { agent } = await enrolApprovedNode(state, `gpu-launch-${RUN}`, 'us-east-1');
  const b = await openBrowser();
  try {
    const { page } = b;
    await ssoSignIn(page, 'bob@acme.example');

    // Account page: refusals name the problem; a good key is listed with its fingerprint.
    await page.goto(`${BASE}/account`);
    await hydrated(page);
    const add = page.locator('#add-key');
    await add.getByLabel('Name').fill('oops');
    await add.getByLabel('Public key').fill('-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY-----');
    await add.getByRole('button', { name: 'Save key' }).click();
    await page.getByRole('alert').filter({ hasText: 'this is a private key: never share it' }).waitFor();
    await add.getByLabel('Public key').fill('ssh-ed25519 AAAA-not-a-key');
    await add.getByRole('button', { name: 'Save key' }).click();
    await page.getByRole('alert').filter({ hasText: /^Invalid ssh_public_key: the key data is not valid base64/ }).waitFor();
    // The reason also sits under the field it is about, and the field says it is invalid.
    assert.match(await page.locator('#key-error').innerText(), /^The key data is not valid base64/);
    assert.equal(await add.locator('textarea[name="public_key"]').getAttribute('aria-invalid'), 'true');
    assert.equal(await page.locator('#key-name-error').innerText(), '');
    await add.getByLabel('Name').fill('laptop');
    await add.getByLabel('Public key').fill(LAPTOP);
    await add.getByRole('button', { name: 'Save key' }).click();
    const row = page.locator('tr[data-key="laptop"]');
    await row.waitFor();
    assert.equal(await add.locator('textarea[name="public_key"]').getAttribute('aria-invalid'), null);
    assert.equal(await row.locator('td.mono').innerText(), LAPTOP_FP);
    assert.equal(await row.locator('td').nth(5).innerText(), 'never');
    // It says where it was added: here, not through an API token.
    assert.match(await row.locator('td.key-added').innerText(), /in the portal$/);

    // The launch form: a plain OS image first, the saved key offered but not ticked (a key
    // someone else planted must not ride along unnoticed).
    await page.goto(`${BASE}/launch`);
    await hydrated(page);
    const form = page.locator('#launch');
    const image = form.locator('select[name="image"]');
    assert.equal(await image.inputValue(), 'ubuntu-24.04-cuda');
    assert.equal(await image.locator('optgroup').first().getAttribute('label'), 'Operating systems');
    const saved = form.getByLabel(/^laptop \(ssh-ed25519 SHA256:/);
    assert.ok(!(await saved.isChecked()));

    // On a phone the saved key's long fingerprint wraps inside the form: nothing scrolls
    // sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(wide <= 390, `the page is ${wide} px wide on a 390 px screen`);
    const keyBox = await saved.locator('xpath=ancestor::label').boundingBox();
    assert.ok(keyBox.x + keyBox.width <= 390, `the saved key ends at ${keyBox.x + keyBox.width} px`);
    await shot(page, 'launch-saved-key-phone');
    await page.setViewportSize({ width: 1280, height: 800 });
    await saved.check();

    // The estimate follows the SKU and the image's fee.
    await form.locator('select[name="sku"]').selectOption('l40s.2x');
    const estimate = page.locator('#launch-estimate li');
    assert.deepEqual((await estimate.allInnerTexts()).slice(0, 3), ['2.38 USD per hour', '57.12 USD per day', '1,713.60 USD per 30 days']);
    await image.selectOption('pytorch');
    assert.equal(await estimate.first().innerText(), '2.63 USD per hour');
    await image.selectOption('ubuntu-24.04-cuda');
    // A chosen lifetime: its cost, and the allocation is released after it.
    const lifetime = form.getByLabel('Release after');
    assert.equal(await lifetime.inputValue(), '');
    assert.equal(await page.locator('#launch-lifetime-hint').innerText(), 'Billing stops when it is released.');
    await lifetime.selectOption('8');
    assert.equal((await estimate.allInnerTexts())[3], '19.04 USD for its lifetime of 8 hours, then it is released');

    // Where nothing is free, the button says so instead of launching.
    const submit = form.locator('#launch-submit');
    await form.locator('select[name="region"]').selectOption('eu-west-1');
    assert.equal(await submit.innerText(), 'Nothing free for l40s.2x in eu-west-1 right now');
    assert.ok(await submit.isDisabled());
    await form.locator('select[name="region"]').selectOption('us-east-1');
    assert.equal(await submit.innerText(), 'Launch');
    await shot(page, 'launch-form');

    // Launch with the saved key and a pasted one, saved as "desktop" on the way.
    await form.locator('input[name="name"]').fill(`keys-${RUN}`);
    await form.locator('textarea[name="ssh_public_keys"]').fill(DESKTOP);
    await form.getByLabel('Save the pasted key as').fill('desktop');
    await submit.click();
    await page.waitForURL(/\/allocations\/[0-9a-f-]{36}$/);
    await hydrated(page);
    const expires = page.locator('dt:text-is("Expires") + dd');
    assert.match(await expires.innerText(), /^\d{4}-\d\d-\d\d/);

    await page.goto(`${BASE}/account`);
    await hydrated(page);
    assert.notEqual(await page.locator('tr[data-key="laptop"] td').nth(5).innerText(), 'never');
    await page.locator('tr[data-key="desktop"]').waitFor();

    // Without JavaScript the estimate comes with the page, for what the query chose.
    const nojs = await openBrowser({ javaScriptEnabled: false });
    try {
      await nojs.context.addCookies(await b.context.cookies());
      await nojs.page.goto(`${BASE}/launch?sku=l40s.2x&region=us-east-1&lifetime_hours=24`);
      assert.equal(await nojs.page.locator('#launch-estimate li').first().innerText(), '2.38 USD per hour');
      assert.equal(await nojs.page.locator('#launch-estimate li').nth(3).innerText(), '57.12 USD for its lifetime of 1 day, then it is released');
      assert.equal(await nojs.page.locator('select[name="lifetime_hours"]').inputValue(), '24');
      assert.ok(await nojs.page.getByRole('button', { name: 'Update estimate' }).isVisible());
    } finally {
      await nojs.close();
    }

    // Deleting a key removes it from the account (and from the next launch form).
    await page.getByRole('button', { name: 'Delete desktop' }).click();
    await page.locator('tr[data-key="desktop"]').waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'Delete laptop' }).click();
    await page.locator('#no-keys').waitFor();
  } finally {
    await b.close();
    agent.kill('SIGTERM');
  }
});
