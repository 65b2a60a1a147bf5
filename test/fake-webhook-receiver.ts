import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local webhook receiver on 127.0.0.1 (a random port), standing in for a
 * customer's endpoint. It records every request with its exact raw body, so a
 * test can check the signature the way a real receiver would, and answers
 * each path with a scripted sequence of status codes (then `200` by default).
 */

export interface ReceivedRequest {
  path: string;
  method: string;
  headers: http.IncomingHttpHeaders;
  /** The body bytes exactly as received, as UTF-8. */
  rawBody: string;
}

export interface FakeWebhookReceiver {
  /** The address of `path` on this receiver, e.g. `http://127.0.0.1:41234/hooks/a`. */
  url(path: string): string;
  /** Answers the next requests to `path` with these statuses, in order; afterwards with `then`. */
  script(path: string, statuses: number[], then?: number): void;
  /** Never answers requests to `path` (until close), to exercise the sender's timeout. */
  hang(path: string): void;
  /** Requests received on `path`, oldest first. */
  received(path: string): ReceivedRequest[];
  close(): Promise<void>;
}

export async function startFakeWebhookReceiver(): Promise<FakeWebhookReceiver> {
  const log: ReceivedRequest[] = [];
  const scripts = new Map<string, { statuses: number[]; then: number }>();
  const hanging = new Set<string>();

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0]!;
      log.push({ path, method: req.method ?? '', headers: req.headers, rawBody: Buffer.concat(chunks).toString('utf8') });
      if (hanging.has(path)) return;
      const script = scripts.get(path);
      const status = script ? (script.statuses.shift() ?? script.then) : 200;
      // A redirect points back at this receiver, so a test can tell whether it was followed.
      res.writeHead(status, { 'content-type': 'application/json', ...(status >= 300 && status < 400 ? { location: `http://127.0.0.1:${port}/redirected` } : {}) });
      res.end(JSON.stringify({ received: status < 300 }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: (path) => `http://127.0.0.1:${port}${path}`,
    script: (path, statuses, then = 200) => void scripts.set(path, { statuses: [...statuses], then }),
    hang: (path) => void hanging.add(path),
    received: (path) => log.filter((r) => r.path === path),
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** An http URL on 127.0.0.1 where nothing listens (connection refused), for failure tests. */
export async function unreachableUrl(): Promise<string> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/hooks`;
}

/** What a receiver does: HMAC-SHA256 over "<timestamp>.<raw body>" with the whole secret, compared in constant time. */
export function signatureIsValid(request: ReceivedRequest, secret: string): boolean {
  const timestamp = request.headers['x-hark-timestamp'];
  const header = request.headers['x-hark-signature'];
  if (typeof timestamp !== 'string' || typeof header !== 'string' || !header.startsWith('v1=')) return false;
  const expected = crypto.createHmac('sha256', secret).update(`${timestamp}.${request.rawBody}`).digest();
  const given = Buffer.from(header.slice(3), 'hex');
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}
