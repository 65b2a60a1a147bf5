/**
 * A small OpenAI-compatible chat-completions and embeddings server for
 * tests and benchmarks, reached through LLM_BASE_URL like a real upstream
 * (`fake.url` ends in /v1, as OpenAI's base URL does).
 *
 * What it answers is set with `fake.set({...})` (in process) or `POST
 * /__fake/behaviour` (when it runs as its own process: `node --import tsx
 * test/fake-llm-upstream.ts` with PORT and HOST). It records every
 * completion and embeddings request (headers, body) and whether the client
 * closed it before the answer was complete.
 *
 * POST /v1/embeddings answers `fakeEmbedding(text, dimensions)` for each
 * input (the behaviour's fail, status, hang, reset and delay modes apply to
 * it too).
 */
import crypto from 'node:crypto';
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';

export interface FakeBehaviour {
  /**
   * normal: a completion, JSON or SSE by the request's `stream` (embeddings: `fakeEmbedding` of each input);
   * fail: 500 with an OpenAI-style error body;
   * status: `status` with `body` (and `headers`);
   * hang: never answers (until the client closes);
   * reset: destroys the connection without answering.
   */
  mode: 'normal' | 'fail' | 'status' | 'hang' | 'reset';
  /** Content is `chunks` pieces of `chunkSize` characters (one SSE chunk each when streaming). */
  chunks: number;
  chunkSize: number;
  /** Pause between streamed chunks. */
  chunkDelayMs: number;
  /** Pause before answering (a slow upstream). */
  delayMs: number;
  /** Streams end without `data: [DONE]`. */
  omitDone: boolean;
  /** Streams stop after this many chunks by destroying the connection. */
  breakAfter?: number;
  /** Streams stop sending (but keep the connection open) after this many chunks. */
  stallAfter?: number;
  /** Fixed content instead of the generated text. */
  content?: string;
  status: number;
  body: string;
  headers: Record<string, string>;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON, or the raw text when it is not JSON. */
  body: unknown;
  /** The client closed the connection before the answer was complete. */
  aborted: boolean;
  /** The whole answer was written. */
  finished: boolean;
}

const DEFAULTS: FakeBehaviour = {
  mode: 'normal',
  chunks: 5,
  chunkSize: 16,
  chunkDelayMs: 0,
  delayMs: 0,
  omitDone: false,
  status: 200,
  body: '',
  headers: {},
};

const WORDS = 'The quick brown fox jumps over the lazy dog while 0123456789 voices hum. ';
const CREATED = 1_700_000_000;

/** The deterministic content of a completion: `length` characters of text. */
export function fakeContent(length: number): string {
  return WORDS.repeat(Math.ceil(length / WORDS.length)).slice(0, length);
}

export function contentOf(behaviour: Pick<FakeBehaviour, 'chunks' | 'chunkSize' | 'content'>): string {
  return behaviour.content ?? fakeContent(behaviour.chunks * behaviour.chunkSize);
}

function completionJson(model: string, content: string): string {
  const completion_tokens = Math.ceil(content.length / 4);
  return JSON.stringify({
    id: 'chatcmpl-fake',
    object: 'chat.completion',
    created: CREATED,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 10, completion_tokens, total_tokens: 10 + completion_tokens },
  });
}

/** The SSE events of a streamed completion: a role chunk, one chunk per piece, a finish chunk, and [DONE] unless omitted. */
function streamEvents(model: string, behaviour: FakeBehaviour): Buffer[] {
  const content = contentOf(behaviour);
  const size = behaviour.content === undefined ? behaviour.chunkSize : Math.max(1, Math.ceil(content.length / behaviour.chunks));
  const chunk = (delta: Record<string, unknown>, finish: string | null) =>
    Buffer.from(
      `data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: CREATED, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`,
    );
  const events = [chunk({ role: 'assistant', content: '' }, null)];
  for (let i = 0; i < content.length; i += size) events.push(chunk({ content: content.slice(i, i + size) }, null));
  events.push(chunk({}, 'stop'));
  if (!behaviour.omitDone) events.push(Buffer.from('data: [DONE]\n\n'));
  return events;
}

/** text-embedding-3-small's size when a request does not ask for `dimensions`. */
const DEFAULT_EMBEDDING_DIMENSIONS = 1536;

/**
 * The deterministic unit vector the fake answers for `text`: numbers drawn
 * from SHA-256 of the text (so equal texts, and only they, get equal vectors).
 */
export function fakeEmbedding(text: string, dimensions = DEFAULT_EMBEDDING_DIMENSIONS): number[] {
  const values: number[] = [];
  for (let block = 0; values.length < dimensions; block++) {
    const digest = crypto.createHash('sha256').update(`${block}\0${text}`).digest();
    for (let i = 0; i + 4 <= digest.length && values.length < dimensions; i += 4) values.push(digest.readInt32BE(i) / 2 ** 31);
  }
  const norm = Math.hypot(...values);
  return values.map((v) => v / norm);
}

function embeddingsJson(body: unknown): { status: number; json: string } {
  const { input, model, dimensions } = (body ?? {}) as { input?: unknown; model?: unknown; dimensions?: unknown };
  const inputs = typeof input === 'string' ? [input] : input;
  const size = dimensions === undefined ? DEFAULT_EMBEDDING_DIMENSIONS : dimensions;
  if (!Array.isArray(inputs) || inputs.length === 0 || !inputs.every((i) => typeof i === 'string') || typeof model !== 'string' || !Number.isInteger(size) || (size as number) < 1) {
    return { status: 400, json: JSON.stringify({ error: { message: 'input must be a string or a non-empty array of strings, model a string, dimensions a positive integer', type: 'invalid_request_error' } }) };
  }
  const tokens = inputs.reduce((sum: number, text: string) => sum + Math.ceil(text.length / 4), 0);
  return {
    status: 200,
    json: JSON.stringify({
      object: 'list',
      data: inputs.map((text: string, index) => ({ object: 'embedding', index, embedding: fakeEmbedding(text, size as number) })),
      model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    }),
  };
}

/** Resolves on 'drain' or 'close', leaving no listener behind. */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done).off('close', done);
      resolve();
    };
    res.on('drain', done).on('close', done);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class FakeLlmUpstream {
  readonly requests: RecordedRequest[] = [];
  private behaviour: FakeBehaviour = { ...DEFAULTS };
  /** Bodies built once per behaviour and model: the benchmark must measure the proxy, not this server. */
  private cache = new Map<string, { json?: Buffer; events?: Buffer[] }>();

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    private readonly record: boolean,
  ) {}

  /** Listens on 127.0.0.1 (a free port unless given). `record: false` keeps no requests (long benchmark runs). */
  static async start(options: { port?: number; host?: string; record?: boolean } = {}): Promise<FakeLlmUpstream> {
    const server = http.createServer();
    // Streams outlive Node's default request timeout in the slow modes.
    server.requestTimeout = 0;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
    });
    const { address, port } = server.address() as AddressInfo;
    const fake = new FakeLlmUpstream(server, `http://${address}:${port}/v1`, options.record ?? true);
    server.on('request', (req, res) => void fake.handle(req, res));
    return fake;
  }

  /** Replaces the behaviour (unnamed settings go back to their defaults). */
  set(behaviour: Partial<FakeBehaviour>): void {
    this.behaviour = { ...DEFAULTS, ...behaviour };
    this.cache.clear();
  }

  /** Back to the defaults, with no recorded requests. */
  reset(): void {
    this.set({});
    this.requests.length = 0;
  }

  /** The content the current behaviour answers. */
  expectedContent(): string {
    return contentOf(this.behaviour);
  }

  /** The latest recorded request (completion or embeddings). */
  last(): RecordedRequest | undefined {
    return this.requests.at(-1);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const path = (req.url ?? '/').split('?')[0]!;

    if (req.method === 'GET' && path === '/health') return void res.end('ok');
    if (req.method === 'POST' && path === '/__fake/behaviour') {
      this.set(JSON.parse(raw) as Partial<FakeBehaviour>);
      return void res.end('{}');
    }
    if (req.method !== 'POST' || (path !== '/v1/chat/completions' && path !== '/v1/embeddings')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ error: { message: `no route ${req.method} ${path}`, type: 'invalid_request_error' } }));
    }

    let body: unknown = raw;
    try {
      body = JSON.parse(raw);
    } catch {
      // Recorded as text.
    }
    const entry: RecordedRequest = { method: req.method, path, headers: req.headers, body, aborted: false, finished: false };
    if (this.record) this.requests.push(entry);
    res.on('close', () => {
      if (res.writableFinished) entry.finished = true;
      else entry.aborted = true;
    });

    const behaviour = this.behaviour;
    if (behaviour.delayMs > 0) await sleep(behaviour.delayMs);
    if (res.destroyed) return;
    const model = typeof (body as { model?: unknown })?.model === 'string' ? (body as { model: string }).model : 'unknown';
    const stream = (body as { stream?: unknown })?.stream === true;

    switch (behaviour.mode) {
      case 'hang':
        return;
      case 'reset':
        return void req.socket.destroy();
      case 'fail':
        res.writeHead(500, { 'content-type': 'application/json' });
        return void res.end(JSON.stringify({ error: { message: 'The server had an error while processing your request (fake internal detail)', type: 'server_error' } }));
      case 'status':
        res.writeHead(behaviour.status, { 'content-type': 'application/json', ...behaviour.headers });
        return void res.end(behaviour.body);
      case 'normal':
        if (path === '/v1/embeddings') return this.embeddings(res, body);
        return stream ? this.stream(res, model, behaviour) : this.json(res, model, behaviour);
    }
  }

  private cached(model: string) {
    let entry = this.cache.get(model);
    if (!entry) this.cache.set(model, (entry = {}));
    return entry;
  }

  private json(res: ServerResponse, model: string, behaviour: FakeBehaviour): void {
    const entry = this.cached(model);
    entry.json ??= Buffer.from(completionJson(model, contentOf(behaviour)));
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': entry.json.length });
    res.end(entry.json);
  }

  private embeddings(res: ServerResponse, body: unknown): void {
    const { status, json } = embeddingsJson(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
    res.end(json);
  }

  private async stream(res: ServerResponse, model: string, behaviour: FakeBehaviour): Promise<void> {
    const entry = this.cached(model);
    const events = (entry.events ??= streamEvents(model, behaviour));
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    let sent = 0;
    for (const event of events) {
      if (res.destroyed) return;
      if (behaviour.breakAfter !== undefined && sent === behaviour.breakAfter) return void res.socket?.destroy();
      if (behaviour.stallAfter !== undefined && sent === behaviour.stallAfter) return;
      if (!res.write(event)) await drained(res);
      sent++;
      if (behaviour.chunkDelayMs > 0) await sleep(behaviour.chunkDelayMs);
    }
    res.end();
  }
}

// Run on its own (benchmarks): PORT and HOST as for Hark; requests are not recorded.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const fake = await FakeLlmUpstream.start({ port: Number(process.env.PORT ?? 0), host: process.env.HOST ?? '127.0.0.1', record: false });
  process.stdout.write(`fake LLM upstream listening at ${fake.url}\n`);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void fake.close().then(() => process.exit(0)));
}
