// Tenant admins run their projects: create, rename, invite (members and people who have not
// signed in yet), change roles, and can't remove the last admin. Members see only what their
// role allows; another tenant sees nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BASE, dnsUnavailable, hydrated, openBrowser, shot, startDns } from '../support.mjs';
import { ssoSignIn } from '../support-sso.mjs';

const RUN = Date.now().toString(36);
const SLUG = `training-${RUN}`;
const NEWCOMER = `newcomer-${RUN}@acme.example`;
let projectUrl = null;
let renameAction = null;

async function as(email) {
  const b = await openBrowser();
  await ssoSignIn(b.page, email);
  await b.page.waitForURL(`${BASE}/`);
  return b;
}

function row(page, email) {
  return page.locator(`#members tr[data-email="${email}"]`);
}

test('alice creates a project, renames it, invites bob and a newcomer, and sees the audit trail', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/projects`);
    const names = await page.locator('#projects tbody td:first-child').allInnerTexts();
    assert.ok(names.includes('Research') && names.includes('Inference'), names.join(','));

    const create = page.locator('#create-project');
    await create.getByLabel('Name', { exact: true }).fill('GPU Training');
    await create.getByLabel('Short name').fill(SLUG);
    await create.getByRole('button', { name: 'Create project' }).click();
    await page.waitForURL(/\/projects\/[0-9a-f-]{36}$/);
    projectUrl = page.url();
    assert.equal(await page.locator('h1').innerText(), 'GPU Training');
    assert.match(await page.locator('.canonical').innerText(), /^gpuaas:portal::[0-9a-f-]{36}:[0-9a-f-]{36}:project:[0-9a-f-]{36}$/);

    // A second project with the same short name is refused by name.
    await page.goto(`${BASE}/projects`);
    await create.getByLabel('Name', { exact: true }).fill('Again');
    await create.getByLabel('Short name').fill(SLUG);
    await create.getByRole('button', { name: 'Create project' }).click();
    assert.equal(
      await create.getByRole('alert').innerText(),
      `A project with the short name "${SLUG}" already exists.`,
    );
    await page.goto(projectUrl);

    const rename = page.locator('#rename-project');
    renameAction = await rename.getAttribute('action');
    await rename.getByLabel('Name', { exact: true }).fill('GPU training');
    await rename.getByRole('button', { name: 'Rename' }).click();
    await page.locator('h1', { hasText: 'GPU training' }).waitFor();

    const invite = page.locator('#invite-member');
    await invite.getByLabel('Email', { exact: true }).fill('bob@acme.example');
    await invite.getByLabel('Role').selectOption('viewer');
    await invite.getByRole('button', { name: 'Invite' }).click();
    await page.getByRole('status').filter({ hasText: 'bob@acme.example is now a member.' }).waitFor();
    await row(page, 'bob@acme.example').waitFor();

    await invite.getByLabel('Email').fill(NEWCOMER);
    await invite.getByLabel('Role').selectOption('operator');
    await invite.getByRole('button', { name: 'Invite' }).click();
    await page.getByRole('status').filter({ hasText: 'Invitation sent' }).waitFor();
    assert.match(await page.locator('#invitations').innerText(), new RegExp(`${NEWCOMER} as operator`));

    // An invitation sent by mistake is withdrawn before anyone uses it.
    const MISTAKE = `mistake-${RUN}@acme.example`;
    await invite.getByLabel('Email').fill(MISTAKE);
    await invite.getByRole('button', { name: 'Invite' }).click();
    await page.locator(`#invitations li[data-email="${MISTAKE}"]`).waitFor();
    await page.getByRole('button', { name: `Cancel the invitation of ${MISTAKE}` }).click();
    await page.getByRole('status').filter({ hasText: 'Invitation cancelled.' }).waitFor();
    await page.locator(`#invitations li[data-email="${MISTAKE}"]`).waitFor({ state: 'detached' });
    assert.equal(await page.locator(`#invitations li[data-email="${NEWCOMER}"]`).count(), 1, 'the other invitation stays');

    // Outside the organization's domains: refused, with the reason.
    await invite.getByLabel('Email').fill('dave@contractor.example');
    await invite.getByRole('button', { name: 'Invite' }).click();
    await page
      .getByRole('alert')
      .filter({ hasText: "dave@contractor.example can't sign in to this organization" })
      .waitFor();

    // The last admin can't be removed.
    await row(page, 'alice@acme.example').getByRole('button', { name: 'Remove' }).click();
    await page.getByRole('alert').filter({ hasText: 'a project must keep at least one admin' }).waitFor();
    await row(page, 'alice@acme.example').waitFor();

    // GPU caps: the organization sets 32, this project 8; the most specific wins.
    const gpuRow = (scope) => page.locator(`.policies[data-scope="${scope}"] tr[data-key="max_gpus_in_use"]`);
    await page.goto(`${BASE}/projects`);
    await gpuRow('organization').locator('input[name="value"]').fill('32');
    await gpuRow('organization').getByRole('button', { name: 'Save' }).click();
    await gpuRow('organization').locator('.effective', { hasText: '32 GPUs' }).waitFor();
    await page.goto(projectUrl);
    assert.equal(await gpuRow('project').locator('.effective').innerText(), '32 GPUs');
    assert.equal(await gpuRow('project').locator('.decided-by').innerText(), 'organization');
    // The deciding level names the chain in its tooltip; an undecided policy has none.
    assert.match(await gpuRow('project').locator('.decided-by').getAttribute('title'), /organization: 32 GPUs/);
    const undecided = page.locator('.policies[data-scope="project"] tr[data-key="allowed_regions"] .decided-by');
    assert.equal(await undecided.innerText(), '—');
    assert.equal(await undecided.getAttribute('title'), null);
    await gpuRow('project').locator('input[name="value"]').fill('lots');
    await gpuRow('project').getByRole('button', { name: 'Save' }).click();
    // The refusal sits on the row that caused it, in words (the row names the policy).
    await gpuRow('project').getByRole('alert').filter({ hasText: '"lots": use a whole number from 0 to 100000.' }).waitFor();
    assert.equal(await gpuRow('project').locator('input[name="value"]').getAttribute('aria-invalid'), 'true');
    assert.doesNotMatch(await page.locator('.policies[data-scope="project"]').innerText(), /max_gpus_in_use/);
    await gpuRow('project').locator('input[name="value"]').fill('8');
    await gpuRow('project').getByRole('button', { name: 'Save' }).click();
    await gpuRow('project').locator('.effective', { hasText: '8 GPUs' }).waitFor();
    assert.equal(await gpuRow('project').locator('.decided-by').innerText(), 'project');

    // East-west traffic between the project's VMs: denied until an admin allows it.
    assert.match(await page.locator('[data-testid="east-west"]').innerText(), /^East-west traffic is denied/);
    await page.locator('#east-west-form').getByRole('button', { name: 'Allow east-west traffic' }).click();
    await page.locator('[data-testid="east-west"]', { hasText: 'East-west traffic is allowed' }).waitFor();
    await page.locator('#east-west-form').getByRole('button', { name: 'Deny east-west traffic' }).waitFor();

    await page.reload();
    const audit = await page.locator('#audit tbody').innerText();
    for (const action of ['project.create', 'project.rename', 'project_membership.add', 'project_invitation.create', 'policy.set', 'project.east_west']) {
      assert.match(audit, new RegExp(action.replace('.', '\\.')), `audit shows ${action}`);
    }
    assert.match(audit, /alice@acme\.example/);
    await shot(page, 'project-alice');
  } finally {
    await b.close();
  }
});

const ACME_ID = '0a0e0000-0000-4000-8000-000000000001';
const GLOBEX_ID = '0a0e0000-0000-4000-8000-000000000002';

test('alice reads her organization\'s audit log, and only hers, and can filter it', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/projects`);
    await page.locator('#org-audit').click();
    await page.waitForURL(`${BASE}/audit`);
    // The log arrives with the page, but the URL can change before it is drawn.
    await page.locator('#audit-log td.resource').first().waitFor();
    const resources = await page.locator('#audit-log td.resource').allInnerTexts();
    assert.ok(resources.length > 0);
    assert.ok(resources.every((r) => r.includes(ACME_ID) && !r.includes(GLOBEX_ID)), resources.join('\n'));
    assert.equal(await page.locator('input[name="tenant"]').count(), 0, 'no organization filter for tenant admins');

    await page.locator('#audit-filters input[name="action"]').fill('policy.');
    await page.locator('#audit-filters').getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/\/audit\?action=policy\./);
    const actions = await page.locator('#audit-log td.action').allInnerTexts();
    assert.ok(actions.length > 0 && actions.every((a) => a.startsWith('policy.')), actions.join(','));

    // A change reads field by field, before → after (a rename, from the test before).
    await page.goto(`${BASE}/audit?action=project.rename`);
    const change = page.locator('#audit-log tr[data-action="project.rename"] ul.changes li').first();
    await change.waitFor();
    assert.match(await change.innerText(), /^display name: .+ → .+$/);

    // Days: from tomorrow there is nothing yet; a day that isn't one is refused by name.
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    await page.goto(`${BASE}/audit?since=${tomorrow}`);
    await page.getByTestId('no-records').waitFor();
    const today = new Date().toISOString().slice(0, 10);
    await page.goto(`${BASE}/audit?since=${today}&until=${tomorrow}&action=project.`);
    assert.equal(await page.locator('#audit-filters input[name="since"]').inputValue(), today);
    const projectRows = await page.locator('#audit-log tbody tr').count();
    assert.ok(projectRows > 0);
    await page.goto(`${BASE}/audit?until=31.12.2026`);
    assert.match(await page.getByRole('alert').innerText(), /until.*"31\.12\.2026" is not a day; write it as 2026-12-01/i);

    // The same records as CSV, a line per changed field.
    await page.goto(`${BASE}/audit?since=${today}&until=${tomorrow}&action=project.`);
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-audit').click()]);
    const csv = readFileSync(await download.path(), 'utf8').trim().split('\n');
    assert.equal(csv[0], 'id,at,actor,action,resource,field,before,after,request_id');
    assert.ok(csv.length - 1 >= projectRows, `${csv.length - 1} lines for ${projectRows} records`);
    assert.ok(csv.slice(1).every((l) => /^\d+,\d{4}-\d\d-\d\dT[^,]+,[^,]+,project\./.test(l)), csv.join('\n'));
    // Asked for directly, the export still holds only her organization's records.
    const res = await page.request.get(`${BASE}/audit/export.csv?action=project.`);
    assert.equal(res.status(), 200);
    assert.ok(!(await res.text()).includes(GLOBEX_ID));
  } finally {
    await b.close();
  }
});

test('alice manages Acme\'s single sign-on: discovery is checked on save, domains are exclusive', async () => {
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/projects`);
    await page.locator('#org-sso').click();
    await page.waitForURL(`${BASE}/settings/sso`);
    const form = page.locator('#sso-settings');
    const issuer = await form.getByLabel('Issuer URL').inputValue();
    assert.equal(issuer, process.env.PORTAL_IDP_ISSUER);
    assert.equal(await form.getByLabel('Email domains (comma-separated)').inputValue(), 'acme.example');
    const mappings = form.locator('textarea[name="mappings"]');
    assert.match(await mappings.inputValue(), /acme-admins = admin/);

    const save = () => form.getByRole('button', { name: 'Save' }).click();
    const alert = form.getByRole('alert');

    // Another organization's domain.
    await form.getByLabel('Email domains (comma-separated)').fill('acme.example, globex.example');
    await save();
    await alert.filter({ hasText: 'The domain globex.example is already used by another organization.' }).waitFor();

    // An issuer that doesn't answer discovery.
    await form.getByLabel('Email domains (comma-separated)').fill('acme.example');
    await form.getByLabel('Issuer URL').fill('http://127.0.0.1:9');
    await save();
    await alert.filter({ hasText: 'does not answer OpenID discovery' }).waitFor();

    // A good change: the real provider answers discovery; the secret is kept.
    await form.getByLabel('Issuer URL').fill(issuer);
    await mappings.fill('acme-admins = admin\nacme-finance = finance\nacme-engineering = member');
    await save();
    await form.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
    await page.reload();
    assert.match(await form.locator('textarea[name="mappings"]').inputValue(), /acme-engineering = member/);
  } finally {
    await b.close();
  }
  // Sign-in still works with the kept secret.
  const again = await as('alice@acme.example');
  await again.close();
});

test('alice proves a new email domain by DNS; the platform\'s own domain is refused', async (t) => {
  const skip = dnsUnavailable();
  if (skip) return t.skip(`SKIPPED: ${skip}`);
  const domain = `labs-${RUN}.acme.test`;
  const b = await as('alice@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/settings/sso`);
    await hydrated(page);
    const form = page.locator('#sso-settings');
    const domains = form.getByLabel('Email domains (comma-separated)');
    const save = () => form.getByRole('button', { name: 'Save' }).click();

    // The platform's own domain can never be claimed: said under the field.
    await domains.fill('acme.example, platform.example');
    await save();
    await form.locator('#sso-domains-error').filter({ hasText: 'platform.example is the platform\'s own domain' }).waitFor();
    assert.equal(await domains.getAttribute('aria-invalid'), 'true');

    await domains.fill(`acme.example, ${domain}`);
    await save();
    await form.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
    const table = page.locator('#sso-domains');
    assert.match(await table.locator('tr[data-domain="acme.example"] .status').innerText(), /^Verified by a platform operator on \d{4}-\d{2}-\d{2}$/);
    const row = table.locator(`tr[data-domain="${domain}"]`);
    assert.equal(await row.locator('.status').innerText(), 'Pending');
    const [name, value] = await row.locator('code').allInnerTexts();
    assert.equal(name, `_gpuaas-challenge.${domain}`);
    assert.match(value, /^gpuaas-domain-verification=[0-9a-f]{32}$/);
    await shot(page, 'sso-domain-pending');

    // Not published yet: the check says which record it looked for.
    let dns = await startDns([]);
    try {
      await row.getByRole('button', { name: `Check the DNS record of ${domain}` }).click();
      await table.getByRole('alert').filter({ hasText: `No TXT record "${value}" at ${name} yet` }).waitFor();
      assert.equal(await row.locator('.status').innerText(), 'Pending');
    } finally {
      await dns.stop();
    }

    dns = await startDns([[name, value]]);
    try {
      await row.getByRole('button', { name: `Check the DNS record of ${domain}` }).click();
      await row.locator('.status').filter({ hasText: /^Verified by DNS on / }).waitFor();
    } finally {
      await dns.stop();
    }
    assert.equal(await row.getByRole('button').count(), 0);
    await shot(page, 'sso-domain-verified');

    // The proof is in the audit log.
    await page.goto(`${BASE}/audit?action=email_domain.`);
    const actions = await page.locator('#audit-log td.action').allInnerTexts();
    assert.deepEqual(actions, ['email_domain.verify']);
  } finally {
    await b.close();
  }
});

test('bob sees his projects with his role and cannot manage them', async () => {
  assert.ok(projectUrl, 'the previous test created the project');
  const b = await as('bob@acme.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/projects`);
    const rows = await page.locator('#projects tbody tr').allInnerTexts();
    assert.ok(rows.some((r) => r.startsWith('Research') && r.includes('operator')), rows.join('\n'));
    assert.ok(rows.some((r) => r.startsWith('GPU training') && r.includes('viewer')), rows.join('\n'));
    assert.ok(!rows.some((r) => r.startsWith('Inference')), 'not a member of Inference');
    assert.equal(await page.locator('#create-project').count(), 0);

    await page.goto(projectUrl);
    assert.equal(await page.locator('.my-role').innerText(), 'viewer');
    // A new project has spent nothing; a viewer reads that too.
    assert.equal(await page.getByTestId('project-spend').innerText(), 'Nothing spent this month yet.');
    assert.equal(await page.locator('#rename-project, #invite-member, #east-west-form').count(), 0);
    assert.equal(await page.getByRole('button', { name: 'Remove' }).count(), 0);
    // bob sees the cap in force, and who decided it, but can't change it.
    const gpus = page.locator('.policies[data-scope="project"] tr[data-key="max_gpus_in_use"]');
    assert.equal(await gpus.locator('.effective').innerText(), '8 GPUs');
    assert.equal(await gpus.locator('.decided-by').innerText(), 'project');
    assert.equal(await page.locator('.policies input[name="value"]').count(), 0);

    // Calling the server function directly doesn't help.
    const id = projectUrl.split('/').pop();
    const res = await page.request.post(`${BASE}${renameAction}`, {
      form: { id, name: 'pwned' },
      headers: { origin: BASE },
      failOnStatusCode: false,
    });
    assert.notEqual(res.status(), 200);
    assert.match(await res.text(), /Only project admins may do this/);

    await page.goto(`${BASE}/audit`);
    assert.equal(await page.getByRole('alert').innerText(), 'Only organization admins may do this.');
    await page.goto(`${BASE}/settings/sso`);
    assert.equal(await page.getByRole('alert').innerText(), 'Only organization admins may do this.');
  } finally {
    await b.close();
  }
});

test('a newcomer invited before their first sign-in becomes a member when they sign in', async () => {
  assert.ok(projectUrl);
  const b = await as(NEWCOMER);
  try {
    const { page } = b;
    await page.goto(projectUrl);
    assert.equal(await page.locator('.my-role').innerText(), 'operator');
    await page.goto(`${BASE}/projects`);
    assert.match(await page.locator('#projects').innerText(), /GPU training/);
  } finally {
    await b.close();
  }
});

test('carol of Globex sees nothing of Acme: its project answers "not found"', async () => {
  assert.ok(projectUrl);
  const b = await as('carol@globex.example');
  try {
    const { page } = b;
    await page.goto(`${BASE}/projects`);
    const names = await page.locator('#projects tbody td:first-child').allInnerTexts();
    assert.deepEqual(names, ['Default']);
    await page.goto(projectUrl);
    assert.equal(await page.getByRole('alert').innerText(), 'Not found.');
    const body = await page.locator('main').innerText();
    assert.ok(!body.includes('GPU training') && !body.includes('alice'), body);
  } finally {
    await b.close();
  }
});
