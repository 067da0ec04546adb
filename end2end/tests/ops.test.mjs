// Operations in a real browser and a real Prometheus: bob runs a 1-GPU L40S slice on a
// simulated node whose kernel log then says the GPU fell off the bus (XID 79). The agent
// reports it with its heartbeat; the slot leaves placement, bob's allocation page says so,
// the node page shows the event and the audit trail the change, and the operator returns the
// slot to service. Meanwhile Prometheus (Debian's) scrapes the server's and the agent's
// /metrics with deploy/'s alert rules loaded: the launch is counted, the GPU figures and the
// XID are there, GpuSlotOutOfService fires, every query of the Grafana dashboard parses, and
// promtool accepts both expositions. /metrics refuses callers off loopback without the token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BASE, ADMIN_PASSWORD, adminSignIn, enrolApprovedNode, hydrated, launchSlice, openBrowser, shot, sql, until, stopAgent } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const HOST = `gpu-ops-${RUN}`;
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop';
const PROMETHEUS = '/usr/bin/prometheus';
const PROMTOOL = '/usr/bin/promtool';
const METRICS_PORT = process.env.PORTAL_METRICS_PORT;
const METRICS_TOKEN = process.env.PORTAL_METRICS_TOKEN;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** This machine's first IPv4 address that is not loopback, or null. */
function outsideAddress() {
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) {
      if (a.family === 'IPv4' && !a.internal) return a.address;
    }
  }
  return null;
}

async function query(prom, q) {
  const r = await fetch(`${prom}/api/v1/query?query=${encodeURIComponent(q)}`);
  const body = await r.json();
  assert.equal(body.status, 'success', `${q}: ${JSON.stringify(body)}`);
  return body.data.result;
}

function promtoolCheck(text, what) {
  const r = spawnSync(PROMTOOL, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(r.status, 0, `promtool check metrics on ${what}:\n${r.stdout}${r.stderr}`);
}

test('an XID 79 takes a GPU out of service: bob, the node page, the audit trail and Prometheus see it', async (t) => {
  for (const [bin, why] of [[PROMETHEUS, 'Debian\'s prometheus'], [PROMTOOL, 'promtool']]) {
    if (!existsSync(bin)) return t.skip(`SKIPPED: ${why} is not installed (${bin}); cargo xtask test installs it`);
  }
  if (!METRICS_PORT || !METRICS_TOKEN) return t.skip('SKIPPED: PORTAL_METRICS_PORT/TOKEN are not set (cargo xtask test sets them)');
  if (!process.env.PORTAL_TEST_PSQL || !process.env.PORTAL_TEST_DATABASE_URL) return t.skip('SKIPPED: PORTAL_TEST_PSQL/DATABASE_URL are not set (cargo xtask test sets them)');
  assert.ok(ADMIN_PASSWORD, 'PORTAL_ADMIN_PASSWORD must be set (cargo xtask test does this)');
  const state = mkdtempSync(join(tmpdir(), 'node-agent-'));
  const promDir = mkdtempSync(join(tmpdir(), 'prometheus-'));
  const agentMetricsPort = await freePort();
  const agentToken = `agent-${RUN}`;
  let agent = null;
  let prom = null;
  try {
    ({ agent } = await enrolApprovedNode(state, HOST, 'eu-west-1', [
      '--metrics-listen', `0.0.0.0:${agentMetricsPort}`, '--metrics-token', agentToken,
    ]));

    // Prometheus scrapes both every second and evaluates the deployment's own rules.
    const promPort = await freePort();
    writeFileSync(join(promDir, 'prometheus.yml'), [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      `rule_files: ["${resolve('deploy/prometheus/alerts.yml')}"]`,
      'scrape_configs:',
      `  - { job_name: gpuaas-server, static_configs: [{ targets: ["127.0.0.1:${METRICS_PORT}"] }] }`,
      `  - { job_name: gpuaas-agent, static_configs: [{ targets: ["127.0.0.1:${agentMetricsPort}"] }] }`,
      '',
    ].join('\n'));
    prom = spawn(PROMETHEUS, [
      `--config.file=${join(promDir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(promDir, 'data')}`,
      `--web.listen-address=127.0.0.1:${promPort}`, '--log.level=warn',
    ], { stdio: ['ignore', 'ignore', 'inherit'] });
    const PROM = `http://127.0.0.1:${promPort}`;

    // Only this test's node sells L40S in eu-west-1 once earlier tests' agents have gone
    // silent (a minute), so bob's slice lands on it.
    const anon = await openBrowser();
    try {
      await until('eu-west-1 selling only this node', async () => {
        await anon.page.goto(`${BASE}/catalog`);
        return (await anon.page.locator('tr[data-sku="l40s.1x"] span[data-region="eu-west-1"]').innerText()) === 'eu-west-1: 4';
      }, 90);
    } finally {
      await anon.close();
    }

    const b = await openBrowser();
    const admin = await openBrowser();
    try {
      const { page } = b;
      await ssoSignIn(page, 'bob@acme.example');
      const allocation = await launchSlice(page, BASE, { sku: 'l40s.1x', region: 'eu-west-1', name: `xid-${RUN}`, key: KEY });
      await until('the allocation running', async () => {
        await page.goto(allocation);
        return (await page.locator('[data-testid="state"]').innerText()) === 'running';
      });
      assert.equal(await page.locator('[data-testid="node"]').innerText(), `eu-west-1 / ${HOST}`);
      const slot = await page.locator('[data-testid="slots"]').innerText();
      assert.equal(await page.locator('[data-testid="gpu-health"]').count(), 0, 'no health notice yet');

      // The operator's view of that slot: its GPU.
      await adminSignIn(admin.page);
      await admin.page.goto(BASE + '/fleet');
      await admin.page.locator(`tr[data-node="${HOST}"] a`).click();
      await admin.page.waitForURL(/\/fleet\/[0-9a-f-]{36}$/);
      const nodeUrl = admin.page.url();
      const row = admin.page.locator('[data-testid="slots"] tbody tr').filter({ has: admin.page.locator(`td:first-child:text-is("${slot}")`) });
      const gpu = (await row.locator('td').nth(1).innerText()).split('\n')[0].trim();
      assert.match(gpu, /^0000:[0-9a-f]{2}:00\.0$/);
      assert.equal(await admin.page.locator('[data-testid="schedulable"]').innerText(), '4 of 4');

      // The host's kernel log, as the NVIDIA driver writes it.
      mkdirSync(join(state, 'sim'), { recursive: true });
      appendFileSync(join(state, 'sim', 'kmsg'),
        `4,7301,912345678,-;NVRM: Xid (PCI:${gpu.slice(0, -2)}): 79, pid=4242, name=python3, GPU has fallen off the bus.\n`);

      // bob is told on his allocation's page.
      await until('the tenant notice', async () => {
        await page.goto(allocation);
        return (await page.locator('[data-testid="gpu-health"]').count()) === 1;
      });
      const notice = page.locator('[data-testid="gpu-health"]');
      assert.equal(await notice.getByRole('heading').innerText(), 'A GPU of this allocation is out of service');
      assert.match(await notice.innerText(), new RegExp(`At \\d{4}-\\d\\d-\\d\\d [^,]+ UTC the GPU in slot ${slot} reported XID 79: GPU has fallen off the bus\\. It is out of service`));
      // Its guest's GPU utilisation over the day, as a chart.
      await until('the utilisation chart', async () => {
        await page.goto(allocation);
        return (await page.locator('[data-testid="gpu-history"]').count()) === 1;
      });
      await page.locator('[data-testid="gpu-history"] canvas').waitFor();
      await shot(page, 'allocation-gpu-out-of-service');
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.setViewportSize({ width: 390, height: 844 });
      await shot(page, 'allocation-gpu-out-of-service-phone-dark');

      // The node page: the slot is out of service with the event, the event is listed, the
      // audit trail has the agent's change, and placement has one slot fewer.
      await admin.page.goto(nodeUrl);
      await hydrated(admin.page);
      assert.equal(await admin.page.locator('[data-testid="schedulable"]').innerText(), '3 of 4');
      assert.equal(await row.getAttribute('data-slot-state'), 'out of service');
      assert.match(await row.locator('[data-testid="out-of-service"]').innerText(), /^XID 79: GPU has fallen off the bus\. \(since \d{4}-/);
      const event = admin.page.locator('[data-testid="gpu-events"] tbody tr[data-kind="xid"]');
      assert.equal(await event.count(), 1);
      assert.deepEqual((await event.locator('td').allInnerTexts()).slice(1), [gpu, slot, 'XID 79: GPU has fallen off the bus.', 'took the slot out of service']);
      const audit = admin.page.locator('section[aria-labelledby="node-audit"] tbody tr', { hasText: 'node.slot.out_of_service' });
      assert.equal(await audit.count(), 1);
      assert.match(await audit.innerText(), /agent/);
      await shot(admin.page, 'node-gpu-health');

      // The operations panel puts it first, with a link to the node, and its figures are the
      // database's.
      await admin.page.goto(`${BASE}/admin/ops`);
      await hydrated(admin.page);
      const attention = admin.page.locator(`[data-testid="attention"] tr[data-kind="out_of_service"]`, { hasText: HOST });
      assert.equal(await attention.count(), 1);
      assert.deepEqual((await attention.locator('td').allInnerTexts()).slice(0, 3),
        ['GPU out of service', HOST, `slot ${slot} (${gpu}): XID 79: GPU has fallen off the bus.`]);
      const figure = async (testid, state) => admin.page.locator(`[data-testid="${testid}"] dd[data-state="${state}"]`).innerText();
      assert.equal(await figure('slot-counts', 'out_of_service'), sql('SELECT count(*) FROM node_resource_slots WHERE retired_at IS NULL AND out_of_service_event IS NOT NULL'));
      assert.equal(await figure('slot-counts', 'blocked'), sql("SELECT count(*) FROM node_resource_slots WHERE retired_at IS NULL AND out_of_service_event IS NULL AND cleanup_state = 'blocked'"));
      assert.equal(await figure('allocation-counts', 'running'), sql("SELECT count(*) FROM allocations WHERE state = 'running'"));
      assert.equal(await admin.page.locator('[data-testid="tasks-running"]').innerText(), sql("SELECT count(*) FROM agent_tasks WHERE state = 'running'"));
      assert.equal(await admin.page.locator('[data-testid="webhooks"]').innerText(), sql('SELECT count(*) FROM stripe_events WHERE processed_at IS NULL'));
      await admin.page.locator(`[data-testid="slots-chart"] canvas, [data-testid="slots-chart"] svg`).first().waitFor();
      await shot(admin.page, 'ops-panel');
      await admin.page.emulateMedia({ colorScheme: 'dark' });
      await admin.page.setViewportSize({ width: 390, height: 844 });
      await shot(admin.page, 'ops-panel-phone-dark');
      await admin.page.emulateMedia({ colorScheme: 'light' });
      await admin.page.setViewportSize({ width: 1280, height: 800 });
      await attention.getByRole('link', { name: HOST }).click();
      await admin.page.waitForURL(nodeUrl);

      // Prometheus has it all.
      await until('Prometheus scraping both targets', async () => {
        const up = await query(PROM, 'up');
        return up.length === 2 && up.every((s) => s.value[1] === '1');
      });
      await until('the XID counted', async () => {
        const x = await query(PROM, `gpuaas_gpu_xid_errors_total{gpu="${gpu}",xid="79"}`);
        return x.length === 1 && x[0].value[1] === '1';
      });
      const placed = await query(PROM, 'sum(gpuaas_launches_total{outcome="placed"})');
      assert.ok(Number(placed[0]?.value[1]) >= 1, 'the launch is counted');
      assert.equal((await query(PROM, 'gpuaas_gpu_temperature_celsius{job="gpuaas-agent"}')).length, 4, 'every GPU of the host has figures');
      assert.ok((await query(PROM, 'gpuaas_agent_heartbeat_age_seconds')).some((s) => s.metric.node === HOST));
      assert.ok(Number((await query(PROM, 'gpuaas_slots{state="out_of_service"}'))[0].value[1]) >= 1);
      const routes = await query(PROM, 'sum by (route, status) (http_server_request_duration_seconds_count)');
      assert.ok(routes.some((s) => s.metric.route === '/allocations/{id}' && s.metric.status === '200'), JSON.stringify(routes.map((s) => s.metric)));
      await until('GpuSlotOutOfService firing', async () => {
        const r = await (await fetch(`${PROM}/api/v1/alerts`)).json();
        return r.data.alerts.some((a) => a.labels.alertname === 'GpuSlotOutOfService' && a.state === 'firing');
      });
      // Every query of the dashboard is one Prometheus accepts.
      const dashboard = JSON.parse(readFileSync('deploy/grafana/gpuaas-portal.json', 'utf8'));
      for (const panel of dashboard.panels) {
        for (const target of panel.targets) await query(PROM, target.expr);
      }

      // Both expositions pass promtool's checks.
      const server = await (await fetch(`http://127.0.0.1:${METRICS_PORT}/metrics`)).text();
      promtoolCheck(server, 'the server');
      assert.match(server, /^gpuaas_launches_total\{outcome="placed",reason=""\} \d+/m);
      const agentText = await (await fetch(`http://127.0.0.1:${agentMetricsPort}/metrics`)).text();
      promtoolCheck(agentText, 'the agent');

      // /metrics is not public: the portal's own address answers 404 without the token; the
      // metrics listeners refuse a caller off loopback without it.
      assert.equal((await fetch(`${BASE}/metrics`)).status, 404);
      assert.equal((await fetch(`${BASE}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status, 404);
      assert.equal((await fetch(`${BASE}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status, 200);
      const outside = outsideAddress();
      if (outside) {
        assert.equal((await fetch(`http://${outside}:${METRICS_PORT}/metrics`)).status, 403);
        assert.equal((await fetch(`http://${outside}:${METRICS_PORT}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status, 200);
        assert.equal((await fetch(`http://${outside}:${agentMetricsPort}/metrics`)).status, 403);
        assert.equal((await fetch(`http://${outside}:${agentMetricsPort}/metrics`, { headers: { authorization: `Bearer ${agentToken}` } })).status, 200);
      } else {
        t.diagnostic('SKIPPED the off-loopback checks: this machine has no IPv4 address but loopback');
      }

      // The operator returns the slot to service, saying what was checked.
      await hydrated(admin.page);
      await row.getByLabel('What you checked on this GPU').fill('reseated the GPU; dcgmi diag -r 3 passed');
      await row.getByRole('button', { name: 'Return to service' }).click();
      await admin.page.getByRole('status').filter({ hasText: 'Back in service' }).waitFor();
      await admin.page.locator('section[aria-labelledby="node-audit"] tbody tr', { hasText: 'node.slot.return_to_service' }).waitFor();
      assert.equal(await row.getAttribute('data-slot-state'), 'claimed', 'bob still holds it');

      // The policy is on the fleet page; a bad XID list is refused by field, nothing saved.
      await admin.page.goto(`${BASE}/fleet`);
      await hydrated(admin.page);
      const policy = admin.page.locator('#health-policy');
      assert.equal(await policy.getByLabel('XID errors that take a slot out of service').inputValue(), '48, 63, 64, 74, 79');
      await policy.getByLabel('XID errors that take a slot out of service').fill('48, 79, banana');
      await policy.getByRole('button', { name: 'Save policy' }).click();
      await admin.page.locator('#xid-error', { hasText: 'not an XID number' }).waitFor();
      assert.equal(await policy.getByLabel('XID errors that take a slot out of service').getAttribute('aria-invalid'), 'true');
      await shot(admin.page, 'fleet-gpu-health-policy');
      // Each checkbox sits right beside its words.
      for (const words of ['Uncorrectable ECC errors', 'Hardware thermal slowdown']) {
        const box = await policy.getByLabel(words).boundingBox();
        const label = await policy.locator('label.check', { hasText: words }).boundingBox();
        assert.ok(label.width < 400, `the "${words}" label is ${label.width} px wide`);
        assert.ok(box.x - label.x < 8, `its checkbox starts the label (${box.x - label.x} px in)`);
      }

      // bob releases; his slot comes back clean.
      await page.setViewportSize({ width: 1280, height: 800 });
      await page.emulateMedia({ colorScheme: 'light' });
      await page.goto(allocation);
      await hydrated(page);
      const release = page.locator('#release');
      await release.getByLabel(/I understand/).check();
      await release.getByRole('button', { name: 'Release' }).click();
      await until('the allocation released', async () => {
        await page.goto(allocation);
        return (await page.locator('[data-testid="state"]').innerText()) === 'released';
      });
    } finally {
      await b.close();
      await admin.close();
    }
  } finally {
    if (prom) prom.kill('SIGTERM');
    await stopAgent(agent, state);
    rmSync(promDir, { recursive: true, force: true });
  }
});
