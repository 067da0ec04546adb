// Finance: fiona (Acme finance) reads the month's spend as a chart, last month's invoice with
// its Stripe status and hosted link (served by the local Stripe test server, paid by it a few
// seconds after finalisation), and exports CSV. bob (a member) can't open billing. The
// platform admin sees Globex's declined payment, the revenue chart, and grants credit.
//
// The demo history (`seed-demo`) gives both tenants last month's usage; the server's billing
// worker rates it, closes the month into invoices and syncs them to Stripe within seconds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BASE, adminSignIn, hydrated, openBrowser, shot } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

async function as(email) {
  const b = await openBrowser();
  await ssoSignIn(b.page, email);
  await b.page.waitForURL(`${BASE}/`);
  return b;
}

/** Reloads `url` until `check()` holds (up to `seconds`). */
async function reloadUntil(page, url, check, seconds = 60) {
  for (let i = 0; i < seconds * 2; i++) {
    await page.goto(url);
    if (await check()) return;
    await page.waitForTimeout(500);
  }
  throw new Error(`waited ${seconds} s on ${url}`);
}

test('fiona sees the spend chart, a paid invoice with its Stripe link, and exports CSV', async () => {
  const b = await as('fiona@acme.example');
  try {
    const { page } = b;
    const paid = page.locator('#invoices tr', { has: page.locator('[data-testid="invoice-status"]', { hasText: 'paid' }) });
    await reloadUntil(page, `${BASE}/billing`, async () => (await paid.count()) > 0);
    await hydrated(page);
    assert.equal(await page.locator('h1').innerText(), 'Billing');
    assert.match(await page.getByTestId('mtd').innerText(), /^\d{1,3}(,\d{3})*\.\d{2} USD$/);
    assert.match(await page.getByTestId('forecast').innerText(), /^\d{1,3}(,\d{3})*\.\d{2} USD$/);
    // Storage beside compute: its part of the month, and what is stored now.
    assert.match(await page.getByTestId('storage-mtd').innerText(), /^\d{1,3}(,\d{3})*\.\d{2} USD$/);
    assert.match(await page.getByTestId('storage-now').innerText(), /^\d+ GiB stored now, \d{1,3}(,\d{3})*\.\d{2} USD a month$/);

    // The chart is drawn by ECharts (served from /vendor/, not a CDN) into a canvas. In the
    // first two hours of a month the demo has no usage in it yet, and the page says so.
    const chart = page.getByTestId('chart-project');
    const monthIsYoung = new Date().getUTCDate() === 1 && new Date().getUTCHours() < 3;
    if (monthIsYoung && (await chart.count()) === 0) {
      assert.match(await page.locator('main').innerText(), /No rated usage this month yet/);
    } else {
      await chart.locator('canvas').first().waitFor({ timeout: 20_000 });
      const option = JSON.parse(await chart.getAttribute('data-option'));
      const projects = option.series.map((s) => s.name).sort();
      assert.deepEqual(projects, ['inference', 'research']);
      assert.ok(option.series.every((s) => s.type === 'bar' && s.stack === 'spend'));
    }
    await shot(page, 'billing-fiona');

    // Last month's invoice: paid, Stripe says so too, with the hosted invoice link.
    const row = paid.first();
    assert.equal(await row.getByTestId('stripe-status').innerText(), 'paid');
    const hosted = await row.getByTestId('hosted-link').getAttribute('href');
    assert.match(hosted, /^http:\/\/127\.0\.0\.1:\d+\/hosted\/in_/);
    const number = await row.locator('td').first().innerText();
    assert.match(number, /^GPU-\d{6}-\d{4,}$/);

    // The invoice page: lines per project and SKU, totals, and the hosted page agrees.
    await row.getByRole('link', { name: number }).click();
    await page.waitForURL(/\/billing\/invoices\/[0-9a-f-]{36}$/);
    assert.equal(await page.locator('h1').innerText(), `Invoice ${number}`);
    const lines = await page.locator('#invoice-lines tbody tr[data-kind="usage"] td:nth-child(2)').allInnerTexts();
    assert.ok(lines.some((l) => l.startsWith('research · h100.8x · 576.000000 GPU-hours at 2.99 USD/GPU-hour')), lines.join('\n'));
    assert.ok(lines.some((l) => l.startsWith('inference · l40s.1x')), lines.join('\n'));
    const total = await page.getByTestId('invoice-total').innerText();
    const stripePage = await b.context.newPage();
    await stripePage.goto(hosted);
    assert.equal(await stripePage.locator('#status').innerText(), 'paid');
    const due = (await stripePage.locator('p', { hasText: 'Amount due' }).innerText()).replace('Amount due: ', '');
    // The portal groups thousands (1,722.24 USD); Stripe's page writes the plain amount.
    assert.match(total, /^\d{1,3}(,\d{3})*\.\d{2} USD$/);
    assert.equal(due, total.replaceAll(',', ''), 'Stripe and the portal agree to the cent');
    await stripePage.close();

    // CSV of the invoice's lines: the same lines, machine-readable.
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-lines').click()]);
    const csv = readFileSync(await download.path(), 'utf8').trim().split('\n');
    assert.equal(csv[0], 'invoice,month,line,kind,project,sku,gpu_hours,unit_price_per_gpu_hour,amount,currency,description,cluster');
    assert.ok(csv.slice(1).every((l) => l.startsWith(`${number},`)), csv.join('\n'));
    assert.equal(csv.length - 1, await page.locator('#invoice-lines tbody tr').count());

    // Usage CSV for this month, from the billing page.
    await page.goto(`${BASE}/billing`);
    const [usage] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-usage').click()]);
    const rows = readFileSync(await usage.path(), 'utf8').trim().split('\n');
    assert.equal(rows[0], 'period_start,project,sku,allocation,allocation_id,gpus,running_seconds,price_per_hour,currency,amount,listing,fee_per_hour,fee_amount');
    assert.ok(monthIsYoung || rows.length > 1, 'this month has rated usage');
  } finally {
    await b.close();
  }
});

test('bob (a member) cannot open billing or its exports', async () => {
  const b = await as('bob@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/billing`);
    assert.equal(await page.getByRole('alert').innerText(), 'Only organization admins and finance may do this.');
    assert.equal(await page.locator('#invoices').count(), 0);
    const res = await page.request.get(`${BASE}/billing/export/usage.csv?month=2026-11`);
    assert.equal(res.status(), 403);
  } finally {
    await b.close();
  }
});

test('the platform admin sees the declined payment and revenue, and grants credit', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await adminSignIn(page);
    const failed = page.locator('#failed-invoices tr[data-invoice]');
    await reloadUntil(page, `${BASE}/admin/billing?status=failed`, async () => (await failed.count()) > 0);
    // The filtered list agrees: only failed payments.
    const listed = await page.locator('#all-invoices [data-testid="invoice-status"]').allInnerTexts();
    assert.ok(listed.length > 0 && listed.every((s) => s === 'payment failed'), listed.join(','));
    await hydrated(page);
    // The organization by its name, not its slug.
    assert.equal(await failed.first().locator('td').first().innerText(), 'Globex');
    assert.equal(await failed.first().getByTestId('invoice-status').innerText(), 'payment failed');
    await page.getByTestId('chart-revenue').locator('canvas').first().waitFor({ timeout: 20_000 });

    const grant = page.locator('section', { has: page.locator('#grant') });
    await grant.getByLabel('Organization').selectOption({ label: 'globex' });
    await grant.getByLabel('Amount').fill('12.5 JPY');
    await grant.getByLabel('Reason').fill('goodwill');
    await grant.getByRole('button', { name: 'Grant credit' }).click();
    await grant.getByRole('alert').waitFor();
    assert.match(await grant.getByRole('alert').innerText(), /JPY is not supported/);
    await grant.getByLabel('Amount').fill('25.00 USD');
    await grant.getByRole('button', { name: 'Grant credit' }).click();
    await grant.getByRole('status').waitFor();
    assert.equal(await grant.getByRole('status').innerText(), 'Granted 25.00 USD.');
    await shot(page, 'billing-platform');
  } finally {
    await b.close();
  }
});
