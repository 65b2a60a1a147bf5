import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { sql } from 'kysely';
import { eventually, startTestRuntime, tempDir, testConfig, type TestRuntime } from '../../../test/helpers.ts';
import { addMember, bearer, call, createKey, createWorkspace, sessionCookie, signUp, type TestKey, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import type { HarkModule } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { sha256Hex } from '../../platform/crypto/tokens.ts';
import { startRuntime, type Runtime } from '../../runtime.ts';
import { MODULES } from '../index.ts';
import { accountsService } from '../accounts/service.ts';
import { generateKey, KNOWN_SCOPES, randomBase62, scopeProblems } from './service.ts';
import { apiKeyCache } from './key-cache.ts';

const KEY_FORMAT = /^svc_(live|test)_[A-Za-z0-9]{8}[A-Za-z0-9]{48}$/;
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * No domain route accepts API keys yet, so these stand in for them: one per
 * known scope, and one that resolves a workspace the way domain routes will.
 */
const PROBE_SCOPES: Record<string, string> = {
  'kb-read': 'kb:read',
  'kb-write': 'kb:write',
  'assistants-write': 'assistants:write',
  'calls-create': 'calls:create',
};
const probes: HarkModule = {
  name: 'api-key-probes',
  routes(app, ctx) {
    for (const [path, scope] of Object.entries(PROBE_SCOPES)) {
      app.get(`/test/probe/${path}`, { config: { auth: ['apiKey', 'session'], scope } }, async (request) => ({ actor: actorOf(request) }));
    }
    app.get<{ Querystring: { accountSlug?: string } }>('/test/probe/workspace', { config: { auth: ['apiKey'] } }, async (request) => {
      const { account } = await accountsService(ctx).access(actorOf(request), { accountSlug: request.query.accountSlug });
      return { account };
    });
  },
};

/** Uses `key` until the auth hook serves it from memory, so a refusal after a change proves the cache was invalidated. */
async function useFromCache(instance: Runtime, key: TestKey): Promise<void> {
  const use = () => instance.app!.inject({ method: 'GET', url: '/test/probe/kb-read', headers: bearer(key.fullKey) });
  await eventually('the API key cache to be live', async () => {
    const res = await use();
    assert.equal(res.statusCode, 200, res.body);
    return apiKeyCache(instance).active;
  });
  assert.equal((await use()).statusCode, 200);
}

describe(`api keys (${process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite'})`, () => {
  let rt: TestRuntime;
  let owner: TestUser;
  let admin: TestUser;
  let member: TestUser;
  let ws: TestWorkspace;

  before(async () => {
    rt = await startTestRuntime({}, { modules: [probes] });
    owner = await signUp(rt);
    ws = await createWorkspace(rt, owner, 'Keys Inc');
    admin = await addMember(rt, ws, owner, 'admin');
    member = await addMember(rt, ws, owner, 'member');
  });
  after(async () => {
    await rt?.destroy();
  });

  const inject = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, headers: Record<string, string> = {}, payload?: object) =>
    rt.app!.inject({ method, url, headers, ...(payload === undefined ? {} : { payload }) });
  const probe = (path: string, key: TestKey) => inject('GET', `/test/probe/${path}`, bearer(key.fullKey));
  const patch = (id: string, by: TestUser, body: object) => inject('PATCH', `/api/api-keys/${id}`, bearer(by.accessToken), body);
  const keyRow = (id: string) => rt.db.kysely.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

  function assertEnvelope(res: { statusCode: number; json(): Record<string, unknown> }, status: number, error: string) {
    assert.equal(res.statusCode, status, JSON.stringify(res.json()));
    const body = res.json();
    assert.equal(body.code, status);
    assert.equal(body.error, error);
    assert.equal(typeof body.message, 'string');
  }

  describe('who may manage keys', () => {
    test('owners and admins create, change and revoke; members only list', async () => {
      const byOwner = await createKey(rt, owner, ws, { name: 'owner key' });
      const byAdmin = await createKey(rt, admin, ws, { name: 'admin key' });
      assert.equal(byOwner.created_by, owner.id);
      assert.equal(byAdmin.created_by, admin.id);

      assertEnvelope(await inject('POST', '/api/api-keys', bearer(member.accessToken), { accountSlug: ws.slug, name: 'nope' }), 403, 'forbidden');
      assertEnvelope(await patch(byOwner.id, member, { name: 'renamed' }), 403, 'forbidden');
      assertEnvelope(await inject('DELETE', `/api/api-keys/${byOwner.id}`, bearer(member.accessToken)), 403, 'forbidden');
      assertEnvelope(await inject('GET', `/api/api-keys/audit?accountSlug=${ws.slug}`, bearer(member.accessToken)), 403, 'forbidden');

      const listed = await call(rt, { method: 'GET', url: `/api/api-keys?accountSlug=${ws.slug}`, headers: bearer(member.accessToken) });
      const ids = (listed.json().apiKeys as Array<{ id: string }>).map((k) => k.id);
      assert.ok(ids.includes(byOwner.id) && ids.includes(byAdmin.id));

      // Admins manage keys they did not create, and the other way round.
      assert.equal((await patch(byOwner.id, admin, { name: 'renamed by admin' })).statusCode, 200);
      assert.equal((await patch(byAdmin.id, owner, { description: 'noted by owner' })).statusCode, 200);
      assert.deepEqual((await inject('DELETE', `/api/api-keys/${byOwner.id}`, bearer(admin.accessToken))).json(), { success: true });
      assert.deepEqual((await inject('DELETE', `/api/api-keys/${byAdmin.id}`, bearer(owner.accessToken))).json(), { success: true });
    });

    test('the web session cookie works as well as the Bearer access token', async () => {
      const res = await rt.app!.inject({ method: 'GET', url: `/api/api-keys?accountSlug=${ws.slug}`, ...sessionCookie(owner.accessToken) });
      assert.equal(res.statusCode, 200, res.body);
      const created = await rt.app!.inject({ method: 'POST', url: '/api/api-keys', ...sessionCookie(admin.accessToken), payload: { accountSlug: ws.slug, name: 'via cookie' } });
      assert.equal(created.statusCode, 200, created.body);
    });

    test('an API key, or no credential at all, gets 401 on every key-management route', async () => {
      const key = await createKey(rt, owner, ws);
      const routes: Array<[method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, body?: object]> = [
        ['GET', `/api/api-keys?accountSlug=${ws.slug}`],
        ['POST', '/api/api-keys', { accountSlug: ws.slug, name: 'minted by a key' }],
        ['PATCH', `/api/api-keys/${key.id}`, { isActive: false }],
        ['DELETE', `/api/api-keys/${key.id}`],
        ['GET', `/api/api-keys/audit?accountSlug=${ws.slug}`],
      ];
      for (const [method, url, body] of routes) {
        const withKey = await inject(method, url, bearer(key.fullKey), body);
        assertEnvelope(withKey, 401, 'unauthorized');
        assert.match(withKey.json().message as string, /does not accept an API key/);
        assertEnvelope(await inject(method, url, {}, body), 401, 'unauthorized');
        assertEnvelope(await inject(method, url, bearer('not-a-jwt'), body), 401, 'unauthorized');
      }
      // None of it went through: the key is still active and usable.
      assert.equal((await keyRow(key.id)).is_active, true);
      assert.equal((await probe('kb-read', key)).statusCode, 200);
    });
  });

  describe('key format and storage', () => {
    test('the full key is shown once, in the §5 format, and only its SHA-256 is stored', async () => {
      const key = await createKey(rt, owner, ws, { name: 'format', description: 'checks the format' });
      assert.match(key.fullKey, KEY_FORMAT);
      assert.ok(key.fullKey.startsWith('svc_live_'));
      assert.equal(key.key_prefix, key.fullKey.slice(0, 17));
      assert.deepEqual(Object.keys(key).sort(), [
        'created_at', 'created_by', 'description', 'environment', 'expires_at', 'fullKey', 'id', 'is_active', 'key_prefix', 'last_used_at', 'name', 'permissions', 'revoked_at',
      ]);
      assert.deepEqual(key.permissions, { scopes: ['*'], rate_limit_per_hour: 1000 }, '§2.2 defaults');
      assert.equal(key.environment, 'live');
      assert.equal(key.expires_at, null);
      assert.equal(key.last_used_at, null);
      assert.equal(key.revoked_at, null);
      assert.equal(key.is_active, true);
      assert.equal(key.description, 'checks the format');
      assert.ok(Math.abs(Date.parse(key.created_at as string) - Date.now()) < 60_000);

      const row = await keyRow(key.id);
      assert.equal(row.key_hash, sha256Hex(key.fullKey));
      const secret = key.fullKey.slice(17);
      for (const [column, value] of Object.entries(row)) {
        const text = value instanceof Date ? value.toISOString() : JSON.stringify(value);
        assert.ok(!text.includes(secret), `column ${column} holds the secret part of the key`);
      }
      const events = await rt.db.kysely.selectFrom('api_key_events').selectAll().where('api_key_id', '=', key.id).execute();
      assert.equal(events.length, 1);
      assert.ok(!JSON.stringify(events).includes(secret) && !JSON.stringify(events).includes(row.key_hash), 'events never hold the key or its hash');

      const listed = await call(rt, { method: 'GET', url: `/api/api-keys?accountSlug=${ws.slug}`, headers: bearer(member.accessToken) });
      const patched = await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken), payload: { name: 'format 2' } });
      for (const res of [listed, patched]) {
        assert.ok(!res.body.includes(secret), 'the key is never shown again');
        assert.ok(!res.body.includes('fullKey') && !res.body.includes(row.key_hash));
      }
      const fromList = (listed.json().apiKeys as TestKey[]).find((k) => k.id === key.id)!;
      const { fullKey: _shownOnce, ...metadata } = key;
      assert.deepEqual(fromList, metadata);
      assert.deepEqual(patched.json().apiKey, { ...metadata, name: 'format 2' });
    });

    test('test keys, expiry in days, custom permissions', async () => {
      const key = await createKey(rt, admin, ws, { environment: 'test', expiresInDays: 30, permissions: { scopes: ['kb:*', 'calls:create', 'kb:*'], rate_limit_per_hour: 50 } });
      assert.match(key.fullKey, KEY_FORMAT);
      assert.ok(key.fullKey.startsWith('svc_test_') && key.key_prefix.startsWith('svc_test_'));
      assert.equal(key.environment, 'test');
      assert.deepEqual(key.permissions, { scopes: ['kb:*', 'calls:create'], rate_limit_per_hour: 50 }, 'repeated scopes are kept once');
      const inThirtyDays = Date.now() + 30 * 24 * 3600 * 1000;
      assert.ok(Math.abs(Date.parse(key.expires_at as string) - inThirtyDays) < 60_000);
      assert.equal((await probe('kb-write', key)).statusCode, 200, 'test keys authenticate like live ones');
    });

    test('keys are uniformly random base62 (no modulo bias), and never repeat', () => {
      const counts = new Map<string, number>();
      const keys = new Set<string>();
      for (let i = 0; i < 1000; i++) {
        const { fullKey, keyPrefix } = generateKey('live');
        assert.match(fullKey, KEY_FORMAT);
        assert.equal(keyPrefix, fullKey.slice(0, 17));
        keys.add(fullKey);
        for (const char of fullKey.slice(9)) counts.set(char, (counts.get(char) ?? 0) + 1);
      }
      assert.equal(keys.size, 1000);
      assert.equal(counts.size, 62, 'every base62 character occurs');
      // 56,000 characters: 903 expected per character, standard deviation about 30.
      // With modulo bias the first 8 characters would come up about 25% more often.
      for (const [char, n] of counts) assert.ok(n > 750 && n < 1060, `${char} occurred ${n} times`);
      assert.equal(randomBase62(0), '');
      assert.equal(randomBase62(500).length, 500);
    });
  });

  describe('input validation', () => {
    test('create: bad fields are 400 validation_failed naming each field', async () => {
      const post = (body: object) => inject('POST', '/api/api-keys', bearer(owner.accessToken), body);
      const cases: Array<[body: object, field: string]> = [
        [{ name: 'x' }, 'accountSlug'],
        [{ accountSlug: ws.slug }, 'name'],
        [{ accountSlug: ws.slug, name: '' }, 'name'],
        [{ accountSlug: ws.slug, name: 'x'.repeat(101) }, 'name'],
        [{ accountSlug: ws.slug, name: 'x', description: 'd'.repeat(501) }, 'description'],
        [{ accountSlug: ws.slug, name: 'x', environment: 'prod' }, 'environment'],
        [{ accountSlug: ws.slug, name: 'x', expiresInDays: 0 }, 'expiresInDays'],
        [{ accountSlug: ws.slug, name: 'x', expiresInDays: -3 }, 'expiresInDays'],
        [{ accountSlug: ws.slug, name: 'x', expiresInDays: 3651 }, 'expiresInDays'],
        [{ accountSlug: ws.slug, name: 'x', permissions: { rate_limit_per_hour: 0 } }, 'permissions.rate_limit_per_hour'],
        [{ accountSlug: ws.slug, name: 'x', permissions: { rate_limit_per_hour: 1_000_001 } }, 'permissions.rate_limit_per_hour'],
        [{ accountSlug: ws.slug, name: 'x', permissions: { rate_limit_per_hour: 2.5 } }, 'permissions.rate_limit_per_hour'],
        [{ accountSlug: ws.slug, name: 'x', permissions: { scopes: [] } }, 'permissions.scopes'],
        [{ accountSlug: ws.slug, name: 'x', permissions: { scopes: [42] } }, 'permissions.scopes[0]'],
      ];
      for (const [body, field] of cases) {
        const res = await post(body);
        assertEnvelope(res, 400, 'validation_failed');
        const fields = (res.json().details as Array<{ field: string }>).map((d) => d.field);
        assert.ok(fields.includes(field), `${JSON.stringify(body)}: details ${JSON.stringify(res.json().details)}`);
      }
      assert.equal((await post({ accountSlug: ws.slug, name: 'x'.repeat(100), description: 'd'.repeat(500), expiresInDays: 3650, permissions: { rate_limit_per_hour: 1_000_000 } })).statusCode, 200, 'the bounds themselves are allowed');
      assert.equal((await post({ accountSlug: ws.slug, name: 'half a day', expiresInDays: 0.5 })).statusCode, 200);
    });

    test('unknown scopes are refused with the index and the scope named', async () => {
      const res = await inject('POST', '/api/api-keys', bearer(owner.accessToken), {
        accountSlug: ws.slug,
        name: 'scopes',
        permissions: { scopes: ['kb:read', 'kb:delete', 'kb:*', 'foo:*', '*', 'assistants:*', 'calls'] },
      });
      assertEnvelope(res, 400, 'validation_failed');
      const details = res.json().details as Array<{ field: string; message: string }>;
      assert.deepEqual(details.map((d) => d.field), ['permissions.scopes[1]', 'permissions.scopes[3]', 'permissions.scopes[6]']);
      assert.match(details[0]!.message, /kb:delete/);
      assert.match(details[1]!.message, /foo:\*/);
      assert.equal(scopeProblems(['*']).length, 0);
      assert.equal(scopeProblems([...KNOWN_SCOPES, 'kb:*', 'assistants:*', 'a*', 'calls:*']).length, 0);
    });

    test('create in a workspace that does not exist or is not yours: 404', async () => {
      assertEnvelope(await inject('POST', '/api/api-keys', bearer(owner.accessToken), { accountSlug: 'no-such-workspace', name: 'x' }), 404, 'not_found');
      assertEnvelope(await inject('GET', '/api/api-keys?accountSlug=no-such-workspace', bearer(owner.accessToken)), 404, 'not_found');
      assertEnvelope(await inject('GET', '/api/api-keys', bearer(owner.accessToken)), 400, 'validation_failed');
    });

    test('patch: empty or invalid bodies are 400; unknown ids 404', async () => {
      const key = await createKey(rt, owner, ws);
      const cases: Array<[body: object, field: string]> = [
        [{}, 'body'],
        [{ unknownField: true }, 'body'],
        [{ permissions: {} }, 'permissions'],
        [{ name: '' }, 'name'],
        [{ isActive: 'maybe' }, 'isActive'],
        [{ expiresAt: 'tomorrow' }, 'expiresAt'],
        [{ expiresAt: '' }, 'expiresAt'],
        [{ expiresAt: new Date(Date.now() - 1000).toISOString() }, 'expiresAt'],
        [{ permissions: { scopes: ['kb:read', 'billing:*'] } }, 'permissions.scopes[1]'],
        [{ permissions: { scopes: [] } }, 'permissions.scopes'],
        [{ permissions: { rate_limit_per_hour: 0 } }, 'permissions.rate_limit_per_hour'],
      ];
      for (const [body, field] of cases) {
        const res = await patch(key.id, owner, body);
        assertEnvelope(res, 400, 'validation_failed');
        const fields = (res.json().details as Array<{ field: string }>).map((d) => d.field);
        assert.ok(fields.includes(field), `${JSON.stringify(body)}: details ${JSON.stringify(res.json().details)}`);
      }
      assert.deepEqual(await keyRow(key.id).then((r) => [r.name, r.is_active, r.expires_at, r.scopes]), ['test key', true, null, ['*']], 'nothing changed');
      assertEnvelope(await patch(crypto.randomUUID(), owner, { name: 'x' }), 404, 'not_found');
      assertEnvelope(await patch('not-a-uuid', owner, { name: 'x' }), 404, 'not_found');
      assertEnvelope(await inject('DELETE', `/api/api-keys/${crypto.randomUUID()}`, bearer(owner.accessToken)), 404, 'not_found');
      assertEnvelope(await inject('DELETE', '/api/api-keys/not-a-uuid', bearer(owner.accessToken)), 404, 'not_found');
    });

    test('patch changes each field and never rotates the key', async () => {
      const key = await createKey(rt, owner, ws, { description: 'before' });
      const expiresAt = new Date(Date.now() + 7 * 24 * 3600 * 1000).toISOString();
      const res = await call(rt, {
        method: 'PATCH',
        url: `/api/api-keys/${key.id}`,
        headers: bearer(admin.accessToken),
        payload: { name: 'after', description: null, expiresAt, permissions: { scopes: ['kb:read'] } },
      });
      const apiKey = res.json().apiKey;
      assert.equal(apiKey.name, 'after');
      assert.equal(apiKey.description, null);
      assert.equal(apiKey.expires_at, expiresAt);
      assert.deepEqual(apiKey.permissions, { scopes: ['kb:read'], rate_limit_per_hour: 1000 }, 'the rate limit is kept when only scopes change');
      assert.equal(apiKey.key_prefix, key.key_prefix);
      const limited = await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(admin.accessToken), payload: { permissions: { rate_limit_per_hour: 10 }, expiresAt: null } });
      assert.deepEqual(limited.json().apiKey.permissions, { scopes: ['kb:read'], rate_limit_per_hour: 10 });
      assert.equal(limited.json().apiKey.expires_at, null);
      assert.equal((await keyRow(key.id)).key_hash, sha256Hex(key.fullKey));
      assert.equal((await probe('kb-read', key)).statusCode, 200, 'the same key still works');
      assert.equal((await probe('kb-write', key)).statusCode, 403, 'with its new scopes');
    });
  });

  describe('using a key', () => {
    test('a key authenticates as its workspace with its scopes', async () => {
      const key = await createKey(rt, owner, ws, { permissions: { scopes: ['kb:read'] } });
      const res = await probe('kb-read', key);
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json().actor, { kind: 'apiKey', credential: 'apiKey', apiKeyId: key.id, accountId: ws.id, scopes: ['kb:read'] });
      const reached = await inject('GET', `/test/probe/workspace?accountSlug=${ws.slug}`, bearer(key.fullKey));
      assert.equal(reached.json().account.id, ws.id);
      assertEnvelope(await inject('GET', '/test/probe/kb-read', bearer(`${key.fullKey.slice(0, -1)}${key.fullKey.endsWith('A') ? 'B' : 'A'}`)), 401, 'unauthorized');
      assertEnvelope(await inject('GET', '/test/probe/kb-read', bearer('svc_live_tooshort')), 401, 'unauthorized');
    });

    test('scope matrix, wildcards included', async () => {
      const expectations: Array<[scopes: string[], allowed: string[]]> = [
        [['*'], ['kb-read', 'kb-write', 'assistants-write', 'calls-create']],
        [['kb:*'], ['kb-read', 'kb-write']],
        [['kb:read'], ['kb-read']],
        [['assistants:*'], ['assistants-write']],
        [['kb:read', 'calls:create'], ['kb-read', 'calls-create']],
      ];
      for (const [scopes, allowed] of expectations) {
        const key = await createKey(rt, admin, ws, { name: scopes.join(','), permissions: { scopes } });
        for (const path of Object.keys(PROBE_SCOPES)) {
          const res = await probe(path, key);
          if (allowed.includes(path)) {
            assert.equal(res.statusCode, 200, `${scopes} on ${path}: ${res.body}`);
          } else {
            assertEnvelope(res, 403, 'forbidden');
            assert.match(res.json().message as string, new RegExp(PROBE_SCOPES[path]!));
          }
        }
      }
    });

    test('disabled keys stop at once and work again when re-enabled', async () => {
      const key = await createKey(rt, owner, ws);
      await useFromCache(rt, key);
      assert.equal((await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(admin.accessToken), payload: { isActive: false } })).json().apiKey.is_active, false);
      const refused = await probe('kb-read', key);
      assertEnvelope(refused, 401, 'unauthorized');
      assert.match(refused.json().message as string, /disabled/);
      assert.equal((await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken), payload: { isActive: true } })).json().apiKey.is_active, true);
      assert.equal((await probe('kb-read', key)).statusCode, 200);
    });

    test('revoked keys stop at once and for good; the row stays', async () => {
      const key = await createKey(rt, owner, ws);
      await useFromCache(rt, key);
      await call(rt, { method: 'DELETE', url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken) });
      assertEnvelope(await probe('kb-read', key), 401, 'unauthorized');

      assertEnvelope(await inject('DELETE', `/api/api-keys/${key.id}`, bearer(owner.accessToken)), 404, 'not_found');
      assertEnvelope(await patch(key.id, owner, { isActive: true }), 404, 'not_found');
      assertEnvelope(await probe('kb-read', key), 401, 'unauthorized');

      const visible = await call(rt, { method: 'GET', url: `/api/api-keys?accountSlug=${ws.slug}`, headers: bearer(member.accessToken) });
      assert.ok(!(visible.json().apiKeys as TestKey[]).some((k) => k.id === key.id), 'revoked keys are hidden by default');
      const all = await call(rt, { method: 'GET', url: `/api/api-keys?accountSlug=${ws.slug}&includeRevoked=true`, headers: bearer(member.accessToken) });
      const revoked = (all.json().apiKeys as TestKey[]).find((k) => k.id === key.id);
      assert.ok(revoked, 'includeRevoked=true shows it');
      assert.equal(revoked.is_active, false);
      assert.ok(Math.abs(Date.parse(revoked.revoked_at as string) - Date.now()) < 60_000);
      const row = await keyRow(key.id);
      assert.ok(row.revoked_at && !row.is_active);
    });

    test('expired keys stop at their expiry; removing the expiry revives them', async () => {
      const key = await createKey(rt, owner, ws);
      const soon = new Date(Date.now() + 2000).toISOString();
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken), payload: { expiresAt: soon } });
      // Served from the cache from here on: expiry is checked against the clock on every request.
      await useFromCache(rt, key);
      const expired = await eventually('the key to expire', async () => {
        const res = await probe('kb-read', key);
        return res.statusCode === 401 ? res : undefined;
      });
      assert.ok(Date.now() >= Date.parse(soon));
      assert.match(expired.json().message as string, /expired/);
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken), payload: { expiresAt: null } });
      assert.equal((await probe('kb-read', key)).statusCode, 200);
    });

    test('the hourly limit: X-RateLimit-* on each answer, then 429 with Retry-After', async () => {
      const key = await createKey(rt, owner, ws, { permissions: { rate_limit_per_hour: 3 } });
      const now = Math.floor(Date.now() / 1000);
      for (const remaining of [2, 1, 0]) {
        const res = await probe('kb-read', key);
        assert.equal(res.statusCode, 200);
        assert.equal(res.headers['x-ratelimit-limit'], '3');
        assert.equal(res.headers['x-ratelimit-remaining'], String(remaining));
        const reset = Number(res.headers['x-ratelimit-reset']);
        assert.ok(reset > now && reset <= now + 3601, `reset ${reset} is within the hour`);
      }
      const limited = await probe('kb-read', key);
      assertEnvelope(limited, 429, 'rate_limited');
      assert.ok(Number(limited.headers['retry-after']) > 0);
      assert.equal(limited.headers['x-ratelimit-remaining'], '0');
      // Other keys of the workspace have their own counters.
      assert.equal((await probe('kb-read', await createKey(rt, owner, ws))).statusCode, 200);
    });

    test('last_used_at is recorded, at most once a minute per key', async () => {
      const key = await createKey(rt, owner, ws);
      assert.equal((await probe('kb-read', key)).statusCode, 200);
      const first = await eventually('last_used_at', async () => (await keyRow(key.id)).last_used_at);
      assert.ok(Math.abs(first.getTime() - Date.now()) < 60_000);
      assert.equal((await probe('kb-read', key)).statusCode, 200);
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal((await keyRow(key.id)).last_used_at?.getTime(), first.getTime(), 'the second use did not write');
      const listed = await call(rt, { method: 'GET', url: `/api/api-keys?accountSlug=${ws.slug}`, headers: bearer(member.accessToken) });
      assert.equal((listed.json().apiKeys as TestKey[]).find((k) => k.id === key.id)?.last_used_at, first.toISOString());
    });
  });

  describe('workspaces are isolated', () => {
    test("another workspace's owner cannot see, change or revoke a key, nor learn it exists", async () => {
      const key = await createKey(rt, owner, ws, { name: 'secret-project-key' });
      const stranger = await signUp(rt);
      const theirs = await createWorkspace(rt, stranger, 'Other Co');
      const strangerKey = await createKey(rt, stranger, theirs);

      const answers = [
        await patch(key.id, stranger, { name: 'mine now' }),
        await patch(key.id, stranger, { isActive: false }),
        await inject('DELETE', `/api/api-keys/${key.id}`, bearer(stranger.accessToken)),
        await inject('GET', `/api/api-keys?accountSlug=${ws.slug}`, bearer(stranger.accessToken)),
        await inject('GET', `/api/api-keys/audit?accountSlug=${ws.slug}`, bearer(stranger.accessToken)),
        await inject('POST', '/api/api-keys', bearer(stranger.accessToken), { accountSlug: ws.slug, name: 'planted' }),
      ];
      for (const res of answers) {
        assertEnvelope(res, 404, 'not_found');
        assert.ok(!res.body.includes('secret-project-key') && !res.body.includes(key.key_prefix) && !res.body.includes(ws.id), res.body);
      }
      // The same answer as for a key that does not exist.
      assert.equal(answers[0]!.json().message, (await patch(crypto.randomUUID(), stranger, { name: 'x' })).json().message);
      const row = await keyRow(key.id);
      assert.equal(row.name, 'secret-project-key');
      assert.ok(row.is_active && !row.revoked_at);

      // Their own list shows only their key.
      const list = await call(rt, { method: 'GET', url: `/api/api-keys?accountSlug=${theirs.slug}`, headers: bearer(stranger.accessToken) });
      assert.deepEqual((list.json().apiKeys as TestKey[]).map((k) => k.id), [strangerKey.id]);

      // A's key cannot reach B's workspace, and B's key cannot reach A's.
      assertEnvelope(await inject('GET', `/test/probe/workspace?accountSlug=${theirs.slug}`, bearer(key.fullKey)), 404, 'not_found');
      assertEnvelope(await inject('GET', `/test/probe/workspace?accountSlug=${ws.slug}`, bearer(strangerKey.fullKey)), 404, 'not_found');
      assert.equal((await inject('GET', '/test/probe/workspace', bearer(strangerKey.fullKey))).json().account.id, theirs.id);
    });
  });

  describe('audit log', () => {
    test('create, change, disable, enable and revoke are recorded in order, with who did it', async () => {
      const auditOwner = await signUp(rt);
      const space = await createWorkspace(rt, auditOwner, 'Audit Ltd');
      const auditAdmin = await addMember(rt, space, auditOwner, 'admin');
      const key = await createKey(rt, auditOwner, space, { name: 'audited', permissions: { scopes: ['kb:read'] } });
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(auditAdmin.accessToken), payload: { name: 'audited 2', permissions: { scopes: ['kb:*'] } } });
      // Changing nothing writes nothing.
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(auditAdmin.accessToken), payload: { name: 'audited 2' } });
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(auditOwner.accessToken), payload: { isActive: false } });
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(auditAdmin.accessToken), payload: { isActive: true } });
      await call(rt, { method: 'DELETE', url: `/api/api-keys/${key.id}`, headers: bearer(auditOwner.accessToken) });

      const res = await call(rt, { method: 'GET', url: `/api/api-keys/audit?accountSlug=${space.slug}`, headers: bearer(auditAdmin.accessToken) });
      const { events, next_before } = res.json() as { events: Array<Record<string, unknown>>; next_before: string | null };
      assert.equal(next_before, null);
      assert.deepEqual(
        events.map((e) => [e.event, e.actor_user_id]),
        [
          ['revoked', auditOwner.id],
          ['enabled', auditAdmin.id],
          ['disabled', auditOwner.id],
          ['updated', auditAdmin.id],
          ['created', auditOwner.id],
        ],
      );
      for (const event of events) {
        assert.equal(event.api_key_id, key.id);
        assert.equal(event.key_prefix, key.key_prefix);
        assert.match(event.id as string, /^[0-9a-f-]{36}$/);
        assert.ok(Math.abs(Date.parse(event.created_at as string) - Date.now()) < 60_000);
      }
      assert.deepEqual(events[3]!.changes, { name: { from: 'audited', to: 'audited 2' }, scopes: { from: ['kb:read'], to: ['kb:*'] } });
      assert.deepEqual(events[2]!.changes, { is_active: { from: true, to: false } });
      assert.deepEqual(events[1]!.changes, { is_active: { from: false, to: true } });
      assert.deepEqual(events[4]!.changes, { name: 'audited', description: null, environment: 'live', scopes: ['kb:read'], rate_limit_per_hour: 1000, expires_at: null });
      assert.ok(!res.body.includes(key.fullKey.slice(17)), 'never the key');

      // Pages of two, following next_before, give the same events.
      const pages: string[] = [];
      let cursor: string | null = null;
      do {
        const page = await call(rt, {
          method: 'GET',
          url: `/api/api-keys/audit?accountSlug=${space.slug}&limit=2${cursor ? `&before=${cursor}` : ''}`,
          headers: bearer(auditOwner.accessToken),
        });
        const body = page.json() as { events: Array<{ id: string }>; next_before: string | null };
        assert.ok(body.events.length <= 2);
        pages.push(...body.events.map((e) => e.id));
        cursor = body.next_before;
      } while (cursor);
      assert.deepEqual(pages, events.map((e) => e.id));

      // Events of this workspace only; a foreign cursor is refused.
      const mine = await call(rt, { method: 'GET', url: `/api/api-keys/audit?accountSlug=${ws.slug}&limit=200`, headers: bearer(owner.accessToken) });
      assert.ok(!(mine.json().events as Array<{ api_key_id: string }>).some((e) => e.api_key_id === key.id));
      assertEnvelope(await inject('GET', `/api/api-keys/audit?accountSlug=${ws.slug}&before=${events[0]!.id}`, bearer(owner.accessToken)), 400, 'validation_failed');
      assertEnvelope(await inject('GET', `/api/api-keys/audit?accountSlug=${ws.slug}&before=nonsense`, bearer(owner.accessToken)), 400, 'validation_failed');
      for (const limit of ['0', '201', 'many']) {
        assertEnvelope(await inject('GET', `/api/api-keys/audit?accountSlug=${ws.slug}&limit=${limit}`, bearer(owner.accessToken)), 400, 'validation_failed');
      }
    });
  });

  test('the OpenAPI document describes the routes and their credentials', async () => {
    const doc = (await call(rt, { method: 'GET', url: '/api/openapi.json' })).json() as {
      paths: Record<string, Record<string, { tags: string[]; security: Array<Record<string, unknown>>; responses: Record<string, unknown> }>>;
    };
    const operations = [
      doc.paths['/api/api-keys']?.get,
      doc.paths['/api/api-keys']?.post,
      doc.paths['/api/api-keys/{id}']?.patch,
      doc.paths['/api/api-keys/{id}']?.delete,
      doc.paths['/api/api-keys/audit']?.get,
    ];
    for (const operation of operations) {
      assert.ok(operation);
      assert.deepEqual(operation.tags, ['api-keys']);
      assert.deepEqual(operation.security, [{ jwt: [] }, { session: [] }]);
      assert.ok(operation.responses['200'] && operation.responses['401']);
    }
  });
});

// PGlite is one process per database: there is no other instance to tell, and
// no LISTEN connection to lose, so these two run on PostgreSQL only.
const onPostgres = Boolean(process.env.DATABASE_URL);

if (onPostgres) describe('changes reach every API process', () => {
  test('a key disabled or revoked through one instance stops working on another that had it cached', async () => {
    const a = await startTestRuntime({}, { modules: [probes] });
    let b: Runtime | undefined;
    try {
      const owner = await signUp(a);
      const ws = await createWorkspace(a, owner);
      const key = await createKey(a, owner, ws);
      b = await secondInstance(a, {}, key.id);
      const onB = () => b!.app!.inject({ method: 'GET', url: '/test/probe/kb-read', headers: bearer(key.fullKey) });
      const change = (method: 'PATCH' | 'DELETE', payload?: object) =>
        call(a, { method, url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken), ...(payload ? { payload } : {}) });

      await useFromCache(b, key);
      await change('PATCH', { isActive: false });
      // NOTIFY is delivered at commit; allow for its trip to the other process, nothing like the cache's TTL.
      await eventually('B to refuse the disabled key', async () => (await onB()).statusCode === 401, 2000);
      await change('PATCH', { isActive: true });
      await eventually('B to accept the re-enabled key', async () => (await onB()).statusCode === 200, 2000);
      await useFromCache(b, key);
      await change('DELETE');
      await eventually('B to refuse the revoked key', async () => (await onB()).statusCode === 401, 2000);
    } finally {
      await b?.close();
      await a.destroy();
    }
  });
});

if (onPostgres) describe('when the change notifications stop', () => {
  test('the cache is emptied and bypassed until it listens again, so no change can be missed', async () => {
    const rt = await startTestRuntime({}, { modules: [probes] });
    try {
      const owner = await signUp(rt);
      const key = await createKey(rt, owner, await createWorkspace(rt, owner));
      const use = async () => (await rt.app!.inject({ method: 'GET', url: '/test/probe/kb-read', headers: bearer(key.fullKey) })).statusCode;
      await useFromCache(rt, key);

      const cache = apiKeyCache(rt);
      await sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'hark-api-key-cache' and datname = current_database()`.execute(rt.db.kysely);
      await eventually('the cache to notice', async () => !cache.active);
      // A change no process hears about (made by hand, without NOTIFY) is seen at once.
      await rt.db.kysely.updateTable('api_keys').set({ is_active: false }).where('id', '=', key.id).execute();
      assert.equal(await use(), 401);

      // It reconnects by itself and serves keys from memory again.
      await eventually('the cache to listen again', async () => (await use(), cache.active));
      await call(rt, { method: 'PATCH', url: `/api/api-keys/${key.id}`, headers: bearer(owner.accessToken), payload: { isActive: true } });
      await useFromCache(rt, key);
    } finally {
      await rt.destroy();
    }
  });
});

describe('the hourly limit is shared by every API process on one Redis', () => {
  // Redis is a real component of the platform: CI starts it, and this test needs it.
  test('requests alternating between two instances share one counter', async () => {

    const env = { REDIS_URL };
    const a = await startTestRuntime(env, { modules: [probes] });
    let b: Runtime | undefined;
    try {
      const owner = await signUp(a);
      const ws = await createWorkspace(a, owner);
      const key = await createKey(a, owner, ws, { permissions: { rate_limit_per_hour: 3 } });
      b = await secondInstance(a, env, key.id);

      const statuses: number[] = [];
      for (const [i, instance] of [a, b, a, b].entries()) {
        const res = await instance.app!.inject({ method: 'GET', url: '/test/probe/kb-read', headers: bearer(key.fullKey) });
        statuses.push(res.statusCode);
        if (i < 3) assert.equal(res.headers['x-ratelimit-remaining'], String(2 - i), 'one counter for both instances');
        else assert.ok(Number(res.headers['retry-after']) > 0);
      }
      assert.deepEqual(statuses, [200, 200, 200, 429]);
      // Leave nothing behind in a Redis other suites share (never a flush).
      await a.rateLimits.reset('api-key', key.id, 3, 3600);
    } finally {
      await b?.close();
      await a.destroy();
    }
  });
});

/**
 * A second API process sharing A's database and Redis. On PostgreSQL it is a
 * real second runtime on the same scratch database, as in production. An
 * in-memory PGlite belongs to one runtime, so there the second runtime gets
 * its own database holding a copy of the key row (same id and hash): the
 * counter under test lives in Redis, keyed by key id, either way.
 */
async function secondInstance(a: TestRuntime, env: Record<string, string>, keyId: string): Promise<Runtime> {
  const modules = [...MODULES, probes];
  if (a.db.kind === 'postgres') {
    const data = tempDir();
    const b = await startRuntime(testConfig(env, data.dir), { database: { kind: 'postgres', url: a.db.connectionString! }, logger: pino({ level: 'silent' }), modules });
    return {
      ...b,
      close: async () => {
        await b.close();
        data.remove();
      },
    };
  }
  const b = await startTestRuntime(env, { modules: [probes] });
  const row = await a.db.kysely.selectFrom('api_keys').selectAll().where('id', '=', keyId).executeTakeFirstOrThrow();
  const account = await a.db.kysely.selectFrom('accounts').select(['id', 'slug', 'name']).where('id', '=', row.account_id).executeTakeFirstOrThrow();
  await b.db.kysely.insertInto('accounts').values({ ...account, created_by: null }).execute();
  await b.db.kysely
    .insertInto('api_keys')
    .values({ ...row, scopes: JSON.stringify(row.scopes), created_by: null })
    .execute();
  return { ...b, close: () => b.destroy() };
}

