/**
 * One request as bytes on the wire, sent in process (`app.inject`, for
 * `npm test`) or over a real connection (`npm run fuzz`), with a time limit:
 * a request that gets no answer in time is a hang, which the gates report.
 */
import http from 'node:http';
import type { FastifyInstance } from 'fastify';

export interface WireRequest {
  method: string;
  /** Path and query string, percent-encoded. */
  url: string;
  headers: Record<string, string>;
  body?: string | Buffer;
}

export interface WireResponse {
  status: number;
  contentType: string;
  body: string;
}

export type Transport = (request: WireRequest) => Promise<WireResponse>;

export class HangError extends Error {
  constructor(request: WireRequest, timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms to ${request.method} ${request.url}`);
    this.name = 'HangError';
  }
}

function withTimeout<T>(promise: Promise<T>, request: WireRequest, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new HangError(request, timeoutMs)), timeoutMs);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

export function injectTransport(app: FastifyInstance, timeoutMs: number): Transport {
  return async (request) => {
    const res = await withTimeout(
      app.inject({ method: request.method as 'GET', url: request.url, headers: request.headers, payload: request.body }),
      request,
      timeoutMs,
    );
    return { status: res.statusCode, contentType: String(res.headers['content-type'] ?? ''), body: res.body };
  };
}

/**
 * A new connection per request: the server may close a connection after an
 * answer (a 431, an early 413 while the body is still being written), and a
 * reused connection would then fail the next, innocent request.
 */
export function httpTransport(baseUrl: string, timeoutMs: number): Transport {
  const base = new URL(baseUrl);
  return (request) =>
    withTimeout(
      new Promise<WireResponse>((resolve, reject) => {
        const body = request.body === undefined ? undefined : Buffer.from(request.body);
        const headers = { ...request.headers, ...(body ? { 'content-length': String(body.length) } : {}) };
        const req = http.request({ host: base.hostname, port: base.port, method: request.method, path: request.url, headers, agent: false }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type'] ?? ''), body: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        });
        req.on('error', reject);
        // The answer may come (and the request end) while the body is still being written; the write then fails on the socket alone.
        req.on('socket', (socket) => socket.on('error', () => {}));
        req.end(body);
      }),
      request,
      timeoutMs,
    );
}

const shellQuote = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;

/** Bodies larger than this go to a file (`bodyFile`) rather than onto the command line. */
const INLINE_BODY_BYTES = 4096;

/**
 * The request as a curl command against `baseUrl`, credentials included, to
 * reproduce a failure by hand. `bodyFile` stores a large body and returns its path.
 */
export function toCurl(baseUrl: string, request: WireRequest, bodyFile?: (body: Buffer) => string): string {
  // --path-as-is: curl would otherwise resolve the dot segments some cases send on purpose.
  const parts = ['curl -sS -i --path-as-is', '-X', request.method, shellQuote(baseUrl.replace(/\/$/, '') + request.url)];
  // curl's spelling of an empty header is `name;`.
  for (const [name, value] of Object.entries(request.headers)) parts.push('-H', shellQuote(value === '' ? `${name};` : `${name}: ${value}`));
  // Without this curl would add a form content type to a body sent without one.
  if (request.body !== undefined && !Object.keys(request.headers).some((name) => name.toLowerCase() === 'content-type')) parts.push('-H', shellQuote('content-type:'));
  if (request.body !== undefined) {
    const body = Buffer.from(request.body);
    if (bodyFile && body.length > INLINE_BODY_BYTES) return [...parts, '--data-binary', shellQuote(`@${bodyFile(body)}`)].join(' ');
    const printable = body.toString('utf8');
    // Bodies with bytes a shell argument cannot carry go through printf's escapes.
    const controls = [...printable].some((char) => char < ' ' && char !== '\n' && char !== '\t');
    if (Buffer.from(printable, 'utf8').equals(body) && !controls && !printable.includes('\u007f')) {
      parts.push('--data-binary', shellQuote(printable));
    } else {
      const escaped = [...body].map((byte) => `\\${byte.toString(8).padStart(3, '0')}`).join('');
      return `printf '${escaped}' | ${parts.join(' ')} --data-binary @-`;
    }
  }
  return parts.join(' ');
}
