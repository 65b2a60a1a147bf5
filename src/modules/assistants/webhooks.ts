import crypto from 'node:crypto';
import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import type { FieldError } from '../../platform/http/errors.ts';
import { defineJob, type JobDefinition } from '../../platform/jobs/queue.ts';
import { randomToken, unseal } from '../../platform/crypto/tokens.ts';
import * as store from './store.ts';

/**
 * Outbound assistant webhooks (§6: "payload and delivery format: not shown").
 *
 * Wire format, one POST per attempt:
 *   body     `{id, type, created_at, assistant_id, account_id, data}` (JSON;
 *            `id` is the delivery id, the same on every retry: deduplicate on it)
 *   headers  `Content-Type: application/json`, `User-Agent: Hark-Webhooks/1`,
 *            `X-Hark-Delivery: <delivery id>`, `X-Hark-Timestamp: <unix seconds>`,
 *            `X-Hark-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>`
 * The HMAC key is the whole secret string (`whsec_...`) as UTF-8. Receivers
 * should recompute the HMAC over the raw bytes, compare in constant time and
 * refuse old timestamps (5 minutes is usual) to stop replays.
 *
 * Any 2xx within the timeout is success. Anything else (other status,
 * redirect, timeout, connection error) is a failed attempt, retried by the
 * job queue with exponential backoff; after the last retry the delivery is
 * `failed`. Redirects are not followed and response bodies are never read.
 */

export const WEBHOOK_EVENTS = ['call.started', 'call.ended', 'call.summary', 'webhook.test'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];
/** What a new assistant subscribes to. `webhook.test` deliveries are sent on request whatever the list says. */
export const DEFAULT_SUBSCRIBED_EVENTS: readonly WebhookEvent[] = ['call.started', 'call.ended', 'call.summary'];

export const WEBHOOK_DELIVERY_JOB = 'assistants.webhook-delivery';
/** Retries after the first attempt: six attempts in all. */
export const WEBHOOK_RETRY_LIMIT = 5;
export const SECRET_PREFIX = 'whsec_';
export const USER_AGENT = 'Hark-Webhooks/1';
export const MAX_WEBHOOK_URL = 2048;

export interface WebhookOptions {
  /**
   * Seconds before the first retry; each retry waits about twice as long as
   * the one before (pg-boss backoff: 1-2 s, 2-4 s, 4-8 s, ...). 0 retries at
   * once without backoff (tests).
   */
  retryDelaySeconds: number;
  /** Per-attempt limit for the whole request, connection included. */
  timeoutMs: number;
}

export const DEFAULT_WEBHOOK_OPTIONS: WebhookOptions = { retryDelaySeconds: 1, timeoutMs: 10_000 };

export function generateWebhookSecret(): string {
  return SECRET_PREFIX + randomToken(32);
}

/** Hex HMAC-SHA256 of `<timestamp>.<raw body>`, keyed with the secret string. */
export function webhookSignature(secret: string, timestamp: number, rawBody: string): string {
  return crypto.createHmac('sha256', secret).update(`${timestamp}.${rawBody}`).digest('hex');
}

/**
 * Checked when the URL is saved. Only http and https. Private and loopback
 * addresses are allowed on purpose: Hark is self-hosted and receivers on the
 * same network are the normal case (documented in the route descriptions).
 * Credentials in the URL are refused: the URL is shown in every GET, and the
 * signature is how a receiver authenticates us.
 */
export function webhookUrlProblems(url: string, field = 'webhook.url'): FieldError[] {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return [{ field, message: 'must be an absolute http or https URL' }];
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return [{ field, message: 'must use http or https' }];
  if (parsed.username || parsed.password) return [{ field, message: 'must not contain credentials; verify X-Hark-Signature in the receiver instead' }];
  return [];
}

/** The body exactly as sent, with the envelope keys in their documented order (jsonb does not keep order). */
export function deliveryBody(payload: Record<string, unknown>): string {
  const { id, type, created_at, assistant_id, account_id, data } = payload;
  return JSON.stringify({ id, type, created_at, assistant_id, account_id, data });
}

export interface AttemptOutcome extends store.AttemptResult {
  ok: boolean;
}

/** One signed POST. Never throws: every failure is described in `error`. */
export async function postWebhook(input: { url: string; secret: string; deliveryId: string; body: string; timeoutMs: number }): Promise<AttemptOutcome> {
  const timestamp = Math.floor(Date.now() / 1000);
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    const response = await fetch(input.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': USER_AGENT,
        'x-hark-delivery': input.deliveryId,
        'x-hark-timestamp': String(timestamp),
        'x-hark-signature': `v1=${webhookSignature(input.secret, timestamp, input.body)}`,
      },
      body: input.body,
      // A redirect could point anywhere, including at internal services: it is reported, not followed.
      redirect: 'manual',
      signal: AbortSignal.timeout(input.timeoutMs),
    });
    const latencyMs = elapsed();
    // The receiver's answer is not ours to keep; release the connection.
    await response.body?.cancel().catch(() => {});
    const status = response.status;
    const ok = status >= 200 && status < 300;
    const error = ok ? null : status >= 300 && status < 400 ? `answered ${status}; redirects are not followed` : `answered ${status}; expected a 2xx status`;
    return { url: input.url, statusCode: status, latencyMs, error, ok };
  } catch (error) {
    return { url: input.url, statusCode: null, latencyMs: elapsed(), error: describeFailure(error, input.timeoutMs), ok: false };
  }
}

function describeFailure(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return `timed out after ${timeoutMs} ms`;
  const cause = error instanceof Error ? (error.cause as { code?: string; message?: string } | undefined) : undefined;
  if (cause?.message) return `could not connect: ${cause.message}`;
  return `request failed: ${error instanceof Error ? error.message : String(error)}`;
}

/** A failed attempt, thrown so the queue retries; carries no URL or secret into the log. */
class AttemptFailed extends Error {
  override name = 'WebhookAttemptFailed';
}

export interface EventInput {
  accountId: string;
  assistantId: string;
  event: WebhookEvent;
  data: Record<string, unknown>;
}

export class AssistantWebhooks {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /**
   * Queues a delivery of `event` to the assistant's webhook, for the modules
   * that produce events (calls). Inside `trx` when given, so the delivery
   * exists only if the caller's write commits; the job is enqueued in the same
   * transaction as the delivery row. Returns the delivery id, or null when the
   * assistant has no webhook URL or is not subscribed to the event.
   */
  async emit(input: EventInput, trx?: Tx): Promise<string | null> {
    if (!(WEBHOOK_EVENTS as readonly string[]).includes(input.event)) throw new Error(`unknown webhook event ${input.event}`);
    const run = async (tx: Tx) => {
      const settings = await store.webhookSettings(tx, input.accountId, input.assistantId);
      if (!settings?.webhook_url || !settings.webhook_events.includes(input.event)) return null;
      const id = crypto.randomUUID();
      await store.insertDelivery(tx, { id, assistantId: input.assistantId, accountId: input.accountId, event: input.event, payload: envelope(id, input), isTest: false });
      await this.ctx.jobs.send(WEBHOOK_DELIVERY_JOB, { deliveryId: id } satisfies DeliveryJob, { trx: tx });
      return id;
    };
    return trx ? run(trx) : this.db.transaction(run);
  }

  /**
   * One attempt of a queued delivery (the job handler). The URL and secret
   * are read now, not when the event happened: a corrected URL or a rotated
   * secret applies to the retries. Throws when the attempt failed, so the
   * queue retries it; the last failure marks the delivery failed first.
   */
  async attempt(deliveryId: string, retryCount: number, options: WebhookOptions): Promise<void> {
    const target = await store.deliveryTarget(this.db.kysely, deliveryId);
    // Already finished: a re-run after a worker died between the POST and the commit.
    if (!target || target.status !== 'pending') return;
    if (target.deleted_at) return store.abandonDelivery(this.db.kysely, deliveryId, 'the assistant was deleted');
    if (!target.webhook_url) return store.abandonDelivery(this.db.kysely, deliveryId, 'the assistant no longer has a webhook URL');
    let secret: string;
    try {
      secret = unseal(this.ctx.secrets.secretsKey, target.webhook_secret_sealed);
    } catch {
      // Retrying cannot help: the key that sealed it is gone.
      return store.abandonDelivery(this.db.kysely, deliveryId, 'the webhook secret cannot be unsealed (SECRETS_KEY changed?); rotate the secret');
    }
    const outcome = await postWebhook({ url: target.webhook_url, secret, deliveryId, body: deliveryBody(target.payload), timeoutMs: options.timeoutMs });
    const last = retryCount >= WEBHOOK_RETRY_LIMIT;
    await this.db.transaction((trx) => store.recordAttempt(trx, deliveryId, outcome, outcome.ok ? 'succeeded' : last ? 'failed' : 'pending'));
    if (!outcome.ok) throw new AttemptFailed(`delivery ${deliveryId} attempt ${retryCount + 1} failed: ${outcome.error}`);
  }

  /**
   * One synchronous attempt, recorded like any other but never retried (the
   * test endpoint): the caller sees the receiver's answer at once.
   */
  async sendNow(input: EventInput & { url: string; secretSealed: string; timeoutMs: number }): Promise<{ id: string; outcome: AttemptOutcome }> {
    const id = crypto.randomUUID();
    const payload = envelope(id, input);
    const secret = unseal(this.ctx.secrets.secretsKey, input.secretSealed);
    // No transaction is held during the POST: on PGlite it would stall every other query.
    const outcome = await postWebhook({ url: input.url, secret, deliveryId: id, body: deliveryBody(payload), timeoutMs: input.timeoutMs });
    await this.db.transaction(async (trx) => {
      await store.insertDelivery(trx, { id, assistantId: input.assistantId, accountId: input.accountId, event: input.event, payload, isTest: true });
      await store.recordAttempt(trx, id, outcome, outcome.ok ? 'succeeded' : 'failed');
    });
    return { id, outcome };
  }
}

function envelope(id: string, input: EventInput): Record<string, unknown> {
  return { id, type: input.event, created_at: new Date().toISOString(), assistant_id: input.assistantId, account_id: input.accountId, data: input.data };
}

export interface DeliveryJob {
  deliveryId: string;
}

/** The queue's policy for deliveries; a 0 s delay means immediate retries (pg-boss backoff needs at least 1 s). */
export function webhookDeliveryJob(ctx: AppContext, options: WebhookOptions): JobDefinition<DeliveryJob> {
  return defineJob<DeliveryJob>({
    name: WEBHOOK_DELIVERY_JOB,
    retryLimit: WEBHOOK_RETRY_LIMIT,
    retryDelaySeconds: options.retryDelaySeconds,
    retryBackoff: options.retryDelaySeconds > 0,
    // Longer than one attempt can take, so a live attempt is never expired and run twice.
    expireInSeconds: Math.ceil(options.timeoutMs / 1000) + 60,
    concurrency: 4,
    handler: (payload, job) => assistantWebhooks(ctx).attempt(payload.deliveryId, job.retryCount, options),
  });
}

export const assistantWebhooks = perContext((ctx) => new AssistantWebhooks(ctx));
