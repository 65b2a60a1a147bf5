import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as OTPAuth from 'otpauth';
import { SignJWT, UnsecuredJWT, decodeJwt } from 'jose';
import { eventually, startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, latestEmail, sessionCookie, signIn, signUp, tokenFromEmail, uniqueEmail, TEST_PASSWORD, type TestUser } from '../../../test/fixtures.ts';
import { sha256Hex } from '../../platform/crypto/tokens.ts';
import { verifyPassword } from '../../platform/crypto/passwords.ts';
import { SIGN_IN_LIMITS } from './service.ts';

const TOKEN_PAIR_KEYS = ['access_token', 'expires_at', 'expires_in', 'refresh_token', 'user'];

interface InjectedCookie {
  name: string;
  value: string;
  httpOnly?: boolean;
  secure?: boolean;
  sameSite?: string;
  path?: string;
}

function sessionCookieOf(res: { cookies: InjectedCookie[] }): InjectedCookie | undefined {
  return res.cookies.find((c) => c.name === 'sb-access-token');
}

/** Asserts the §2.1 token pair without token_type (sign-in, refresh, confirm). */
function assertTokenPair(body: Record<string, unknown>, user: { id?: string; email: string }) {
  assert.deepEqual(Object.keys(body).sort(), TOKEN_PAIR_KEYS);
  assert.equal(typeof body.access_token, 'string');
  assert.equal(typeof body.refresh_token, 'string');
  assert.ok((body.refresh_token as string).length >= 32);
  assert.ok(Number.isInteger(body.expires_in) && (body.expires_in as number) > 0);
  assert.ok(Number.isInteger(body.expires_at));
  const now = Math.floor(Date.now() / 1000);
  assert.ok(Math.abs((body.expires_at as number) - (now + (body.expires_in as number))) <= 5, 'expires_at is now + expires_in, in Unix seconds');
  const u = body.user as Record<string, unknown>;
  assert.deepEqual(Object.keys(u).sort(), ['email', 'id']);
  assert.equal(u.email, user.email);
  if (user.id) assert.equal(u.id, user.id);
  const claims = decodeJwt(body.access_token as string);
  assert.equal(claims.sub, u.id);
  assert.equal(claims.exp, body.expires_at);
}

/** The session id inside an access token. */
function sessionIdOf(accessToken: string): string {
  const sid = decodeJwt(accessToken).sid;
  assert.equal(typeof sid, 'string');
  return sid as string;
}

function totpFor(secret: string) {
  return new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32(secret) });
}

/** A well-formed 6-digit code that is not valid now (nor one step either side). */
function wrongCodeFor(secret: string): string {
  const totp = totpFor(secret);
  const valid = new Set([-60_000, -30_000, 0, 30_000, 60_000].map((offset) => totp.generate({ timestamp: Date.now() + offset })));
  for (let n = 0; ; n++) {
    const code = String(n * 111_111 + 123).padStart(6, '0').slice(-6);
    if (!valid.has(code)) return code;
  }
}

describe('identity: sign-up, sign-in, tokens, sessions, MFA, credentials', () => {
  let rt: TestRuntime;
  before(async () => {
    rt = await startTestRuntime();
  });
  after(async () => {
    await rt?.destroy();
  });

  async function sessions(token: string, via: 'bearer' | 'cookie' = 'bearer') {
    return rt.app!.inject({ method: 'GET', url: '/api/desktop-app/sessions', ...(via === 'bearer' ? { headers: bearer(token) } : sessionCookie(token)) });
  }

  async function signInRes(email: string, password: string, extra: Record<string, unknown> = {}, remoteAddress?: string) {
    return rt.app!.inject({ method: 'POST', url: '/api/auth/sign-in', payload: { email, password, ...extra }, ...(remoteAddress ? { remoteAddress } : {}) });
  }

  async function refreshRes(refreshToken: string) {
    return rt.app!.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refresh_token: refreshToken } });
  }

  describe('sign-up', () => {
    test('answers the exact §4.1 shape and sets an HttpOnly, SameSite=Lax session cookie (not Secure over http)', async () => {
      const email = uniqueEmail('signup');
      const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email, password: TEST_PASSWORD } });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['data', 'success']);
      assert.equal(body.success, true);
      const data = body.data;
      assert.deepEqual(Object.keys(data).sort(), ['access_token', 'expires_at', 'expires_in', 'needs_email_confirm', 'refresh_token', 'token_type', 'user']);
      assert.equal(data.needs_email_confirm, false);
      assert.equal(data.token_type, 'bearer');
      assert.equal(typeof data.access_token, 'string');
      assert.equal(typeof data.refresh_token, 'string');
      assert.ok(Number.isInteger(data.expires_in) && data.expires_in > 0);
      assert.ok(Number.isInteger(data.expires_at) && data.expires_at > Date.now() / 1000);
      assert.deepEqual(Object.keys(data.user).sort(), ['email', 'id', 'user_metadata']);
      assert.equal(data.user.email, email);
      assert.match(data.user.id, /^[0-9a-f-]{36}$/);
      assert.deepEqual(data.user.user_metadata, {});

      const cookie = sessionCookieOf(res);
      assert.ok(cookie, 'sb-access-token cookie is set');
      assert.equal(cookie.value, data.access_token);
      assert.equal(cookie.httpOnly, true);
      assert.equal(cookie.sameSite, 'Lax');
      assert.notEqual(cookie.secure, true, 'not Secure when BASE_URL is http');
      assert.equal(cookie.path, '/');

      // The new session works at once, by Bearer and by cookie.
      assert.equal((await sessions(data.access_token)).statusCode, 200);
      assert.equal((await sessions(data.access_token, 'cookie')).statusCode, 200);
    });

    test('stores a scrypt hash of the password, never the password', async () => {
      const email = uniqueEmail('hash');
      const user = await signUp(rt, email);
      const row = await rt.db.kysely.selectFrom('users').select(['password_hash', 'email_confirmed_at']).where('id', '=', user.id).executeTakeFirstOrThrow();
      assert.ok(row.password_hash);
      assert.match(row.password_hash, /^scrypt\$\d+\$\d+\$\d+\$[A-Za-z0-9_-]+\$[A-Za-z0-9_-]+$/);
      assert.ok(!row.password_hash.includes(TEST_PASSWORD));
      assert.equal(await verifyPassword(TEST_PASSWORD, row.password_hash), true);
      assert.equal(await verifyPassword('another password!', row.password_hash), false);
      assert.ok(row.email_confirmed_at, 'without AUTH_EMAIL_CONFIRM the address counts as confirmed');
    });

    test('the password policy answers 400 with details on the password field', async () => {
      const email = uniqueEmail('policy');
      const local = email.split('@')[0]!;
      for (const password of ['short', 'aaaaaaaaaaaa', local, email, 'x'.repeat(129)]) {
        const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email, password } });
        assert.equal(res.statusCode, 400, `password ${JSON.stringify(password)}: ${res.body}`);
        const body = res.json();
        assert.equal(body.error, 'validation_failed');
        assert.equal(body.code, 400);
        assert.ok(Array.isArray(body.details) && body.details.length > 0);
        for (const detail of body.details) {
          assert.equal(detail.field, 'password');
          assert.equal(typeof detail.message, 'string');
        }
      }
      const missing = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email } });
      assert.equal(missing.statusCode, 400);
      assert.deepEqual(missing.json().details, [{ field: 'password', message: 'is required' }]);
      const count = await rt.db.kysely.selectFrom('users').select((eb) => eb.fn.countAll<number>().as('n')).where('email', '=', email).executeTakeFirstOrThrow();
      assert.equal(Number(count.n), 0, 'no user was created');
    });

    test('an invalid email answers 400 with details on the email field', async () => {
      for (const email of ['not-an-email', 'a@', '@example.test', 'two words@example.test']) {
        const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email, password: TEST_PASSWORD } });
        assert.equal(res.statusCode, 400, `email ${email}: ${res.body}`);
        const body = res.json();
        assert.equal(body.error, 'validation_failed');
        assert.ok(body.details.some((d: { field: string }) => d.field === 'email'), JSON.stringify(body.details));
      }
      const missing = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { password: TEST_PASSWORD } });
      assert.equal(missing.statusCode, 400);
      assert.deepEqual(missing.json().details, [{ field: 'email', message: 'is required' }]);
    });

    test('a duplicate email (in any letter case) is 409 and creates no second user', async () => {
      const email = uniqueEmail('dup');
      await signUp(rt, email);
      for (const again of [email, email.toUpperCase()]) {
        const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email: again, password: 'a different password' } });
        assert.equal(res.statusCode, 409, res.body);
        assert.equal(res.json().error, 'conflict');
        assert.equal(sessionCookieOf(res), undefined, 'no session cookie on a refused sign-up');
      }
      const rows = await rt.db.kysely.selectFrom('users').select(['id']).where('email', 'ilike', email).execute();
      assert.equal(rows.length, 1);
      // The original password still works; the refused one does not.
      assert.equal((await signInRes(email, TEST_PASSWORD)).statusCode, 200);
      assert.equal((await signInRes(email, 'a different password')).statusCode, 401);
    });
  });

  describe('sign-in', () => {
    test('returns the token pair of §2.1 without token_type, and sets the session cookie', async () => {
      const user = await signUp(rt);
      const res = await signInRes(user.email.toUpperCase(), TEST_PASSWORD);
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assertTokenPair(body, { id: user.id, email: user.email });
      assert.notEqual(body.refresh_token, user.refreshToken);
      assert.notEqual(sessionIdOf(body.access_token), sessionIdOf(user.accessToken), 'each sign-in is a new session');
      const cookie = sessionCookieOf(res);
      assert.ok(cookie);
      assert.equal(cookie.value, body.access_token);
      assert.equal(cookie.httpOnly, true);
      assert.equal(cookie.sameSite, 'Lax');
      assert.equal((await sessions(body.access_token)).statusCode, 200);
    });

    test('a wrong password and an unknown email give identical 401 bodies', async () => {
      const user = await signUp(rt);
      const wrong = await signInRes(user.email, 'not the password', {}, '10.1.0.1');
      const unknown = await signInRes(uniqueEmail('nobody'), 'not the password', {}, '10.1.0.1');
      assert.equal(wrong.statusCode, 401);
      assert.equal(unknown.statusCode, 401);
      assert.deepEqual(wrong.json(), unknown.json());
      assert.equal(wrong.json().error, 'unauthorized');
      assert.equal(sessionCookieOf(wrong), undefined);
    });

    test(`after ${SIGN_IN_LIMITS.perEmail} failures one email is throttled (429 + Retry-After, even with the right password); other emails are not`, async () => {
      const address = '10.2.0.1';
      const target = await signUp(rt);
      const bystander = await signUp(rt);
      for (let i = 0; i < SIGN_IN_LIMITS.perEmail; i++) {
        const res = await signInRes(target.email, `wrong password ${i}`, {}, address);
        assert.equal(res.statusCode, 401, `attempt ${i + 1}: ${res.body}`);
      }
      for (const password of ['wrong again', TEST_PASSWORD]) {
        const blocked = await signInRes(target.email, password, {}, address);
        assert.equal(blocked.statusCode, 429, blocked.body);
        assert.equal(blocked.json().error, 'rate_limited');
        const retryAfter = Number(blocked.headers['retry-after']);
        assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= SIGN_IN_LIMITS.windowSeconds, `Retry-After: ${blocked.headers['retry-after']}`);
      }
      // The limit counts per email, whatever the letter case.
      assert.equal((await signInRes(target.email.toUpperCase(), TEST_PASSWORD, {}, '10.2.0.2')).statusCode, 429);
      // Another email from the same address is not throttled.
      assert.equal((await signInRes(bystander.email, 'wrong password', {}, address)).statusCode, 401);
      assert.equal((await signInRes(bystander.email, TEST_PASSWORD, {}, address)).statusCode, 200);
    });

    test(`after ${SIGN_IN_LIMITS.perAddress} failures from one address, that address is throttled; other addresses are not`, async () => {
      const address = '10.3.0.1';
      const user = await signUp(rt);
      // Spread the failures over many emails so no single email reaches its own limit.
      const ownFailures = SIGN_IN_LIMITS.perEmail - 1;
      for (let i = 0; i < ownFailures; i++) assert.equal((await signInRes(user.email, `wrong ${i}`, {}, address)).statusCode, 401);
      for (let i = ownFailures; i < SIGN_IN_LIMITS.perAddress; i++) {
        const res = await signInRes(uniqueEmail('spray'), 'wrong', {}, address);
        assert.equal(res.statusCode, 401, `attempt ${i + 1}: ${res.body}`);
      }
      const blocked = await signInRes(user.email, TEST_PASSWORD, {}, address);
      assert.equal(blocked.statusCode, 429, blocked.body);
      assert.ok(Number(blocked.headers['retry-after']) >= 1);
      assert.equal((await signInRes(uniqueEmail('fresh'), 'wrong', {}, address)).statusCode, 429);
      // The user is not locked out from elsewhere: the per-email count stayed under its limit.
      assert.equal((await signInRes(user.email, TEST_PASSWORD, {}, '10.3.0.2')).statusCode, 200);
    });

    test('a successful sign-in resets the per-email failure count', async () => {
      const address = '10.4.0.1';
      const user = await signUp(rt);
      for (let i = 0; i < SIGN_IN_LIMITS.perEmail - 1; i++) assert.equal((await signInRes(user.email, 'wrong', {}, address)).statusCode, 401);
      assert.equal((await signInRes(user.email, TEST_PASSWORD, {}, address)).statusCode, 200);
      for (let i = 0; i < SIGN_IN_LIMITS.perEmail - 1; i++) assert.equal((await signInRes(user.email, 'wrong', {}, address)).statusCode, 401);
      assert.equal((await signInRes(user.email, TEST_PASSWORD, {}, address)).statusCode, 200);
    });
  });

  describe('refresh', () => {
    test('returns a new pair with a new refresh token; the old access token keeps working', async () => {
      const user = await signUp(rt);
      const res = await refreshRes(user.refreshToken);
      assert.equal(res.statusCode, 200, res.body);
      const pair = res.json();
      assertTokenPair(pair, { id: user.id, email: user.email });
      assert.notEqual(pair.refresh_token, user.refreshToken);
      assert.equal(sessionIdOf(pair.access_token), sessionIdOf(user.accessToken), 'refresh stays in the same session');
      assert.equal((await sessions(user.accessToken)).statusCode, 200, 'the old access token works until it expires');
      assert.equal((await sessions(pair.access_token)).statusCode, 200);
      // The new refresh token works once more.
      const again = await refreshRes(pair.refresh_token);
      assert.equal(again.statusCode, 200, again.body);
      assert.notEqual(again.json().refresh_token, pair.refresh_token);
    });

    test('using an old refresh token again is 401 and revokes the whole session', async () => {
      const user = await signUp(rt);
      const other = await signIn(rt, user); // a second, unrelated session of the same user
      const first = await refreshRes(user.refreshToken);
      assert.equal(first.statusCode, 200);
      const next = first.json();

      const reuse = await refreshRes(user.refreshToken);
      assert.equal(reuse.statusCode, 401, reuse.body);
      assert.equal(reuse.json().error, 'unauthorized');

      assert.equal((await refreshRes(next.refresh_token)).statusCode, 401, 'the newest refresh token of the session is revoked too');
      assert.equal((await sessions(next.access_token)).statusCode, 401, 'the newest access token of the session stops working');
      assert.equal((await sessions(user.accessToken)).statusCode, 401, 'the original access token stops working');
      assert.equal((await sessions(user.accessToken, 'cookie')).statusCode, 401);

      const session = await rt.db.kysely.selectFrom('auth_sessions').select(['revoked_at', 'revoked_reason']).where('id', '=', sessionIdOf(user.accessToken)).executeTakeFirstOrThrow();
      assert.ok(session.revoked_at);
      assert.equal(session.revoked_reason, 'refresh_reuse');

      // The user's other session is independent.
      assert.equal((await sessions(other.accessToken)).statusCode, 200);
      assert.equal((await refreshRes(other.refreshToken)).statusCode, 200);
    });

    test('an unknown refresh token is 401; an empty one is 400', async () => {
      const res = await refreshRes(crypto.randomBytes(32).toString('base64url'));
      assert.equal(res.statusCode, 401);
      assert.equal(res.json().error, 'unauthorized');
      const empty = await refreshRes('');
      assert.equal(empty.statusCode, 400);
      assert.equal(empty.json().details[0].field, 'refresh_token');
    });
  });

  describe('sign-out', () => {
    test("ends that session's tokens (Bearer and cookie) and no other session", async () => {
      const user = await signUp(rt);
      const other = await signIn(rt, user);
      const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-out', payload: { refresh_token: user.refreshToken } });
      assert.equal(res.statusCode, 200);
      assert.deepEqual(res.json(), { success: true });
      const cleared = sessionCookieOf(res);
      assert.ok(cleared, 'the session cookie is cleared');
      assert.equal(cleared.value, '');

      assert.equal((await refreshRes(user.refreshToken)).statusCode, 401);
      const byBearer = await sessions(user.accessToken);
      assert.equal(byBearer.statusCode, 401);
      assert.equal(byBearer.json().error, 'unauthorized');
      assert.equal((await sessions(user.accessToken, 'cookie')).statusCode, 401);

      assert.equal((await sessions(other.accessToken)).statusCode, 200);
      assert.equal((await sessions(other.accessToken, 'cookie')).statusCode, 200);
      assert.equal((await refreshRes(other.refreshToken)).statusCode, 200);
    });

    test('an unknown refresh token is accepted (already signed out)', async () => {
      const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-out', payload: { refresh_token: 'never-issued-' + crypto.randomBytes(8).toString('hex') } });
      assert.equal(res.statusCode, 200);
      assert.deepEqual(res.json(), { success: true });
    });

    test('signing out with a rotated refresh token still ends the session', async () => {
      const user = await signUp(rt);
      const next = (await refreshRes(user.refreshToken)).json();
      const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-out', payload: { refresh_token: user.refreshToken } });
      assert.equal(res.statusCode, 200);
      assert.equal((await sessions(next.access_token)).statusCode, 401);
      assert.equal((await refreshRes(next.refresh_token)).statusCode, 401);
    });
  });

  describe('sessions list and revoke', () => {
    test("lists the caller's active sessions with exactly one current", async () => {
      const user = await signUp(rt);
      const second = await signIn(rt, user);
      const third = await signIn(rt, user);
      await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-out', payload: { refresh_token: third.refreshToken } });
      const stranger = await signUp(rt);

      const res = await rt.app!.inject({ method: 'GET', url: '/api/desktop-app/sessions', headers: { ...bearer(second.accessToken), 'user-agent': 'HarkDesktop/1.0' } });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.equal(body.success, true);
      const ids = body.sessions.map((s: { id: string }) => s.id).sort();
      assert.deepEqual(ids, [sessionIdOf(user.accessToken), sessionIdOf(second.accessToken)].sort(), 'only this user, only active sessions');
      assert.ok(!ids.includes(sessionIdOf(stranger.accessToken)));
      const current = body.sessions.filter((s: { current: boolean }) => s.current);
      assert.equal(current.length, 1);
      assert.equal(current[0].id, sessionIdOf(second.accessToken));
      for (const s of body.sessions) {
        assert.equal(s.method, 'password');
        for (const field of ['created_at', 'last_used_at', 'expires_at']) assert.ok(!Number.isNaN(Date.parse(s[field])), field);
      }

      // Through the cookie the current flag follows the cookie's session.
      const viaCookie = (await sessions(user.accessToken, 'cookie')).json();
      assert.deepEqual(
        viaCookie.sessions.filter((s: { current: boolean }) => s.current).map((s: { id: string }) => s.id),
        [sessionIdOf(user.accessToken)],
      );
    });

    test('revoking another of your sessions ends its tokens; another user\u2019s session is 404', async () => {
      const user = await signUp(rt);
      const laptop = await signIn(rt, user);
      const stranger = await signUp(rt);

      const foreign = await rt.app!.inject({ method: 'DELETE', url: `/api/desktop-app/sessions/${sessionIdOf(stranger.accessToken)}`, headers: bearer(user.accessToken) });
      assert.equal(foreign.statusCode, 404, foreign.body);
      assert.equal(foreign.json().error, 'not_found');
      assert.equal((await sessions(stranger.accessToken)).statusCode, 200, "the stranger's session is untouched");
      const unknown = await rt.app!.inject({ method: 'DELETE', url: `/api/desktop-app/sessions/${crypto.randomUUID()}`, headers: bearer(user.accessToken) });
      assert.equal(unknown.statusCode, 404);

      const res = await rt.app!.inject({ method: 'DELETE', url: `/api/desktop-app/sessions/${sessionIdOf(laptop.accessToken)}`, headers: bearer(user.accessToken) });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json(), { success: true });
      assert.equal((await sessions(laptop.accessToken)).statusCode, 401);
      assert.equal((await refreshRes(laptop.refreshToken)).statusCode, 401);
      assert.equal((await sessions(user.accessToken)).statusCode, 200, 'the caller’s own session continues');

      const twice = await rt.app!.inject({ method: 'DELETE', url: `/api/desktop-app/sessions/${sessionIdOf(laptop.accessToken)}`, headers: bearer(user.accessToken) });
      assert.equal(twice.statusCode, 404, 'an already revoked session is not found');
      const list = (await sessions(user.accessToken)).json();
      assert.deepEqual(list.sessions.map((s: { id: string }) => s.id), [sessionIdOf(user.accessToken)]);
    });
  });

  describe('MFA (TOTP)', () => {
    test('enroll, verify, sign in with a code, sealed at rest, disable with a code', async () => {
      const user = await signUp(rt);
      const enroll = await rt.app!.inject({ method: 'POST', url: '/api/auth/mfa/enroll', headers: bearer(user.accessToken) });
      assert.equal(enroll.statusCode, 200, enroll.body);
      const { success, secret, otpauth_url } = enroll.json();
      assert.equal(success, true);
      assert.match(secret, /^[A-Z2-7]{16,}$/);
      const uri = new URL(otpauth_url);
      assert.equal(uri.protocol, 'otpauth:');
      assert.equal(uri.host, 'totp');
      assert.equal(uri.searchParams.get('secret'), secret);
      assert.ok(decodeURIComponent(uri.pathname).includes(user.email));

      const row = await rt.db.kysely.selectFrom('users').select(['mfa_secret_sealed', 'mfa_enabled_at']).where('id', '=', user.id).executeTakeFirstOrThrow();
      assert.ok(row.mfa_secret_sealed, 'the secret is stored');
      assert.ok(!row.mfa_secret_sealed.includes(secret), 'but sealed, not in the clear');
      assert.ok(!row.mfa_secret_sealed.toUpperCase().includes(secret.slice(0, 12)));
      assert.equal(row.mfa_enabled_at, null, 'MFA is not on before the first code');
      assert.equal((await signInRes(user.email, TEST_PASSWORD)).statusCode, 200, 'enrolling alone does not demand a code');

      const totp = totpFor(secret);
      const mfaPost = (path: string, code: string) => rt.app!.inject({ method: 'POST', url: `/api/auth/mfa/${path}`, headers: bearer(user.accessToken), payload: { code } });
      const wrong = await mfaPost('verify', wrongCodeFor(secret));
      assert.equal(wrong.statusCode, 400, wrong.body);
      assert.equal((await signInRes(user.email, TEST_PASSWORD)).statusCode, 200, 'a wrong code does not turn MFA on');
      const right = await mfaPost('verify', totp.generate());
      assert.equal(right.statusCode, 200, right.body);
      assert.deepEqual(right.json(), { success: true });

      const again = await rt.app!.inject({ method: 'POST', url: '/api/auth/mfa/enroll', headers: bearer(user.accessToken) });
      assert.equal(again.statusCode, 409, 'no re-enrollment while on');

      const noCode = await signInRes(user.email, TEST_PASSWORD);
      assert.equal(noCode.statusCode, 401);
      assert.equal(noCode.json().error, 'mfa_required');
      assert.equal(sessionCookieOf(noCode), undefined);
      const badCode = await signInRes(user.email, TEST_PASSWORD, { mfa_code: wrongCodeFor(secret) });
      assert.equal(badCode.statusCode, 401);
      assert.equal(badCode.json().error, 'unauthorized');
      const wrongPassword = await signInRes(user.email, 'not the password', { mfa_code: totp.generate() });
      assert.equal(wrongPassword.statusCode, 401, 'a valid code does not replace the password');
      assert.equal(wrongPassword.json().error, 'unauthorized');
      const ok = await signInRes(user.email, TEST_PASSWORD, { mfa_code: totp.generate() });
      assert.equal(ok.statusCode, 200, ok.body);
      assertTokenPair(ok.json(), { id: user.id, email: user.email });

      const badDisable = await mfaPost('disable', wrongCodeFor(secret));
      assert.equal(badDisable.statusCode, 400);
      assert.equal((await signInRes(user.email, TEST_PASSWORD)).json().error, 'mfa_required', 'still on after a refused disable');
      const malformed = await mfaPost('disable', 'abc');
      assert.equal(malformed.statusCode, 400);
      assert.equal(malformed.json().details[0].field, 'code');
      const disable = await mfaPost('disable', totp.generate());
      assert.equal(disable.statusCode, 200, disable.body);
      assert.equal((await signInRes(user.email, TEST_PASSWORD)).statusCode, 200, 'no code needed once off');
      const cleared = await rt.db.kysely.selectFrom('users').select(['mfa_secret_sealed', 'mfa_enabled_at']).where('id', '=', user.id).executeTakeFirstOrThrow();
      assert.deepEqual(cleared, { mfa_secret_sealed: null, mfa_enabled_at: null });
    });

    test('verify before enrolling is 400; MFA routes need a signed-in user', async () => {
      const user = await signUp(rt);
      const res = await rt.app!.inject({ method: 'POST', url: '/api/auth/mfa/verify', headers: bearer(user.accessToken), payload: { code: '123456' } });
      assert.equal(res.statusCode, 400);
      const anon = await rt.app!.inject({ method: 'POST', url: '/api/auth/mfa/enroll' });
      assert.equal(anon.statusCode, 401);
    });
  });

  describe('credentials per route', () => {
    let user: TestUser;
    let sid: string;
    before(async () => {
      user = await signUp(rt);
      sid = sessionIdOf(user.accessToken);
    });

    function jwt(claims: { sub?: string; sid?: string; iss?: string; aud?: string; exp: number }, secret: string) {
      const builder = new SignJWT({ sid: claims.sid ?? sid })
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .setSubject(claims.sub ?? user.id)
        .setIssuer(claims.iss ?? 'hark')
        .setAudience(claims.aud ?? 'hark-api')
        .setIssuedAt(claims.exp - 900)
        .setExpirationTime(claims.exp);
      return builder.sign(new TextEncoder().encode(secret));
    }
    const now = () => Math.floor(Date.now() / 1000);

    test('no credential is 401', async () => {
      const res = await rt.app!.inject({ method: 'GET', url: '/api/desktop-app/sessions' });
      assert.equal(res.statusCode, 401);
      assert.equal(res.json().error, 'unauthorized');
    });

    test('an API key on a user route is 401 saying API keys are not accepted', async () => {
      const key = `svc_live_${crypto.randomBytes(4).toString('hex')}${crypto.randomBytes(24).toString('hex')}`;
      const res = await rt.app!.inject({ method: 'GET', url: '/api/desktop-app/sessions', headers: bearer(key) });
      assert.equal(res.statusCode, 401, res.body);
      assert.equal(res.json().error, 'unauthorized');
      assert.match(res.json().message, /does not accept an API key/);
    });

    test('a garbage Bearer token is 401', async () => {
      for (const token of ['garbage', 'a.b.c', user.refreshToken]) {
        const res = await rt.app!.inject({ method: 'GET', url: '/api/desktop-app/sessions', headers: bearer(token) });
        assert.equal(res.statusCode, 401, token);
        assert.equal(res.json().error, 'unauthorized');
      }
    });

    test('a JWT we signed is accepted, but not once expired', async () => {
      const fresh = await jwt({ exp: now() + 600 }, rt.secrets.jwtSecret);
      assert.equal((await sessions(fresh)).statusCode, 200, 'control: a well-formed token of a live session works');
      const expired = await jwt({ exp: now() - 120 }, rt.secrets.jwtSecret);
      const res = await sessions(expired);
      assert.equal(res.statusCode, 401);
      assert.equal((await sessions(expired, 'cookie')).statusCode, 401);
    });

    test('a JWT signed with another secret, for another audience or issuer, or unsigned is 401', async () => {
      const exp = now() + 600;
      const tokens = [
        await jwt({ exp }, crypto.randomBytes(48).toString('base64url')),
        await jwt({ exp, aud: 'someone-else' }, rt.secrets.jwtSecret),
        await jwt({ exp, iss: 'not-hark' }, rt.secrets.jwtSecret),
        new UnsecuredJWT({ sid }).setSubject(user.id).setIssuer('hark').setAudience('hark-api').setExpirationTime(exp).encode(),
      ];
      for (const token of tokens) assert.equal((await sessions(token)).statusCode, 401, token);
    });

    test('a JWT for a session of another user is 401', async () => {
      const stranger = await signUp(rt);
      const forged = await jwt({ exp: now() + 600, sid: sessionIdOf(stranger.accessToken) }, rt.secrets.jwtSecret);
      assert.equal((await sessions(forged)).statusCode, 401);
    });

    test('onboarding start takes the session cookie only, not a Bearer token', async () => {
      const payload = { companyName: 'Cookie Only Inc', clientToken: crypto.randomUUID() };
      const res = await rt.app!.inject({ method: 'POST', url: '/api/onboarding/start', headers: bearer(user.accessToken), payload });
      assert.equal(res.statusCode, 401, res.body);
      assert.match(res.json().message, /session cookie/);
      const none = await rt.app!.inject({ method: 'POST', url: '/api/onboarding/start', payload });
      assert.equal(none.statusCode, 401);
      const count = await rt.db.kysely.selectFrom('onboarding_starts').select(['client_token']).where('client_token', '=', payload.clientToken).execute();
      assert.equal(count.length, 0);
      const ok = await rt.app!.inject({ method: 'POST', url: '/api/onboarding/start', ...sessionCookie(user.accessToken), payload });
      assert.equal(ok.statusCode, 200, ok.body);
    });
  });

  describe('sweeper', () => {
    test('platform.sweep-expired deletes expired refresh tokens and one-time tokens, and keeps live ones', async () => {
      const user = await signUp(rt);
      const live = await signIn(rt, user);
      const expiredHash = sha256Hex(user.refreshToken);
      const past = new Date(Date.now() - 3600_000);
      const updated = await rt.db.kysely.updateTable('refresh_tokens').set({ expires_at: past }).where('token_hash', '=', expiredHash).executeTakeFirst();
      assert.equal(Number(updated.numUpdatedRows), 1);
      const expiredOtt = sha256Hex(`expired-${crypto.randomUUID()}`);
      const liveOtt = sha256Hex(`live-${crypto.randomUUID()}`);
      await rt.db.kysely
        .insertInto('one_time_tokens')
        .values([
          { purpose: 'magic_link', email: user.email, user_id: user.id, token_hash: expiredOtt, code_hash: null, expires_at: past, used_at: null },
          { purpose: 'magic_link', email: user.email, user_id: user.id, token_hash: liveOtt, code_hash: null, expires_at: new Date(Date.now() + 3600_000), used_at: null },
        ])
        .execute();
      assert.equal((await refreshRes(user.refreshToken)).statusCode, 401, 'an expired refresh token is refused even before it is swept');

      await rt.jobs.send('platform.sweep-expired', {});
      await eventually('expired rows to be swept', async () => {
        const refresh = await rt.db.kysely.selectFrom('refresh_tokens').select(['id']).where('token_hash', '=', expiredHash).executeTakeFirst();
        const ott = await rt.db.kysely.selectFrom('one_time_tokens').select(['id']).where('token_hash', '=', expiredOtt).executeTakeFirst();
        return !refresh && !ott;
      });
      const kept = await rt.db.kysely.selectFrom('refresh_tokens').select(['id']).where('token_hash', '=', sha256Hex(live.refreshToken)).executeTakeFirst();
      assert.ok(kept, 'a live refresh token is kept');
      const keptOtt = await rt.db.kysely.selectFrom('one_time_tokens').select(['id']).where('token_hash', '=', liveOtt).executeTakeFirst();
      assert.ok(keptOtt, 'a live one-time token is kept');
      assert.equal((await refreshRes(live.refreshToken)).statusCode, 200);
    });
  });
});

describe('identity over https', () => {
  let rt: TestRuntime;
  before(async () => {
    rt = await startTestRuntime({ BASE_URL: 'https://api.example.test' });
  });
  after(async () => {
    await rt?.destroy();
  });

  test('the session cookie is Secure (and still HttpOnly, SameSite=Lax) when BASE_URL is https', async () => {
    const email = uniqueEmail('secure');
    const signup = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email, password: TEST_PASSWORD } });
    assert.equal(signup.statusCode, 200, signup.body);
    const set = signup.headers['set-cookie'];
    const header = (Array.isArray(set) ? set : [set]).find((c) => c?.startsWith('sb-access-token='));
    assert.ok(header, 'Set-Cookie for sb-access-token');
    assert.match(header, /;\s*Secure/i);
    assert.match(header, /;\s*HttpOnly/i);
    assert.match(header, /;\s*SameSite=Lax/i);
    const signin = await rt.app!.inject({ method: 'POST', url: '/api/auth/sign-in', payload: { email, password: TEST_PASSWORD } });
    assert.equal(sessionCookieOf(signin)?.secure, true);
  });
});

describe('identity with email confirmation (AUTH_EMAIL_CONFIRM=true)', () => {
  let rt: TestRuntime;
  before(async () => {
    rt = await startTestRuntime({ AUTH_EMAIL_CONFIRM: 'true', APP_URL: 'https://app.example.test' });
  });
  after(async () => {
    await rt?.destroy();
  });

  const signUpRes = (email: string, password = TEST_PASSWORD) => rt.app!.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email, password } });
  const signInRes = (email: string, password = TEST_PASSWORD) => rt.app!.inject({ method: 'POST', url: '/api/auth/sign-in', payload: { email, password } });
  const confirm = (token: string) => rt.app!.inject({ method: 'POST', url: '/api/auth/confirm', payload: { token } });
  const usersWith = async (email: string) => rt.db.kysely.selectFrom('users').select(['id']).where('email', 'ilike', email).execute();

  test('sign-up answers needs_email_confirm without tokens; confirming signs in once', async () => {
    const email = uniqueEmail('confirm');
    const res = await signUpRes(email);
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.success, true);
    assert.deepEqual(Object.keys(body.data).sort(), ['needs_email_confirm', 'user']);
    assert.equal(body.data.needs_email_confirm, true);
    assert.deepEqual(Object.keys(body.data.user).sort(), ['email', 'id', 'user_metadata']);
    assert.equal(body.data.user.email, email);
    assert.equal(sessionCookieOf(res), undefined, 'no session before confirming');

    const mail = await latestEmail(rt, email, 'confirm_email');
    assert.ok(mail, 'a confirmation email is in the outbox');
    assert.match(mail.body_text, /https:\/\/app\.example\.test\/auth\/confirm\?token=/);
    const token = tokenFromEmail(mail.body_text);
    const stored = await rt.db.kysely.selectFrom('one_time_tokens').select(['token_hash']).where('purpose', '=', 'email_confirm').where('email', '=', email).execute();
    assert.deepEqual(stored, [{ token_hash: sha256Hex(token) }], 'only the hash of the token is stored');

    const early = await signInRes(email);
    assert.equal(early.statusCode, 403, early.body);
    assert.equal(early.json().error, 'forbidden');
    assert.equal((await signInRes(email, 'wrong password here')).statusCode, 401, 'a wrong password is still 401, not a hint');

    const confirmed = await confirm(token);
    assert.equal(confirmed.statusCode, 200, confirmed.body);
    const pair = confirmed.json();
    assertTokenPair(pair, { id: body.data.user.id, email });
    assert.equal(sessionCookieOf(confirmed)?.value, pair.access_token);
    const list = await rt.app!.inject({ method: 'GET', url: '/api/desktop-app/sessions', headers: bearer(pair.access_token) });
    assert.equal(list.statusCode, 200);
    assert.equal(list.json().sessions[0].method, 'email_confirm');

    const reused = await confirm(token);
    assert.equal(reused.statusCode, 400, 'a confirmation token works once');
    assert.equal((await confirm('x'.repeat(43))).statusCode, 400, 'an unknown token is refused');

    const later = await signInRes(email);
    assert.equal(later.statusCode, 200, later.body);
    assertTokenPair(later.json(), { id: body.data.user.id, email });
  });

  test('sign-up of an existing email answers the same way and creates no second user', async () => {
    const email = uniqueEmail('exists');
    const first = await signUpRes(email);
    assert.equal(first.statusCode, 200);
    const confirmed = await confirm(tokenFromEmail((await latestEmail(rt, email, 'confirm_email'))!.body_text));
    assert.equal(confirmed.statusCode, 200);

    const again = await signUpRes(email.toUpperCase(), 'a whole new password');
    assert.equal(again.statusCode, 200, again.body);
    const body = again.json();
    assert.deepEqual(Object.keys(body).sort(), Object.keys(first.json()).sort());
    assert.deepEqual(Object.keys(body.data).sort(), Object.keys(first.json().data).sort());
    assert.deepEqual(Object.keys(body.data.user).sort(), Object.keys(first.json().data.user).sort());
    assert.equal(body.data.needs_email_confirm, true);
    assert.notEqual(body.data.user.id, first.json().data.user.id, 'the real user id is not revealed');
    assert.deepEqual(body.data.user.user_metadata, {});
    assert.equal(sessionCookieOf(again), undefined);

    assert.equal((await usersWith(email)).length, 1, 'no second user');
    assert.ok(await latestEmail(rt, email.toUpperCase(), 'signup_existing'), 'the owner of the address is told instead');
    assert.equal((await signInRes(email, 'a whole new password')).statusCode, 401, 'the password was not replaced');
    assert.equal((await signInRes(email)).statusCode, 200);

    // Same for an address whose owner never confirmed: still one user, still no tokens.
    const pending = uniqueEmail('pending');
    assert.equal((await signUpRes(pending)).statusCode, 200);
    const repeat = await signUpRes(pending);
    assert.equal(repeat.statusCode, 200);
    assert.deepEqual(Object.keys(repeat.json().data).sort(), ['needs_email_confirm', 'user']);
    assert.equal((await usersWith(pending)).length, 1);
  });
});
