/**
 * The knowledge-base API (§4.5) as the kb suite calls it: over HTTP, with an
 * API key, exactly as a client would. One workspace and one assistant per
 * client.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import { sleep } from './time.ts';

export type SearchMode = 'semantic' | 'keyword' | 'hybrid';
export const SEARCH_MODES: readonly SearchMode[] = ['semantic', 'keyword', 'hybrid'];

/** §2.5 search hit. */
export interface SearchHit {
  rank: number;
  file_id: string;
  filename: string;
  chunk_index: number;
  page_number?: number | null;
  content: string;
  similarity: number;
  match_type: string;
  adjacent: boolean;
}

/** §2.5 knowledge-base file. */
export interface KbFile {
  id: string;
  filename: string;
  status: 'pending' | 'parsing' | 'embedding' | 'indexing' | 'ready' | 'failed';
  status_error: string | null;
  size_bytes: number;
  char_count: number | null;
  chunk_count: number | null;
}

/** The highest hourly limit a key may have: a benchmark must never be throttled. */
const RATE_LIMIT_PER_HOUR = 1_000_000;
const READY_POLL_MS = 100;

export class KbClient {
  private constructor(
    readonly baseUrl: string,
    readonly accountId: string,
    readonly assistantId: string,
    private readonly apiKey: string,
  ) {}

  /** A new user, their workspace (onboarding), an API key with every scope, and an assistant. */
  static async create(baseUrl: string, label: string): Promise<KbClient> {
    const signUp = await json<{ data: { access_token: string } }>(baseUrl, 'POST', '/api/auth/sign-up', {
      body: { email: `bench-${label}-${crypto.randomUUID().slice(0, 8)}@example.test`, password: 'bench-password-123' },
    });
    const token = signUp.data.access_token;
    const workspace = await json<{ accountId: string; slug: string }>(baseUrl, 'POST', '/api/onboarding/start', {
      body: { companyName: 'Kestrel Voice Bench', clientToken: crypto.randomUUID() },
      headers: { cookie: `sb-access-token=${token}` },
    });
    const key = await json<{ apiKey: { fullKey: string } }>(baseUrl, 'POST', '/api/api-keys', {
      body: { accountSlug: workspace.slug, name: 'kb bench', permissions: { scopes: ['*'], rate_limit_per_hour: RATE_LIMIT_PER_HOUR } },
      headers: { authorization: `Bearer ${token}` },
    });
    const apiKey = key.apiKey.fullKey;
    const assistant = await json<{ assistant: { id: string } }>(baseUrl, 'POST', '/api/assistants', {
      body: { name: 'Kestrel front desk' },
      headers: { authorization: `Bearer ${apiKey}` },
    });
    return new KbClient(baseUrl, workspace.accountId, assistant.assistant.id, apiKey);
  }

  /** The same workspace and assistant through another server process (e.g. after a restart on another port). */
  at(baseUrl: string): KbClient {
    return new KbClient(baseUrl, this.accountId, this.assistantId, this.apiKey);
  }

  private call<T>(method: string, path: string, body?: unknown): Promise<T> {
    return json<T>(this.baseUrl, method, path, { body, headers: { authorization: `Bearer ${this.apiKey}` } });
  }

  /** POST /api/kb/files with the whole file in memory. */
  async upload(filename: string, mimeType: string, bytes: Buffer): Promise<KbFile> {
    const form = new FormData();
    form.append('file', new Blob([bytes], { type: mimeType }), filename);
    const res = await fetch(`${this.baseUrl}/api/kb/files`, { method: 'POST', headers: { authorization: `Bearer ${this.apiKey}` }, body: form });
    if (!res.ok) throw new Error(`POST /api/kb/files ${filename}: ${res.status} ${await res.text()}`);
    return ((await res.json()) as { file: KbFile }).file;
  }

  /**
   * POST /api/kb/files with a body of `size` bytes produced by `source` while
   * it is sent, so the client never holds the file. `source` is called with
   * how many bytes are still wanted and returns the next piece (at most that).
   */
  uploadStream(filename: string, mimeType: string, size: number, source: (remaining: number) => Buffer): Promise<KbFile> {
    const boundary = `----hark-bench-${crypto.randomUUID()}`;
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: ${mimeType}\r\n\r\n`);
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const url = new URL('/api/kb/files', this.baseUrl);
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          agent: false,
          headers: {
            authorization: `Bearer ${this.apiKey}`,
            'content-type': `multipart/form-data; boundary=${boundary}`,
            'content-length': head.length + size + tail.length,
          },
        },
        (res) =>
          bodyText(res).then((text) => {
            if (res.statusCode !== 200) reject(new Error(`POST /api/kb/files ${filename}: ${res.statusCode} ${text.slice(0, 300)}`));
            else resolve((JSON.parse(text) as { file: KbFile }).file);
          }).catch(reject),
      );
      req.on('error', reject);
      let remaining = size;
      // Writes until the socket's buffer is full, then waits for it to drain: memory stays flat on this side too.
      const pump = () => {
        while (remaining > 0) {
          const piece = source(remaining);
          remaining -= piece.length;
          if (!req.write(piece)) return void req.once('drain', pump);
        }
        req.end(tail);
      };
      req.write(head);
      pump();
    });
  }

  file(fileId: string): Promise<KbFile> {
    return this.call<{ file: KbFile }>('GET', `/api/kb/files/${fileId}`).then((body) => body.file);
  }

  async deleteFile(fileId: string): Promise<void> {
    await this.call('DELETE', `/api/kb/files/${fileId}`);
  }

  async attach(fileId: string): Promise<void> {
    await this.call('POST', `/api/assistants/${this.assistantId}/knowledge-base`, { file_id: fileId });
  }

  /** Polls every READY_POLL_MS until the file is ready; a failed file or the deadline throws. */
  async waitReady(fileId: string, timeoutMs: number): Promise<KbFile> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const file = await this.file(fileId);
      if (file.status === 'ready') return file;
      if (file.status === 'failed') throw new Error(`${file.filename} failed: ${file.status_error}`);
      if (performance.now() > deadline) throw new Error(`${file.filename} still ${file.status} after ${timeoutMs} ms`);
      await sleep(READY_POLL_MS);
    }
  }

  async search(query: string, mode: SearchMode, topK: number): Promise<SearchHit[]> {
    return (await this.timedSearch(query, mode, topK)).hits;
  }

  /** The hits and how long the server says the query took to embed (its Server-Timing `embedding` metric). */
  async timedSearch(query: string, mode: SearchMode, topK: number): Promise<{ hits: SearchHit[]; embeddingMs?: number }> {
    const { body, headers } = await request<{ hits: SearchHit[] }>(this.baseUrl, 'POST', '/api/kb/search', {
      body: { assistant_id: this.assistantId, query, top_k: topK, mode },
      headers: { authorization: `Bearer ${this.apiKey}` },
    });
    const embedding = /(?:^|,\s*)embedding;dur=([\d.]+)/.exec(String(headers['server-timing'] ?? ''));
    return { hits: body.hits, embeddingMs: embedding ? Number(embedding[1]) : undefined };
  }
}

async function json<T>(baseUrl: string, method: string, path: string, options: { body?: unknown; headers?: Record<string, string> }): Promise<T> {
  return (await request<T>(baseUrl, method, path, options)).body;
}

/**
 * One JSON request over node:http with a kept-alive connection. The latency
 * table times these calls on the machine that runs the server: fetch (undici)
 * took about three times the client CPU per request (0.8 against 0.27 ms
 * here), CPU a 2-core machine's server would otherwise have had.
 */
const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 4 });

function request<T>(baseUrl: string, method: string, path: string, options: { body?: unknown; headers?: Record<string, string> }): Promise<{ body: T; headers: http.IncomingHttpHeaders }> {
  const url = new URL(path, baseUrl);
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: `${url.pathname}${url.search}`,
        method,
        agent: keepAlive,
        headers: { ...(payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }), ...options.headers },
      },
      (res) =>
        bodyText(res).then((text) => {
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) reject(new Error(`${method} ${path}: ${status} ${text.slice(0, 300)}`));
          else resolve({ body: (text === '' ? undefined : JSON.parse(text)) as T, headers: res.headers });
        }).catch(reject),
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** A response's whole body as text. */
function bodyText(res: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('end', () => resolve(Buffer.concat(chunks).toString()));
    res.on('error', reject);
  });
}
