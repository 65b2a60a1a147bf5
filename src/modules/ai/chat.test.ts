import http from 'node:http';
import net from 'node:net';
import { PassThrough } from 'node:stream';
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { eventually, scratchDatabase, startTestRuntime, tempDir, testConfig, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, createKey, createWorkspace, sessionCookie, signUp, type TestUser } from '../../../test/fixtures.ts';
import { FakeLlmUpstream, fakeContent } from '../../../test/fake-llm-upstream.ts';
import { startRuntime, type Runtime } from '../../runtime.ts';
import { MODULES } from '../index.ts';
import { LlmError, OpenAiCompatibleLlm, sanitizeUpstreamMessage, type LlmProvider } from '../../providers/llm/index.ts';
import { chatError, CHAT_MODELS, relaySse, upstreamRequest, WITHHELD_OPTIONS } from './chat.ts';
import { createAiModule } from './index.ts';

const ENGINE = process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite';
const MESSAGES = [{ role: 'user', content: 'Say hello' }];

/** The `data:` payloads of an SSE body, in order. */
function sseData(text: string): string[] {
  return text
    .split(/\r?\n\r?\n/)
    .map((event) => event.trim())
    .filter((event) => event.startsWith('data:'))
    .map((event) => event.slice('data:'.length).trim());
}

/** The completion text carried by the chunks of an SSE body. */
function streamedContent(text: string): string {
  return sseData(text)
    .filter((data) => data !== '[DONE]')
    .map((data) => (JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content ?? '')
    .join('');
}

function assertEnvelope(res: { statusCode: number; json(): Record<string, unknown> }, status: number, code?: string) {
  assert.equal(res.statusCode, status);
  const body = res.json();
  assert.equal(body.code, status);
  if (code) assert.equal(body.error, code);
  assert.equal(typeof body.message, 'string');
  return body as { error: string; message: string; code: number; details?: Array<{ field: string; message: string }>; requestId?: string };
}

describe(`chat completion proxy (${ENGINE})`, () => {
  let fake: FakeLlmUpstream;
  let rt: TestRuntime;
  let base: string;
  let user: TestUser;

  before(async () => {
    fake = await FakeLlmUpstream.start();
    rt = await startTestRuntime({ LLM_BASE_URL: fake.url, LLM_API_KEY: 'up-key' });
    await rt.app!.listen({ port: 0, host: '127.0.0.1' });
    const address = rt.app!.server.address() as net.AddressInfo;
    base = `http://127.0.0.1:${address.port}`;
    user = await signUp(rt);
  });
  after(async () => {
    await rt?.destroy();
    await fake?.close();
  });
  beforeEach(() => fake.reset());

  const chat = (payload: unknown, headers: Record<string, string> = {}) =>
    rt.app!.inject({ method: 'POST', url: '/api/llm/chat', headers: { ...bearer(user.accessToken), ...headers }, payload: payload as Record<string, unknown> });

  /** A real HTTP request (inject buffers the answer; streaming needs a socket). */
  const fetchChat = (body: unknown, init: { signal?: AbortSignal } = {}) =>
    fetch(`${base}/api/llm/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...bearer(user.accessToken) },
      body: JSON.stringify(body),
      signal: init.signal,
    });

  describe('non-streaming', () => {
    test('answers the upstream completion (§2.4) unchanged', async () => {
      const res = await chat({ model: 'llm-4o', messages: MESSAGES });
      assert.equal(res.statusCode, 200, res.body);
      assert.match(String(res.headers['content-type']), /^application\/json/);
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['choices', 'created', 'id', 'model', 'object', 'usage']);
      assert.equal(body.object, 'chat.completion');
      assert.equal(typeof body.created, 'number');
      assert.equal(body.model, 'llm-4o');
      assert.deepEqual(body.choices, [{ index: 0, message: { role: 'assistant', content: fake.expectedContent() }, finish_reason: 'stop' }]);
      assert.deepEqual(Object.keys(body.usage).sort(), ['completion_tokens', 'prompt_tokens', 'total_tokens']);
      assert.equal(fake.requests.length, 1);
      assert.equal((fake.last()!.body as { stream: boolean }).stream, false, 'stream defaults to false upstream too');
    });

    test('a -proxied model goes upstream without the suffix; other models unchanged', async () => {
      for (const model of CHAT_MODELS) {
        const res = await chat({ model, messages: MESSAGES });
        assert.equal(res.statusCode, 200, `${model}: ${res.body}`);
        assert.equal((fake.last()!.body as { model: string }).model, model.replace(/-proxied$/, ''), model);
      }
      assert.equal((fake.last()!.body as { model: string }).model, 'llm-4o-mini-transcribe');
    });

    test('forwards temperature and every other option unchanged, except the withheld ones', async () => {
      const options = {
        temperature: 0.2,
        top_p: 0.9,
        max_tokens: 64,
        stop: ['\n\n'],
        seed: 7,
        n: 1,
        response_format: { type: 'json_object' },
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
        tool_choice: 'auto',
        logit_bias: { '50256': -100 },
        some_future_option: { nested: [1, 'two', null] },
      };
      const messages = [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', name: 'ann', content: [{ type: 'text', text: 'Hi' }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: '{"ok":true}' },
      ];
      const withheld = { user: 'someone-else', safety_identifier: 'x', store: true, metadata: { a: 'b' }, service_tier: 'priority' };
      const res = await chat({ model: 'llm-4.1-nano-proxied', messages, ...options, ...withheld });
      assert.equal(res.statusCode, 200, res.body);
      const sent = fake.last()!.body as Record<string, unknown>;
      assert.deepEqual(sent, { model: 'llm-4.1-nano', messages, stream: false, ...options });
      for (const option of Object.keys(withheld)) assert.ok(WITHHELD_OPTIONS.has(option) && !(option in sent), option);
    });

    test("the caller's credentials and headers never reach the upstream: only Bearer LLM_API_KEY", async () => {
      const res = await chat(
        { model: 'llm-4o-mini', messages: MESSAGES },
        { cookie: `sb-access-token=${user.accessToken}; other=1`, 'x-request-id': 'trace-me', 'x-api-key': 'caller-secret', 'openai-organization': 'org-caller' },
      );
      assert.equal(res.statusCode, 200, res.body);
      const headers = fake.last()!.headers;
      assert.equal(headers.authorization, 'Bearer up-key');
      for (const name of ['cookie', 'x-request-id', 'x-api-key', 'openai-organization']) assert.equal(headers[name], undefined, name);
      assert.doesNotMatch(JSON.stringify(headers), new RegExp(user.accessToken.slice(-20).replace(/[-/\\^$*+?.()|[\]{}]/g, '\\$&')));
      assert.equal(headers['content-type'], 'application/json');
    });
  });

  describe('bad requests are 400 and never reach the upstream', () => {
    test('disallowed or missing model, missing or malformed messages, invalid options', async () => {
      const cases: Array<[string, unknown, string?]> = [
        ['unknown model', { model: 'gpt-4o', messages: MESSAGES }, 'model'],
        ['double suffix', { model: 'llm-4o-proxied-proxied', messages: MESSAGES }, 'model'],
        ['upstream name of another vendor', { model: 'llm-4o-mini-transcribe-proxied', messages: MESSAGES }, 'model'],
        ['no model', { messages: MESSAGES }, 'model'],
        ['no messages', { model: 'llm-4o' }, 'messages'],
        ['empty messages', { model: 'llm-4o', messages: [] }, 'messages'],
        ['messages not an array', { model: 'llm-4o', messages: { role: 'user', content: 'x' } }, 'messages'],
        ['message without role', { model: 'llm-4o', messages: [{ content: 'x' }] }, 'messages[0].role'],
        ['message without content', { model: 'llm-4o', messages: [{ role: 'user' }] }, 'messages[0].content'],
        ['unknown role', { model: 'llm-4o', messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
        ['content an object', { model: 'llm-4o', messages: [{ role: 'user', content: { text: 'x' } }] }, 'messages[0].content'],
        ['content a number', { model: 'llm-4o', messages: MESSAGES.concat({ role: 'user', content: 5 as never }) }, 'messages[1].content'],
        ['stream not a boolean', { model: 'llm-4o', messages: MESSAGES, stream: 'maybe' }, 'stream'],
        ['temperature out of range', { model: 'llm-4o', messages: MESSAGES, temperature: 3 }, 'temperature'],
        ['body not an object', [MESSAGES], undefined],
      ];
      for (const [label, payload, field] of cases) {
        const res = await chat(payload);
        const body = assertEnvelope(res, 400, 'validation_failed');
        if (field) assert.ok(body.details?.some((d) => d.field === field), `${label}: ${JSON.stringify(body.details)}`);
      }
      assert.equal(fake.requests.length, 0);
    });

    test('invalid JSON', async () => {
      const res = await rt.app!.inject({
        method: 'POST',
        url: '/api/llm/chat',
        headers: { ...bearer(user.accessToken), 'content-type': 'application/json' },
        payload: '{"model": "llm-4o", "messages": [',
      });
      assertEnvelope(res, 400, 'invalid_json');
      assert.equal(fake.requests.length, 0);
    });

    test('only a desktop JWT is accepted (§4.4)', async () => {
      const owner = await signUp(rt);
      const key = await createKey(rt, owner, await createWorkspace(rt, owner));
      const payload = { model: 'llm-4o', messages: MESSAGES };
      assertEnvelope(await rt.app!.inject({ method: 'POST', url: '/api/llm/chat', payload }), 401, 'unauthorized');
      assertEnvelope(await rt.app!.inject({ method: 'POST', url: '/api/llm/chat', headers: bearer(key.fullKey), payload }), 401, 'unauthorized');
      assertEnvelope(await rt.app!.inject({ method: 'POST', url: '/api/llm/chat', ...sessionCookie(owner.accessToken), payload }), 401, 'unauthorized');
      assertEnvelope(await rt.app!.inject({ method: 'POST', url: '/api/llm/chat', headers: bearer('not-a-token'), payload }), 401, 'unauthorized');
      assert.equal(fake.requests.length, 0);
    });
  });

  describe('upstream failures', () => {
    test('a 4xx with an OpenAI error body is 400 with its message, sanitised', async () => {
      fake.set({
        mode: 'status',
        status: 400,
        body: JSON.stringify({ error: { message: "Invalid 'max_tokens': too large.\u0007 Key up-key and sk-proj-abcdef123456 must not show", type: 'invalid_request_error' } }),
      });
      const body = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES, max_tokens: 1e9 }), 400, 'bad_request');
      assert.match(body.message, /^The model provider rejected the request: Invalid 'max_tokens': too large\./);
      assert.doesNotMatch(body.message, /up-key|sk-proj/);
      assert.ok(!body.message.includes('\u0007'), 'control characters are removed');

      fake.set({ mode: 'status', status: 404, body: JSON.stringify({ error: { message: 'x'.repeat(5000) } }) });
      const long = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES }), 400, 'bad_request');
      assert.ok(long.message.length < 400, 'the upstream message is truncated');
    });

    test('a 4xx without a JSON error is 400 without its body', async () => {
      fake.set({ mode: 'status', status: 422, body: '<html><body>Traceback: secret internals</body></html>' });
      const body = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES }), 400, 'bad_request');
      assert.equal(body.message, 'The model provider rejected the request (HTTP 422)');
    });

    test('5xx is 502 without the upstream body; a refused key is 502; 429 is 429 with Retry-After', async () => {
      fake.set({ mode: 'fail' });
      const failed = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES }), 502, 'bad_gateway');
      assert.doesNotMatch(failed.message, /fake internal detail/);
      assert.ok(failed.requestId);

      fake.set({ mode: 'status', status: 401, body: JSON.stringify({ error: { message: 'Incorrect API key provided: up-key' } }) });
      const refused = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES }), 502, 'bad_gateway');
      assert.match(refused.message, /LLM_API_KEY/);
      assert.doesNotMatch(refused.message, /up-key/);

      fake.set({ mode: 'status', status: 429, headers: { 'retry-after': '7' }, body: JSON.stringify({ error: { message: 'Rate limit reached' } }) });
      const limited = await chat({ model: 'llm-4o', messages: MESSAGES });
      assertEnvelope(limited, 429, 'rate_limited');
      assert.equal(limited.headers['retry-after'], '7');
    });

    test('a connection reset before any answer is 502', async () => {
      fake.set({ mode: 'reset' });
      const body = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES, stream: true }), 502, 'bad_gateway');
      assert.match(body.message, /could not be reached/);
    });

    test('a slow upstream is waited for', async () => {
      fake.set({ delayMs: 400 });
      const res = await chat({ model: 'llm-4o', messages: MESSAGES });
      assert.equal(res.statusCode, 200, res.body);
    });
  });

  describe('streaming', () => {
    test('arrives as several chunks, as text/event-stream, ending with data: [DONE]', async () => {
      fake.set({ chunks: 6, chunkSize: 10, chunkDelayMs: 40 });
      const res = await fetchChat({ model: 'llm-4o-proxied', messages: MESSAGES, stream: true });
      assert.equal(res.status, 200);
      assert.match(String(res.headers.get('content-type')), /^text\/event-stream/);
      assert.equal(res.headers.get('cache-control'), 'no-cache, no-transform');
      const reads: string[] = [];
      const decoder = new TextDecoder();
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) reads.push(decoder.decode(chunk, { stream: true }));
      const text = reads.join('');
      assert.ok(reads.length >= 3, `expected the stream in several reads, got ${reads.length}`);
      assert.ok(text.endsWith('data: [DONE]\n\n'), JSON.stringify(text.slice(-40)));
      assert.equal(sseData(text).filter((d) => d === '[DONE]').length, 1, 'one [DONE], the upstream\'s');
      assert.equal(streamedContent(text), fake.expectedContent());
      const first = JSON.parse(sseData(text)[0]!);
      assert.equal(first.object, 'chat.completion.chunk');
      assert.equal(first.model, 'llm-4o', 'upstream bytes pass unchanged');
      assert.equal((fake.last()!.body as { stream: boolean }).stream, true);
      assert.equal(fake.last()!.headers.accept, 'text/event-stream');
    });

    test('adds data: [DONE] when the upstream ends without it', async () => {
      fake.set({ omitDone: true });
      const res = await chat({ model: 'llm-4o', messages: MESSAGES, stream: true });
      assert.equal(res.statusCode, 200);
      assert.ok(res.body.endsWith('\n\ndata: [DONE]\n\n'), JSON.stringify(res.body.slice(-40)));
      assert.equal(sseData(res.body).filter((d) => d === '[DONE]').length, 1);
      assert.equal(streamedContent(res.body), fake.expectedContent());
    });

    test('a 1 MB streamed completion arrives intact', async () => {
      fake.set({ chunks: 256, chunkSize: 4096 });
      const expected = fake.expectedContent();
      assert.equal(expected.length, 1024 * 1024);
      const res = await fetchChat({ model: 'llm-4.1', messages: MESSAGES, stream: true });
      assert.equal(res.status, 200);
      const text = await res.text();
      assert.ok(text.length > 1024 * 1024);
      const content = streamedContent(text);
      assert.equal(content.length, expected.length);
      assert.ok(content === expected, 'content differs from what the upstream sent');
      assert.ok(text.endsWith('data: [DONE]\n\n'));
    });

    test('a 1 MB non-streamed completion arrives intact', async () => {
      fake.set({ chunks: 256, chunkSize: 4096 });
      const res = await fetchChat({ model: 'llm-4.1', messages: MESSAGES });
      assert.equal(res.status, 200);
      const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
      assert.ok(body.choices[0]!.message.content === fake.expectedContent());
    });

    test('a client that disconnects aborts the upstream request', async () => {
      fake.set({ chunks: 200, chunkSize: 10, chunkDelayMs: 50 });
      const controller = new AbortController();
      const res = await fetchChat({ model: 'llm-4o', messages: MESSAGES, stream: true }, { signal: controller.signal });
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      const first = await reader.read();
      assert.equal(first.done, false);
      assert.match(new TextDecoder().decode(first.value), /^data: /);
      controller.abort();
      await reader.read().catch(() => undefined);
      const request = await eventually('the upstream request to be closed early', async () => (fake.last()?.aborted ? fake.last() : undefined), 5000);
      assert.equal(request.finished, false);
    });

    test('a client that disconnects while waiting for a non-streamed answer aborts the upstream request', async () => {
      fake.set({ delayMs: 5000 });
      const req = http.request(`${base}/api/llm/chat`, { method: 'POST', headers: { 'content-type': 'application/json', ...bearer(user.accessToken) } });
      req.on('error', () => {});
      req.end(JSON.stringify({ model: 'llm-4o', messages: MESSAGES }));
      await eventually('the upstream to receive the request', async () => fake.requests.length === 1, 5000);
      req.destroy();
      await eventually('the upstream request to be closed early', async () => fake.last()!.aborted, 3000);
    });

    test('an upstream that breaks off mid-stream ends with an error event and no [DONE]', async () => {
      // The pause lets each event leave the fake before it destroys the connection.
      fake.set({ chunks: 10, chunkSize: 8, breakAfter: 4, chunkDelayMs: 20 });
      const res = await fetchChat({ model: 'llm-4o', messages: MESSAGES, stream: true });
      assert.equal(res.status, 200);
      const text = await res.text();
      const data = sseData(text);
      assert.ok(!data.includes('[DONE]'));
      assert.deepEqual(JSON.parse(data.at(-1)!).error.type, 'upstream_error');
      assert.equal(data.length, 5, 'the four upstream events, then the error');
    });
  });
});

describe('chat proxy building blocks', () => {
  test('upstreamRequest drops withheld options and sets model and stream', () => {
    const body = upstreamRequest({ model: 'llm-5-nano-proxied', messages: [{ role: 'user', content: 'x' }], user: 'u', top_k: 3 } as never);
    assert.deepEqual(body, { model: 'llm-5-nano', messages: [{ role: 'user', content: 'x' }], stream: false, top_k: 3 });
  });

  test('errors map to the §7 statuses', () => {
    const status = (error: unknown) => chatError(error).status;
    assert.equal(status(new LlmError('not_configured', 'x')), 500);
    assert.equal(chatError(new LlmError('not_configured', 'x')).message, 'missing server configuration: the language-model upstream (LLM_BASE_URL) is not set');
    assert.equal(status(new LlmError('unreachable', 'x')), 502);
    assert.equal(status(new LlmError('timeout', 'x')), 502);
    assert.equal(status(new LlmError('invalid_response', 'x')), 502);
    assert.equal(status(new LlmError('http', 'x', { status: 400 })), 400);
    assert.equal(status(new LlmError('http', 'x', { status: 404 })), 400);
    assert.equal(status(new LlmError('http', 'x', { status: 403 })), 502);
    assert.equal(status(new LlmError('http', 'x', { status: 429 })), 429);
    assert.equal(status(new LlmError('http', 'x', { status: 503 })), 502);
    assert.equal(status(new Error('boom')), 502);
  });

  test('sanitizeUpstreamMessage removes keys and control characters and truncates', () => {
    assert.equal(sanitizeUpstreamMessage('Incorrect API key provided: sk-proj-****abcd.', []), 'Incorrect API key provided: [redacted]');
    assert.equal(sanitizeUpstreamMessage('bad secret-value here', ['secret-value']), 'bad [redacted] here');
    assert.equal(sanitizeUpstreamMessage('Bearer abc.def and\nnew\tline'), 'Bearer [redacted] and new line');
    assert.equal(sanitizeUpstreamMessage('y'.repeat(1000)).length, 300);
  });

  test('the SSE relay adds [DONE] on a clean end only, on any line ending', async () => {
    const run = async (chunks: string[], breakOff = false) => {
      const upstream = new PassThrough();
      const relay = relaySse(upstream);
      const out: string[] = [];
      relay.on('data', (chunk: Buffer) => out.push(chunk.toString()));
      const ended = new Promise((resolve) => relay.on('end', resolve));
      for (const chunk of chunks) upstream.write(chunk);
      if (breakOff) upstream.destroy(new Error('reset'));
      else upstream.end();
      await ended;
      return out.join('');
    };
    assert.equal(await run(['data: {"a":1}\n\n', 'data: [DONE]\n\n']), 'data: {"a":1}\n\ndata: [DONE]\n\n');
    assert.equal(await run(['data: {"a":1}\n\ndata: [DO', 'NE]']), 'data: {"a":1}\n\ndata: [DONE]');
    assert.equal(await run(['data: {"a":1}\n\n']), 'data: {"a":1}\n\ndata: [DONE]\n\n');
    assert.equal(await run(['data: {"a":1}\n']), 'data: {"a":1}\n\ndata: [DONE]\n\n');
    assert.equal(await run(['data: {"a":1}']), 'data: {"a":1}\n\ndata: [DONE]\n\n');
    assert.equal(await run([]), 'data: [DONE]\n\n');
    const broken = await run(['data: {"a":1}\n\ndata: {"b"'], true);
    assert.match(broken, /^data: \{"a":1\}\n\ndata: \{"b"\n\ndata: \{"error":\{"message":"The model provider's stream was interrupted"/);
    assert.doesNotMatch(broken, /\[DONE\]/);
  });
});

/** An LlmProvider whose target a test can change while the app runs. */
class SwitchableLlm implements LlmProvider {
  constructor(public current: LlmProvider) {}
  get configured() {
    return this.current.configured;
  }
  openChatCompletion: LlmProvider['openChatCompletion'] = (body, options) => this.current.openChatCompletion(body, options);
  chatCompletion: LlmProvider['chatCompletion'] = (body, options) => this.current.chatCompletion(body, options);
  close() {
    this.current.close();
  }
}

/** A port nothing listens on. */
async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe(`chat proxy: unreachable and stalled upstreams (${ENGINE})`, () => {
  const TIMEOUTS = { connectMs: 500, responseMs: 700, idleMs: 700 };
  let fake: FakeLlmUpstream;
  let runtime: Runtime;
  let drop: () => Promise<void>;
  let removeDir: () => void;
  let llm: SwitchableLlm;
  let user: TestUser;

  before(async () => {
    fake = await FakeLlmUpstream.start();
    llm = new SwitchableLlm(new OpenAiCompatibleLlm({ baseUrl: fake.url, apiKey: 'up-key' }, TIMEOUTS));
    const data = tempDir();
    const database = await scratchDatabase();
    drop = database.drop;
    removeDir = data.remove;
    // The shared ai module replaced by one whose upstream client has short timeouts.
    const modules = MODULES.filter((m) => m.name !== 'ai').concat(createAiModule({ llm: () => llm }));
    runtime = await startRuntime(testConfig({}, data.dir), { database: database.target, logger: pino({ level: 'silent' }), modules });
    user = await signUp(runtime as TestRuntime);
  });
  after(async () => {
    await runtime?.close();
    await drop?.();
    removeDir?.();
    await fake?.close();
  });
  beforeEach(() => fake.reset());

  const chat = (payload: Record<string, unknown>) =>
    runtime.app!.inject({ method: 'POST', url: '/api/llm/chat', headers: bearer(user.accessToken), payload });

  test('connection refused is 502', async () => {
    const saved = llm.current;
    llm.current = new OpenAiCompatibleLlm({ baseUrl: `http://127.0.0.1:${await deadPort()}/v1`, apiKey: 'up-key' }, TIMEOUTS);
    try {
      const body = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES }), 502, 'bad_gateway');
      assert.match(body.message, /could not be reached \(ECONNREFUSED\)/);
    } finally {
      llm.current = saved;
    }
  });

  test('an upstream that never answers is 502 after the response timeout, and its request is closed', async () => {
    fake.set({ mode: 'hang' });
    const startedAt = Date.now();
    const body = assertEnvelope(await chat({ model: 'llm-4o', messages: MESSAGES, stream: true }), 502, 'bad_gateway');
    assert.match(body.message, /did not answer within/);
    assert.ok(Date.now() - startedAt < 5000);
    await eventually('the hung upstream request to be closed', async () => fake.last()?.aborted, 3000);
  });

  test('a stream that stalls ends with an error event after the idle timeout', async () => {
    fake.set({ chunks: 10, chunkSize: 8, stallAfter: 3 });
    const res = await chat({ model: 'llm-4o', messages: MESSAGES, stream: true });
    assert.equal(res.statusCode, 200);
    const data = sseData(res.body);
    assert.equal(data.length, 4);
    assert.match(JSON.parse(data.at(-1)!).error.message, /sent nothing for/);
    await eventually('the stalled upstream request to be closed', async () => fake.last()?.aborted, 3000);
  });

  test('the provider parses non-streaming completions and reports timeouts', async () => {
    fake.set({ content: 'parsed text' });
    const completion = await llm.chatCompletion({ model: 'llm-4o', messages: MESSAGES });
    assert.equal(completion.choices[0]!.message.content, 'parsed text');
    fake.set({ mode: 'hang' });
    await assert.rejects(llm.chatCompletion({ model: 'llm-4o', messages: MESSAGES }), (error: unknown) => error instanceof LlmError && error.kind === 'timeout');
    fake.set({ mode: 'status', status: 200, headers: { 'content-type': 'text/html' }, body: '<html></html>' });
    await assert.rejects(llm.chatCompletion({ model: 'llm-4o', messages: MESSAGES }), (error: unknown) => error instanceof LlmError && error.kind === 'invalid_response');
    assert.equal(fakeContent(5), 'The q');
  });
});
