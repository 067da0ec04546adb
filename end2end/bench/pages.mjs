// `cargo xtask bench pages`: signed-in page loads against a release server.
//
// Signs in CLIENTS sessions (default 64) through the real sign-in path (the portal's SSO
// form, the demo identity provider, the callback), each in its own Chromium context, then
// runs one keep-alive HTTP connection per session for SECONDS (default 20) with PAGES_LOADER
// (`xtask pages-load`, xtask/src/pageload.rs), each fetching in
// turn the allocation list (the newest 50 of Research's 200), an allocation's page, the catalog and the billing page. Prints
// pages/s and p50/p99/max per page and the errors, the hydration bundle's size (raw and gzip),
// and, from Chromium, how long the launch page takes to become interactive (navigation start
// until hydration) on loopback. Ends with `RESULT pages …`.
//
// Environment: PORTAL_URL, PAGES_CLIENTS, PAGES_SECONDS, SITE_PKG (the built site's pkg dir),
// PAGES_KEEP_DIR (where to keep one body of each page; none kept without it), PAGES_ONLY
// (list, allocation, catalog or billing: every session loads that page alone), SERVER_PID and
// PG_POSTMASTER_PID (the server's pid and PostgreSQL's postmaster.pid file: the CPU time each
// spends a page, read from /proc), PAGES_LOADER (the xtask binary: its `pages-load` runs the load).
import http from 'node:http';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { BASE } from '../support.mjs';
import { providerLogin } from '../support-sso.mjs';

const CLIENTS = Number(process.env.PAGES_CLIENTS ?? 64);
const SECONDS = Number(process.env.PAGES_SECONDS ?? 20);
const USER = 'alice@acme.example';
// Acme's Research project (a demo id): the list shows one project's allocations, the first
// project when none is named, and which is first depends on what else exists.
const LIST = '/allocations?project=0a0e0000-0000-4000-8001-000000000001';
const url = new URL(BASE);

/** The SSO round trip for `email`. The portal allows 30 sign-in starts a minute per address,
 *  then one every 2 s (it says so on the form): wait as it asks and try again. */
async function signIn(page, email) {
  for (let attempt = 0; ; attempt++) {
    await page.goto(`${BASE}/login`);
    const form = page.locator('#sso-form');
    await form.getByLabel('Work email').fill(email);
    await form.getByRole('button', { name: 'Continue' }).click();
    const away = page.waitForURL((u) => !u.href.startsWith(BASE)).then(() => true);
    const refused = page.getByText(/Too many attempts/).waitFor().then(() => false);
    if (await Promise.race([away, refused])) break;
    if (attempt > 60) throw new Error('sign-in kept being refused');
    await page.waitForTimeout(2200);
  }
  await providerLogin(page, email);
  await page.waitForURL((u) => u.href.startsWith(BASE));
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run'],
});

// 1. Sessions, each through the whole sign-in round trip.
const started = Date.now();
const cookies = [];
for (let i = 0; i < CLIENTS; i++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await signIn(page, USER);
  const session = (await context.cookies(BASE)).find((c) => c.name === 'portal_session');
  if (!session) throw new Error(`sign-in ${i + 1} left no portal_session cookie`);
  cookies.push(`portal_session=${session.value}`);
  await context.close();
}
console.log(`signed in ${CLIENTS} sessions as ${USER} through SSO in ${((Date.now() - started) / 1000).toFixed(1)} s`);

/** GET `path` on `agent`'s connection; resolves to [status, body length]. */
function get(agent, cookie, path) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path, agent, headers: { cookie, accept: 'text/html' } },
      (res) => {
        let n = 0;
        let body = '';
        res.on('data', (c) => {
          n += c.length;
          if (body.length < 200_000) body += c;
        });
        res.on('end', () => resolve([res.statusCode, n, body]));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

// An allocation's page to fetch: the first one the list links to.
const probe = new http.Agent({ keepAlive: true, maxSockets: 1 });
const [listStatus, , list] = await get(probe, cookies[0], LIST);
const found = list.match(/href="(\/allocations\/[0-9a-f-]{36})"/);
if (listStatus !== 200 || !found) throw new Error(`the allocation list (${listStatus}) links to no allocation`);
const PAGES = [
  ['allocation list', LIST, 'list'],
  ['allocation page', found[1], 'allocation'],
  ['catalog', '/catalog', 'catalog'],
  ['billing', '/billing', 'billing'],
];
const ONLY = process.env.PAGES_ONLY || '';
const only = ONLY ? PAGES.findIndex((p) => p[2] === ONLY) : -1;
if (ONLY && only < 0) throw new Error(`PAGES_ONLY=${ONLY}: not one of ${PAGES.map((p) => p[2]).join(', ')}`);
// One body of each page, kept for reading (what a page is made of: markup against the data
// it carries for hydration).
const kept = process.env.PAGES_KEEP_DIR;
if (kept) {
  mkdirSync(kept, { recursive: true });
  for (const [name, path] of PAGES) {
    const [, , body] = await get(probe, cookies[0], path);
    writeFileSync(join(kept, `${name.replaceAll(' ', '-')}.html`), body);
  }
}

/** CPU seconds so far of the server, of PostgreSQL (the postmaster, its live children and
 *  those it reaped) and of this process; null where /proc can't tell (not Linux, no pids). */
const TICK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();
function statOf(pid) {
  // The fields after the command name, which may hold spaces: state is [0], ppid [1],
  // utime [11], stime [12], cutime [13], cstime [14].
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2).split(' ');
}
function cpuNow() {
  const own = process.cpuUsage();
  let client = (own.user + own.system) / 1e6;
  try {
    // The loader, once reaped (spawnSync waits for it), is in this process's children's time.
    const self = statOf(process.pid);
    client += (+self[13] + +self[14]) / TICK;
  } catch {
    // Not Linux: this process's own time only.
  }
  try {
    const server = statOf(process.env.SERVER_PID);
    const postmaster = readFileSync(process.env.PG_POSTMASTER_PID, 'utf8').split('\n')[0].trim();
    const pm = statOf(postmaster);
    let db = +pm[11] + +pm[12] + +pm[13] + +pm[14];
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        const f = statOf(pid);
        if (f[1] === postmaster) db += +f[11] + +f[12];
      } catch {
        // Gone since the listing: its time is in the postmaster's reaped children now.
      }
    }
    return { server: (+server[11] + +server[12]) / TICK, db: db / TICK, client };
  } catch (e) {
    return { client, why: e.message };
  }
}

// 2. Load: one connection per session, pages in turn (or PAGES_ONLY's alone), for SECONDS,
// by PAGES_LOADER (`xtask pages-load`: a thread and a blocking socket per session, far less
// CPU a page than this process's HTTP client, on cores the server shares). This process waits
// meanwhile; the loader's CPU is read from this process's reaped children.
const lat = PAGES.map(() => []);
const bytes = PAGES.map(() => 0);
let errors = 0;
let firstError = '';
const loader = process.env.PAGES_LOADER;
if (!loader) throw new Error('PAGES_LOADER (the xtask binary, which has pages-load) is not set');
const scratch = mkdtempSync(join(tmpdir(), 'pages-load-'));
writeFileSync(join(scratch, 'cookies'), cookies.join('\n') + '\n');
const cpu0 = cpuNow();
const t0 = process.hrtime.bigint();
const run = spawnSync(
  loader,
  [
    'pages-load',
    '--addr', `${url.hostname}:${url.port}`,
    '--seconds', String(SECONDS),
    '--cookies', join(scratch, 'cookies'),
    '--out', join(scratch, 'answers'),
    ...(only >= 0 ? ['--only', String(only)] : []),
    ...PAGES.map((p) => p[1]),
  ],
  { stdio: 'inherit' },
);
const t1 = process.hrtime.bigint();
const cpu1 = cpuNow();
if (run.status !== 0) {
  rmSync(scratch, { recursive: true, force: true });
  throw new Error(`${loader} pages-load: ${run.error?.message ?? `exit ${run.status}`}`);
}
for (const line of readFileSync(join(scratch, 'answers'), 'utf8').split('\n')) {
  if (!line) continue;
  const f = line.split(' ');
  if (f[0] === 'E') {
    errors++;
    firstError ||= `${PAGES[+f[1]][1]}: ${f.slice(2).join(' ')}`;
    continue;
  }
  const [p, ms, n, status] = [+f[0], +f[1], +f[2], +f[3]];
  lat[p].push(ms);
  bytes[p] = n;
  if (status !== 200) {
    errors++;
    firstError ||= `${PAGES[p][1]}: HTTP ${status}`;
  }
}
rmSync(scratch, { recursive: true, force: true });
const secs = Number(t1 - t0) / 1e9;
const q = (v, p) => (v.length ? v[Math.min(v.length - 1, Math.ceil(v.length * p) - 1)] : NaN);
const all = lat.flat().sort((a, b) => a - b);
console.log(`\n${CLIENTS} signed-in sessions, keep-alive, ${secs.toFixed(1)} s\n`);
console.log('page               count   pages/s   p50 ms   p99 ms   max ms   size');
PAGES.forEach(([name], p) => {
  if (only >= 0 && p !== only) return;
  const v = lat[p].sort((a, b) => a - b);
  console.log(
    `${name.padEnd(17)} ${String(v.length).padStart(6)} ${(v.length / secs).toFixed(0).padStart(9)} ${q(v, 0.5).toFixed(1).padStart(8)} ${q(v, 0.99).toFixed(1).padStart(8)} ${(v.at(-1) ?? NaN).toFixed(1).padStart(8)}   ${(bytes[p] / 1024).toFixed(0)} KiB`,
  );
});
const rate = all.length / secs;
console.log(
  `${'all'.padEnd(17)} ${String(all.length).padStart(6)} ${rate.toFixed(0).padStart(9)} ${q(all, 0.5).toFixed(1).padStart(8)} ${q(all, 0.99).toFixed(1).padStart(8)} ${(all.at(-1) ?? NaN).toFixed(1).padStart(8)}`,
);
console.log(`errors: ${errors}${firstError ? ` (first: ${firstError})` : ''}`);
console.log('targets: >= 2000 pages/s, p99 <= 30 ms, 0 errors');
// What a page costs each process in CPU: steadier than pages/s from one hour to the next on a
// shared machine, and what the goal's arithmetic needs (2,000 pages/s on two cores leaves
// 1 ms of CPU a page for all three together).
const perPage = (k) => (cpu0[k] == null || cpu1[k] == null ? null : ((cpu1[k] - cpu0[k]) * 1000) / Math.max(all.length, 1));
const [srvMs, dbMs, cliMs] = ['server', 'db', 'client'].map(perPage);
if (srvMs == null) {
  console.log(`CPU a page: SKIPPED for the server and PostgreSQL (${cpu1.why ?? cpu0.why}); this load generator ${cliMs.toFixed(3)} ms`);
} else {
  console.log(`CPU a page: server ${srvMs.toFixed(3)} ms, PostgreSQL ${dbMs.toFixed(3)} ms, this load generator ${cliMs.toFixed(3)} ms`);
}
const cpuMs = (v) => (v == null ? 'skipped' : v.toFixed(3));

// 3. The hydration bundle.
const pkg = process.env.SITE_PKG ?? 'target/site/pkg';
let raw = 0;
let gz = 0;
for (const f of readdirSync(pkg)) {
  if (!/\.(wasm|js)$/.test(f)) continue;
  raw += statSync(join(pkg, f)).size;
  gz += gzipSync(readFileSync(join(pkg, f)), { level: 9 }).length;
}
console.log(`\nhydration bundle (${pkg}: wasm + js): ${(raw / 1024).toFixed(0)} KiB raw, ${(gz / 1024).toFixed(0)} KiB gzip`);

// 4. The launch page, until interactive (navigation start until hydrated): with the browser's
// cache cleared (the wasm fetched and compiled) and warm, 5 of each, medians.
// PAGES_INTERACTIVE=0 skips it (the smoke run inside `cargo xtask test` does: there the
// debug server shares two cores with the test harness, and one of its ten navigations once
// waited past 20 s for hydration, which measures the machine, not the page).
const cold = [];
const warm = [];
if (process.env.PAGES_INTERACTIVE === '0') {
  console.log('launch page interactive: SKIPPED (PAGES_INTERACTIVE=0, the smoke run)');
} else {
  const context = await browser.newContext();
  const page = await context.newPage();
  await signIn(page, USER);
  const cdp = await context.newCDPSession(page);
  for (const [cache, into] of [['cold', cold], ['warm', warm]]) {
    for (let i = 0; i < 5; i++) {
      if (cache === 'cold') await cdp.send('Network.clearBrowserCache');
      const s = Date.now();
      await page.goto(`${BASE}/launch`, { waitUntil: 'commit' });
      await page.waitForSelector('body[data-hydrated="true"]', { timeout: 20_000 });
      into.push(Date.now() - s);
    }
    into.sort((x, y) => x - y);
  }
  await context.close();
}
if (cold.length) {
  console.log(`launch page interactive (navigation until hydrated, loopback): cold cache median ${cold[2]} ms, warm median ${warm[2]} ms (5 each)`);
}
await browser.close();

console.log(
  `RESULT pages pages_per_s=${rate.toFixed(0)} p99_ms=${q(all, 0.99).toFixed(1)} errors=${errors} clients=${CLIENTS} bundle_kib=${(raw / 1024).toFixed(0)} bundle_gzip_kib=${(gz / 1024).toFixed(0)} launch_interactive_ms=${cold[2] ?? "skipped"} launch_interactive_warm_ms=${warm[2] ?? "skipped"} server_cpu_ms=${cpuMs(srvMs)} db_cpu_ms=${cpuMs(dbMs)} client_cpu_ms=${cpuMs(cliMs)}${ONLY ? ` page=${ONLY}` : ''}`,
);
process.exit(errors === 0 ? 0 : 1);
