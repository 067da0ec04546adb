// Org members sign in through their organization's identity provider: a real, certified
// OpenID provider (npm oidc-provider) on loopback, started by `cargo xtask test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, openBrowser, shot } from '../support.mjs';
import { providerLogin, ssoSignIn, startSso } from '../support-sso.mjs';

const ISSUER = process.env.PORTAL_IDP_ISSUER;

async function signedInName(page) {
  const who = page.locator('.user-menu .who');
  return (await who.count()) ? (await who.innerText()).trim() : null;
}

async function assertSignedOut(page) {
  await page.goto(`${BASE}/admin`);
  assert.equal(page.url(), `${BASE}/login?next=/admin`);
  assert.equal(await signedInName(page), null);
}

async function ssoError(page) {
  const alert = page.locator('[data-sso-error]');
  await alert.waitFor();
  return { code: await alert.getAttribute('data-sso-error'), text: await alert.innerText() };
}

test('alice signs in through Acme\'s provider and signs out there too', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await startSso(page, 'alice@acme.example');
    assert.ok(page.url().startsWith(`${ISSUER}/`), `at the provider: ${page.url()}`);
    // The authorization request carries PKCE S256, state and nonce.
    await providerLogin(page, 'alice@acme.example');
    await page.waitForURL(`${BASE}/`);
    assert.equal(await signedInName(page), 'Alice Anders');
    await shot(page, 'sso-alice-home');

    await page.locator('.user-menu').getByRole('button', { name: 'Sign out' }).click();
    // The provider's end-session page asks to confirm, then returns to the portal.
    await page.waitForURL((u) => u.href.startsWith(`${ISSUER}/`));
    await page.getByRole('button', { name: 'Yes, sign me out' }).click();
    await page.waitForURL(`${BASE}/`);
    await assertSignedOut(page);
  } finally {
    await b.close();
  }
});

test('someone the portal has never seen is created just in time, as a member', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await ssoSignIn(page, 'gina@globex.example');
    await page.waitForURL(`${BASE}/`);
    assert.equal(await signedInName(page), 'Gina Green');
    // A tenant member, not platform staff.
    await page.goto(`${BASE}/admin`);
    assert.equal(await page.getByRole('alert').innerText(), 'Only platform staff may do this.');
  } finally {
    await b.close();
  }
});

test('the provider request uses PKCE S256, a state and a nonce', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    let authorize = null;
    page.on('request', (r) => {
      if (r.url().startsWith(`${ISSUER}/auth?`)) authorize = new URL(r.url());
    });
    await startSso(page, 'bob@acme.example');
    assert.ok(authorize, 'saw the authorization request');
    const q = authorize.searchParams;
    assert.equal(q.get('response_type'), 'code');
    assert.equal(q.get('code_challenge_method'), 'S256');
    assert.ok((q.get('code_challenge') ?? '').length >= 43);
    assert.ok((q.get('state') ?? '').length >= 16);
    assert.ok((q.get('nonce') ?? '').length >= 16);
    assert.equal(q.get('client_id'), 'portal-acme');
    assert.equal(q.get('redirect_uri'), `${BASE}/auth/callback`);
    assert.equal(q.get('login_hint'), 'bob@acme.example');
  } finally {
    await b.close();
  }
});

test('an email domain no tenant owns is refused before leaving the portal', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await page.goto(`${BASE}/login`);
    const form = page.locator('#sso-form');
    await form.getByLabel('Work email').fill('mallory@unknown.example');
    await form.getByRole('button', { name: 'Continue' }).click();
    const alert = form.getByRole('alert');
    await alert.waitFor();
    assert.equal(
      await alert.innerText(),
      'Sign-in failed: no organization signs in with unknown.example addresses.',
    );
    assert.ok(page.url().startsWith(BASE));
    await assertSignedOut(page);
  } finally {
    await b.close();
  }
});

test('a callback without a matching state is refused, with or without a sign-in under way', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    // Nothing started in this browser.
    await page.goto(`${BASE}/auth/callback?code=forged&state=forged`);
    assert.equal((await ssoError(page)).code, 'state');
    // Started, but the state is wrong.
    await startSso(page, 'alice@acme.example');
    await page.goto(`${BASE}/auth/callback?code=forged&state=not-the-state`);
    const err = await ssoError(page);
    assert.equal(err.code, 'state');
    assert.match(err.text, /did not match a sign-in started in this browser/);
    // Missing state.
    await startSso(page, 'alice@acme.example');
    await page.goto(`${BASE}/auth/callback?code=forged`);
    assert.equal((await ssoError(page)).code, 'state');
    await assertSignedOut(page);
  } finally {
    await b.close();
  }
});

test('a replayed authorization code signs nobody in', async () => {
  const victim = await openBrowser();
  const attacker = await openBrowser();
  try {
    let callback = null;
    victim.page.on('request', (r) => {
      if (r.url().startsWith(`${BASE}/auth/callback`)) callback = r.url();
    });
    await ssoSignIn(victim.page, 'carol@globex.example');
    assert.equal(await signedInName(victim.page), 'Carol Chen');
    assert.ok(callback, 'saw the callback URL');

    // The same code and state, replayed from another browser.
    await attacker.page.goto(callback);
    assert.equal((await ssoError(attacker.page)).code, 'state');
    await assertSignedOut(attacker.page);

    // And replayed in the victim's own browser after signing out of the portal only.
    await victim.context.clearCookies();
    await victim.page.goto(callback);
    assert.equal((await ssoError(victim.page)).code, 'state');
    await assertSignedOut(victim.page);
  } finally {
    await victim.close();
    await attacker.close();
  }
});

test('a refusal at the provider comes back as a clear error and no session', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await startSso(page, 'alice@acme.example');
    await page.goto(`${BASE}/auth/callback?error=access_denied&state=whatever`);
    const err = await ssoError(page);
    assert.equal(err.code, 'provider_refused');
    await assertSignedOut(page);
  } finally {
    await b.close();
  }
});

test('signing in at the provider as someone outside the tenant\'s domains is refused', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await startSso(page, 'alice@acme.example');
    await providerLogin(page, 'dave@contractor.example');
    await page.waitForURL((u) => u.href.startsWith(`${BASE}/login`));
    const err = await ssoError(page);
    assert.equal(err.code, 'email_not_allowed');
    await assertSignedOut(page);
  } finally {
    await b.close();
  }
});

test('without JavaScript: the SSO round trip works as plain forms and redirects', async () => {
  const b = await openBrowser({ javaScriptEnabled: false });
  try {
    const { page } = b;
    await ssoSignIn(page, 'fiona@acme.example');
    await page.waitForURL(`${BASE}/`);
    assert.equal(await signedInName(page), 'Fiona Fischer');
  } finally {
    await b.close();
  }
});
