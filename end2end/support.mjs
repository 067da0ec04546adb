// Shared helpers for the browser tests: Debian's Chromium through playwright-core, a fresh
// profile per context, and where screenshots go. `cargo xtask test` sets PORTAL_URL and
// ARTIFACTS_DIR and starts the portal (release build) against a throwaway database.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

export const BASE = process.env.PORTAL_URL ?? 'http://127.0.0.1:3000';
export const ARTIFACTS = process.env.ARTIFACTS_DIR ?? 'test-artifacts';
mkdirSync(ARTIFACTS, { recursive: true });

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Browsers open now. A test closes its own in a `finally`, but when one close() throws (it
 *  reports the page's errors) the closes after it are skipped, and a browser left open keeps
 *  the test file's process alive: the run would hang until CI's limit instead of failing. So
 *  whatever is still open when a file's tests end is closed here. */
const OPEN = new Set();
after(async () => {
  for (const b of OPEN) {
    await b.context.close().catch(() => {});
    rmSync(b.profile, { recursive: true, force: true });
  }
  OPEN.clear();
});

/** A browser context with its own empty profile; close() also removes the profile. */
export async function openBrowser({ javaScriptEnabled = true, viewport } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'portal-e2e-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: FLAGS,
    javaScriptEnabled,
    viewport: viewport ?? { width: 1280, height: 800 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  // A page that throws, or a script the Content-Security-Policy refused (the browser logs
  // the refusal as a console error), fails the test at close().
  const watch = (p) => {
    p.on('pageerror', (e) => errors.push(e.message));
    p.on('console', (m) => {
      if (m.type() === 'error' && /Content.Security.Policy/i.test(m.text())) {
        errors.push(`CSP: ${m.text()}`);
      }
    });
  };
  watch(page);
  context.on('page', watch);
  // Dangerous actions ask first (a confirm dialog): the person agrees, unless a test says
  // otherwise by setting `b.dialogs` to 'dismiss'. Every question asked is kept in `b.asked`.
  const asked = [];
  const answer = { dialogs: 'accept' };
  const onDialog = (d) => {
    asked.push(d.message());
    return answer.dialogs === 'dismiss' ? d.dismiss() : d.accept();
  };
  page.on('dialog', onDialog);
  context.on('page', (p) => p.on('dialog', onDialog));
  const open = { context, profile };
  OPEN.add(open);
  return {
    context,
    page,
    errors,
    asked,
    set dialogs(how) {
      answer.dialogs = how;
    },
    /** Closes the browser; fails the test if any page threw (a wasm panic during
     *  hydration included) or broke the script policy, since a form's no-JS fallback could
     *  otherwise hide it. */
    async close() {
      OPEN.delete(open);
      await context.close();
      rmSync(profile, { recursive: true, force: true });
      if (errors.length) {
        throw new Error(`uncaught errors in the page:\n${errors.join('\n')}`);
      }
    },
  };
}

export function shot(page, name) {
  return page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Resolves once the wasm bundle has hydrated the page. */
export function hydrated(page) {
  return page.waitForSelector('body[data-hydrated="true"]', { timeout: 20_000 });
}

export const ADMIN_EMAIL = process.env.PORTAL_ADMIN_EMAIL ?? 'admin@platform.example';
export const ADMIN_PASSWORD = process.env.PORTAL_ADMIN_PASSWORD;

/** Signs in as the platform admin (break-glass); resolves on the admin page. */
export async function adminSignIn(page) {
  if (!ADMIN_PASSWORD) throw new Error('PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  await page.goto(`${BASE}/login`);
  const form = page.locator('#break-glass-form');
  await form.getByLabel('Email').fill(ADMIN_EMAIL);
  await form.getByLabel('Password').fill(ADMIN_PASSWORD);
  await form.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${BASE}/admin`);
}

/** Reloads a node's page until the agent's discovery shows as a proposal (up to 30 s). */
export async function waitForProposal(page, nodeUrl) {
  const status = page.locator('[data-testid="proposal-status"]');
  for (let i = 0; i < 60 && !(await status.count()); i++) {
    await page.waitForTimeout(500);
    await page.goto(nodeUrl);
  }
  return status;
}

/**
 * Enrols `host` (PCIe L40S, in `region`) as the platform admin, runs a simulated node agent for
 * it with its state in `state`, and approves its slot map. Returns the agent process (kill it
 * when done) and the node's page. `extraArgs` go to `node-agent run` (by default its /metrics on
 * a port of its own). A node whose agent was stopped still counts as live for a
 * minute, so tests that must land on their own node use a region of their own.
 */
export async function enrolApprovedNode(state, host, region = 'us-east-1', extraArgs = ['--metrics-listen', '127.0.0.1:0']) {
  const AGENT = process.env.NODE_AGENT_BIN ?? 'target/debug/node-agent';
  const b = await openBrowser();
  try {
    const { page } = b;
    await adminSignIn(page);
    await page.goto(`${BASE}/fleet`);
    await hydrated(page);
    const enrol = page.locator('section[aria-labelledby="enrol"]');
    await enrol.getByLabel('Hostname').fill(host);
    await enrol.getByLabel('Region').fill(region);
    await enrol.getByLabel('Rack').fill('r7');
    await enrol.getByLabel('Node family').fill('pcie-l40s-4x');
    await enrol.getByRole('button', { name: 'Enrol' }).click();
    const token = (await enrol.locator('[data-testid="bootstrap-token"]').innerText()).trim();
    const enrolled = spawnSync(AGENT, ['enroll', '--server', BASE, '--state-dir', state, '--hostname', host], {
      env: { ...process.env, NODE_AGENT_BOOTSTRAP_TOKEN: token },
      encoding: 'utf8',
    });
    assert.equal(enrolled.status, 0, enrolled.stderr);
    const agent = spawn(AGENT, ['run', '--state-dir', state, '--driver', 'simulated', '--fixture', 'node-agent/fixtures/pcie-l40s-4x',
      '--heartbeat-s', '2', '--telemetry-listen', '127.0.0.1:0', ...extraArgs], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    await enrol.getByRole('link', { name: host }).click();
    await page.waitForURL(/\/fleet\/[0-9a-f-]{36}$/);
    const nodeUrl = page.url();
    const status = await waitForProposal(page, nodeUrl);
    assert.equal(await status.innerText(), 'pending');
    await hydrated(page);
    const approve = page.locator('[data-testid="proposal"] .decision form').first();
    await approve.getByLabel('Destructive wipe policy').selectOption('overwrite-verify');
    await approve.getByRole('button', { name: 'Approve' }).click();
    await page.locator('[data-testid="proposal-status"]', { hasText: 'approved' }).waitFor();
    return { agent, nodeUrl };
  } finally {
    await b.close();
  }
}

/**
 * Stops a node agent and removes its state directory once it has exited: removing it while the
 * agent still writes there (a task it was finishing) fails with ENOTEMPTY. SIGKILL after 10 s.
 */
export async function stopAgent(agent, state) {
  if (agent && agent.exitCode === null && agent.signalCode === null) {
    const exited = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill('SIGTERM');
    const timer = setTimeout(() => agent.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  rmSync(state, { recursive: true, force: true });
}

const DNSMASQ = '/usr/sbin/dnsmasq';

/** Why a DNS-backed test can't run here, or null. */
export function dnsUnavailable() {
  if (!process.env.PORTAL_DNS_PORT) return 'PORTAL_DNS_PORT is not set (cargo xtask test sets it)';
  if (spawnSync(DNSMASQ, ['--version']).status !== 0) return `${DNSMASQ} is not installed`;
  return null;
}

/**
 * Starts dnsmasq on 127.0.0.1:PORTAL_DNS_PORT (the resolver the portal was started with),
 * answering these TXT records ([name, value] pairs) and NXDOMAIN for everything else.
 * Resolves once it answers; stop() ends it.
 */
export async function startDns(records) {
  const port = process.env.PORTAL_DNS_PORT;
  const args = ['--keep-in-foreground', '--conf-file=/dev/null', '--listen-address=127.0.0.1',
    '--bind-interfaces', '--no-resolv', '--no-hosts', '--pid-file=', '--local=/#/', `--port=${port}`,
    ...records.map(([name, value]) => `--txt-record=${name},"${value}"`)];
  const child = spawn(DNSMASQ, args, { stdio: 'ignore' });
  const { createSocket } = await import('node:dgram');
  const query = Buffer.from('123401000001000000000000057265616479000001' + '0001', 'hex');
  const deadline = Date.now() + 10_000;
  for (;;) {
    const answered = await new Promise((resolve) => {
      const s = createSocket('udp4');
      const timer = setTimeout(() => { s.close(); resolve(false); }, 200);
      s.on('message', () => { clearTimeout(timer); s.close(); resolve(true); });
      s.send(query, Number(port), '127.0.0.1');
    });
    if (answered) break;
    if (Date.now() > deadline) { child.kill(); throw new Error(`dnsmasq did not answer on port ${port}`); }
  }
  return {
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill();
      await exited;
    },
  };
}

/** Polls `check` (4 times a second) until it returns true; fails naming `what` and the last
 *  answer after `seconds`. */
export async function until(what, check, seconds = 40) {
  let last;
  for (let i = 0; i < seconds * 4; i++) {
    last = await check().catch((e) => e);
    if (last === true) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.fail(`${what} never happened (last: ${last})`);
}

/** One answer from the browser tests' database (cargo xtask test gives its URL and psql), to
 *  check what a page shows against the database itself. */
export function sql(query) {
  const r = spawnSync(process.env.PORTAL_TEST_PSQL, [process.env.PORTAL_TEST_DATABASE_URL, '-AtX', '-c', query], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

/** bob's launch form, filled and sent on `base` (either replica): a slice of `sku` in `region`
 *  named `name`; waits for the allocation's page and returns its URL. */
export async function launchSlice(page, base, { sku, region, name, key }) {
  await page.goto(`${base}/launch?sku=${sku}`);
  await hydrated(page);
  const form = page.locator('#launch');
  await form.getByLabel('Region').selectOption(region);
  await form.locator('select[name="image"]').selectOption('ubuntu-24.04-cuda');
  await form.getByLabel('Name').fill(name);
  await form.locator('textarea[name="ssh_public_keys"]').fill(key);
  await form.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL(new RegExp(`^${base}/allocations/[0-9a-f-]{36}$`));
  return page.url();
}
