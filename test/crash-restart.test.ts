/**
 * Crash and restart: the real server process is killed with SIGKILL while
 * background work is in flight (no shutdown code runs, as when a machine or
 * container dies), started again on the same storage, and every piece of
 * work must still finish, once in the database and at least once outside.
 *
 * On PostgreSQL a job that was active when its worker died is retried only
 * after its queue expiry (expireInSeconds), as the queue cannot tell a dead
 * worker from a slow one; on PGlite the restarted process reclaims it at once
 * (one process owns an embedded database, so an active job is an orphan).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { apiClient, createApiKey, newTenant } from '../bench/lib/api-client.ts';
import { assistantWebhooks } from '../src/modules/assistants/webhooks.ts';
import { signatureIsValid, startFakeWebhookReceiver, type FakeWebhookReceiver, type ReceivedRequest } from './fake-webhook-receiver.ts';
import { eventually } from './helpers.ts';
import { killHard, serverStorage, stopGracefully, type ServerStorage } from './server-process-helpers.ts';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- response bodies under test

const ENGINE = process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite';
/**
 * Queue maintenance (which expires a dead worker's jobs) every second instead
 * of every 30, and every job's expiry capped at 30 s: without the cap a
 * webhook job comes back 70 s after the kill (10 s attempt timeout + 60 s) and
 * a knowledge-base job after 30 minutes. Both jobs tolerate a run that
 * overlaps a slow live one (deliveries are at least once, chunks are keyed by
 * position), which is what a short expiry risks.
 */
const SERVER_ENV = { JOBS_MAINTENANCE_SECONDS: '1', JOBS_EXPIRE_SECONDS: '30' };
const RECOVERY_TIMEOUT_MS = 240_000;
const TIMEOUT = { timeout: 420_000 };
const IN_PROCESSING = ['parsing', 'embedding', 'indexing'];

describe(`crash and restart (${ENGINE})`, TIMEOUT, () => {
  test('webhook deliveries in flight when the process is killed are all delivered after a restart, none lost', TIMEOUT, async () => {
    const EVENTS = 24;
    const HOOK_PATH = '/hooks/crash';
    const storage = await serverStorage();
    const receiver = await startFakeWebhookReceiver();
    // Each answer takes a while, so the four workers have deliveries in flight when the kill comes.
    const front = await slowFront(receiver, 1500);
    try {
      const first = await storage.start(SERVER_ENV);
      const api = apiClient(first.base);
      const tenant = await newTenant(api, 'crash-hooks');
      const created = await api.request<Json>('POST', '/api/assistants', {
        token: tenant.accessToken,
        json: { accountSlug: tenant.slug, name: 'Crash hooks', webhook: { url: front.url(HOOK_PATH) } },
      });
      const assistantId: string = created.assistant.id;
      const secret: string = created.assistant.webhook.secret;
      await stopGracefully(first);

      // No HTTP route queues a delivery yet (calls will emit them), so the burst is queued the way
      // those modules will, by emit(), with the server down: the embedded database admits one process at a time.
      const deliveryIds = await withDatabase(storage, async (rt) => {
        const ids: string[] = [];
        for (let n = 0; n < EVENTS; n++) {
          const id = await assistantWebhooks(rt).emit({ accountId: tenant.accountId, assistantId, event: 'call.ended', data: { call_id: `call-${n}` } });
          assert.ok(id, 'the assistant has a webhook URL and subscribes to call.ended');
          ids.push(id);
        }
        return ids;
      });

      const second = await storage.start(SERVER_ENV);
      await eventually('some deliveries answered and others still in flight', async () => front.answered() >= 4 && front.holding() >= 1, 60_000);
      await killHard(second);
      const beforeKill = new Set(receiver.received(HOOK_PATH).map(deliveryIdOf));
      assert.ok(beforeKill.size < EVENTS, 'the kill came before the burst was through');

      const third = await storage.start(SERVER_ENV);
      const api3 = apiClient(third.base);
      const listDeliveries = async () =>
        (await api3.request<Json>('GET', `/api/assistants/${assistantId}/webhooks/deliveries?limit=100`, { token: tenant.accessToken })).deliveries as Json[];
      await eventually(
        'every delivery succeeded',
        async () => {
          const list = await listDeliveries();
          return list.length === EVENTS && list.every((d) => d.status === 'succeeded');
        },
        RECOVERY_TIMEOUT_MS,
      );

      // At least once, each with a valid signature; nothing the burst did not queue.
      const arrivals = receiver.received(HOOK_PATH);
      for (const request of arrivals) assert.ok(signatureIsValid(request, secret), `bad signature on delivery ${deliveryIdOf(request)}`);
      const arrived = new Set(arrivals.map(deliveryIdOf));
      assert.deepEqual([...arrived].sort(), [...deliveryIds].sort());
      for (const request of arrivals) assert.equal(JSON.parse(request.rawBody).id, deliveryIdOf(request), 'body id and X-Hark-Delivery agree');

      // No row lost or duplicated: exactly the queued deliveries, each with its attempts.
      const list = await listDeliveries();
      assert.deepEqual(list.map((d) => d.id).sort(), [...deliveryIds].sort());
      for (const d of list) {
        assert.equal(d.test, false);
        assert.ok(d.attempts >= 1 && d.attempt_log.length === d.attempts, `delivery ${d.id}: ${d.attempts} attempts, ${d.attempt_log.length} logged`);
        assert.equal(d.attempt_log.at(-1).status_code, 200);
      }
      await stopGracefully(third);
    } finally {
      await front.close();
      await receiver.close();
      await storage.remove();
    }
  });

  test('knowledge-base files being processed when the process is killed all become ready after a restart, chunks neither lost nor doubled', TIMEOUT, async () => {
    const FILES = 3;
    const storage = await serverStorage();
    try {
      const first = await storage.start(SERVER_ENV);
      const api = apiClient(first.base);
      const tenant = await newTenant(api, 'crash-kb');
      const key = await createApiKey(api, tenant, { scopes: ['kb:read', 'kb:write'], rate_limit_per_hour: 10_000 });
      const fileIds: string[] = [];
      for (let n = 0; n < FILES; n++) {
        // Big enough that processing takes seconds, small enough that one run stays well inside the 30 s expiry on a busy machine.
        const form = new FormData();
        form.append('file', new Blob([generatedDocument(n, 60_000)], { type: 'text/markdown' }), `handbook-${n}.md`);
        const uploaded = await api.request<Json>('POST', '/api/kb/files', { token: key, form });
        assert.equal(uploaded.file.status, 'pending');
        fileIds.push(uploaded.file.id);
      }
      const listFiles = async (base: ReturnType<typeof apiClient>) => (await base.request<Json>('GET', '/api/kb/files', { token: key })).files as Json[];
      const caught = await eventually('a file in the middle of processing', async () => (await listFiles(api)).find((f) => IN_PROCESSING.includes(f.status)), 120_000);
      await killHard(first);

      const second = await storage.start(SERVER_ENV);
      const api2 = apiClient(second.base);
      await eventually(
        `every file ready (the one killed in ${caught.status} comes back after its job expiry)`,
        async () => {
          const files = await listFiles(api2);
          const failed = files.find((f) => f.status === 'failed');
          if (failed) throw new Error(`file ${failed.filename} failed: ${failed.status_error}`);
          return files.length === FILES && files.every((f) => f.status === 'ready');
        },
        RECOVERY_TIMEOUT_MS,
      );
      const files = await listFiles(api2);
      assert.deepEqual(files.map((f) => f.id).sort(), [...fileIds].sort(), 'no file lost or added');
      for (const file of files) assert.ok(file.chunk_count > 0 && file.char_count > 0, `${file.filename}: ${file.char_count} chars, ${file.chunk_count} chunks`);
      await stopGracefully(second);

      // Every position 0..chunk_count-1 stored exactly once, with the file's embedding model: nothing lost, nothing twice.
      await withDatabase(storage, async (rt) => {
        const stored = await rt.db.kysely
          .selectFrom('kb_files as f')
          .leftJoin('kb_chunks as c', 'c.file_id', 'f.id')
          .select((eb) => [
            'f.id',
            'f.chunk_count',
            eb.fn.count<string>('c.id').as('chunks'),
            eb.fn.count<string>('c.chunk_index').distinct().as('positions'),
            eb.fn.min<number>('c.chunk_index').as('first'),
            eb.fn.max<number>('c.chunk_index').as('last'),
            sql<string>`count(*) filter (where c.embedding_model is distinct from f.embedding_model)`.as('other_model'),
          ])
          .groupBy(['f.id', 'f.chunk_count'])
          .execute();
        assert.equal(stored.length, FILES);
        for (const row of stored) {
          const expected = row.chunk_count!;
          assert.deepEqual(
            { chunks: Number(row.chunks), positions: Number(row.positions), first: row.first, last: row.last, otherModel: Number(row.other_model) },
            { chunks: expected, positions: expected, first: 0, last: expected - 1, otherModel: 0 },
            `chunks of file ${row.id}`,
          );
        }
      });
    } finally {
      await storage.remove();
    }
  });
});

/** About `bytes` of Markdown, different for every `seed`: headings over paragraphs of plausible sentences. */
function generatedDocument(seed: number, bytes: number): string {
  const words = ['policy', 'customer', 'refund', 'shipping', 'warranty', 'account', 'invoice', 'support', 'delivery', 'return', 'order', 'payment', 'schedule', 'contract', 'service', 'device'];
  let state = seed * 7919 + 1;
  const next = () => (state = (state * 48271) % 2147483647);
  const parts: string[] = [`# Handbook ${seed}`];
  let size = parts[0]!.length;
  for (let section = 1; size < bytes; section++) {
    const lines = [`## Section ${seed}.${section}`];
    for (let sentence = 0; sentence < 12; sentence++) {
      const length = 8 + (next() % 10);
      const text = Array.from({ length }, () => words[next() % words.length]).join(' ');
      lines.push(`${text.charAt(0).toUpperCase()}${text.slice(1)} number ${next() % 100_000}.`);
    }
    const block = lines.join(' ').replace(/^(## [^ ]+ [^ ]+) /, '$1\n\n');
    parts.push(block);
    size += block.length + 2;
  }
  return parts.join('\n\n');
}

/**
 * Sits between Hark and the fake receiver: passes each request on at once (so
 * the receiver records it), then holds the receiver's answer back for
 * `delayMs`, so deliveries stay in flight long enough to be killed mid-way.
 */
async function slowFront(receiver: FakeWebhookReceiver, delayMs: number) {
  let answered = 0;
  let holding = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', async () => {
      const path = (req.url ?? '/').split('?')[0]!;
      const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('x-hark-') || name === 'content-type' || name === 'user-agent')) as Record<string, string>;
      holding++;
      const upstream = await fetch(receiver.url(path), { method: req.method, headers, body: Buffer.concat(chunks) });
      await upstream.body?.cancel();
      setTimeout(() => {
        holding--;
        answered++;
        // The sender may be dead by now; its socket is gone and this answer goes nowhere.
        res.writeHead(upstream.status).end();
      }, delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: (path: string) => `http://127.0.0.1:${port}${path}`,
    answered: () => answered,
    holding: () => holding,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function deliveryIdOf(request: ReceivedRequest): string {
  return String(request.headers['x-hark-delivery']);
}


/** Runs `fn` on the storage's database opened in this process (no server may be running), then closes it. */
async function withDatabase<T>(storage: ServerStorage, fn: (rt: Awaited<ReturnType<ServerStorage['open']>>) => Promise<T>): Promise<T> {
  const rt = await storage.open();
  try {
    return await fn(rt);
  } finally {
    await rt.close();
  }
}
