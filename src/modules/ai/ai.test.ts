import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventually, startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { addMember, bearer, createKey, createWorkspace, sessionCookie, signUp, type TestKey, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import { FakeLlmUpstream } from '../../../test/fake-llm-upstream.ts';
import { UTILITY_MODEL } from './prompts.ts';

const ENGINE = process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite';

type Body = Record<string, unknown>;
interface Envelope {
  error: string;
  message: string;
  code: number;
  details?: Array<{ field: string; message: string }>;
  requestId?: string;
}

function envelope(res: { statusCode: number; json(): unknown; body: string }, status: number, code?: string): Envelope {
  assert.equal(res.statusCode, status, res.body);
  const body = res.json() as Envelope;
  assert.equal(body.code, status);
  if (code) assert.equal(body.error, code);
  return body;
}

/** Each utility with a valid body and the fields that body carries to the model. */
const UTILITIES: Array<{ path: string; body: Body; required: string[] }> = [
  { path: '/api/improve-prompt', body: { prompt: 'You are a receptionist. answer calls, be nice, book appointments maybe' }, required: ['prompt'] },
  { path: '/api/translate-prompt', body: { prompt: 'Du bist eine Empfangskraft.', targetLanguage: 'Swahili' }, required: ['prompt', 'targetLanguage'] },
  { path: '/api/generate-opportunity-prompt', body: { systemPrompt: 'You sell solar panels to homeowners in Lyon.' }, required: ['systemPrompt'] },
  { path: '/api/generate-success-prompt', body: { systemPrompt: 'You book dental cleanings for Smile Clinic.' }, required: ['systemPrompt'] },
];

describe(`prompt utilities and presets (${ENGINE})`, () => {
  let fake: FakeLlmUpstream;
  let rt: TestRuntime;
  let owner: TestUser;
  let ws: TestWorkspace;
  let key: TestKey;
  let outsider: TestUser;
  let otherWs: TestWorkspace;

  before(async () => {
    fake = await FakeLlmUpstream.start();
    rt = await startTestRuntime({ LLM_BASE_URL: fake.url, LLM_API_KEY: 'up-key' });
    owner = await signUp(rt);
    ws = await createWorkspace(rt, owner, 'Prompt Owners');
    key = await createKey(rt, owner, ws);
    outsider = await signUp(rt);
    otherWs = await createWorkspace(rt, outsider, 'Other Place');
  });
  after(async () => {
    await rt?.destroy();
    await fake?.close();
  });
  beforeEach(() => {
    fake.reset();
    fake.set({ content: '  Generated text.\n' });
  });

  const post = (url: string, payload: Body, auth: Record<string, unknown> = { headers: bearer(owner.accessToken) }) =>
    rt.app!.inject({ method: 'POST', url, payload, ...auth });

  describe('prompt utilities', () => {
    test('each answers {text} from one completion, built from its template with the input inside', async () => {
      for (const utility of UTILITIES) {
        fake.reset();
        fake.set({ content: '  Generated text.\n' });
        const res = await post(utility.path, utility.body);
        assert.equal(res.statusCode, 200, `${utility.path}: ${res.body}`);
        assert.deepEqual(res.json(), { text: 'Generated text.' });
        assert.equal(fake.requests.length, 1);
        const sent = fake.last()!;
        assert.equal(sent.headers.authorization, 'Bearer up-key');
        assert.equal(sent.headers.cookie, undefined);
        const body = sent.body as { model: string; stream: boolean; messages: Array<{ role: string; content: string }>; temperature: number };
        assert.equal(body.model, UTILITY_MODEL);
        assert.equal(body.stream, false);
        assert.equal(typeof body.temperature, 'number');
        assert.deepEqual(body.messages.map((m) => m.role), ['system', 'user']);
        for (const field of utility.required) {
          assert.ok(body.messages[1]!.content.includes(String(utility.body[field])), `${utility.path}: the user message carries ${field}`);
          assert.ok(!body.messages[0]!.content.includes(String(utility.body[field])), `${utility.path}: ${field} stays out of the instructions`);
        }
      }
    });

    test('improve-prompt asks for a rewrite in the language of the input', async () => {
      await post('/api/improve-prompt', { prompt: 'Sei gentile' });
      const system = (fake.last()!.body as { messages: Array<{ content: string }> }).messages[0]!.content;
      assert.match(system, /same language/);
      assert.match(system, /Never translate/);
    });

    test('placeholders in the input are sent as typed, not expanded', async () => {
      await post('/api/translate-prompt', { prompt: 'Hello {{targetLanguage}} and {{prompt}}', targetLanguage: 'fr' });
      const user = (fake.last()!.body as { messages: Array<{ content: string }> }).messages[1]!.content;
      assert.ok(user.includes('Hello {{targetLanguage}} and {{prompt}}'), user);
    });

    test('400 with details when a required field is missing, empty, blank or too long', async () => {
      for (const utility of UTILITIES) {
        for (const field of utility.required) {
          for (const value of [undefined, '', '   ', null]) {
            const body: Body = { ...utility.body, [field]: value };
            if (value === undefined) delete body[field];
            const res = await post(utility.path, body);
            const error = envelope(res, 400, 'validation_failed');
            assert.ok(error.details?.some((d) => d.field === field), `${utility.path} ${field}=${JSON.stringify(value)}: ${res.body}`);
          }
        }
      }
      const tooLong = envelope(await post('/api/improve-prompt', { prompt: 'x'.repeat(20_001) }), 400, 'validation_failed');
      assert.equal(tooLong.details?.[0]?.field, 'prompt');
      assert.equal((await post('/api/improve-prompt', { prompt: 'x'.repeat(20_000) })).statusCode, 200, 'exactly 20000 characters is allowed');
      envelope(await post('/api/translate-prompt', { prompt: 'x', targetLanguage: 'l'.repeat(101) }), 400, 'validation_failed');
      envelope(await rt.app!.inject({ method: 'POST', url: '/api/improve-prompt', headers: { ...bearer(owner.accessToken), 'content-type': 'application/json' }, payload: '{"prompt":' }), 400, 'invalid_json');
      assert.equal(fake.requests.length, 1, 'only the valid 20000-character prompt went upstream');
    });

    test('an API key acts in its own workspace; naming another one is 404', async () => {
      const withKey = { headers: bearer(key.fullKey) };
      assert.equal((await post('/api/improve-prompt', { prompt: 'p' }, withKey)).statusCode, 200);
      assert.equal((await post('/api/improve-prompt', { prompt: 'p', accountSlug: ws.slug }, withKey)).statusCode, 200);
      assert.equal((await post(`/api/generate-success-prompt?accountSlug=${ws.slug}`, { systemPrompt: 's' }, withKey)).statusCode, 200);
      envelope(await post('/api/improve-prompt', { prompt: 'p', accountSlug: otherWs.slug }, withKey), 404, 'not_found');
      envelope(await post(`/api/generate-success-prompt?accountSlug=${otherWs.slug}`, { systemPrompt: 's' }, withKey), 404, 'not_found');
      envelope(await post('/api/translate-prompt', { prompt: 'p', targetLanguage: 'de', teamId: otherWs.id }, withKey), 404, 'not_found');
    });

    test('a session may name a workspace it belongs to (accountSlug or teamId, body or query); another one is 404', async () => {
      const cookie = sessionCookie(owner.accessToken);
      assert.equal((await post('/api/improve-prompt', { prompt: 'p' }, cookie)).statusCode, 200, 'no workspace named');
      assert.equal((await post('/api/improve-prompt', { prompt: 'p', accountSlug: ws.slug }, cookie)).statusCode, 200);
      assert.equal((await post('/api/improve-prompt', { prompt: 'p', teamId: ws.id }, cookie)).statusCode, 200);
      assert.equal((await post(`/api/generate-success-prompt?accountSlug=${ws.slug}`, { systemPrompt: 's' }, cookie)).statusCode, 200);
      assert.equal((await post(`/api/generate-opportunity-prompt?teamId=${ws.id}`, { systemPrompt: 's' }, cookie)).statusCode, 200);
      const upstreamCalls = fake.requests.length;
      envelope(await post('/api/improve-prompt', { prompt: 'p', accountSlug: otherWs.slug }, cookie), 404, 'not_found');
      envelope(await post(`/api/generate-success-prompt?accountSlug=${otherWs.slug}`, { systemPrompt: 's' }, cookie), 404, 'not_found');
      envelope(await post('/api/translate-prompt', { prompt: 'p', targetLanguage: 'de', teamId: otherWs.id }, cookie), 404, 'not_found');
      envelope(await post('/api/improve-prompt', { prompt: 'p', teamId: 'not-a-uuid' }, cookie), 404, 'not_found');
      envelope(await post('/api/improve-prompt', { prompt: 'p', accountSlug: 'no-such-workspace' }, cookie), 404, 'not_found');
      // The body names the workspace when body and query both do.
      envelope(await post(`/api/improve-prompt?accountSlug=${ws.slug}`, { prompt: 'p', accountSlug: otherWs.slug }, cookie), 404, 'not_found');
      assert.equal(fake.requests.length, upstreamCalls, 'refused calls never reach the model');

      // A member (not only the owner) may use the workspace; a Bearer session token works like the cookie.
      const member = await addMember(rt, ws, owner, 'member');
      assert.equal((await post('/api/improve-prompt', { prompt: 'p', accountSlug: ws.slug }, { headers: bearer(member.accessToken) })).statusCode, 200);
      envelope(await post('/api/improve-prompt', { prompt: 'p', accountSlug: ws.slug }, { headers: bearer(outsider.accessToken) }), 404, 'not_found');
    });

    test('a client that disconnects stops the generation upstream', async () => {
      fake.set({ delayMs: 5000, content: 'too late' });
      await rt.app!.listen({ port: 0, host: '127.0.0.1' });
      const { port } = rt.app!.server.address() as AddressInfo;
      const req = http.request({ host: '127.0.0.1', port, path: '/api/improve-prompt', method: 'POST', headers: { 'content-type': 'application/json', ...bearer(owner.accessToken) } });
      req.on('error', () => {});
      req.end(JSON.stringify({ prompt: 'p' }));
      await eventually('the upstream to receive the request', async () => fake.requests.length === 1, 5000);
      req.destroy();
      await eventually('the upstream request to be closed early', async () => fake.last()!.aborted, 3000);
    });

    test('401 without credentials', async () => {
      envelope(await post('/api/improve-prompt', { prompt: 'p' }, {}), 401, 'unauthorized');
      envelope(await post('/api/improve-prompt', { prompt: 'p' }, { headers: bearer('svc_live_notakey') }), 401, 'unauthorized');
    });

    test('an upstream failure is 500 with a clear message and nothing of the upstream answer', async () => {
      const failures: Array<[Parameters<FakeLlmUpstream['set']>[0], RegExp]> = [
        [{ mode: 'fail' }, /HTTP 500/],
        [{ mode: 'status', status: 400, body: JSON.stringify({ error: { message: 'context_length_exceeded sk-abcdef123456' } }) }, /HTTP 400/],
        [{ mode: 'status', status: 401, body: JSON.stringify({ error: { message: 'Incorrect API key provided: up-key' } }) }, /HTTP 401/],
        [{ mode: 'reset' }, /could not be reached/],
        [{ mode: 'status', status: 200, body: '{"not":"a completion"}' }, /could not be read/],
        [{ content: '   ' }, /no text/],
      ];
      for (const [behaviour, message] of failures) {
        fake.set(behaviour);
        const error = envelope(await post('/api/improve-prompt', { prompt: 'p' }), 500, 'internal_error');
        assert.match(error.message, /^Text generation failed/);
        assert.match(error.message, message);
        assert.doesNotMatch(error.message, /fake internal detail|context_length|up-key|sk-/);
        assert.ok(error.requestId);
      }
    });
  });

  describe('prompt presets', () => {
    let user: TestUser;
    let other: TestUser;
    before(async () => {
      user = await signUp(rt);
      other = await signUp(rt);
    });

    const as = (who: TestUser) => ({ headers: bearer(who.accessToken) });
    const list = async (who: TestUser) => {
      const res = await rt.app!.inject({ method: 'GET', url: '/api/prompt-presets', ...as(who) });
      assert.equal(res.statusCode, 200, res.body);
      return res.json().data.presets as Array<Record<string, unknown>>;
    };
    const create = async (who: TestUser, title: string, prompt = `prompt of ${title}`) => {
      const res = await rt.app!.inject({ method: 'POST', url: '/api/prompt-presets', ...as(who), payload: { title, prompt } });
      assert.equal(res.statusCode, 200, res.body);
      return res.json().data.preset as Record<string, unknown> & { id: string };
    };
    const insertDirect = (userId: string, title: string, flags: { is_default?: boolean; is_template?: boolean }) =>
      rt.db.kysely.insertInto('prompt_presets').values({ user_id: userId, title, prompt: 'provided', ...flags }).returning(['id']).executeTakeFirstOrThrow();
    const put = (who: TestUser, id: string, payload: Body) => rt.app!.inject({ method: 'PUT', url: `/api/prompt-presets/${id}`, ...as(who), payload });
    const del = (who: TestUser, id: string) => rt.app!.inject({ method: 'DELETE', url: `/api/prompt-presets/${id}`, ...as(who) });

    test('create answers the §2.3 preset', async () => {
      const before = Date.now();
      const preset = await create(user, 'Receptionist', 'Answer calls politely.');
      assert.deepEqual(Object.keys(preset).sort(), ['created_at', 'id', 'is_default', 'is_template', 'prompt', 'title', 'uid', 'updated_at', 'user_id']);
      assert.match(preset.id, /^[0-9a-f-]{36}$/);
      assert.equal(preset.user_id, user.id);
      assert.equal(preset.uid, user.id);
      assert.equal(preset.title, 'Receptionist');
      assert.equal(preset.prompt, 'Answer calls politely.');
      assert.equal(preset.is_default, 0);
      assert.equal(preset.is_template, 0);
      assert.equal(new Date(preset.created_at as string).toISOString(), preset.created_at);
      assert.ok(Date.parse(preset.created_at as string) >= before - 5000);
      assert.equal(preset.updated_at, preset.created_at);
    });

    test('create needs a non-blank title and prompt (400), within the limits', async () => {
      const cases: Array<[Body, string]> = [
        [{ prompt: 'p' }, 'title'],
        [{ title: 't' }, 'prompt'],
        [{ title: '', prompt: 'p' }, 'title'],
        [{ title: 't', prompt: '' }, 'prompt'],
        [{ title: '   ', prompt: 'p' }, 'title'],
        [{ title: 't', prompt: ' \n ' }, 'prompt'],
        [{ title: 't'.repeat(201), prompt: 'p' }, 'title'],
        [{ title: 't', prompt: 'p'.repeat(20_001) }, 'prompt'],
      ];
      for (const [payload, field] of cases) {
        const res = await rt.app!.inject({ method: 'POST', url: '/api/prompt-presets', ...as(other), payload });
        const error = envelope(res, 400, 'validation_failed');
        assert.ok(error.details?.some((d) => d.field === field), `${JSON.stringify(payload).slice(0, 50)}: ${res.body}`);
      }
      assert.deepEqual(await list(other), []);
    });

    test('list: own presets only, defaults first, then by title (case-insensitive)', async () => {
      const owner2 = await signUp(rt);
      for (const title of ['banana', 'Cherry', 'apple', 'Apple pie']) await create(owner2, title);
      await insertDirect(owner2.id, 'Zeta default', { is_default: true });
      await insertDirect(owner2.id, 'alpha default', { is_default: true });
      await insertDirect(owner2.id, 'A template', { is_template: true });
      await create(other, 'Not yours');
      const presets = await list(owner2);
      assert.deepEqual(
        presets.map((p) => [p.title, p.is_default]),
        [['alpha default', 1], ['Zeta default', 1], ['apple', 0], ['Apple pie', 0], ['banana', 0], ['Cherry', 0]],
      );
      assert.ok(presets.every((p) => p.user_id === owner2.id && p.uid === owner2.id && p.is_template === 0));
    });

    test('PUT changes only the non-empty fields; at least one is needed', async () => {
      const preset = await create(user, 'Original title', 'Original prompt');
      await new Promise((resolve) => setTimeout(resolve, 20));

      const titleOnly = await put(user, preset.id, { title: 'New title', prompt: '' });
      assert.equal(titleOnly.statusCode, 200, titleOnly.body);
      const changed = titleOnly.json().data.preset;
      assert.equal(changed.title, 'New title');
      assert.equal(changed.prompt, 'Original prompt', 'an empty string does not clear the prompt');
      assert.equal(changed.created_at, preset.created_at);
      assert.ok(Date.parse(changed.updated_at) > Date.parse(preset.updated_at as string), 'updated_at moves');

      const promptOnly = await put(user, preset.id, { prompt: 'New prompt' });
      assert.equal(promptOnly.statusCode, 200);
      assert.deepEqual([promptOnly.json().data.preset.title, promptOnly.json().data.preset.prompt], ['New title', 'New prompt']);

      for (const payload of [{}, { title: '' }, { title: '', prompt: '' }, { title: '  ', prompt: '\t' }, { prompt: null }]) {
        envelope(await put(user, preset.id, payload), 400, 'validation_failed');
      }
      envelope(await put(user, preset.id, { title: 't'.repeat(201) }), 400, 'validation_failed');
      const stored = (await list(user)).find((p) => p.id === preset.id)!;
      assert.deepEqual([stored.title, stored.prompt], ['New title', 'New prompt'], 'refused updates changed nothing');
    });

    test("404 for a missing, another user's, default or template preset (PUT and DELETE)", async () => {
      const mine = await create(user, 'Mine');
      const theirs = await create(other, 'Theirs');
      const byDefault = await insertDirect(user.id, 'Provided default', { is_default: true });
      const template = await insertDirect(user.id, 'Provided template', { is_template: true });
      for (const id of [crypto.randomUUID(), 'not-a-uuid', theirs.id, byDefault.id, template.id]) {
        envelope(await put(user, id, { title: 'hijack' }), 404, 'not_found');
        envelope(await del(user, id), 404, 'not_found');
      }
      const theirsNow = (await list(other)).find((p) => p.id === theirs.id)!;
      assert.equal(theirsNow.title, 'Theirs');
      const row = await rt.db.kysely.selectFrom('prompt_presets').select(['title']).where('id', '=', byDefault.id).executeTakeFirstOrThrow();
      assert.equal(row.title, 'Provided default');
      // The owner's own non-default preset is still theirs to change.
      assert.equal((await put(user, mine.id, { title: 'Mine, renamed' })).statusCode, 200);
    });

    test('DELETE answers {changes: 1}; a second delete is 404', async () => {
      const preset = await create(user, 'Disposable');
      const res = await del(user, preset.id);
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(res.json(), { success: true, data: { changes: 1 } });
      assert.ok(!(await list(user)).some((p) => p.id === preset.id));
      envelope(await del(user, preset.id), 404, 'not_found');
    });

    test('templates are an empty list, and /templates is not taken for an id', async () => {
      const res = await rt.app!.inject({ method: 'GET', url: '/api/prompt-presets/templates', ...as(user) });
      assert.equal(res.statusCode, 200);
      assert.deepEqual(res.json(), { success: true, data: { templates: [] } });
      envelope(await put(user, 'templates', { title: 'x' }), 404, 'not_found');
      envelope(await del(user, 'templates'), 404, 'not_found');
    });

    test('only a desktop JWT is accepted', async () => {
      const routes: Array<[string, string, Body?]> = [
        ['GET', '/api/prompt-presets'],
        ['GET', '/api/prompt-presets/templates'],
        ['POST', '/api/prompt-presets', { title: 't', prompt: 'p' }],
        ['PUT', `/api/prompt-presets/${crypto.randomUUID()}`, { title: 't' }],
        ['DELETE', `/api/prompt-presets/${crypto.randomUUID()}`],
      ];
      for (const [method, url, payload] of routes) {
        for (const auth of [{}, sessionCookie(user.accessToken), { headers: bearer(key.fullKey) }]) {
          const res = await rt.app!.inject({ method: method as 'GET', url, payload, ...auth });
          envelope(res, 401, 'unauthorized');
        }
      }
    });
  });
});

describe(`LLM endpoints without LLM_BASE_URL (${ENGINE})`, () => {
  let rt: TestRuntime;
  let user: TestUser;
  before(async () => {
    rt = await startTestRuntime();
    user = await signUp(rt);
  });
  after(async () => {
    await rt?.destroy();
  });

  test('answer 500 not_configured "missing server configuration"', async () => {
    const calls: Array<[string, Body]> = [
      ...UTILITIES.map((u): [string, Body] => [u.path, u.body]),
      ['/api/llm/chat', { model: 'llm-4o', messages: [{ role: 'user', content: 'hi' }] }],
      ['/api/llm/chat', { model: 'llm-4o', messages: [{ role: 'user', content: 'hi' }], stream: true }],
    ];
    for (const [url, payload] of calls) {
      const error = envelope(await rt.app!.inject({ method: 'POST', url, headers: bearer(user.accessToken), payload }), 500, 'not_configured');
      assert.match(error.message, /^missing server configuration/, url);
      assert.ok(error.requestId);
    }
  });

  test('bad input is still 400, and presets work', async () => {
    envelope(await rt.app!.inject({ method: 'POST', url: '/api/improve-prompt', headers: bearer(user.accessToken), payload: { prompt: '' } }), 400, 'validation_failed');
    envelope(await rt.app!.inject({ method: 'POST', url: '/api/llm/chat', headers: bearer(user.accessToken), payload: { model: 'nope', messages: [] } }), 400, 'validation_failed');
    const res = await rt.app!.inject({ method: 'POST', url: '/api/prompt-presets', headers: bearer(user.accessToken), payload: { title: 't', prompt: 'p' } });
    assert.equal(res.statusCode, 200, res.body);
  });
});
