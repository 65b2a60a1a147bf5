import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as OTPAuth from 'otpauth';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, latestEmail, signUp, uniqueEmail, sessionCookie, tokenFromEmail } from '../../../test/fixtures.ts';
import { hashPassword } from '../../platform/crypto/passwords.ts';
import * as store from './store.ts';

describe('magic link and one-time code sign-in', () => {
  let rt: TestRuntime;
  before(async () => {
    rt = await startTestRuntime({ APP_URL: 'http://app.hark.test' });
  });
  after(async () => {
    await rt?.destroy();
  });

  const app = () => rt.app!;

  async function requestLink(email: string) {
    return app().inject({ method: 'POST', url: '/api/auth/magic-link', payload: { email } });
  }

  /** Requests a link and reads the newest magic-link email: its token and code. */
  async function emailed(email: string): Promise<{ token: string; code: string; body: string }> {
    const res = await requestLink(email);
    assert.equal(res.statusCode, 200, res.body);
    const mail = await latestEmail(rt, email, 'magic_link');
    assert.ok(mail, 'a magic-link email was sent');
    const code = /code: (\d{6})/.exec(mail.body_text)?.[1];
    assert.ok(code, `no code in ${mail.body_text}`);
    return { token: tokenFromEmail(mail.body_text), code, body: mail.body_text };
  }

  function verify(payload: Record<string, string>) {
    return app().inject({ method: 'POST', url: '/api/auth/magic-link/verify', payload });
  }

  async function sessionMethods(accessToken: string): Promise<string[]> {
    const res = await app().inject({ method: 'GET', url: '/api/desktop-app/sessions', headers: bearer(accessToken) });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().sessions.map((s: { method: string }) => s.method);
  }

  test('signs in by the emailed link: token pair, cookie, magic_link session', async () => {
    const user = await signUp(rt);
    const { token, body } = await emailed(user.email);
    assert.match(body, /^Sign in to Hark with this link:\n\nhttp:\/\/app\.hark\.test\/auth\/magic\?token=/);
    const res = await verify({ token });
    assert.equal(res.statusCode, 200, res.body);
    const pair = res.json();
    assert.equal(pair.user.id, user.id);
    assert.equal(typeof pair.refresh_token, 'string');
    const cookie = res.cookies.find((c) => c.name === 'sb-access-token');
    assert.equal(cookie?.value, pair.access_token);
    assert.equal(cookie?.httpOnly, true);
    const sessions = await app().inject({ method: 'GET', url: '/api/desktop-app/sessions', ...sessionCookie(pair.access_token) });
    assert.equal(sessions.statusCode, 200);
    assert.ok(sessions.json().sessions.some((s: { method: string; current: boolean }) => s.method === 'magic_link' && s.current));
  });

  test('signs in by email and code, case-insensitively', async () => {
    const user = await signUp(rt);
    const { code } = await emailed(user.email);
    const res = await verify({ email: user.email.toUpperCase(), code });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().user.id, user.id);
    assert.ok((await sessionMethods(res.json().access_token)).includes('magic_link'));
  });

  test('only hashes are stored', async () => {
    const user = await signUp(rt);
    const { token, code } = await emailed(user.email);
    const rows = await rt.db.kysely.selectFrom('one_time_tokens').selectAll().where('user_id', '=', user.id).where('purpose', '=', 'magic_link').execute();
    assert.equal(rows.length, 1);
    assert.notEqual(rows[0]!.token_hash, token);
    assert.doesNotMatch(JSON.stringify(rows), new RegExp(`${token}|"${code}"`));
  });

  test('a link or code works once', async () => {
    const user = await signUp(rt);
    const { token, code } = await emailed(user.email);
    assert.equal((await verify({ token })).statusCode, 200);
    const again = await verify({ token });
    assert.equal(again.statusCode, 401);
    assert.equal(again.json().error, 'unauthorized');
    assert.match(again.json().message, /already used/);
    const byCode = await verify({ email: user.email, code });
    assert.equal(byCode.statusCode, 401, 'the code of a used link is spent too');
  });

  test('wrong codes count; after five the code is dead but the link still works', async () => {
    const user = await signUp(rt);
    const { token, code } = await emailed(user.email);
    const wrong = code === '000000' ? '000001' : '000000';
    for (let left = 4; left >= 0; left--) {
      const res = await verify({ email: user.email, code: wrong });
      assert.equal(res.statusCode, 401);
      assert.match(res.json().message, left > 0 ? new RegExp(`${left} attempts? left`) : /no longer works/);
    }
    const right = await verify({ email: user.email, code });
    assert.equal(right.statusCode, 401);
    assert.match(right.json().message, /Too many wrong codes/);
    const row = await rt.db.kysely.selectFrom('one_time_tokens').select(['attempts']).where('user_id', '=', user.id).where('purpose', '=', 'magic_link').executeTakeFirstOrThrow();
    assert.equal(row.attempts, 5);
    assert.equal((await verify({ token })).statusCode, 200, 'guessing codes does not lock the owner out of the link');
  });

  test('an expired link or code is refused with a clear message', async () => {
    const user = await signUp(rt);
    const { token, code } = await emailed(user.email);
    await rt.db.kysely.updateTable('one_time_tokens').set({ expires_at: new Date(Date.now() - 1000) }).where('user_id', '=', user.id).execute();
    for (const payload of [{ token }, { email: user.email, code }] as Array<Record<string, string>>) {
      const res = await verify(payload);
      assert.equal(res.statusCode, 401);
      assert.match(res.json().message, /expired/);
    }
  });

  test('a new request replaces the previous link and code', async () => {
    const user = await signUp(rt);
    const first = await emailed(user.email);
    const second = await emailed(user.email);
    const old = await verify({ token: first.token });
    assert.equal(old.statusCode, 401);
    assert.match(old.json().message, /replaced by a newer one/);
    assert.equal((await verify({ email: user.email, code: second.code })).statusCode, 200);
  });

  test('an unknown email gets the same answer, and nothing is created or sent', async () => {
    const email = uniqueEmail('nobody');
    const res = await requestLink(email);
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { success: true });
    assert.equal(await latestEmail(rt, email, 'magic_link'), undefined);
    const rows = await rt.db.kysely.selectFrom('one_time_tokens').select('id').where('email', '=', email).execute();
    assert.equal(rows.length, 0);
    assert.equal(await store.findUserByEmail(rt.db.kysely, email), undefined);
    const guess = await verify({ email, code: '123456' });
    assert.equal(guess.statusCode, 401);
  });

  test('sends are throttled per address, known or not (429 with Retry-After)', async () => {
    for (const email of [(await signUp(rt)).email, uniqueEmail('ghost')]) {
      for (let i = 0; i < 5; i++) assert.equal((await requestLink(email)).statusCode, 200);
      const res = await requestLink(email);
      assert.equal(res.statusCode, 429);
      assert.equal(res.json().error, 'rate_limited');
      assert.ok(Number(res.headers['retry-after']) > 0);
    }
  });

  test('bad input is a 400 naming the problem', async () => {
    const neither = await verify({});
    assert.equal(neither.statusCode, 400);
    assert.equal(neither.json().error, 'validation_failed');
    const both = await verify({ token: 'x'.repeat(20), email: 'a@example.test', code: '123456' });
    assert.equal(both.statusCode, 400);
    const codeOnly = await verify({ code: '123456' });
    assert.equal(codeOnly.statusCode, 400);
    const shortCode = await verify({ email: 'a@example.test', code: '12345' });
    assert.equal(shortCode.statusCode, 400);
    assert.equal(shortCode.json().details[0].field, 'code');
    const badEmail = await requestLink('not-an-email');
    assert.equal(badEmail.statusCode, 400);
  });

  test('signing in by link confirms the email and drops a password nobody proved', async () => {
    const email = uniqueEmail('unconfirmed');
    const created = await store.insertUser(rt.db.kysely, { email, passwordHash: await hashPassword('set by someone else'), confirmed: false });
    assert.ok(created);
    const { token } = await emailed(email);
    const res = await verify({ token });
    assert.equal(res.statusCode, 200, res.body);
    const user = await store.findUserById(rt.db.kysely, created.id);
    assert.ok(user?.email_confirmed_at, 'email confirmed');
    assert.equal(user?.password_hash, null, 'the unproven password no longer signs in');
  });

  test('with MFA on, the link needs a current TOTP code as well', async () => {
    const user = await signUp(rt);
    const enroll = await app().inject({ method: 'POST', url: '/api/auth/mfa/enroll', headers: bearer(user.accessToken) });
    assert.equal(enroll.statusCode, 200, enroll.body);
    const totp = new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32(enroll.json().secret), digits: 6, period: 30, algorithm: 'SHA1' });
    const on = await app().inject({ method: 'POST', url: '/api/auth/mfa/verify', headers: bearer(user.accessToken), payload: { code: totp.generate() } });
    assert.equal(on.statusCode, 200, on.body);

    const { token, code } = await emailed(user.email);
    const missing = await verify({ token });
    assert.equal(missing.statusCode, 401);
    assert.equal(missing.json().error, 'mfa_required');
    assert.equal(missing.cookies.length, 0, 'no cookie without MFA');

    const current = totp.generate();
    const wrongMfa = await verify({ token, mfa_code: current === '000000' ? '000001' : '000000' });
    assert.equal(wrongMfa.statusCode, 401);
    assert.equal(wrongMfa.json().error, 'unauthorized');
    assert.match(wrongMfa.json().message, /two-factor/);

    const withCode = await verify({ email: user.email, code, mfa_code: totp.generate() });
    assert.equal(withCode.statusCode, 200, withCode.body);
    assert.equal(withCode.json().user.id, user.id);
  });
});
