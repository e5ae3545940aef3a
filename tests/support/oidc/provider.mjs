// A real OpenID Connect provider (npm `oidc-provider`, installed by install.sh into
// .oidc-provider/) for the single sign-on tests; tests/support/oidc_provider.py runs it.
//
//   node provider.mjs --port 8123 --issuer http://localhost:8123 \
//     --client '{"client_id": "sluice", "client_secret": "…", "redirect_uris": ["…"]}' \
//     --accounts /tmp/accounts.json [--code-ttl 60] [--wrong-audience]
//
// Listens on 127.0.0.1 only; the issuer says `localhost` (which resolves to 127.0.0.1 here)
// so the browser keeps the provider's cookies apart from the gateway's on 127.0.0.1.
// Prints `ready <issuer>` once listening; exits on SIGTERM.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.OIDC_PORT },
    issuer: { type: 'string' },
    client: { type: 'string' },
    accounts: { type: 'string' },
    'code-ttl': { type: 'string', default: '60' },
    'wrong-audience': { type: 'boolean', default: false },
    modules: {
      type: 'string',
      default: join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '.oidc-provider'),
    },
  },
});
for (const name of ['port', 'issuer', 'client', 'accounts']) {
  if (!args[name]) {
    console.error(`provider.mjs: --${name} is required`);
    process.exit(2);
  }
}

// The packages live in .oidc-provider/node_modules, not beside this script.
const requireFrom = createRequire(join(args.modules, 'package.json'));
const load = (name) => import(pathToFileURL(requireFrom.resolve(name)).href);
const { default: Provider } = await load('oidc-provider');
const jose = await load('jose');

const ALG = 'RS256';
const { privateKey } = await jose.generateKeyPair(ALG, { extractable: true });
const signingJwk = { ...(await jose.exportJWK(privateKey)), kid: 'test-key', alg: ALG, use: 'sig' };

// Re-read on every look-up: a test changes a user's groups by rewriting the file.
const readAccounts = () => JSON.parse(readFileSync(args.accounts, 'utf8'));

const client = {
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
  ...JSON.parse(args.client),
};

const provider = new Provider(args.issuer, {
  clients: [client],
  jwks: { keys: [signingJwk] },
  pkce: { required: () => true },
  // Explicit lifetimes for the rest too: the defaults print a notice each.
  ttl: {
    AuthorizationCode: Number(args['code-ttl']),
    Interaction: 60 * 60,
    Session: 24 * 60 * 60,
    Grant: 24 * 60 * 60,
    IdToken: 60 * 60,
    AccessToken: 60 * 60,
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  // The scopes' claims in the ID token as well, not only from userinfo.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  // Any login name signs in (as the dev login form says); one not in the file has no claims
  // but `sub` (oidc-provider answers a 500 when findAccount finds nobody after the login).
  async findAccount(ctx, sub) {
    return {
      accountId: sub,
      async claims() {
        return { ...readAccounts()[sub], sub };
      },
    };
  },
  // No consent page: whatever this (only, first-party) client asks for is granted.
  async loadExistingGrant(ctx) {
    const { oidc } = ctx;
    const grantId = oidc.result?.consent?.grantId || oidc.session.grantIdFor(oidc.client.clientId);
    const grant = (grantId && (await oidc.provider.Grant.find(grantId)))
      || new oidc.provider.Grant({ clientId: oidc.client.clientId, accountId: oidc.session.accountId });
    grant.addOIDCScope([...oidc.requestParamOIDCScopes].join(' '));
    grant.addOIDCClaims([...oidc.requestParamClaims]);
    await grant.save();
    return grant;
  },
});

if (args['wrong-audience']) {
  // The token endpoint's ID token for someone else, still signed with the provider's own key.
  const key = await jose.importJWK(signingJwk, ALG);
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path !== '/token' || typeof ctx.body?.id_token !== 'string') return;
    const header = jose.decodeProtectedHeader(ctx.body.id_token);
    const claims = { ...jose.decodeJwt(ctx.body.id_token), aud: 'someone-else' };
    ctx.body = {
      ...ctx.body,
      id_token: await new jose.SignJWT(claims).setProtectedHeader(header).sign(key),
    };
  });
}

const server = createServer(provider.callback());
server.listen(Number(args.port), '127.0.0.1', () => {
  console.log(`ready ${args.issuer}`);
});
process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  process.exit(0);
});
