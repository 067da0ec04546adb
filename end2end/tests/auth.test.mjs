// Break-glass sign-in for platform admins, sign-out, pages that need a session, and the
// cross-origin guard. `cargo xtask test` gives the admin a fresh random password per run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, openBrowser, shot, hydrated } from '../support.mjs';

const EMAIL = process.env.PORTAL_ADMIN_EMAIL ?? 'admin@platform.example';
const PASSWORD = process.env.PORTAL_ADMIN_PASSWORD;

async function signIn(page, password = PASSWORD) {
  await page.goto(`${BASE}/login`);
  const form = page.locator('#break-glass-form');
  await form.getByLabel('Email').fill(EMAIL);
  await form.getByLabel('Password').fill(password);
  await form.getByRole('button', { name: 'Sign in' }).click();
}

// First in this file: the per-account limit (5 failures, then one a minute) must be full for
// the five failures that lock the account to be counted.
test('five wrong passwords lock the account; a signed-in admin sees it on /admin and unlocks it', async () => {
  assert.ok(PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  // The admin who will unlock signs in first: a lock refuses sign-ins, not sessions.
  const admin = await openBrowser();
  const guesser = await openBrowser();
  try {
    await signIn(admin.page);
    await admin.page.waitForURL(`${BASE}/admin`);

    const { page } = guesser;
    await page.goto(`${BASE}/login`);
    await hydrated(page);
    const form = page.locator('#break-glass-form');
    const action = await form.getAttribute('action');
    // One attempt at a time, on the hydrated page: each waits for its answer.
    const attempt = async (password) => {
      await form.getByLabel('Email').fill(EMAIL);
      await form.getByLabel('Password').fill(password);
      const answer = page.waitForResponse((r) => r.url().endsWith(action));
      await form.getByRole('button', { name: 'Sign in' }).click();
      return (await answer).status();
    };
    for (let n = 1; n <= 5; n += 1) {
      assert.equal(await attempt(`guess ${n}`), 401, `attempt ${n}`);
    }
    // Locked: even the right password is refused, with when to come back.
    assert.equal(await attempt(PASSWORD), 429);
    await page.getByRole('alert').filter({ hasText: /Too many attempts\. Try again in \d+ seconds\./ }).waitFor();
    assert.equal(page.url(), `${BASE}/login`);

    const a = admin.page;
    await a.goto(`${BASE}/admin`);
    await hydrated(a);
    const row = a.locator(`#lockouts tr[data-account="${EMAIL}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    assert.equal(cells[1], '5');
    assert.match(cells[2], /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/, 'locked until a time');
    await shot(a, 'admin-lockout');
    await a.emulateMedia({ colorScheme: 'dark' });
    await a.setViewportSize({ width: 390, height: 844 });
    await shot(a, 'admin-lockout-phone-dark');
    await a.setViewportSize({ width: 1280, height: 800 });
    await row.getByRole('button', { name: `Unlock ${EMAIL}` }).click();
    await a.locator('#no-lockouts').waitFor();
    // The unlock is audited, by who did it.
    await a.goto(`${BASE}/audit`);
    assert.ok(
      (await a.locator('#audit-log td').allInnerTexts()).some((t) => t.includes('platform_admin.unlock')),
      'platform_admin.unlock is in the audit log',
    );

    // The right password works again.
    await signIn(page);
    await page.waitForURL(`${BASE}/admin`);
    assert.equal(await page.locator('.signed-in-as').innerText(), 'Signed in as Platform admin (platform admin).');
  } finally {
    // Whatever failed, leave the account usable for the tests after this one.
    const unlock = admin.page.getByRole('button', { name: `Unlock ${EMAIL}` });
    await admin.page.goto(`${BASE}/admin`).catch(() => {});
    if (await unlock.count().catch(() => 0)) {
      await unlock.click().catch(() => {});
      await admin.page.locator('#no-lockouts').waitFor({ timeout: 10_000 }).catch(() => {});
    }
    await guesser.close();
    await admin.close();
  }
});

test('signed out, the admin page asks you to sign in', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    // The browser is sent to sign in, and would come back to the admin page after.
    const res = await page.goto(`${BASE}/admin`);
    assert.equal(page.url(), `${BASE}/login?next=/admin`);
    assert.equal(res.status(), 200);
    assert.equal(await page.locator('h1').innerText(), 'Sign in');
    assert.equal(await page.locator('#break-glass-form input[name="next"]').getAttribute('value'), '/admin');
    assert.equal(await page.getByRole('banner').getByRole('link', { name: 'Sign in' }).count(), 1);
  } finally {
    await b.close();
  }
});

test('a platform admin signs in with the break-glass password, sees who they are, signs out', async () => {
  assert.ok(PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  const b = await openBrowser();
  try {
    const { page } = b;
    await page.goto(`${BASE}/login`);
    await hydrated(page);
    await signIn(page, 'not the password');
    assert.equal(await page.getByRole('alert').innerText(), 'Email or password is wrong.');
    assert.equal(page.url(), `${BASE}/login`);

    await signIn(page);
    await page.waitForURL(`${BASE}/admin`);
    const who = page.locator('.signed-in-as');
    await who.waitFor();
    assert.equal(await who.innerText(), 'Signed in as Platform admin (platform admin).');
    // Platform admins see, and may set, the global policies.
    const global = page.locator('.policies[data-scope="global"]');
    await global.locator('tr[data-key="allowed_regions"]').waitFor();
    assert.equal(await global.locator('input[name="value"]').count(), 9); // one per policy key
    // ... and read every organization's audit records, narrowed by organization.
    await page.goto(`${BASE}/audit?tenant=globex`);
    const resources = await page.locator('#audit-log td.resource').allInnerTexts();
    assert.ok(resources.length > 0, 'Globex has records (its demo data)');
    assert.ok(resources.every((r) => r.includes('0a0e0000-0000-4000-8000-000000000002')), resources.join('\n'));
    await page.goto(`${BASE}/admin`);
    const menu = page.locator('.user-menu');
    await menu.getByText('Platform admin').first().waitFor();
    await shot(page, 'admin-signed-in');

    // The session is a cookie the page can't read, and it survives a reload.
    assert.equal(await page.evaluate(() => document.cookie.includes('portal_session')), false);
    await page.reload();
    assert.equal(await page.locator('.signed-in-as').innerText(), 'Signed in as Platform admin (platform admin).');

    await menu.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(`${BASE}/`);
    await page.getByRole('banner').getByRole('link', { name: 'Sign in' }).waitFor();
    await page.goto(`${BASE}/admin`);
    assert.equal(page.url(), `${BASE}/login?next=/admin`);
  } finally {
    await b.close();
  }
});

test('without JavaScript: break-glass sign-in and sign-out work as plain forms', async () => {
  const b = await openBrowser({ javaScriptEnabled: false });
  try {
    const { page } = b;
    await signIn(page, 'wrong password, no js');
    await page.waitForURL(/\/login\?/);
    assert.equal(await page.getByRole('alert').innerText(), 'Email or password is wrong.');

    await signIn(page);
    await page.waitForURL(`${BASE}/admin`);
    assert.equal(await page.locator('.signed-in-as').innerText(), 'Signed in as Platform admin (platform admin).');
    await page.locator('.user-menu').getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(`${BASE}/`);
    assert.equal(await page.getByRole('banner').getByRole('link', { name: 'Sign in' }).count(), 1);
  } finally {
    await b.close();
  }
});

test('a post from another origin is refused and signs nobody in', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await page.goto(`${BASE}/login`);
    const action = await page.locator('#break-glass-form').getAttribute('action');
    const res = await page.request.post(`${BASE}${action}`, {
      form: { email: EMAIL, password: PASSWORD },
      headers: { accept: 'text/html', origin: 'http://evil.example', referer: 'http://evil.example/' },
      maxRedirects: 0,
    });
    assert.equal(res.status(), 403);
    assert.match(await res.text(), /Origin check/);
    const cookies = await b.context.cookies(BASE);
    assert.equal(cookies.some((c) => c.name === 'portal_session'), false);
  } finally {
    await b.close();
  }
});
