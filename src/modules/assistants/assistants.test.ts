import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { addMember, bearer, call, createKey, createWorkspace, sessionCookie, signUp, type TestKey, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import { unseal } from '../../platform/crypto/tokens.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ASSISTANT_KEYS = [
  'account_id',
  'account_slug',
  'created_at',
  'first_message',
  'id',
  'model',
  'name',
  'prompt',
  'telephony',
  'transcriptor_options',
  'type',
  'updated_at',
  'voice',
  'webhook',
];

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- response bodies under test

describe(`assistants (${process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite'})`, () => {
  let rt: TestRuntime;
  let owner: TestUser;
  let member: TestUser;
  let ws: TestWorkspace;
  let otherOwner: TestUser;
  let otherWs: TestWorkspace;
  let fullKey: TestKey;
  let otherKey: TestKey;

  before(async () => {
    rt = await startTestRuntime();
    owner = await signUp(rt);
    ws = await createWorkspace(rt, owner, 'Assist Co');
    member = await addMember(rt, ws, owner, 'member');
    otherOwner = await signUp(rt);
    otherWs = await createWorkspace(rt, otherOwner, 'Other Co');
    fullKey = await createKey(rt, owner, ws);
    otherKey = await createKey(rt, otherOwner, otherWs);
  });
  after(async () => {
    await rt?.destroy();
  });

  const inject = (options: InjectOptions) => rt.app!.inject(options);
  const asUser = (user: TestUser) => sessionCookie(user.accessToken);
  const asKey = (key: TestKey) => ({ headers: bearer(key.fullKey) });

  async function create(auth: Pick<InjectOptions, 'cookies' | 'headers'>, body: Json): Promise<Json> {
    return (await call(rt, { method: 'POST', url: '/api/assistants', ...auth, payload: body })).json();
  }
  const createAsOwner = async (body: Json = {}) => (await create(asUser(owner), { accountSlug: ws.slug, name: 'Receptionist', ...body })).assistant as Json;

  function assertError(res: LightMyRequestResponse, status: number, error: string): Json {
    assert.equal(res.statusCode, status, res.body);
    const body = res.json();
    assert.equal(body.error, error, res.body);
    assert.equal(body.code, status);
    assert.equal(typeof body.message, 'string');
    return body;
  }

  function assertDetail(res: LightMyRequestResponse, field: string, message?: RegExp) {
    const body = assertError(res, 400, 'validation_failed');
    const detail = (body.details as Array<{ field: string; message: string }>).find((d) => d.field === field);
    assert.ok(detail, `expected a detail for ${field}: ${res.body}`);
    if (message) assert.match(detail.message, message);
  }

  test('the catalogue is public and lists the spec models', async () => {
    const res = await call(rt, { method: 'GET', url: '/api/assistants/catalogue' });
    const { success, catalogue } = res.json();
    assert.equal(success, true);
    const openai = catalogue.llm.find((p: Json) => p.id === 'openai');
    for (const model of ['llm-4.1', 'llm-4o', 'llm-4o-mini', 'llm-4.1-nano', 'llm-5-nano']) assert.ok(openai.models.includes(model), model);
    assert.ok(catalogue.llm.length >= 3);
    assert.ok(catalogue.voice.every((p: Json) => p.voices.length > 0));
    assert.ok(catalogue.transcriber.every((p: Json) => p.models.length > 0 && p.languages.length > 0));
    assert.deepEqual(catalogue.defaults.model, { provider: 'openai', model: 'llm-4o-mini' });
  });

  describe('create', () => {
    test('with a session: defaults, exact shape, secret shown once', async () => {
      const { success, assistant } = await create(asUser(owner), { accountSlug: ws.slug, name: 'Front desk' });
      assert.equal(success, true);
      assert.deepEqual(Object.keys(assistant).sort(), ASSISTANT_KEYS);
      assert.match(assistant.id, UUID);
      assert.equal(assistant.account_id, ws.id);
      assert.equal(assistant.account_slug, ws.slug);
      assert.equal(assistant.name, 'Front desk');
      assert.equal(assistant.type, 'inbound');
      assert.equal(assistant.prompt, '');
      assert.equal(assistant.first_message, '');
      assert.deepEqual(assistant.model, { provider: 'openai', model: 'llm-4o-mini' });
      assert.deepEqual(assistant.voice, { provider: 'openai', voice_id: 'alloy' });
      assert.deepEqual(assistant.transcriptor_options, { provider: 'openai', model: 'llm-4o-mini-transcribe', language: 'en' });
      assert.deepEqual(assistant.telephony, { outbound_enabled: false, max_call_seconds: 1800, record_calls: false, phone_number_id: null });
      assert.deepEqual(Object.keys(assistant.webhook).sort(), ['events', 'has_secret', 'secret', 'url']);
      assert.equal(assistant.webhook.url, null);
      assert.deepEqual(assistant.webhook.events, ['call.started', 'call.ended', 'call.summary']);
      assert.equal(assistant.webhook.has_secret, true);
      assert.match(assistant.webhook.secret, /^whsec_[A-Za-z0-9_-]{43}$/);
      assert.equal(assistant.created_at, assistant.updated_at);
    });

    test('with every field', async () => {
      const body = {
        accountSlug: ws.slug,
        name: 'Outbound sales',
        type: 'outbound',
        prompt: 'p'.repeat(20_000),
        first_message: 'f'.repeat(2_000),
        voice: { provider: 'azure', voice_id: 'de-DE-KatjaNeural' },
        model: { provider: 'anthropic', model: 'llm-sonnet-4' },
        transcriptor_options: { provider: 'deepgram', model: 'nova-3', language: 'de' },
        telephony: { outbound_enabled: true, max_call_seconds: 600, record_calls: true, phone_number_id: '6f1c1f7e-6c1f-4c7e-9b3a-2f1d7a0b9c11' },
        webhook: { url: 'https://hooks.example.test/hark', events: ['call.ended'] },
      };
      const { assistant } = await create(asUser(member), body);
      const { accountSlug: _slug, webhook, ...rest } = body;
      for (const [field, value] of Object.entries(rest)) assert.deepEqual(assistant[field], value, field);
      assert.equal(assistant.webhook.url, webhook.url);
      assert.deepEqual(assistant.webhook.events, webhook.events);
    });

    test('users must name the workspace; keys default to their own', async () => {
      assertDetail(await inject({ method: 'POST', url: '/api/assistants', ...asUser(owner), payload: { name: 'x' } }), 'accountSlug');
      const byKey = await create(asKey(fullKey), { name: 'Key made' });
      assert.equal(byKey.assistant.account_id, ws.id);
      const named = await create(asKey(fullKey), { accountSlug: ws.slug, name: 'Key made, named' });
      assert.equal(named.assistant.account_slug, ws.slug);
      assertError(await inject({ method: 'POST', url: '/api/assistants', ...asKey(fullKey), payload: { accountSlug: otherWs.slug, name: 'x' } }), 404, 'not_found');
      assertError(await inject({ method: 'POST', url: '/api/assistants', ...asUser(owner), payload: { accountSlug: otherWs.slug, name: 'x' } }), 404, 'not_found');
    });

    test('refuses invalid fields with details naming them', async () => {
      const cases: Array<[string, Json, RegExp?]> = [
        ['name', { name: undefined }],
        ['name', { name: '' }],
        ['name', { name: 'n'.repeat(101) }],
        ['name', { name: '   ' }],
        ['type', { type: 'robot' }, /inbound, outbound, web/],
        ['prompt', { prompt: 'p'.repeat(20_001) }],
        ['first_message', { first_message: 'f'.repeat(2_001) }],
        ['model.model', { model: { provider: 'openai', model: 'llm-sonnet-4' } }, /is not a model of provider openai/],
        ['model.model', { model: { model: 'llm-llama-3.3-70b' } }, /is not a model of provider openai/],
        ['model.provider', { model: { provider: 'skynet', model: 'llm-4o' } }, /must be one of openai, anthropic, groq/],
        ['model', { model: {} }],
        ['voice.voice_id', { voice: { provider: 'elevenlabs', voice_id: 'alloy' } }, /is not a voice of provider elevenlabs/],
        ['transcriptor_options.model', { transcriptor_options: { provider: 'deepgram' } }, /is not a model of provider deepgram/],
        ['transcriptor_options.language', { transcriptor_options: { provider: 'assemblyai', model: 'universal-streaming', language: 'de' } }],
        ['telephony.max_call_seconds', { telephony: { max_call_seconds: 5 } }],
        ['telephony.phone_number_id', { telephony: { phone_number_id: 'not-a-uuid' } }],
        ['webhook.url', { webhook: { url: 'ftp://files.example.test/x' } }, /http or https/],
        ['webhook.url', { webhook: { url: 'not a url' } }],
        ['webhook.url', { webhook: { url: 'https://user:pass@hooks.example.test/' } }, /credentials/],
        ['webhook.url', { webhook: { url: `https://example.test/${'x'.repeat(2048)}` } }],
        ['webhook.events[0]', { webhook: { events: ['call.exploded'] } }],
      ];
      for (const [field, override, message] of cases) {
        const res = await inject({ method: 'POST', url: '/api/assistants', ...asUser(owner), payload: { accountSlug: ws.slug, name: 'Valid', ...override } });
        assertDetail(res, field, message);
      }
    });
  });

  describe('API key scopes', () => {
    const keys: Record<string, TestKey> = {};
    let assistantId: string;
    before(async () => {
      for (const [label, scopes] of Object.entries({ read: ['assistants:read'], write: ['assistants:write'], all: ['assistants:*'], kb: ['kb:read', 'kb:write'] })) {
        keys[label] = await createKey(rt, owner, ws, { name: label, permissions: { scopes } });
      }
      assistantId = (await createAsOwner()).id;
    });

    const attempts = () => [
      { scope: 'read', method: 'GET', url: '/api/assistants' },
      { scope: 'read', method: 'GET', url: `/api/assistants/${assistantId}` },
      { scope: 'read', method: 'GET', url: `/api/assistants/${assistantId}/webhooks/deliveries` },
      { scope: 'write', method: 'POST', url: '/api/assistants', payload: { name: 'By key' } },
      { scope: 'write', method: 'PATCH', url: `/api/assistants/${assistantId}`, payload: { prompt: 'Be brief.' } },
      { scope: 'write', method: 'POST', url: `/api/assistants/${assistantId}/webhooks/rotate-secret`, payload: {} },
    ] as const;

    test('assistants:read reads, assistants:write writes, assistants:* does both, kb-only does neither', async () => {
      for (const attempt of attempts()) {
        for (const [label, key] of Object.entries(keys)) {
          const allowed = label === 'all' || label === attempt.scope;
          const res = await inject({ method: attempt.method, url: attempt.url, ...asKey(key), ...('payload' in attempt ? { payload: attempt.payload } : {}) });
          if (allowed) assert.equal(res.statusCode, 200, `${label} ${attempt.method} ${attempt.url}: ${res.body}`);
          else assert.match(assertError(res, 403, 'forbidden').message, /assistants:(read|write)/, `${label} ${attempt.method} ${attempt.url}`);
        }
      }
      const del = await createAsOwner();
      assertError(await inject({ method: 'DELETE', url: `/api/assistants/${del.id}`, ...asKey(keys.read!) }), 403, 'forbidden');
      await call(rt, { method: 'DELETE', url: `/api/assistants/${del.id}`, ...asKey(keys.write!) });
    });

    test('no credential is 401 everywhere but the catalogue', async () => {
      for (const attempt of attempts()) {
        assertError(await inject({ method: attempt.method, url: attempt.url, ...('payload' in attempt ? { payload: attempt.payload } : {}) }), 401, 'unauthorized');
      }
    });
  });

  describe('PATCH', () => {
    test('partial update answers {success, assistant} and keeps everything else', async () => {
      const original = await createAsOwner({ prompt: 'Old prompt', telephony: { record_calls: true }, webhook: { url: 'https://hooks.example.test/a' } });
      const res = await call(rt, {
        method: 'PATCH',
        url: `/api/assistants/${original.id}`,
        ...asUser(member),
        payload: { accountSlug: ws.slug, name: 'Renamed', model: { model: 'llm-4.1' }, telephony: { max_call_seconds: 300 }, transcriptor_options: { language: 'fr' } },
      });
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['assistant', 'success']);
      assert.equal(body.success, true);
      const assistant = body.assistant;
      assert.deepEqual(Object.keys(assistant).sort(), ASSISTANT_KEYS);
      assert.deepEqual(Object.keys(assistant.webhook).sort(), ['events', 'has_secret', 'url'], 'no secret after create');
      assert.equal(assistant.name, 'Renamed');
      assert.deepEqual(assistant.model, { provider: 'openai', model: 'llm-4.1' });
      assert.deepEqual(assistant.telephony, { outbound_enabled: false, max_call_seconds: 300, record_calls: true, phone_number_id: null });
      assert.deepEqual(assistant.transcriptor_options, { provider: 'openai', model: 'llm-4o-mini-transcribe', language: 'fr' });
      assert.equal(assistant.prompt, 'Old prompt');
      assert.equal(assistant.webhook.url, 'https://hooks.example.test/a');
      assert.equal(assistant.created_at, original.created_at);
      assert.ok(Date.parse(assistant.updated_at) >= Date.parse(original.updated_at));

      const fetched = (await call(rt, { method: 'GET', url: `/api/assistants/${original.id}`, ...asKey(fullKey) })).json();
      assert.deepEqual(fetched, { success: true, assistant });
    });

    test('provider and model are validated together with the stored value', async () => {
      const { id } = await createAsOwner();
      const patch = (payload: Json) => inject({ method: 'PATCH', url: `/api/assistants/${id}`, ...asKey(fullKey), payload });
      assertDetail(await patch({ model: { provider: 'anthropic' } }), 'model.model', /"llm-4o-mini" is not a model of provider anthropic/);
      assertDetail(await patch({ model: { model: 'llm-haiku-3.5' } }), 'model.model', /is not a model of provider openai/);
      assertDetail(await patch({ voice: { voice_id: 'rachel' } }), 'voice.voice_id', /is not a voice of provider openai/);
      const ok = await patch({ model: { provider: 'anthropic', model: 'llm-haiku-3.5' } });
      assert.equal(ok.statusCode, 200, ok.body);
      assertDetail(await patch({ model: { model: 'llm-4o' } }), 'model.model', /is not a model of provider anthropic/);
      const stored = (await call(rt, { method: 'GET', url: `/api/assistants/${id}`, ...asKey(fullKey) })).json().assistant;
      assert.deepEqual(stored.model, { provider: 'anthropic', model: 'llm-haiku-3.5' }, 'refused PATCHes changed nothing');
    });

    test('an empty PATCH is 400; webhook url null stops deliveries', async () => {
      const { id } = await createAsOwner({ webhook: { url: 'http://127.0.0.1:9/hook' } });
      assertDetail(await inject({ method: 'PATCH', url: `/api/assistants/${id}`, ...asUser(owner), payload: { accountSlug: ws.slug } }), 'body');
      assertDetail(await inject({ method: 'PATCH', url: `/api/assistants/${id}`, ...asKey(fullKey), payload: {} }), 'body');
      assertDetail(await inject({ method: 'PATCH', url: `/api/assistants/${id}`, ...asKey(fullKey), payload: { telephony: {} } }), 'telephony');
      const res = await call(rt, { method: 'PATCH', url: `/api/assistants/${id}`, ...asKey(fullKey), payload: { webhook: { url: null } } });
      assert.equal(res.json().assistant.webhook.url, null);
      assertError(await inject({ method: 'PATCH', url: `/api/assistants/${id}`, ...asUser(owner), payload: { accountSlug: otherWs.slug, name: 'x' } }), 404, 'not_found');
    });
  });

  test('pagination: newest first, cursor pages, stable end', async () => {
    const pager = await signUp(rt);
    const pws = await createWorkspace(rt, pager, 'Pages Inc');
    const created: string[] = [];
    for (let i = 0; i < 5; i++) created.push((await create(asUser(pager), { accountSlug: pws.slug, name: `A${i}` })).assistant.id);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = `accountSlug=${pws.slug}&limit=2${cursor ? `&cursor=${cursor}` : ''}`;
      const body: Json = (await call(rt, { method: 'GET', url: `/api/assistants?${query}`, ...asUser(pager) })).json();
      assert.equal(body.success, true);
      assert.ok(body.assistants.length <= 2);
      seen.push(...body.assistants.map((a: Json) => a.id));
      cursor = body.next_cursor;
      pages++;
    } while (cursor);
    assert.equal(pages, 3);
    assert.deepEqual(seen, [...created].reverse());

    const all = (await call(rt, { method: 'GET', url: `/api/assistants?accountSlug=${pws.slug}`, ...asUser(pager) })).json();
    assert.equal(all.assistants.length, 5);
    assert.equal(all.next_cursor, null);
    assertDetail(await inject({ method: 'GET', url: `/api/assistants?accountSlug=${pws.slug}&cursor=nope`, ...asUser(pager) }), 'cursor');
    const foreign = (await createAsOwner()).id;
    assertDetail(await inject({ method: 'GET', url: `/api/assistants?accountSlug=${pws.slug}&cursor=${foreign}`, ...asUser(pager) }), 'cursor');
    assertDetail(await inject({ method: 'GET', url: `/api/assistants?accountSlug=${pws.slug}&limit=101`, ...asUser(pager) }), 'limit');
    assertDetail(await inject({ method: 'GET', url: '/api/assistants', ...asUser(pager) }), 'accountSlug');
  });

  test("another workspace's assistant is 404 with no data, for its users and its keys", async () => {
    const secretName = 'Confidential assistant name';
    const target = await createAsOwner({ name: secretName, prompt: 'secret prompt' });
    const urls: Array<[InjectOptions['method'], string, Json?]> = [
      ['GET', `/api/assistants/${target.id}`],
      ['PATCH', `/api/assistants/${target.id}`, { name: 'Hijacked' }],
      ['DELETE', `/api/assistants/${target.id}`],
      ['GET', `/api/assistants/${target.id}/webhooks/deliveries`],
      ['POST', `/api/assistants/${target.id}/webhooks/rotate-secret`, {}],
    ];
    const outsiders = [asUser(otherOwner), asKey(otherKey)];
    for (const [method, url, payload] of urls) {
      for (const outsider of outsiders) {
        const res = await inject({ method, url, ...outsider, ...(payload ? { payload } : {}) });
        const body = assertError(res, 404, 'not_found');
        assert.deepEqual(Object.keys(body).sort(), ['code', 'error', 'message']);
        assert.doesNotMatch(res.body, /Confidential|secret prompt/);
      }
    }
    // The test delivery (sessions only) and a PATCH naming the outsider's own workspace.
    assertError(await inject({ method: 'POST', url: `/api/assistants/${target.id}/webhooks/test`, ...asUser(otherOwner), payload: {} }), 404, 'not_found');
    assertError(await inject({ method: 'PATCH', url: `/api/assistants/${target.id}`, ...asUser(otherOwner), payload: { accountSlug: otherWs.slug, name: 'x' } }), 404, 'not_found');
    // Lists never mix workspaces.
    const theirs = (await call(rt, { method: 'GET', url: `/api/assistants?accountSlug=${otherWs.slug}`, ...asUser(otherOwner) })).json();
    assert.ok(!theirs.assistants.some((a: Json) => a.id === target.id));
    assertError(await inject({ method: 'GET', url: `/api/assistants?accountSlug=${ws.slug}`, ...asUser(otherOwner) }), 404, 'not_found');
    assertError(await inject({ method: 'GET', url: `/api/assistants?accountSlug=${ws.slug}`, ...asKey(otherKey) }), 404, 'not_found');
    // Unknown and malformed ids look the same.
    assertError(await inject({ method: 'GET', url: '/api/assistants/00000000-0000-4000-8000-000000000000', ...asUser(owner) }), 404, 'not_found');
    assertError(await inject({ method: 'GET', url: '/api/assistants/not-a-uuid', ...asUser(owner) }), 404, 'not_found');

    const still = (await call(rt, { method: 'GET', url: `/api/assistants/${target.id}`, ...asUser(owner) })).json().assistant;
    assert.equal(still.name, secretName, 'nothing was changed by the outsiders');
  });

  test('DELETE is soft: the row stays, the API answers 404 afterwards; members may delete', async () => {
    const { id } = await createAsOwner({ name: 'Short-lived' });
    const res = await call(rt, { method: 'DELETE', url: `/api/assistants/${id}`, ...asUser(member) });
    assert.deepEqual(res.json(), { success: true });
    assertError(await inject({ method: 'GET', url: `/api/assistants/${id}`, ...asUser(owner) }), 404, 'not_found');
    assertError(await inject({ method: 'PATCH', url: `/api/assistants/${id}`, ...asUser(owner), payload: { name: 'Back' } }), 404, 'not_found');
    assertError(await inject({ method: 'DELETE', url: `/api/assistants/${id}`, ...asUser(owner) }), 404, 'not_found');
    const list = (await call(rt, { method: 'GET', url: `/api/assistants?accountSlug=${ws.slug}&limit=100`, ...asUser(owner) })).json();
    assert.ok(!list.assistants.some((a: Json) => a.id === id));
    const row = await rt.db.kysely.selectFrom('assistants').select(['deleted_at', 'name']).where('id', '=', id).executeTakeFirstOrThrow();
    assert.ok(row.deleted_at instanceof Date);
    assert.equal(row.name, 'Short-lived');
  });

  test('the webhook secret is sealed at rest and shown only on create and rotate', async () => {
    const created = await createAsOwner({ webhook: { url: 'https://hooks.example.test/sealed' } });
    const secret: string = created.webhook.secret;
    const sealedOf = async () =>
      (await rt.db.kysely.selectFrom('assistants').select(['webhook_secret_sealed']).where('id', '=', created.id).executeTakeFirstOrThrow()).webhook_secret_sealed;
    const sealed = await sealedOf();
    assert.ok(!sealed.includes(secret) && !sealed.includes(secret.slice(6)), 'not stored in plaintext');
    assert.equal(unseal(rt.secrets.secretsKey, sealed), secret);

    const reads = [
      await call(rt, { method: 'GET', url: `/api/assistants/${created.id}`, ...asUser(owner) }),
      await call(rt, { method: 'GET', url: `/api/assistants?accountSlug=${ws.slug}&limit=100`, ...asUser(owner) }),
      await call(rt, { method: 'PATCH', url: `/api/assistants/${created.id}`, ...asKey(fullKey), payload: { name: 'Still secret' } }),
    ];
    for (const res of reads) {
      assert.ok(!res.body.includes(secret), 'secret not shown');
      assert.ok(!res.body.includes('whsec_'), 'no secret of any assistant shown');
    }

    const rotated = (await call(rt, { method: 'POST', url: `/api/assistants/${created.id}/webhooks/rotate-secret`, ...asUser(member) })).json();
    assert.deepEqual(Object.keys(rotated).sort(), ['secret', 'success']);
    assert.match(rotated.secret, /^whsec_/);
    assert.notEqual(rotated.secret, secret);
    assert.equal(unseal(rt.secrets.secretsKey, await sealedOf()), rotated.secret);
  });
});
