import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Type } from 'typebox';
import { sql } from 'kysely';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import type { HarkModule } from '../context.ts';
import { AppError } from './errors.ts';

/** Routes that exist only in this test, to drive each error path of the platform. */
let release: () => void = () => {};
let reached: () => void = () => {};
const probes: HarkModule = {
  name: 'http-probes',
  routes(app, ctx) {
    app.get('/test/items/:id', { config: { auth: 'none' }, schema: { params: Type.Object({ id: Type.String() }) } }, async (request) => ({ id: request.params.id }));
    // Stores the value the way any module does: a text and a jsonb parameter.
    app.post(
      '/test/echo-through-database',
      { config: { auth: 'none' }, schema: { body: Type.Object({ text: Type.String(), as: Type.Union([Type.Literal('text'), Type.Literal('jsonb')]) }) } },
      async (request) => {
        const { text, as } = request.body;
        const query = as === 'text' ? sql<{ v: unknown }>`select ${text}::text as v` : sql<{ v: unknown }>`select ${JSON.stringify({ text })}::jsonb as v`;
        return { stored: (await query.execute(ctx.db.kysely)).rows[0]!.v };
      },
    );
    app.post(
      '/test/items',
      {
        config: { auth: 'none' },
        schema: {
          body: Type.Object({
            name: Type.String({ minLength: 1, maxLength: 10 }),
            count: Type.Integer({ minimum: 1 }),
            tags: Type.Optional(Type.Array(Type.String())),
          }),
        },
      },
      async (request) => ({ ok: true, name: request.body.name }),
    );
    app.post('/test/small', { config: { auth: 'none' }, bodyLimit: 64 }, async () => ({ ok: true }));
    app.get('/test/boom', { config: { auth: 'none' } }, async () => {
      throw new Error('database password is hunter2');
    });
    app.get('/test/teapot', { config: { auth: 'none' } }, async () => {
      throw new AppError('conflict', 'Already exists', undefined, { cause: new Error('unique violation') });
    });
    app.get('/test/minimal', { config: { auth: 'none', errorShape: 'error-only' } }, async () => {
      throw new AppError('not_found', 'File not found');
    });
    app.get('/test/slow', { config: { auth: 'none' } }, async () => {
      const released = new Promise<void>((resolve) => (release = resolve));
      reached();
      await released;
      return { finished: true };
    });
  },
};

describe('HTTP platform', () => {
  let rt: TestRuntime;
  before(async () => {
    rt = await startTestRuntime({}, { modules: [probes] });
  });
  after(async () => {
    await rt?.destroy();
  });

  /** The app's address on a real port (several tests need real connections; it listens once). */
  let address: Promise<string> | undefined;
  const listening = () => (address ??= rt.app!.listen({ port: 0, host: '127.0.0.1' }));

  function assertEnvelope(body: Record<string, unknown>, status: number, error: string) {
    assert.equal(body.code, status);
    assert.equal(body.error, error);
    assert.equal(typeof body.message, 'string');
    assert.ok((body.message as string).length > 0);
  }

  test('unknown route is a 404 envelope', async () => {
    const res = await rt.app!.inject({ method: 'GET', url: '/api/nothing-here?x=1' });
    assert.equal(res.statusCode, 404);
    assertEnvelope(res.json(), 404, 'not_found');
    assert.match(res.json().message, /GET \/api\/nothing-here/);
  });

  test('malformed JSON is 400 invalid_json', async () => {
    const res = await rt.app!.inject({ method: 'POST', url: '/test/items', headers: { 'content-type': 'application/json' }, payload: '{"name": "a",' });
    assert.equal(res.statusCode, 400);
    assertEnvelope(res.json(), 400, 'invalid_json');
  });

  test('validation failure lists every bad field in details', async () => {
    const res = await rt.app!.inject({ method: 'POST', url: '/test/items', payload: { name: '', count: 'many', tags: [1, {}] } });
    assert.equal(res.statusCode, 400);
    const body = res.json();
    assertEnvelope(body, 400, 'validation_failed');
    const fields = body.details.map((d: { field: string }) => d.field).sort();
    assert.ok(fields.includes('name'), `details: ${JSON.stringify(body.details)}`);
    assert.ok(fields.includes('count'));
    assert.ok(fields.includes('tags[1]'));
    for (const detail of body.details) assert.equal(typeof detail.message, 'string');
  });

  test('a missing required field is named', async () => {
    const res = await rt.app!.inject({ method: 'POST', url: '/test/items', payload: { name: 'ok' } });
    assert.equal(res.statusCode, 400);
    assert.deepEqual(res.json().details, [{ field: 'count', message: 'is required' }]);
  });

  test('a body over the route limit is 413 with a clear message', async () => {
    const res = await rt.app!.inject({ method: 'POST', url: '/test/small', payload: { text: 'x'.repeat(500) } });
    assert.equal(res.statusCode, 413);
    assertEnvelope(res.json(), 413, 'payload_too_large');
  });

  test('a body over the global limit is 413', async () => {
    const res = await rt.app!.inject({ method: 'POST', url: '/test/items', payload: { name: 'x'.repeat(2 * 1024 * 1024), count: 1 } });
    assert.equal(res.statusCode, 413);
    assertEnvelope(res.json(), 413, 'payload_too_large');
  });

  test('a wrong content type is 415', async () => {
    const res = await rt.app!.inject({ method: 'POST', url: '/test/items', headers: { 'content-type': 'text/csv' }, payload: 'a,b' });
    assert.equal(res.statusCode, 415);
    assertEnvelope(res.json(), 415, 'unsupported_media_type');
  });

  // Found by the fuzz gate (test/gates): the router answered these in Fastify's own body, outside the envelope.
  test('a malformed percent-escape in the path is a 400 envelope', async () => {
    for (const segment of ['%zz', '%', '%E0%A4%A']) {
      const res = await rt.app!.inject({ method: 'GET', url: `/test/items/${segment}` });
      assert.equal(res.statusCode, 400, segment);
      assertEnvelope(res.json(), 400, 'bad_request');
      assert.deepEqual(Object.keys(res.json()).sort(), ['code', 'error', 'message']);
    }
  });

  test('an over-long path segment is a 414 envelope', async () => {
    const res = await rt.app!.inject({ method: 'GET', url: `/test/items/${'a'.repeat(101)}` });
    assert.equal(res.statusCode, 414);
    assertEnvelope(res.json(), 414, 'uri_too_long');
    assert.deepEqual(Object.keys(res.json()).sort(), ['code', 'error', 'message']);
  });

  // Found by the fuzz gate over real connections: Node's parser errors were answered in Fastify's own body.
  test('requests the HTTP parser rejects are answered in the envelope', async () => {
    const { port } = new URL(await listening());
    const rawExchange = (text: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(port), '127.0.0.1', () => socket.end(text));
        let answer = '';
        socket.on('data', (chunk) => (answer += chunk.toString()));
        socket.on('close', () => resolve(answer));
        socket.on('error', reject);
      });
    const cases: Array<[string, number, string]> = [
      [`GET /api/health?x=${'a'.repeat(20_000)} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 431, 'headers_too_large'],
      ['NOT HTTP AT ALL\r\n\r\n', 400, 'bad_request'],
    ];
    for (const [request, status, error] of cases) {
      const answer = await rawExchange(request);
      assert.match(answer, new RegExp(`^HTTP/1.1 ${status} `), answer);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
      assertEnvelope(body, status, error);
      assert.deepEqual(Object.keys(body).sort(), ['code', 'error', 'message']);
    }
  });

  // Found by the fuzz gate: a NUL in any field bound for PostgreSQL (slugs, names, prompts) was a 500.
  test('a NUL character the database cannot store is a 400, in text and in jsonb', async () => {
    for (const as of ['text', 'jsonb'] as const) {
      const res = await rt.app!.inject({ method: 'POST', url: '/test/echo-through-database', payload: { text: 'a\u0000b', as } });
      assert.equal(res.statusCode, 400, `${as}: ${res.body}`);
      assertEnvelope(res.json(), 400, 'bad_request');
      assert.match(res.json().message, /NUL/);
      const fine = await rt.app!.inject({ method: 'POST', url: '/test/echo-through-database', payload: { text: 'a b', as } });
      assert.equal(fine.statusCode, 200, fine.body);
    }
  });

  test('an unexpected error is a 500 with the request id and no internal detail', async () => {
    const res = await rt.app!.inject({ method: 'GET', url: '/test/boom', headers: { 'x-request-id': 'trace-500' } });
    assert.equal(res.statusCode, 500);
    const body = res.json();
    assertEnvelope(body, 500, 'internal_error');
    assert.equal(body.requestId, 'trace-500');
    assert.doesNotMatch(res.body, /hunter2/);
  });

  test('an AppError keeps its code and hides its cause', async () => {
    const res = await rt.app!.inject({ method: 'GET', url: '/test/teapot' });
    assert.equal(res.statusCode, 409);
    assert.deepEqual(res.json(), { error: 'conflict', message: 'Already exists', code: 409 });
  });

  test('routes declared error-only answer {error}', async () => {
    const res = await rt.app!.inject({ method: 'GET', url: '/test/minimal' });
    assert.equal(res.statusCode, 404);
    assert.deepEqual(res.json(), { error: 'File not found' });
  });

  test('x-request-id is echoed when sane and replaced when not', async () => {
    const kept = await rt.app!.inject({ method: 'GET', url: '/api/health', headers: { 'x-request-id': 'client-abc.123' } });
    assert.equal(kept.headers['x-request-id'], 'client-abc.123');
    const replaced = await rt.app!.inject({ method: 'GET', url: '/api/health', headers: { 'x-request-id': 'bad id\twith spaces' } });
    assert.match(String(replaced.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    const generated = await rt.app!.inject({ method: 'GET', url: '/api/nothing' });
    assert.match(String(generated.headers['x-request-id']), /^[0-9a-f-]{36}$/);
  });

  test('health and readiness', async () => {
    const health = await rt.app!.inject({ method: 'GET', url: '/api/health' });
    assert.deepEqual(health.json(), { status: 'ok' });
    const ready = await rt.app!.inject({ method: 'GET', url: '/api/ready' });
    assert.equal(ready.statusCode, 200);
    assert.equal(ready.json().ready, true);
    assert.equal(ready.json().checks.worker.ok, true);
  });

  test('close waits for an in-flight request to finish', async () => {
    const address = await listening();
    const inHandler = new Promise<void>((resolve) => (reached = resolve));
    const inFlight = fetch(`${address}/test/slow`);
    await inHandler;
    let closed = false;
    const closing = rt.app!.close().then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closed, false, 'close must wait for the request');
    release();
    const res = await inFlight;
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { finished: true });
    await closing;
    await assert.rejects(fetch(`${address}/api/health`), 'a closed server accepts no new connections');
  });
});

describe('readiness without a worker', () => {
  test('is 503 naming the worker when the work role is expected but stopped', async () => {
    const rt = await startTestRuntime();
    try {
      await rt.jobs.stop(1000);
      const res = await rt.app!.inject({ method: 'GET', url: '/api/ready' });
      assert.equal(res.statusCode, 503);
      assert.equal(res.json().checks.worker.ok, false);
      assert.equal(res.json().checks.database.ok, true);
    } finally {
      await rt.destroy();
    }
  });

  test('a serve-only process is ready without a worker', async () => {
    const rt = await startTestRuntime({ ROLES: 'serve' });
    try {
      const res = await rt.app!.inject({ method: 'GET', url: '/api/ready' });
      assert.equal(res.statusCode, 200);
      assert.match(res.json().checks.worker.detail, /work role/);
    } finally {
      await rt.destroy();
    }
  });
});
