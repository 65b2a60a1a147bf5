import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import type { InjectOptions } from 'fastify';
import { eventually, startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, call, createKey, createWorkspace, sessionCookie, signUp, type TestKey, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import { signatureIsValid, startFakeWebhookReceiver, unreachableUrl, type FakeWebhookReceiver } from '../../../test/fake-webhook-receiver.ts';
import { createAssistantsModule } from './index.ts';
import { assistantWebhooks, DEFAULT_WEBHOOK_OPTIONS, WEBHOOK_DELIVERY_JOB, WEBHOOK_RETRY_LIMIT, webhookDeliveryJob } from './webhooks.ts';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- response bodies under test

const TIMEOUT = { timeout: 120_000 };
/** Per-attempt limit in these tests: far above a local round trip, short enough for the hanging receiver. */
const TIMEOUT_MS = 2_000;

/**
 * The real runtime, with the assistants module's delivery job retrying at
 * once instead of after 1-2 s, 2-4 s, ... (the queue, database and HTTP are real).
 */
function startRuntimeWithFastRetries(): Promise<TestRuntime> {
  return startTestRuntime({}, { replace: [createAssistantsModule({ retryDelaySeconds: 0, timeoutMs: TIMEOUT_MS })] });
}


describe(`assistant webhooks (${process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite'})`, TIMEOUT, () => {
  let rt: TestRuntime;
  let receiver: FakeWebhookReceiver;
  let owner: TestUser;
  let ws: TestWorkspace;
  let key: TestKey;

  before(async () => {
    rt = await startRuntimeWithFastRetries();
    receiver = await startFakeWebhookReceiver();
    owner = await signUp(rt);
    ws = await createWorkspace(rt, owner, 'Hooks Ltd');
    key = await createKey(rt, owner, ws, { permissions: { scopes: ['assistants:read', 'assistants:write'] } });
  });
  after(async () => {
    await rt?.destroy();
    await receiver?.close();
  });

  async function assistantWithWebhook(url: string | null, events?: string[]): Promise<{ id: string; secret: string }> {
    const res = await call(rt, {
      method: 'POST',
      url: '/api/assistants',
      ...sessionCookie(owner.accessToken),
      payload: { accountSlug: ws.slug, name: 'Hooked', webhook: { url, ...(events ? { events } : {}) } },
    });
    const assistant = res.json().assistant;
    return { id: assistant.id, secret: assistant.webhook.secret };
  }

  const sendTest = (id: string, options: Partial<InjectOptions> = sessionCookie(owner.accessToken), payload?: Json) =>
    rt.app!.inject({ method: 'POST', url: `/api/assistants/${id}/webhooks/test`, ...options, ...(payload ? { payload } : {}) });

  async function deliveries(id: string): Promise<Json[]> {
    return (await call(rt, { method: 'GET', url: `/api/assistants/${id}/webhooks/deliveries`, headers: bearer(key.fullKey) })).json().deliveries;
  }
  async function delivery(assistantId: string, deliveryId: string): Promise<Json | undefined> {
    return (await deliveries(assistantId)).find((d) => d.id === deliveryId);
  }

  describe('test endpoint', () => {
    test('sends one signed delivery in the documented format', async () => {
      const { id, secret } = await assistantWithWebhook(receiver.url('/signed'));
      const res = await sendTest(id);
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['delivery', 'success']);
      assert.equal(body.success, true);
      const { delivery: sent } = body;
      assert.deepEqual(Object.keys(sent).sort(), ['error', 'id', 'latency_ms', 'ok', 'status_code']);
      assert.equal(sent.ok, true);
      assert.equal(sent.status_code, 200);
      assert.equal(sent.error, null);
      assert.ok(Number.isInteger(sent.latency_ms) && sent.latency_ms >= 0);

      const [request, ...more] = receiver.received('/signed');
      assert.ok(request);
      assert.equal(more.length, 0);
      assert.equal(request.method, 'POST');
      assert.equal(request.headers['content-type'], 'application/json');
      assert.equal(request.headers['user-agent'], 'Hark-Webhooks/1');
      assert.equal(request.headers['x-hark-delivery'], sent.id);
      assert.match(String(request.headers['x-hark-timestamp']), /^\d{10}$/);
      assert.match(String(request.headers['x-hark-signature']), /^v1=[0-9a-f]{64}$/);
      assert.ok(signatureIsValid(request, secret), 'signature verifies with the secret shown at creation');
      assert.ok(!signatureIsValid(request, secret + 'x'), 'and not with another secret');
      assert.ok(!signatureIsValid({ ...request, rawBody: request.rawBody + ' ' }, secret), 'and not over other bytes');

      const payload = JSON.parse(request.rawBody);
      assert.deepEqual(Object.keys(payload), ['id', 'type', 'created_at', 'assistant_id', 'account_id', 'data']);
      assert.equal(payload.id, sent.id);
      assert.equal(payload.type, 'webhook.test');
      assert.equal(payload.assistant_id, id);
      assert.equal(payload.account_id, ws.id);
      assert.ok(!Number.isNaN(Date.parse(payload.created_at)));
      assert.equal(payload.data.test, true);

      const [recorded] = await deliveries(id);
      assert.ok(recorded);
      assert.equal(recorded.id, sent.id);
      assert.equal(recorded.status, 'succeeded');
      assert.equal(recorded.test, true);
      assert.equal(recorded.attempts, 1);
      assert.equal(recorded.last_status_code, 200);
      assert.deepEqual(recorded.payload, payload);
      assert.ok(recorded.completed_at);
      assert.equal(recorded.attempt_log.length, 1);
      assert.deepEqual({ ...recorded.attempt_log[0], created_at: undefined }, {
        attempt: 1,
        url: receiver.url('/signed'),
        status_code: 200,
        latency_ms: sent.latency_ms,
        error: null,
        created_at: undefined,
      });
    });

    test('a rotated secret signs the next delivery', async () => {
      const { id, secret } = await assistantWithWebhook(receiver.url('/rotated'));
      const rotated = (await call(rt, { method: 'POST', url: `/api/assistants/${id}/webhooks/rotate-secret`, headers: bearer(key.fullKey) })).json().secret;
      assert.equal((await sendTest(id, sessionCookie(owner.accessToken), { event: 'call.ended' })).json().delivery.ok, true);
      const [request] = receiver.received('/rotated');
      assert.ok(request);
      assert.equal(JSON.parse(request.rawBody).type, 'call.ended');
      assert.ok(signatureIsValid(request, rotated));
      assert.ok(!signatureIsValid(request, secret));
    });

    test("reports the receiver's failure as ok: false, recorded and not retried", async () => {
      receiver.script('/broken', [], 500);
      const broken = await assistantWithWebhook(receiver.url('/broken'));
      const res = await sendTest(broken.id, { headers: bearer(owner.accessToken) });
      assert.equal(res.statusCode, 200, res.body);
      const sent = res.json().delivery;
      assert.equal(sent.ok, false);
      assert.equal(sent.status_code, 500);
      assert.match(sent.error, /500/);
      const [recorded] = await deliveries(broken.id);
      assert.equal(recorded?.status, 'failed');
      assert.equal(recorded?.attempts, 1);

      const refused = await assistantWithWebhook(await unreachableUrl());
      const down = (await call(rt, { method: 'POST', url: `/api/assistants/${refused.id}/webhooks/test`, ...sessionCookie(owner.accessToken) })).json().delivery;
      assert.equal(down.ok, false);
      assert.equal(down.status_code, null);
      assert.match(down.error, /ECONNREFUSED/);
      assert.ok(Number.isInteger(down.latency_ms));
      const [failed] = await deliveries(refused.id);
      assert.equal(failed?.status, 'failed');
      assert.equal(failed?.attempt_log[0].status_code, null);
      assert.match(failed?.attempt_log[0].error, /ECONNREFUSED/);
    });

    test('redirects are reported, not followed; a silent receiver times out', async () => {
      receiver.script('/moved', [301]);
      const moved = await assistantWithWebhook(receiver.url('/moved'));
      const redirect = (await sendTest(moved.id)).json().delivery;
      assert.equal(redirect.ok, false);
      assert.equal(redirect.status_code, 301);
      assert.match(redirect.error, /redirects are not followed/);
      assert.equal(receiver.received('/redirected').length, 0);

      receiver.hang('/silent');
      const silent = await assistantWithWebhook(receiver.url('/silent'));
      const res = await sendTest(silent.id);
      assert.equal(res.statusCode, 200, res.body);
      const timedOut = res.json().delivery;
      assert.equal(timedOut.ok, false);
      assert.equal(timedOut.status_code, null);
      assert.equal(timedOut.error, `timed out after ${TIMEOUT_MS} ms`);
      assert.equal(receiver.received('/silent').length, 1);
    });

    test('400 without a webhook URL; sessions only', async () => {
      const { id } = await assistantWithWebhook(null);
      const res = await sendTest(id);
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(res.json().error, 'bad_request');
      assert.deepEqual(res.json().details, [{ field: 'webhook.url', message: 'is not set' }]);
      assert.equal((await sendTest(id, { headers: bearer(key.fullKey) })).statusCode, 401);
      assert.equal((await sendTest(id, {}, { event: 'nope' })).statusCode, 401);
      assert.equal((await sendTest(id, sessionCookie(owner.accessToken), { event: 'nope' })).statusCode, 400);
    });
  });

  describe('queued deliveries', () => {
    test('a receiver that fails twice then succeeds gets one successful delivery after three attempts', TIMEOUT, async () => {
      receiver.script('/flaky', [500, 503], 200);
      const { id, secret } = await assistantWithWebhook(receiver.url('/flaky'));
      const deliveryId = await assistantWebhooks(rt).emit({ accountId: ws.id, assistantId: id, event: 'call.ended', data: { call_id: 'c-1', duration_seconds: 42 } });
      assert.ok(deliveryId);

      const done = await eventually('the delivery to succeed', async () => {
        const d = await delivery(id, deliveryId);
        return d?.status === 'succeeded' ? d : undefined;
      }, 60_000);
      assert.equal(done.attempts, 3);
      assert.equal(done.last_status_code, 200);
      assert.equal(done.test, false);
      assert.deepEqual(done.attempt_log.map((a: Json) => [a.attempt, a.status_code]), [[1, 500], [2, 503], [3, 200]]);
      assert.match(done.attempt_log[0].error, /500/);
      assert.equal(done.attempt_log[2].error, null);

      const requests = receiver.received('/flaky');
      assert.equal(requests.length, 3);
      assert.equal(requests.filter((r) => r.rawBody === requests[0]!.rawBody).length, 3, 'every retry carries the same body');
      for (const request of requests) {
        assert.equal(request.headers['x-hark-delivery'], deliveryId);
        assert.ok(signatureIsValid(request, secret));
      }
      const payload = JSON.parse(requests[0]!.rawBody);
      assert.deepEqual(payload.data, { call_id: 'c-1', duration_seconds: 42 });
      assert.equal(payload.type, 'call.ended');
      assert.equal(payload.id, deliveryId);
    });

    test('a receiver that always fails gets retryLimit + 1 attempts, then the delivery is failed', TIMEOUT, async () => {
      receiver.script('/down', [], 502);
      const { id } = await assistantWithWebhook(receiver.url('/down'));
      const deliveryId = await assistantWebhooks(rt).emit({ accountId: ws.id, assistantId: id, event: 'call.started', data: {} });
      assert.ok(deliveryId);
      const failed = await eventually('the delivery to fail', async () => {
        const d = await delivery(id, deliveryId);
        return d?.status === 'failed' ? d : undefined;
      }, 90_000);
      assert.equal(failed.attempts, WEBHOOK_RETRY_LIMIT + 1);
      assert.equal(failed.attempt_log.length, WEBHOOK_RETRY_LIMIT + 1);
      assert.ok(failed.attempt_log.every((a: Json) => a.status_code === 502));
      assert.ok(failed.completed_at);
      assert.equal(receiver.received('/down').length, WEBHOOK_RETRY_LIMIT + 1);
    });

    test('only subscribed events of assistants with a URL are queued', async () => {
      const quiet = await assistantWithWebhook(receiver.url('/quiet'), ['call.summary']);
      assert.equal(await assistantWebhooks(rt).emit({ accountId: ws.id, assistantId: quiet.id, event: 'call.started', data: {} }), null);
      const none = await assistantWithWebhook(null);
      assert.equal(await assistantWebhooks(rt).emit({ accountId: ws.id, assistantId: none.id, event: 'call.ended', data: {} }), null);
      const other = await createWorkspace(rt, await signUp(rt), 'Elsewhere');
      assert.equal(await assistantWebhooks(rt).emit({ accountId: other.id, assistantId: quiet.id, event: 'call.summary', data: {} }), null, 'another workspace cannot emit for it');
      assert.deepEqual(await deliveries(quiet.id), []);
    });

    test('the job is enqueued in the transaction of the delivery row', async () => {
      const { id } = await assistantWithWebhook(receiver.url('/rolled-back'));
      let deliveryId: string | null = null;
      await assert.rejects(
        rt.db.transaction(async (trx) => {
          deliveryId = await assistantWebhooks(rt).emit({ accountId: ws.id, assistantId: id, event: 'call.ended', data: {} }, trx);
          throw new Error('the caller rolls back');
        }),
        /rolls back/,
      );
      assert.ok(deliveryId);
      const jobs = await sql<{ n: number }>`select count(*)::int as n from pgboss.job where data->>'deliveryId' = ${deliveryId}`.execute(rt.db.kysely);
      assert.equal(jobs.rows[0]?.n, 0);
      assert.deepEqual(await deliveries(id), []);
    });

    test('a delivery of an assistant deleted before its attempt ends failed, without a request', TIMEOUT, async () => {
      const { id } = await assistantWithWebhook(receiver.url('/gone'));
      const deliveryId = await rt.db.transaction(async (trx) => {
        const queued = await assistantWebhooks(rt).emit({ accountId: ws.id, assistantId: id, event: 'call.ended', data: {} }, trx);
        await trx.updateTable('assistants').set({ deleted_at: new Date() }).where('id', '=', id).execute();
        return queued;
      });
      assert.ok(deliveryId);
      const row = await eventually('the delivery to be abandoned', async () => {
        const d = await rt.db.kysely.selectFrom('webhook_deliveries').selectAll().where('id', '=', deliveryId).executeTakeFirstOrThrow();
        return d.status === 'failed' ? d : undefined;
      });
      assert.equal(row.attempts, 0);
      assert.match(row.last_error ?? '', /deleted/);
      assert.equal(receiver.received('/gone').length, 0);
    });
  });

  test('production policy: 5 retries, exponential backoff from 1 s, 10 s per attempt', () => {
    const job = webhookDeliveryJob(rt, DEFAULT_WEBHOOK_OPTIONS);
    assert.equal(job.name, WEBHOOK_DELIVERY_JOB);
    assert.equal(job.name, 'assistants.webhook-delivery');
    assert.equal(job.retryLimit, 5);
    assert.equal(job.retryDelaySeconds, 1);
    assert.equal(job.retryBackoff, true);
    assert.equal(DEFAULT_WEBHOOK_OPTIONS.timeoutMs, 10_000);
    assert.ok((job.expireInSeconds ?? 0) > DEFAULT_WEBHOOK_OPTIONS.timeoutMs / 1000, 'a running attempt is never expired');
  });

  test('the deliveries list pages and needs assistants:read', async () => {
    const { id } = await assistantWithWebhook(receiver.url('/paged'));
    const sent: string[] = [];
    for (let i = 0; i < 3; i++) sent.push((await sendTest(id)).json().delivery.id);
    const page1 = (await call(rt, { method: 'GET', url: `/api/assistants/${id}/webhooks/deliveries?limit=2`, headers: bearer(key.fullKey) })).json();
    assert.deepEqual(page1.deliveries.map((d: Json) => d.id), [sent[2], sent[1]]);
    assert.ok(page1.next_cursor);
    const page2 = (
      await call(rt, { method: 'GET', url: `/api/assistants/${id}/webhooks/deliveries?limit=2&cursor=${page1.next_cursor}`, ...sessionCookie(owner.accessToken) })
    ).json();
    assert.deepEqual(page2.deliveries.map((d: Json) => d.id), [sent[0]]);
    assert.equal(page2.next_cursor, null);

    const kbOnly = await createKey(rt, owner, ws, { permissions: { scopes: ['kb:read'] } });
    const refused = await rt.app!.inject({ method: 'GET', url: `/api/assistants/${id}/webhooks/deliveries`, headers: bearer(kbOnly.fullKey) });
    assert.equal(refused.statusCode, 403);
  });
});
