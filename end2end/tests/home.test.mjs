// Each role's home page and menu: a visitor, a member (bob), finance (fiona), an
// organization admin (alice), another organization's admin (carol) and the platform admin.
// The menu holds exactly the sections that role can open, and each of them answers 200; what
// the menu hides, the server still refuses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ARTIFACTS, BASE, adminSignIn, hydrated, openBrowser, shot } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const MONEY = /^\d{1,3}(,\d{3})*\.\d{2} USD$/;

async function as(email, options) {
  const b = await openBrowser(options);
  await ssoSignIn(b.page, email);
  await b.page.waitForURL(`${BASE}/`);
  return b;
}

/** The menu's link texts, and that each link answers 200 for this browser's session. */
async function menuOf(page) {
  const links = page.getByRole('navigation', { name: 'Main' }).getByRole('link');
  await links.first().waitFor();
  const names = await links.allInnerTexts();
  for (const href of await links.evaluateAll((as) => as.map((a) => a.getAttribute('href')))) {
    const res = await page.request.get(`${BASE}${href}`);
    assert.equal(res.status(), 200, `${href} from the menu answers ${res.status()}`);
  }
  return names;
}

test('a visitor: what the product is, the offers for sale, and only the public pages', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await page.goto(BASE);
    await hydrated(page);
    assert.equal(await page.locator('h1').innerText(), 'GPU cloud');
    assert.doesNotMatch(await page.locator('main').innerText(), /migration/i, 'no internal details');
    const offers = page.locator('#offers tbody tr');
    assert.ok((await offers.count()) >= 1, 'the catalog is on the home page');
    assert.match(await offers.first().locator('td.amount').innerText(), MONEY);
    assert.deepEqual(await menuOf(page), ['Catalog', 'Marketplace']);
    await shot(page, 'home-visitor');
  } finally {
    await b.close();
  }
});

test('bob (a member who operates Research): his instances, a launch button, no billing', async () => {
  const b = await as('bob@acme.example');
  try {
    const { page } = b;
    await hydrated(page);
    assert.match(await page.locator('h1').innerText(), /^Welcome, /);
    assert.equal(await page.getByRole('heading', { name: 'Running now' }).count(), 1);
    assert.equal(await page.getByTestId('attention').count(), 1);
    assert.equal(await page.getByRole('link', { name: 'Launch an instance' }).count(), 1, 'an operator may launch');
    assert.equal(await page.getByTestId('home-mtd').count(), 0, 'spend is for admins and finance');
    assert.deepEqual(await menuOf(page), ['Catalog', 'Marketplace', 'Instances', 'Volumes', 'Projects']);
    // Hidden from the menu and still refused.
    for (const path of ['/billing', '/organization', '/fleet', '/admin']) {
      const res = await page.request.get(`${BASE}${path}`);
      assert.equal(res.status(), 403, `${path} is refused to bob`);
    }
    await shot(page, 'home-bob');
  } finally {
    await b.close();
  }
});

test('fiona (finance): the month\'s spend and forecast, no launch button', async () => {
  const b = await as('fiona@acme.example');
  try {
    const { page } = b;
    await hydrated(page);
    assert.match(await page.getByTestId('home-mtd').innerText(), MONEY);
    assert.match(await page.getByTestId('home-forecast').innerText(), MONEY);
    assert.equal(await page.getByRole('link', { name: 'Launch an instance' }).count(), 0, 'finance does not launch');
    assert.deepEqual(await menuOf(page), ['Catalog', 'Marketplace', 'Instances', 'Volumes', 'Projects', 'Billing']);
    await shot(page, 'home-fiona');
  } finally {
    await b.close();
  }
});

test('alice (organization admin): spend, launch, and her organization\'s settings one click away', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await hydrated(page);
    assert.match(await page.getByTestId('home-mtd').innerText(), MONEY);
    assert.equal(await page.getByRole('link', { name: 'Launch an instance' }).count(), 1);
    assert.deepEqual(await menuOf(page), ['Catalog', 'Marketplace', 'Instances', 'Volumes', 'Projects', 'Billing', 'Organization']);
    await shot(page, 'home-alice');

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Organization' }).click();
    await page.waitForURL(`${BASE}/organization`);
    assert.equal(await page.locator('h1').innerText(), 'Acme Corp');
    // The demo's provider is registered and its domain verified.
    assert.match(await page.getByTestId('sso-state').innerText(), /^Members sign in through http:\/\/127\.0\.0\.1:\d+.* with acme\.example\.$/);
    for (const [name, href] of [
      ['Identity provider, domains and role mapping', '/settings/sso'],
      ['Projects, members and invitations', '/projects'],
      ['Search the audit log', '/audit'],
      ['API tokens', '/account/tokens'],
    ]) {
      assert.equal(await page.getByRole('link', { name, exact: true }).getAttribute('href'), href);
    }
    await shot(page, 'organization');
  } finally {
    await b.close();
  }
});

test('carol (Globex admin): the declined payment is what needs her', async () => {
  const b = await as('carol@globex.example');
  try {
    const { page } = b;
    // The billing worker closes last month and Stripe declines Globex's card within seconds
    // of the server starting; until then the home page has nothing to flag.
    const failed = page.getByTestId('attention').getByRole('link', { name: /^Payment of invoice GPU-\d{6}-\d+ \(.+\) failed$/ });
    for (let i = 0; i < 120 && (await failed.count()) === 0; i++) {
      await page.waitForTimeout(500);
      await page.goto(BASE);
    }
    assert.equal(await failed.count(), 1);
    assert.match(await failed.getAttribute('href'), /^\/billing\/invoices\/[0-9a-f-]{36}$/);
    await shot(page, 'home-carol');
  } finally {
    await b.close();
  }
});

test('the platform admin: what needs attention, the fleet in numbers, capacity by SKU and region', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await adminSignIn(page);
    await page.goto(BASE);
    await hydrated(page);
    assert.equal(await page.locator('h1').innerText(), 'Platform');
    assert.equal(await page.getByTestId('attention').count(), 1);
    const capacity = page.locator('#capacity tbody tr');
    assert.ok((await capacity.count()) >= 1, 'every SKU and region is listed');
    assert.match(await capacity.first().locator('td').first().innerText(), /^(\d+|not sold)$/);
    assert.deepEqual(await menuOf(page), ['Catalog', 'Marketplace', 'Fleet', 'Platform billing', 'Admin']);
    // Organization pages are not the platform admin's.
    assert.equal((await page.request.get(`${BASE}/organization`)).status(), 403);
    await shot(page, 'home-platform');
  } finally {
    await b.close();
  }
});

test('an invoice on a phone: every amount on screen, nothing to scroll sideways; printed, the invoice alone', async () => {
  const b = await as('fiona@acme.example', { viewport: { width: 390, height: 844 } });
  try {
    const { page } = b;
    await page.goto(`${BASE}/billing`);
    const link = page.locator('#invoices tbody tr a').first();
    await link.waitFor({ timeout: 60_000 });
    await page.goto(`${BASE}${await link.getAttribute('href')}`);
    await hydrated(page);
    const amounts = page.locator('#invoice-lines td.amount');
    assert.ok((await amounts.count()) >= 1);
    for (const box of await amounts.evaluateAll((tds) => tds.map((td) => td.getBoundingClientRect().right))) {
      assert.ok(box <= 390, `an amount ends at ${box} px, inside the screen`);
    }
    assert.match(await page.getByTestId('invoice-total').innerText(), MONEY);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
    assert.equal(overflow, false, 'no horizontal scrolling');
    await shot(page, 'invoice-phone');

    // Printed (to PDF from the browser's dialog): the invoice alone, no menu or buttons.
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.emulateMedia({ media: 'print' });
    assert.equal(await page.locator('header.topbar').isVisible(), false);
    assert.equal(await page.getByTestId('export-lines').isVisible(), false);
    assert.equal(await page.getByTestId('invoice-total').isVisible(), true);
    const pdf = await page.pdf({ path: join(ARTIFACTS, 'invoice.pdf') });
    assert.equal(pdf.subarray(0, 5).toString(), '%PDF-');
  } finally {
    await b.close();
  }
});
