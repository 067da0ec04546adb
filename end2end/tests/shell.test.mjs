// The UI shell: server rendering, hydration, forms without JavaScript, keyboard use.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, openBrowser, shot, hydrated } from '../support.mjs';

// What a visitor's menu offers: the public pages (each role's menu: home.test.mjs).
const SECTIONS = ['Catalog', 'Marketplace'];

test('home page renders, hydrates, and then handles forms and links in place', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    const response = await page.goto(BASE);
    assert.equal(response.status(), 200);
    assert.equal(await page.locator('h1').innerText(), 'GPU cloud');
    assert.match(await page.locator('[data-status]').innerText(), /Control plane ready/);
    const menu = page.getByRole('navigation', { name: 'Main' }).getByRole('link');
    assert.deepEqual(await menu.allInnerTexts(), SECTIONS);

    await hydrated(page);
    // Anything stored on window survives only if the page is never reloaded.
    await page.evaluate(() => { window.__samePage = 'yes'; });

    // The theme form posts in the background once hydrated: no navigation, immediate effect.
    await page.getByLabel('Dark').check();
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForSelector('html[data-theme="dark"]');
    assert.equal(await page.evaluate(() => window.__samePage), 'yes');
    await shot(page, 'home-hydrated-dark');

    // Client-side navigation, also without a reload; the current link is marked.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Catalog' }).click();
    await page.waitForURL(`${BASE}/catalog`);
    assert.equal(await page.locator('h1').innerText(), 'Catalog');
    assert.equal(await page.evaluate(() => window.__samePage), 'yes');
    assert.equal(await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Catalog' }).getAttribute('aria-current'), 'page');
    // The table comes with the page's data, a moment after the navigation.
    await page.locator('#catalog').waitFor({ timeout: 10_000 });
    assert.equal(await page.locator('#catalog').count(), 1, 'the catalog is public');
    assert.equal(await page.title(), 'Catalog · GPU cloud');
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Marketplace' }).click();
    await page.waitForURL(`${BASE}/marketplace`);
    assert.equal(await page.evaluate(() => window.__samePage), 'yes');

    // The cookie was set by the background post: a fresh load keeps the theme.
    await page.reload();
    assert.equal(await page.locator('html').getAttribute('data-theme'), 'dark');
    assert.deepEqual(b.errors, []);
  } finally {
    await b.close();
  }
});

test('a bad theme value is refused with a message that names it (hydrated)', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await page.goto(BASE);
    await hydrated(page);
    await page.evaluate(() => { document.querySelector('input[value="light"]').value = 'purple'; });
    await page.getByLabel('Light').check();
    await page.getByRole('button', { name: 'Apply' }).click();
    const alert = page.getByRole('alert');
    await alert.waitFor();
    assert.equal(await alert.innerText(), 'Unknown theme "purple": choose one of system, light or dark.');
    assert.equal(await page.locator('html').getAttribute('data-theme'), 'system');
  } finally {
    await b.close();
  }
});

test('without JavaScript: links navigate and the form posts to its server function', async () => {
  const b = await openBrowser({ javaScriptEnabled: false });
  try {
    const { page } = b;
    await page.goto(BASE);
    assert.equal(await page.locator('body[data-hydrated]').count(), 0, 'no wasm ran');
    assert.match(await page.locator('[data-status]').innerText(), /Control plane ready/);

    // Billing needs a session: without one the browser is sent to sign in, to come back after.
    await page.goto(`${BASE}/billing`);
    await page.waitForURL(`${BASE}/login?next=/billing`);
    assert.equal(await page.locator('h1').innerText(), 'Sign in');
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Catalog' }).click();
    await page.waitForURL(`${BASE}/catalog`);
    assert.equal(await page.locator('h1').innerText(), 'Catalog');

    await page.getByLabel('Light').check();
    await Promise.all([
      page.waitForURL(`${BASE}/catalog`, { waitUntil: 'load' }),
      page.getByRole('button', { name: 'Apply' }).click(),
    ]);
    assert.equal(await page.locator('html').getAttribute('data-theme'), 'light');
    assert.equal(await page.getByLabel('Light').isChecked(), true);
    await shot(page, 'catalog-no-js-light');
  } finally {
    await b.close();
  }
});

test('without JavaScript: a refused form post comes back with the error shown', async () => {
  const b = await openBrowser({ javaScriptEnabled: false });
  try {
    const { page } = b;
    await page.goto(`${BASE}/marketplace`);
    const action = await page.locator('form.theme-picker').getAttribute('action');
    // A tampered post, as a plain browser form would send it.
    const res = await page.request.post(`${BASE}${action}`, {
      form: { theme: 'purple' },
      headers: { accept: 'text/html', referer: `${BASE}/marketplace`, origin: BASE },
      maxRedirects: 0,
    });
    assert.equal(res.status(), 302);
    const location = res.headers()['location'];
    assert.match(location, /^http:\/\/127\.0\.0\.1:\d+\/marketplace\?/);
    await page.goto(location);
    assert.equal(
      await page.locator('form.theme-picker').getByRole('alert').innerText(),
      'Unknown theme "purple": choose one of system, light or dark.',
    );
    assert.equal(await page.locator('html').getAttribute('data-theme'), 'system');
  } finally {
    await b.close();
  }
});

test('keyboard: the first Tab reaches the skip link, which moves focus to the content', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await page.goto(`${BASE}/marketplace/no-such-listing`);
    await hydrated(page);
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to content');
    await page.keyboard.press('Enter');
    await page.waitForURL(`${BASE}/marketplace/no-such-listing#main`);
    await page.keyboard.press('Tab');
    // The navigation is skipped: this page's content (a not-found notice) has no controls, so the next stop is the
    // theme form in the footer.
    const focused = await page.evaluate(() => document.activeElement.closest('form')?.className);
    assert.equal(focused, 'theme-picker');
  } finally {
    await b.close();
  }
});

test('narrow screens fold the menu behind a button, keep every section reachable; unknown pages say so with a 404', async () => {
  const b = await openBrowser({ viewport: { width: 390, height: 844 } });
  try {
    const { page } = b;
    await page.goto(BASE);
    await hydrated(page);
    const button = page.getByRole('button', { name: 'Menu' });
    assert.equal(await button.getAttribute('aria-expanded'), 'false');
    for (const name of SECTIONS) {
      assert.equal(await page.getByRole('link', { name, exact: true }).isVisible(), false, `${name} folded away`);
    }
    const header = await page.locator('header.topbar').boundingBox();
    assert.ok(header.height < 80, `the folded header is one row (${header.height} px)`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
    assert.equal(overflow, false, 'no horizontal scrolling');
    await shot(page, 'home-mobile');

    await button.click();
    assert.equal(await button.getAttribute('aria-expanded'), 'true');
    for (const name of SECTIONS) {
      assert.equal(await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name }).isVisible(), true, `${name} visible`);
    }
    await shot(page, 'home-mobile-menu-open');
    // Following a link folds it again.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Catalog' }).click();
    await page.waitForURL(`${BASE}/catalog`);
    assert.equal(await button.getAttribute('aria-expanded'), 'false');

    const res = await page.goto(`${BASE}/no-such-page`);
    assert.equal(res.status(), 404);
    assert.equal(await page.locator('h1').innerText(), 'Page not found');
  } finally {
    await b.close();
  }
});

test('without JavaScript a phone shows the whole menu: no button that could not work', async () => {
  const b = await openBrowser({ javaScriptEnabled: false, viewport: { width: 390, height: 844 } });
  try {
    const { page } = b;
    await page.goto(BASE);
    assert.equal(await page.getByRole('button', { name: 'Menu' }).isVisible(), false);
    for (const name of SECTIONS) {
      assert.equal(await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name }).isVisible(), true, `${name} visible`);
    }
  } finally {
    await b.close();
  }
});
