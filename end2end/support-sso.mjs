// Signing in through the demo organizations' identity provider (npm oidc-provider).
import { BASE } from './support.mjs';

/** Starts SSO for `email` on the portal's sign-in page; resolves on the provider's form. */
export async function startSso(page, email) {
  await page.goto(`${BASE}/login`);
  const form = page.locator('#sso-form');
  await form.getByLabel('Work email').fill(email);
  await form.getByRole('button', { name: 'Continue' }).click();
  await page.waitForURL((u) => !u.href.startsWith(BASE));
}

/** At the provider's login form: sign in as `login` (any password works there). */
export async function providerLogin(page, login) {
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('demo password');
  await page.getByRole('button', { name: 'Sign-in' }).click();
}

/** The whole round trip; resolves back on the portal. */
export async function ssoSignIn(page, email, login = email) {
  await startSso(page, email);
  await providerLogin(page, login);
  await page.waitForURL((u) => u.href.startsWith(BASE));
}
