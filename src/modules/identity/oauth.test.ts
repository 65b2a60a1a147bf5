import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as OTPAuth from 'otpauth';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { startFakeOAuthProvider, type FakeOAuthProvider } from '../../../test/fake-oauth-provider.ts';
import { bearer, signIn, signUp, uniqueEmail, sessionCookie } from '../../../test/fixtures.ts';
import { hashPassword } from '../../platform/crypto/passwords.ts';
import { ConfigError, loadConfig } from '../../config.ts';
import * as store from './store.ts';

const BASE_URL = 'http://api.hark.test';
const APP_URL = 'http://app.hark.test';
const callbackOf = (provider: string) => `${BASE_URL}/api/auth/oauth/${provider}/callback`;

describe('OAuth sign-in with Google and GitHub', () => {
  let fake: FakeOAuthProvider;
  let rt: TestRuntime;
  let counter = 0;

  before(async () => {
    fake = await startFakeOAuthProvider({ redirectUris: [callbackOf('google'), callbackOf('github')] });
    rt = await startTestRuntime({ BASE_URL, APP_URL, ...fake.env() });
  });
  after(async () => {
    await rt?.destroy();
    await fake?.close();
  });

  const app = () => rt.app!;

  function googleAs(email: string, extra: Partial<FakeOAuthProvider['googleUser']> = {}) {
    fake.googleUser = { sub: `g-${++counter}-${Date.now()}`, email, email_verified: true, name: 'G Person', ...extra };
    return fake.googleUser;
  }
  function githubAs(email: string, extra: Partial<FakeOAuthProvider['githubUser']> = {}) {
    fake.githubUser = { id: 5000 + ++counter, login: `octo${counter}`, name: 'Octo', emails: [{ email, primary: true, verified: true }], ...extra };
    return fake.githubUser;
  }

  interface Flow {
    /** The callback path and query the provider sent the browser to. */
    callback: string;
    stateCookie: string;
  }

  /** Starts at our authorize endpoint and follows the provider's consent page (which approves at once) back to the callback URL. */
  async function startFlow(provider: string, redirectTo?: string): Promise<Flow> {
    const query = redirectTo === undefined ? '' : `?redirect_to=${encodeURIComponent(redirectTo)}`;
    const start = await app().inject({ method: 'GET', url: `/api/auth/oauth/${provider}/authorize${query}` });
    assert.equal(start.statusCode, 302, start.body);
    const consent = new URL(String(start.headers.location));
    assert.equal(consent.origin, fake.url);
    assert.equal(consent.searchParams.get('code_challenge_method'), 'S256');
    assert.equal(consent.searchParams.get('redirect_uri'), callbackOf(provider));
    const stateCookie = start.cookies.find((c) => c.name === 'hark-oauth-state');
    assert.ok(stateCookie?.httpOnly, 'state cookie set, HttpOnly');
    assert.equal(stateCookie.value, consent.searchParams.get('state'));

    const approved = await fetch(consent, { redirect: 'manual' });
    assert.equal(approved.status, 302, await approved.clone().text());
    const back = new URL(approved.headers.get('location')!);
    assert.equal(`${back.origin}${back.pathname}`, callbackOf(provider));
    return { callback: `${back.pathname}${back.search}`, stateCookie: stateCookie.value };
  }

  function finish(flow: Flow, cookies: Record<string, string> = { 'hark-oauth-state': flow.stateCookie }) {
    return app().inject({ method: 'GET', url: flow.callback, cookies });
  }

  /** Asserts a completed sign-in and returns its access token. */
  async function signedIn(res: Awaited<ReturnType<typeof finish>>, landing: string, method: string): Promise<string> {
    assert.equal(res.statusCode, 302, res.body);
    assert.equal(res.headers.location, landing);
    const cookie = res.cookies.find((c) => c.name === 'sb-access-token');
    assert.ok(cookie?.value, 'session cookie set');
    assert.equal(cookie.httpOnly, true);
    const sessions = await app().inject({ method: 'GET', url: '/api/desktop-app/sessions', ...sessionCookie(cookie.value) });
    assert.equal(sessions.statusCode, 200, sessions.body);
    assert.ok(sessions.json().sessions.some((s: { method: string; current: boolean }) => s.current && s.method === method));
    // The same token also works as the desktop app's Bearer token.
    const asBearer = await app().inject({ method: 'GET', url: '/api/desktop-app/sessions', headers: bearer(cookie.value) });
    assert.equal(asBearer.statusCode, 200);
    return cookie.value;
  }

  async function sessionCount(): Promise<number> {
    const row = await rt.db.kysely.selectFrom('auth_sessions').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /** The user an access token belongs to (its `sub`). */
  function userOf(accessToken: string): string {
    return JSON.parse(Buffer.from(accessToken.split('.')[1]!, 'base64url').toString('utf8')).sub;
  }

  test('Google: a new person gets a user without a password, email confirmed, identity linked', async () => {
    const email = uniqueEmail('google-new');
    const person = googleAs(email, { name: 'Ada Google' });
    const token = await signedIn(await finish(await startFlow('google', '/welcome')), `${APP_URL}/welcome`, 'oauth:google');
    const user = await store.findUserByEmail(rt.db.kysely, email);
    assert.ok(user);
    assert.equal(user.password_hash, null);
    assert.ok(user.email_confirmed_at);
    assert.equal(user.user_metadata.name, 'Ada Google');
    assert.equal(userOf(token), user.id);
    const identity = await rt.db.kysely.selectFrom('oauth_identities').selectAll().where('provider', '=', 'google').where('subject', '=', person.sub).executeTakeFirst();
    assert.equal(identity?.user_id, user.id);
    const states = await rt.db.kysely.selectFrom('oauth_states').select('state_hash').execute();
    assert.equal(states.length, 0, 'the state row is gone once used');
  });

  test('Google: an existing user is linked by verified email, then found by subject', async () => {
    const existing = await signUp(rt);
    const person = googleAs(existing.email.toUpperCase());
    const token = await signedIn(await finish(await startFlow('google')), `${APP_URL}/`, 'oauth:google');
    assert.equal(userOf(token), existing.id);
    // The password still works for the owner of a confirmed account.
    await signIn(rt, existing);

    // Later the Google account's address changes: the link by subject still finds the user.
    googleAs(uniqueEmail('renamed'), { sub: person.sub });
    const again = await signedIn(await finish(await startFlow('google')), `${APP_URL}/`, 'oauth:google');
    assert.equal(userOf(again), existing.id);
  });

  test('Google: claims missing from the ID token are read from userinfo', async () => {
    const email = uniqueEmail('userinfo');
    googleAs(email, { emailOnlyInUserinfo: true });
    const before = fake.requests.filter((p) => p === '/userinfo').length;
    await signedIn(await finish(await startFlow('google')), `${APP_URL}/`, 'oauth:google');
    assert.equal(fake.requests.filter((p) => p === '/userinfo').length, before + 1);
    assert.ok(await store.findUserByEmail(rt.db.kysely, email));
  });

  test('Google: an unverified email is refused and nothing is created', async () => {
    const email = uniqueEmail('unverified');
    googleAs(email, { email_verified: false });
    const res = await finish(await startFlow('google'));
    assert.equal(res.statusCode, 400);
    assert.match(res.json().message, /verified email/);
    assert.equal(await store.findUserByEmail(rt.db.kysely, email), undefined);
  });

  test('Google: an ID token not signed by the published key is refused', async () => {
    googleAs(uniqueEmail('forged'));
    fake.signWithUnknownKey = true;
    try {
      const before = await sessionCount();
      const res = await finish(await startFlow('google'));
      assert.equal(res.statusCode, 400, res.body);
      assert.match(res.json().message, /could not be verified/);
      assert.equal(await sessionCount(), before);
    } finally {
      fake.signWithUnknownKey = false;
    }
  });

  test('Google: discovery is fetched once and cached', () => {
    assert.equal(fake.requests.filter((p) => p === '/.well-known/openid-configuration').length, 1);
  });

  test('GitHub: a new person signs in with their verified primary email', async () => {
    const email = uniqueEmail('github-new');
    githubAs(email, { emails: [{ email: uniqueEmail('other'), primary: false, verified: true }, { email, primary: true, verified: true }] });
    const token = await signedIn(await finish(await startFlow('github', `${APP_URL}/settings?tab=1`)), `${APP_URL}/settings?tab=1`, 'oauth:github');
    const user = await store.findUserByEmail(rt.db.kysely, email);
    assert.ok(user);
    assert.equal(user.password_hash, null);
    assert.equal(userOf(token), user.id);
    const identity = await rt.db.kysely.selectFrom('oauth_identities').selectAll().where('provider', '=', 'github').where('user_id', '=', user.id).executeTakeFirst();
    assert.equal(identity?.subject, String(fake.githubUser.id));
  });

  test('GitHub: an existing user is linked by email', async () => {
    const existing = await signUp(rt);
    githubAs(existing.email);
    const token = await signedIn(await finish(await startFlow('github')), `${APP_URL}/`, 'oauth:github');
    assert.equal(userOf(token), existing.id);
  });

  test('GitHub: an unverified primary email is refused', async () => {
    const email = uniqueEmail('gh-unverified');
    githubAs(email, { emails: [{ email, primary: true, verified: false }] });
    const res = await finish(await startFlow('github'));
    assert.equal(res.statusCode, 400);
    assert.match(res.json().message, /no verified primary email/);
    assert.equal(await store.findUserByEmail(rt.db.kysely, email), undefined);
  });

  test('linking to an account whose email was never confirmed drops its unproven password', async () => {
    const email = uniqueEmail('prehijack');
    const planted = await store.insertUser(rt.db.kysely, { email, passwordHash: await hashPassword('attacker password'), confirmed: false });
    assert.ok(planted);
    googleAs(email);
    await signedIn(await finish(await startFlow('google')), `${APP_URL}/`, 'oauth:google');
    const user = await store.findUserById(rt.db.kysely, planted.id);
    assert.equal(user?.password_hash, null);
    assert.ok(user?.email_confirmed_at);
  });

  for (const provider of ['google', 'github']) {
    test(`${provider}: a tampered PKCE verifier is refused by the provider; no session`, async () => {
      if (provider === 'google') googleAs(uniqueEmail('pkce'));
      else githubAs(uniqueEmail('pkce'));
      const flow = await startFlow(provider);
      await rt.db.kysely.updateTable('oauth_states').set({ code_verifier: 'x'.repeat(43) }).execute();
      const before = await sessionCount();
      const res = await finish(flow);
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().error, 'bad_request');
      assert.match(res.json().message, /rejected the sign-in \((invalid_grant|bad_verification_code): code_verifier does not match/);
      assert.equal(res.cookies.find((c) => c.name === 'sb-access-token'), undefined);
      assert.equal(await sessionCount(), before);
    });

    test(`${provider}: a refusal at the provider is a clear 400 and spends the state`, async () => {
      fake.deny = true;
      try {
        const flow = await startFlow(provider);
        const res = await finish(flow);
        assert.equal(res.statusCode, 400);
        assert.match(res.json().message, /cancelled or refused \(access_denied/);
      } finally {
        fake.deny = false;
      }
      assert.equal((await rt.db.kysely.selectFrom('oauth_states').select('state_hash').execute()).length, 0);
    });
  }

  test('a replayed callback is refused: the state works once', async () => {
    googleAs(uniqueEmail('replay'));
    const flow = await startFlow('google');
    await signedIn(await finish(flow), `${APP_URL}/`, 'oauth:google');
    const before = await sessionCount();
    const replay = await finish(flow);
    assert.equal(replay.statusCode, 400);
    assert.match(replay.json().message, /invalid OAuth state/);
    assert.equal(await sessionCount(), before);
  });

  test('an unknown, expired, or foreign-browser state is refused', async () => {
    googleAs(uniqueEmail('state'));
    const flow = await startFlow('google');
    const forged = flow.callback.replace(/state=[^&]+/, 'state=forged-state-value');
    const unknown = await app().inject({ method: 'GET', url: forged, cookies: { 'hark-oauth-state': 'forged-state-value' } });
    assert.equal(unknown.statusCode, 400);
    assert.match(unknown.json().message, /invalid OAuth state/);

    const noCookie = await finish(flow, {});
    assert.equal(noCookie.statusCode, 400, 'a callback opened in another browser (login CSRF) is refused');
    assert.match(noCookie.json().message, /invalid OAuth state/);
    const missingState = await app().inject({ method: 'GET', url: `/api/auth/oauth/google/callback?code=abc`, cookies: { 'hark-oauth-state': flow.stateCookie } });
    assert.equal(missingState.statusCode, 400);

    await rt.db.kysely.updateTable('oauth_states').set({ expires_at: new Date(Date.now() - 1000) }).execute();
    const expired = await finish(flow);
    assert.equal(expired.statusCode, 400);
    assert.match(expired.json().message, /invalid OAuth state/);
  });

  test('state is checked against the provider it was issued for', async () => {
    googleAs(uniqueEmail('cross'));
    const flow = await startFlow('google');
    const res = await finish({ ...flow, callback: flow.callback.replace('/google/', '/github/') });
    assert.equal(res.statusCode, 400);
    assert.match(res.json().message, /invalid OAuth state/);
  });

  test('redirect_to must be on APP_URL', async () => {
    for (const target of ['https://evil.test/', '//evil.test/x', '/\\evil.test', 'http://app.hark.test.evil.test/', 'javascript:alert(1)', 'http://user@app.hark.test/', '/\tpath', 'dashboard']) {
      const res = await app().inject({ method: 'GET', url: `/api/auth/oauth/google/authorize?redirect_to=${encodeURIComponent(target)}` });
      assert.equal(res.statusCode, 400, `${target}: ${res.body}`);
      assert.match(res.json().message, /redirect_to/);
      assert.equal(res.headers.location, undefined);
    }
    const ok = await app().inject({ method: 'GET', url: `/api/auth/oauth/github/authorize?redirect_to=${encodeURIComponent('/calls?x=1#top')}` });
    assert.equal(ok.statusCode, 302);
  });

  test('unknown providers are 404', async () => {
    for (const url of ['/api/auth/oauth/facebook/authorize', '/api/auth/oauth/facebook/callback?code=a&state=b']) {
      const res = await app().inject({ method: 'GET', url });
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().error, 'not_found');
      assert.match(res.json().message, /provider not configured/);
    }
  });

  test('with MFA on, the sign-in is not completed: back to the app with mfa_required=1, no cookie', async () => {
    const user = await signUp(rt);
    const enroll = await app().inject({ method: 'POST', url: '/api/auth/mfa/enroll', headers: bearer(user.accessToken) });
    const totp = new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32(enroll.json().secret) });
    const on = await app().inject({ method: 'POST', url: '/api/auth/mfa/verify', headers: bearer(user.accessToken), payload: { code: totp.generate() } });
    assert.equal(on.statusCode, 200, on.body);

    githubAs(user.email);
    const before = await sessionCount();
    const res = await finish(await startFlow('github', '/dashboard'));
    assert.equal(res.statusCode, 302);
    assert.equal(res.headers.location, `${APP_URL}/?mfa_required=1`);
    assert.equal(res.cookies.find((c) => c.name === 'sb-access-token'), undefined);
    assert.equal(await sessionCount(), before);
  });

  test('the routes are in the OpenAPI document', async () => {
    const doc = (await app().inject({ method: 'GET', url: '/api/openapi.json' })).json();
    for (const path of ['/api/auth/magic-link', '/api/auth/magic-link/verify', '/api/auth/oauth/{provider}/authorize', '/api/auth/oauth/{provider}/callback']) {
      const operations = Object.values(doc.paths[path] ?? {}) as Array<{ tags: string[]; summary: string; responses: Record<string, unknown> }>;
      assert.ok(operations.length, `${path} documented`);
      for (const op of operations) {
        assert.deepEqual(op.tags, ['identity']);
        assert.ok(op.summary);
        assert.ok(op.responses['400'], `${path} documents 400`);
      }
    }
    assert.ok(doc.paths['/api/auth/oauth/{provider}/callback'].get.responses['302'].headers.Location);
  });
});

describe('OAuth sign-in configuration', () => {
  test('a provider without credentials answers 404 on both routes', async () => {
    const rt = await startTestRuntime({ OAUTH_GOOGLE_CLIENT_ID: 'id', OAUTH_GOOGLE_CLIENT_SECRET: 'secret' });
    try {
      for (const url of ['/api/auth/oauth/github/authorize', '/api/auth/oauth/github/callback?code=a&state=b']) {
        const res = await rt.app!.inject({ method: 'GET', url });
        assert.equal(res.statusCode, 404);
        assert.equal(res.json().error, 'not_found');
        assert.match(res.json().message, /provider not configured/);
      }
    } finally {
      await rt.destroy();
    }
  });

  test('an unreachable provider is a 502, not a 500', async () => {
    const rt = await startTestRuntime({ OAUTH_GOOGLE_CLIENT_ID: 'id', OAUTH_GOOGLE_CLIENT_SECRET: 'secret', OAUTH_GOOGLE_ISSUER_URL: 'http://127.0.0.1:9' });
    try {
      const res = await rt.app!.inject({ method: 'GET', url: '/api/auth/oauth/google/authorize' });
      assert.equal(res.statusCode, 502, res.body);
      assert.equal(res.json().error, 'bad_gateway');
      assert.match(res.json().message, /Could not reach Google/);
    } finally {
      await rt.destroy();
    }
  });

  test('defaults, and one-line errors naming the variable', () => {
    const config = loadConfig({ OAUTH_GITHUB_CLIENT_ID: 'id', OAUTH_GITHUB_CLIENT_SECRET: 'secret' });
    assert.equal(config.oauth.google, undefined);
    assert.deepEqual(config.oauth.github, { clientId: 'id', clientSecret: 'secret', url: 'https://github.com', apiUrl: 'https://api.github.com' });
    assert.equal(loadConfig({ OAUTH_GOOGLE_CLIENT_ID: 'a', OAUTH_GOOGLE_CLIENT_SECRET: 'b' }).oauth.google?.issuerUrl, 'https://accounts.google.com');
    const bad: Array<[Record<string, string>, string]> = [
      [{ OAUTH_GOOGLE_CLIENT_ID: 'id' }, 'OAUTH_GOOGLE_CLIENT_SECRET'],
      [{ OAUTH_GITHUB_CLIENT_SECRET: 'secret' }, 'OAUTH_GITHUB_CLIENT_ID'],
      [{ OAUTH_GOOGLE_ISSUER_URL: 'accounts.google.com' }, 'OAUTH_GOOGLE_ISSUER_URL'],
      [{ OAUTH_GITHUB_API_URL: 'ftp://api.github.com' }, 'OAUTH_GITHUB_API_URL'],
    ];
    for (const [env, variable] of bad) {
      assert.throws(
        () => loadConfig(env),
        (error: unknown) => error instanceof ConfigError && error.variable === variable && error.message.startsWith(`Invalid configuration: ${variable} `) && !error.message.includes('\n'),
      );
    }
  });
});
