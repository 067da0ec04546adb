// Every page as a person sees it: a screenshot of each at desktop (1280×800) and phone
// (390×844) width, in the light and the dark theme, into test-artifacts/pages/, and axe-core's
// accessibility rules run on each page in both themes with no serious or critical violation.
// Also: the launch flow works with the keyboard alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS, BASE, adminSignIn, hydrated, openBrowser } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const OUT = join(ARTIFACTS, 'pages');
mkdirSync(OUT, { recursive: true });
const AXE = 'node_modules/axe-core/axe.min.js';
const VIEWPORTS = { desktop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } };

/** Runs axe on the page; returns the serious and critical violations, one line each. */
async function axeProblems(page) {
  await page.addScriptTag({ path: AXE });
  const result = await page.evaluate(() => globalThis.axe.run(document, { resultTypes: ['violations'] }));
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
}

/** Visits each page in both themes and both widths, as whoever `signIn` makes the context. */
async function review(who, signIn, pages) {
  const problems = [];
  for (const [vpName, viewport] of Object.entries(VIEWPORTS)) {
    const b = await openBrowser({ viewport });
    try {
      const { page, context } = b;
      await signIn(page);
      for (const theme of ['light', 'dark']) {
        await context.addCookies([{ name: 'theme', value: theme, url: BASE }]);
        for (const [name, where] of pages) {
          // A path, or a function that finds one (pages whose URL holds a generated id).
          const path = typeof where === 'function' ? await where(page) : where;
          const res = await page.goto(`${BASE}${path}`);
          assert.ok(res.status() < 500, `${path} as ${who}: HTTP ${res.status()}`);
          await hydrated(page);
          await page.screenshot({ path: join(OUT, `${name}-${theme}-${vpName}.png`), fullPage: true });
          if (vpName === 'desktop') {
            for (const p of await axeProblems(page)) problems.push(`${path} (${who}, ${theme}): ${p}`);
          }
        }
      }
    } finally {
      await b.close();
    }
  }
  return problems;
}

const none = async () => {};

test('every page: screenshots at two widths in both themes, and no serious accessibility violation', async () => {
  const problems = [
    ...(await review('anonymous', none, [
      ['home', '/'],
      ['login', '/login'],
      ['catalog', '/catalog'],
      ['marketplace', '/marketplace'],
      ['listing', '/marketplace/pytorch'],
      ['api-reference', '/docs/api'],
      ['not-found', '/no/such/page'],
    ])),
    ...(await review('alice', (p) => ssoSignIn(p, 'alice@acme.example'), [
      ['home-tenant', '/'],
      ['organization', '/organization'],
      ['projects', '/projects'],
      ['allocations', '/allocations'],
      ['volumes', '/volumes'],
      ['launch', '/launch'],
      ['account', '/account'],
      ['tokens', '/account/tokens'],
      ['billing', '/billing'],
      ['audit', '/audit'],
      ['sso-settings', '/settings/sso'],
      ['publish', '/marketplace/publish'],
    ])),
    ...(await review('platform admin', adminSignIn, [
      ['home-platform', '/'],
      ['admin', '/admin'],
      ['fleet', '/fleet'],
      ['sku-admin', '/catalog/manage'],
      ['marketplace-review', '/admin/marketplace'],
      ['version-review', async (page) => {
        await page.goto(`${BASE}/admin/marketplace`);
        const link = page.getByRole('link', { name: 'Review vllm 0.6.5' });
        return new URL(await link.getAttribute('href'), BASE).pathname;
      }],
      ['platform-billing', '/admin/billing'],
    ])),
  ];
  assert.deepEqual(problems, [], `accessibility problems:\n${problems.join('\n')}`);
});

test('the launch form works with the keyboard alone', async () => {
  const b = await openBrowser();
  try {
    const { page } = b;
    await ssoSignIn(page, 'alice@acme.example');
    await page.goto(`${BASE}/launch`);
    await hydrated(page);
    // Tab from the top of the page until the SKU select has focus, then choose with arrows.
    const sku = page.locator('#launch select[name="sku"]');
    for (let i = 0; i < 40 && !(await sku.evaluate((e) => e === document.activeElement)); i++) {
      await page.keyboard.press('Tab');
    }
    assert.ok(await sku.evaluate((e) => e === document.activeElement), 'the SKU select is reachable by Tab');
    const before = await sku.inputValue();
    await page.keyboard.press('ArrowDown');
    assert.notEqual(await sku.inputValue(), before, 'arrow keys change the SKU');
    // Focus is visible: the focused control draws an outline.
    const outline = await sku.evaluate((e) => getComputedStyle(e).outlineStyle);
    assert.notEqual(outline, 'none', 'focus is visible');
    const name = page.locator('#launch input[name="name"]');
    for (let i = 0; i < 40 && !(await name.evaluate((e) => e === document.activeElement)); i++) {
      await page.keyboard.press('Tab');
    }
    assert.ok(await name.evaluate((e) => e === document.activeElement), 'the name field is reachable by Tab');
    await page.keyboard.type('kbd-only');
    assert.equal(await name.inputValue(), 'kbd-only');
  } finally {
    await b.close();
  }
});
