// Platform operators manage what is sold: a SKU is created as a draft from the SKU form (its
// refusals named under their fields, nothing saved), then activated, and the public catalog
// offers it until it is retired. Storage is priced per region on the same page, and the
// public catalog shows the price.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, adminSignIn, hydrated, openBrowser, shot } from '../support.mjs';

const RUN = Date.now().toString(36);
const NAME = `e2e-${RUN}.1x`;

test('an operator creates a SKU, is told what is wrong under the field, activates and retires it', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await adminSignIn(page);
    await page.goto(`${BASE}/catalog/manage`);
    await hydrated(page);
    const form = page.locator('section[aria-labelledby="new-sku"]');
    await form.getByLabel('Name', { exact: true }).fill(NAME);
    await form.getByLabel('Display name').fill(`E2E ${RUN}`);
    await form.getByLabel('Shape').selectOption('gpu_slice');
    await form.getByLabel('GPU model').fill('NVIDIA L40S');
    await form.getByLabel('GPUs').fill('3');
    await form.getByLabel('vCPUs').fill('16');
    await form.getByLabel('Memory (GiB)').fill('96');
    await form.getByLabel('NVMe (GiB)').fill('500');
    await form.getByLabel('Regions').fill('eu-west-1');
    await form.getByLabel('Node families').fill('pcie-l40s-4x');
    await form.getByLabel('Price per hour').fill('1.75 usd');

    // A slice of 3 GPUs is refused under its field, and nothing is saved.
    await form.getByRole('button', { name: 'Save SKU' }).click();
    const gpus = form.locator('#sku-gpu-count-error');
    await gpus.filter({ hasText: 'not 3' }).waitFor();
    assert.equal(await gpus.innerText(), "A gpu_slice has 1, 2, 4 or 8 GPUs, not 3.");
    assert.equal(await page.locator(`tr[data-sku="${NAME}"]`).count(), 0);

    await form.locator('input[name="sku[gpu_count]"]').fill('1');
    await form.getByRole('button', { name: 'Save SKU' }).click();
    await page.getByText(`Saved ${NAME}.`).waitFor();
    await page.reload();
    const row = page.locator(`tr[data-sku="${NAME}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /1\.75 USD/);
    assert.match(await row.innerText(), /draft/);
    await shot(page, 'sku-admin-saved');

    await hydrated(page);
    await row.getByRole('button', { name: 'Activate' }).click();
    await row.filter({ hasText: 'active' }).waitFor();

    // The public catalog sells it now.
    await page.goto(`${BASE}/catalog`);
    await page.getByText(NAME).first().waitFor();

    // Retired, it leaves the catalog (and the other tests' launch forms) again.
    await page.goto(`${BASE}/catalog/manage`);
    await hydrated(page);
    await row.getByRole('button', { name: 'Retire' }).click();
    await row.filter({ hasText: 'retired' }).waitFor();
    await page.goto(`${BASE}/catalog`);
    assert.equal(await page.getByText(NAME).count(), 0);
  } finally {
    await b.close();
  }
});

test('an operator prices storage in a region, and the public catalog shows it', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await adminSignIn(page);
    await page.goto(`${BASE}/catalog/manage`);
    await hydrated(page);
    const row = page.locator('#storage-prices-table tr[data-region="us-east-1"]');
    const input = row.getByLabel('New storage price for us-east-1');
    // A price without its currency is refused, naming what to write; nothing changes.
    await input.fill('0.09');
    await row.getByRole('button', { name: 'Set price' }).click();
    await page.getByText(/write a price per GiB-month and a currency/).waitFor();
    assert.equal(await row.getByTestId('storage-price').innerText(), '0.10 USD');

    await input.fill('0.085 usd');
    await row.getByRole('button', { name: 'Set price' }).click();
    await page.getByText('Storage in us-east-1 now costs 0.085 USD per GiB-month.').waitFor();
    await row.getByTestId('storage-price').filter({ hasText: '0.085 USD' }).waitFor();
    await shot(page, 'sku-admin-storage-prices');

    await page.goto(`${BASE}/catalog`);
    const listed = page.locator('#storage-prices li[data-region="us-east-1"]');
    assert.equal(await listed.innerText(), 'us-east-1: 0.085 USD per GiB-month');

    // Back to the demo's price, for the tests that make volumes there.
    await page.goto(`${BASE}/catalog/manage`);
    await hydrated(page);
    await input.fill('0.10 USD');
    await row.getByRole('button', { name: 'Set price' }).click();
    await row.getByTestId('storage-price').filter({ hasText: '0.10 USD' }).waitFor();
  } finally {
    await b.close();
  }
});
