/**
 * Auth matrix: every route refuses what it must. No credential is 401; a
 * credential kind the route does not declare is 401 or 403 even when it is
 * valid; garbage, expired, signed-out, disabled, expired and revoked
 * credentials are 401 (or 403); a key without the route's scope is 403.
 * Declarations are checked against §5 rule 9 and the scopes of §4.5, and
 * the OpenAPI document against Fastify's route table.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { eventually } from '../helpers.ts';
import { signIn } from '../fixtures.ts';
import { CREDENTIAL_KINDS, readOperations, undocumentedRoutes, type Operation } from './operations.ts';
import { createApiKey } from './resources.ts';
import { toWire, validParts } from './requests.ts';
import { errorBodyProblem } from './envelope.ts';
import { credentialHeaders, expiredAccessToken, jsonRequest, startGateWorld, type GateWorld } from './world.ts';
import { SESSION_COOKIE, scopeAllows } from '../../src/platform/http/auth.ts';
import { KNOWN_SCOPES } from '../../src/modules/api-keys/service.ts';
import type { CredentialKind } from '../../src/platform/http/route-config.ts';

/**
 * What the spec says about credentials and scopes, by route (§4.2–§4.6,
 * §5 rule 9). A route matching a rule must not declare `refuse` kinds, must
 * declare `accept` kinds, and must need `scope`.
 */
const SPEC_RULES: Array<{ routes: RegExp; refuse?: CredentialKind[]; accept?: CredentialKind[]; scope?: string; why: string }> = [
  { routes: /^\w+ \/api\/onboarding\//, refuse: ['apiKey'], why: '§4.8, §5 rule 9: onboarding is for sessions only' },
  { routes: /^\w+ \/api\/crm\/opportunities/, refuse: ['apiKey'], why: '§5 rule 9: opportunities are for sessions only' },
  { routes: /^\w+ \/api\/flows?\/(?!.*\/trigger$)(?!integrations\/webhooks\/)/, refuse: ['apiKey'], why: '§5 rule 9: flow management is for sessions only' },
  { routes: /^\w+ \/api\/files\b/, refuse: ['apiKey'], why: '§4.6, §5 rule 9: workspace files are for sessions only' },
  { routes: /^\w+ \/api\/phone-numbers\/(?!.*webhook)/, refuse: ['apiKey'], why: '§5 rule 9: phone numbers (except webhooks) are for sessions only' },
  { routes: /^\w+ \/api\/api-keys\b/, refuse: ['apiKey'], why: '§4.2: API-key management needs a JWT of an owner or admin' },
  { routes: /^\w+ \/api\/(llm\/chat|prompt-presets)\b/, refuse: ['apiKey', 'session'], why: '§4.4: chat completion and presets require a desktop JWT' },
  { routes: /^POST \/api\/assistants\/\{assistantId\}\/webhooks\/test$/, refuse: ['apiKey'], why: '§4.3: the test delivery is for sessions' },
  { routes: /^\w+ \/api\/(credits|crm\/contacts)\b/, accept: ['apiKey', 'session'], why: '§5 rule 9: contacts and credits accept API keys or sessions' },
  { routes: /^PATCH \/api\/assistants\/\{assistantId\}$/, accept: ['apiKey', 'session'], why: '§4.3: assistants PATCH accepts API keys or sessions' },
  { routes: /^POST \/api\/(improve-prompt|translate-prompt|generate-opportunity-prompt|generate-success-prompt)$/, accept: ['apiKey', 'session', 'jwt'], why: '§4.4: prompt utilities accept an API key, a Bearer session token or the cookie' },
  { routes: /^GET \/api\/(kb\/|assistants\/\{assistantId\}\/knowledge-base$)/, accept: ['apiKey', 'session'], scope: 'kb:read', why: '§4.5: knowledge-base reads need kb:read' },
  { routes: /^POST \/api\/kb\/search$/, accept: ['apiKey', 'session'], scope: 'kb:read', why: '§4.5: search needs kb:read' },
  { routes: /^(POST|DELETE) \/api\/(kb\/files|assistants\/\{assistantId\}\/knowledge-base)/, accept: ['apiKey', 'session'], scope: 'kb:write', why: '§4.5: knowledge-base changes need kb:write' },
];

interface Attempt {
  label: string;
  headers: Record<string, string>;
}

describe('auth matrix', () => {
  let world: GateWorld;
  let operations: Operation[];
  /** Credentials of workspace A that must never work. */
  const dead: { jwt: Attempt[]; apiKey: Attempt[] } = { jwt: [], apiKey: [] };
  const narrowKeys = new Map<string, string>();

  before(async () => {
    world = await startGateWorld();
    operations = await readOperations(world.rt.app!);
    const { a } = world;

    const signedOut = await signIn(world.rt, a.user);
    const out = await world.send(jsonRequest('POST', '/api/auth/sign-out', {}, { refresh_token: signedOut.refreshToken }));
    assert.equal(out.status, 200, out.body);
    const expired = await expiredAccessToken(world, a.user);
    const [header, payload] = a.user.accessToken.split('.');
    const forged = `${header}.${payload}.${crypto.randomBytes(32).toString('base64url')}`;
    for (const [label, token] of [
      ['signed-out session token', signedOut.accessToken],
      ['expired access token', expired],
      ['access token with a forged signature', forged],
      ['garbage token', 'not-a-token'],
    ] as const) {
      dead.jwt.push({ label: `${label} (Bearer)`, headers: { authorization: `Bearer ${token}` } }, { label: `${label} (cookie)`, headers: { cookie: `${SESSION_COOKIE}=${token}` } });
    }

    const revoked = await createApiKey(world, a);
    assert.equal((await world.send(jsonRequest('DELETE', `/api/api-keys/${revoked.id}`, credentialHeaders('jwt', a)))).status, 200);
    const disabled = await createApiKey(world, a);
    assert.equal((await world.send(jsonRequest('PATCH', `/api/api-keys/${disabled.id}`, credentialHeaders('jwt', a), { isActive: false }))).status, 200);
    // 0.00002 days is under two seconds: the shortest expiry the API takes, waited out below.
    const expiring = await createApiKey(world, a, { expiresInDays: 0.00002 });
    await eventually('the short-lived key to expire', async () => {
      const res = await world.send(jsonRequest('GET', '/api/credits', { authorization: `Bearer ${expiring.fullKey}` }));
      return res.status === 401 || res.status === 403;
    });
    const garbageKey = `svc_live_${crypto.randomBytes(42).toString('base64url').slice(0, 56)}`;
    for (const [label, key] of [
      ['revoked API key', revoked.fullKey],
      ['disabled API key', disabled.fullKey],
      ['expired API key', expiring.fullKey],
      ['unknown API key', garbageKey],
      ['truncated API key', a.key.fullKey.slice(0, -1)],
    ] as const) {
      dead.apiKey.push({ label, headers: { authorization: `Bearer ${key}` } });
    }
  });
  after(async () => {
    await world?.close();
  });

  /** A key of workspace A whose one scope does not cover `scope`. */
  async function keyLacking(scope: string): Promise<string> {
    const other = KNOWN_SCOPES.find((known) => !scopeAllows([known], scope));
    assert.ok(other, `no known scope leaves out ${scope}`);
    if (!narrowKeys.has(other)) narrowKeys.set(other, (await createApiKey(world, world.a, { permissions: { scopes: [other] } })).fullKey);
    return narrowKeys.get(other)!;
  }

  test('every route Fastify serves is in the OpenAPI document', () => {
    assert.deepEqual(undocumentedRoutes(world.rt.app!, operations), [], 'these routes are served but not documented (schema.hide?)');
  });

  test('declarations follow the spec (§4.2–§4.6, §5 rule 9)', () => {
    const problems: string[] = [];
    for (const op of operations) {
      const declared = op.auth === 'none' ? [] : op.auth;
      for (const rule of SPEC_RULES.filter((r) => r.routes.test(op.key))) {
        for (const kind of rule.refuse ?? []) if (declared.includes(kind)) problems.push(`${op.key} accepts ${kind}: ${rule.why}`);
        for (const kind of rule.accept ?? []) if (!declared.includes(kind)) problems.push(`${op.key} does not accept ${kind}: ${rule.why}`);
        if (rule.scope && op.scope !== rule.scope) problems.push(`${op.key} needs scope ${op.scope ?? '(none)'}, not ${rule.scope}: ${rule.why}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('every route refuses missing, wrong-kind, invalid and under-scoped credentials', async (t) => {
    const guarded = operations.filter((op) => op.auth !== 'none');
    let requests = 0;
    for (const op of guarded) {
      await t.test(op.key, async () => {
        const accepted = op.auth as CredentialKind[];
        const attempts: Array<Attempt & { expect: number[] }> = [{ label: 'no credentials', headers: {}, expect: [401] }];
        for (const kind of CREDENTIAL_KINDS.filter((k) => !accepted.includes(k))) {
          attempts.push({ label: `valid ${kind} (not declared)`, headers: credentialHeaders(kind, world.a), expect: [401, 403] });
        }
        if (accepted.includes('jwt') || accepted.includes('session')) {
          const usable = dead.jwt.filter((d) => (d.headers.cookie ? accepted.includes('session') : accepted.includes('jwt')));
          attempts.push(...usable.map((d) => ({ ...d, expect: [401] })));
        }
        if (accepted.includes('apiKey')) {
          attempts.push(...dead.apiKey.map((d) => ({ ...d, expect: [401, 403] })));
          if (op.scope) attempts.push({ label: `API key without ${op.scope}`, headers: { authorization: `Bearer ${await keyLacking(op.scope)}` }, expect: [403] });
        }
        for (const attempt of attempts) {
          const res = await world.send(toWire(op, validParts(op, {}), attempt.headers));
          requests++;
          const what = `${op.key} with ${attempt.label}: ${res.status} ${res.body.slice(0, 300)}`;
          assert.ok(attempt.expect.includes(res.status), `expected ${attempt.expect.join(' or ')}: ${what}`);
          assert.equal(errorBodyProblem(op, res), undefined, what);
        }
      });
    }
    t.diagnostic(`auth matrix: ${guarded.length} operations, ${requests} requests`);
    console.log(`auth matrix: ${guarded.length} operations with credentials, ${requests} requests`);
  });
});
