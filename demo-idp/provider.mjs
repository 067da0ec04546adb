// The demo organizations' identity provider: npm `oidc-provider` (OpenID Certified) on
// loopback. `cargo xtask dev` and `cargo xtask test` start it; nothing here is used in
// production, where each tenant registers its own provider.
//
// Environment:
//   IDP_PORT            port to listen on (127.0.0.1)
//   PORTAL_URL          the portal's public URL (redirect URIs are built from it)
//   IDP_CLIENT_SECRET   the secret of both demo clients (random per run or per dev machine)
import Provider from 'oidc-provider';

const port = Number(process.env.IDP_PORT ?? 3002);
const portal = (process.env.PORTAL_URL ?? 'http://127.0.0.1:3000').replace(/\/$/, '');
const secret = process.env.IDP_CLIENT_SECRET;
if (!secret) {
  console.error('demo-idp: IDP_CLIENT_SECRET is required');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

// The people of the demo organizations. Any password is accepted on the login form: this is
// a demo provider. `groups` map to tenant roles in the portal.
const ACCOUNTS = {
  'alice@acme.example': { name: 'Alice Anders', groups: ['acme-admins'] },
  'bob@acme.example': { name: 'Bob Baker', groups: ['acme-engineering'] },
  'fiona@acme.example': { name: 'Fiona Fischer', groups: ['acme-finance'] },
  'dave@contractor.example': { name: 'Dave Contractor', groups: ['acme-engineering'] },
  'carol@globex.example': { name: 'Carol Chen', groups: ['globex-admins'] },
  'gina@globex.example': { name: 'Gina Green', groups: [] },
  'hank@acme.example': { name: 'Hank Hill', groups: ['acme-engineering'] },
};

const client = (id) => ({
  client_id: id,
  client_secret: secret,
  redirect_uris: [`${portal}/auth/callback`],
  post_logout_redirect_uris: [`${portal}/`],
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
});

const provider = new Provider(issuer, {
  clients: [client('portal-acme'), client('portal-globex')],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  // Put email, name and groups into the ID token itself.
  conformIdTokenClaims: false,
  cookies: { keys: [secret] },
  async findAccount(_ctx, id) {
    const email = String(id).trim().toLowerCase();
    // Anyone else at a demo organization's domain is a plain employee (no groups), so that
    // newcomers can be invited and then sign in.
    const generic = /^[a-z0-9._-]+@(acme|globex)\.example$/.test(email)
      ? { name: email.split('@')[0], groups: [] }
      : undefined;
    const account = ACCOUNTS[email] ?? generic;
    if (!account) return undefined;
    return {
      accountId: email,
      async claims() {
        return { sub: email, email, email_verified: true, name: account.name, groups: account.groups };
      },
    };
  },
  // The portal is this provider's own client: skip the consent page.
  async loadExistingGrant(ctx) {
    const { Grant } = ctx.oidc.provider;
    const grantId = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      const existing = await Grant.find(grantId);
      if (existing) return existing;
    }
    const grant = new Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    grant.addOIDCClaims(['email', 'email_verified', 'name', 'groups']);
    await grant.save();
    return grant;
  },
});
// A login name that isn't a demo account gets the login form again, not a crash.
provider.on('server_error', (_ctx, err) => console.error('demo-idp:', err));

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`demo-idp: issuer ${issuer}, clients portal-acme and portal-globex`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
