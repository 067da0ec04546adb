// API tokens in a real browser: alice (Acme's admin) makes one from her account page, sees its
// secret once, uses it on the API, sees where it was last used from, and revokes it, after
// which the API refuses it; a key added through a token with the keys scope is shown as such
// on her account page; bob, an operator, sees no form to make one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, hydrated, openBrowser, shot } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

async function as(email) {
  const b = await openBrowser();
  await ssoSignIn(b.page, email);
  return b;
}

const sshKeys = (secret) =>
  fetch(`${BASE}/api/v1/ssh-keys`, { headers: { authorization: `Bearer ${secret}` } });

test('alice makes an API token, uses it on the API, sees its last use and revokes it', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/account`);
    await page.getByRole('link', { name: 'API tokens' }).click();
    await page.waitForURL(`${BASE}/account/tokens`);
    await hydrated(page);

    const form = page.locator('#make-token');
    const name = `ci-${Date.now().toString(36)}`;
    // No scope at all is refused by name.
    await form.getByLabel('Name').fill(name);
    await form.getByLabel(/read: instances/).uncheck();
    await form.getByRole('button', { name: 'Make token' }).click();
    await page.locator('#token-scopes-error').filter({ hasText: 'Choose at least one scope' }).waitFor();

    await form.getByLabel(/read: instances/).check();
    await form.getByLabel(/launch: launch and release/).check();
    await form.getByLabel('Expires after').selectOption('7');
    await form.getByRole('button', { name: 'Make token' }).click();
    const secret = (await page.locator('[data-testid="token-secret"]').innerText()).trim();
    assert.match(secret, /^gpk_[A-Za-z0-9_-]{43}$/);
    await shot(page, 'tokens-made');
    // The secret comes first on the page, with a button that copies it.
    const secretBox = await page.getByTestId('token-secret').boundingBox();
    const listBox = await page.locator('#tokens-h').boundingBox();
    assert.ok(secretBox.y < listBox.y, 'the new secret is above the list');
    await b.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
    await page.getByRole('button', { name: "Copy the token's secret" }).click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);

    // The API answers as alice, with her keys.
    const ok = await sshKeys(secret);
    assert.equal(ok.status, 200);
    assert.ok(Array.isArray((await ok.json()).ssh_keys));

    // Listed with its scopes and last use; the secret is never shown again.
    await page.reload();
    await hydrated(page);
    const row = page.locator(`tr[data-token="${name}"]`);
    assert.equal(await row.locator('[data-testid="scopes"]').innerText(), 'read, launch');
    assert.match(await row.locator('[data-testid="last-used"]').innerText(), / from 127\.0\.0\.1$/);
    assert.equal(await row.locator('[data-testid="state"]').innerText(), 'active');
    assert.ok(!(await page.content()).includes(secret), 'the secret is shown once');

    await row.getByRole('button', { name: `Revoke ${name}` }).click();
    await row.locator('[data-testid="state"]').filter({ hasText: /^revoked / }).waitFor();
    const refused = await sshKeys(secret);
    assert.equal(refused.status, 401);
    assert.equal(refused.headers.get('content-type'), 'application/problem+json');
    assert.equal((await refused.json()).code, 'unauthenticated');
    await shot(page, 'tokens-revoked');
  } finally {
    await b.close();
  }
});

test('a key added through a token needs the keys scope and says so on the account page', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/account/tokens`);
    await hydrated(page);
    const form = page.locator('#make-token');
    const name = `keys-${Date.now().toString(36)}`;
    await form.getByLabel('Name').fill(name);
    await form.getByLabel(/keys: add and delete your saved SSH keys/).check();
    await form.getByRole('button', { name: 'Make token' }).click();
    const secret = (await page.locator('[data-testid="token-secret"]').innerText()).trim();
    // The organization signs in with its own provider: the token lapses unless alice signs in.
    await page.reload();
    await hydrated(page);
    const row = page.locator(`tr[data-token="${name}"]`);
    assert.match(await row.locator('[data-testid="lapses"]').innerText(), /^or \d{4}-\d\d-\d\d .* if alice@acme\.example has not signed in again by then$/);

    const key = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEorqTlXDEue8uPXrBC/J2mGhCVSlB9xbL3JVhwex5yy ci@runner';
    const added = await fetch(`${BASE}/api/v1/ssh-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: `from-${name}`, public_key: key }),
    });
    assert.equal(added.status, 201, await added.clone().text());
    const id = (await added.json()).id;

    await page.goto(`${BASE}/account`);
    await hydrated(page);
    const keyRow = page.locator(`tr[data-key="from-${name}"]`);
    assert.match(await keyRow.locator('td.key-added').innerText(), new RegExp(`through API token ${name} \\(gpk_`));
    await shot(page, 'account-key-from-token');
    const gone = await fetch(`${BASE}/api/v1/ssh-keys/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${secret}` } });
    assert.equal(gone.status, 204);
  } finally {
    await b.close();
  }
});

test('bob, a project operator, may not make tokens and is told who may', async () => {
  const b = await as('bob@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/account/tokens`);
    await hydrated(page);
    await page.getByText('Organization admins make tokens for the organization').waitFor();
    assert.equal(await page.locator('#make-token').count(), 0);
    // The API reference tells him whom to ask, not to make one.
    await page.goto(`${BASE}/docs/api`);
    await hydrated(page);
    assert.match(await page.locator('#token-advice').innerText(), /ask one of them for a token/);
    assert.equal(await page.getByRole('link', { name: 'Account → API tokens' }).count(), 0);
  } finally {
    await b.close();
  }
});

test('the API reference renders the generated document from local files only', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    const outside = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(BASE) && !r.url().startsWith('data:')) outside.push(r.url());
    });
    await page.goto(`${BASE}/account/tokens`);
    await hydrated(page);
    await page.getByRole('link', { name: 'API', exact: true }).click();
    await page.waitForURL(`${BASE}/docs/api`);
    await page.getByRole('heading', { name: 'API reference' }).waitFor();
    // Alice administers her organization: she is sent to make one.
    assert.match(await page.locator('#token-advice').innerText(), /^Make a token on Account → API tokens/);
    // RapiDoc (from /vendor/) draws every operation of /api/v1/openapi.json in its shadow DOM.
    for (const summary of ['Launches an instance', 'The instances the token reaches', 'Releases an instance']) {
      await page.getByText(summary).first().waitFor({ timeout: 15000 });
    }
    const doc = page.locator('rapi-doc');
    assert.equal(await doc.getAttribute('theme'), 'light');
    await page.evaluate(() => document.documentElement.setAttribute('data-theme', 'dark'));
    await page.waitForFunction(() => document.querySelector('rapi-doc').getAttribute('theme') === 'dark');
    assert.deepEqual(outside, [], 'nothing is fetched from outside the portal');
    await shot(page, 'api-reference');
  } finally {
    await b.close();
  }
});
