import { sql, type Kysely, type Selectable } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import type { ModelSettings, TranscriberSettings, VoiceSettings } from './catalogue.ts';
import type { AssistantTables, AssistantType, DeliveryStatus, TelephonySettings } from './tables.ts';
import { olderThanCursor } from '../../platform/db/keyset.ts';

/**
 * Every SQL statement of the assistants module. Each statement that touches
 * an assistant or a delivery names its workspace (or reaches it through an
 * assistant already checked), so a wrong id can never reach another tenant's
 * row. `db` is either the pool or a transaction handle.
 */
export type Db = Kysely<Tables>;

/** An assistant without its sealed secret: only webhook code ever reads that. */
export type AssistantRow = Omit<Selectable<AssistantTables['assistants']>, 'webhook_secret_sealed'>;
export type DeliveryRow = Selectable<AssistantTables['webhook_deliveries']>;
export type AttemptRow = Selectable<AssistantTables['webhook_delivery_attempts']>;

const ASSISTANT_COLUMNS = [
  'id',
  'account_id',
  'name',
  'type',
  'prompt',
  'first_message',
  'voice',
  'model',
  'transcriptor_options',
  'telephony',
  'webhook_url',
  'webhook_events',
  'created_by',
  'created_at',
  'updated_at',
  'deleted_at',
] as const;

/** The workspace of a live (not deleted) assistant; the caller checks access before anything else. */
export async function accountOfAssistant(db: Db, id: string): Promise<string | undefined> {
  const row = await db.selectFrom('assistants').select(['account_id']).where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst();
  return row?.account_id;
}

export async function findAssistant(db: Db, accountId: string, id: string, options: { lock?: boolean } = {}): Promise<AssistantRow | undefined> {
  let query = db.selectFrom('assistants').select(ASSISTANT_COLUMNS).where('account_id', '=', accountId).where('id', '=', id).where('deleted_at', 'is', null);
  if (options.lock) query = query.forUpdate();
  return query.executeTakeFirst();
}

/**
 * Newest first, `limit` rows strictly older than the assistant `after`.
 * Deleted rows stay in the table, so a cursor survives its row's deletion.
 */
export async function listAssistants(db: Db, accountId: string, options: { limit: number; after?: string }): Promise<AssistantRow[]> {
  let query = db.selectFrom('assistants as a').select(ASSISTANT_COLUMNS.map((c) => `a.${c}` as const)).where('a.account_id', '=', accountId).where('a.deleted_at', 'is', null);
  if (options.after !== undefined) {
    query = query.where(olderThanCursor('a', { table: 'assistants', scopeColumn: 'account_id', scopeId: accountId, id: options.after }));
  }
  return query.orderBy('a.created_at', 'desc').orderBy('a.id', 'desc').limit(options.limit).execute();
}

export interface NewAssistant {
  accountId: string;
  name: string;
  type: AssistantType;
  prompt: string;
  firstMessage: string;
  voice: VoiceSettings;
  model: ModelSettings;
  transcriptorOptions: TranscriberSettings;
  telephony: TelephonySettings;
  webhookUrl: string | null;
  webhookEvents: string[];
  webhookSecretSealed: string;
  createdBy: string | null;
}

export async function insertAssistant(db: Db, a: NewAssistant): Promise<AssistantRow> {
  return db
    .insertInto('assistants')
    .values({
      account_id: a.accountId,
      name: a.name,
      type: a.type,
      prompt: a.prompt,
      first_message: a.firstMessage,
      voice: JSON.stringify(a.voice),
      model: JSON.stringify(a.model),
      transcriptor_options: JSON.stringify(a.transcriptorOptions),
      telephony: JSON.stringify(a.telephony),
      webhook_url: a.webhookUrl,
      webhook_events: JSON.stringify(a.webhookEvents),
      webhook_secret_sealed: a.webhookSecretSealed,
      created_by: a.createdBy,
      deleted_at: null,
    })
    .returning(ASSISTANT_COLUMNS)
    .executeTakeFirstOrThrow();
}

export interface AssistantChanges {
  name?: string;
  type?: AssistantType;
  prompt?: string;
  first_message?: string;
  voice?: VoiceSettings;
  model?: ModelSettings;
  transcriptor_options?: TranscriberSettings;
  telephony?: TelephonySettings;
  webhook_url?: string | null;
  webhook_events?: string[];
}

export async function updateAssistant(db: Db, accountId: string, id: string, changes: AssistantChanges): Promise<AssistantRow> {
  const { voice, model, transcriptor_options, telephony, webhook_events, ...plain } = changes;
  const json = (value: unknown) => (value === undefined ? undefined : JSON.stringify(value));
  const set = {
    ...plain,
    voice: json(voice),
    model: json(model),
    transcriptor_options: json(transcriptor_options),
    telephony: json(telephony),
    webhook_events: json(webhook_events),
  };
  return db
    .updateTable('assistants')
    .set({ ...(Object.fromEntries(Object.entries(set).filter(([, v]) => v !== undefined)) as typeof set), updated_at: sql`now()` })
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .returning(ASSISTANT_COLUMNS)
    .executeTakeFirstOrThrow();
}

/** Soft delete: false when there was no live assistant to delete. */
export async function softDeleteAssistant(db: Db, accountId: string, id: string): Promise<boolean> {
  const row = await db
    .updateTable('assistants')
    .set({ deleted_at: sql`now()`, updated_at: sql`now()` })
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .returning(['id'])
    .executeTakeFirst();
  return row !== undefined;
}

export async function replaceWebhookSecret(db: Db, accountId: string, id: string, sealed: string): Promise<boolean> {
  const row = await db
    .updateTable('assistants')
    .set({ webhook_secret_sealed: sealed, updated_at: sql`now()` })
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .returning(['id'])
    .executeTakeFirst();
  return row !== undefined;
}

/** Where and how to sign a delivery for a live assistant: URL (null when none), subscribed events, sealed secret. */
export async function webhookSettings(db: Db, accountId: string, id: string) {
  return db
    .selectFrom('assistants')
    .select(['webhook_url', 'webhook_events', 'webhook_secret_sealed'])
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
}

export interface NewDelivery {
  id: string;
  assistantId: string;
  accountId: string;
  event: string;
  payload: Record<string, unknown>;
  isTest: boolean;
}

export async function insertDelivery(db: Db, d: NewDelivery): Promise<void> {
  await db
    .insertInto('webhook_deliveries')
    .values({
      id: d.id,
      assistant_id: d.assistantId,
      account_id: d.accountId,
      event: d.event,
      payload: JSON.stringify(d.payload),
      is_test: d.isTest,
      last_status_code: null,
      last_error: null,
      completed_at: null,
    })
    .execute();
}

/**
 * A pending delivery with what an attempt needs, read at attempt time: the
 * assistant's current URL and secret (a rotated secret or a corrected URL
 * applies to retries), and whether the assistant still exists.
 */
export async function deliveryTarget(db: Db, deliveryId: string) {
  return db
    .selectFrom('webhook_deliveries as d')
    .innerJoin('assistants as a', 'a.id', 'd.assistant_id')
    .select(['d.id', 'd.status', 'd.payload', 'a.webhook_url', 'a.webhook_secret_sealed', 'a.deleted_at'])
    .where('d.id', '=', deliveryId)
    .executeTakeFirst();
}

export interface AttemptResult {
  url: string;
  statusCode: number | null;
  latencyMs: number;
  error: string | null;
}

/**
 * Counts one attempt on the delivery and records it, in the caller's
 * transaction. `status` is the delivery's state after this attempt.
 */
export async function recordAttempt(db: Db, deliveryId: string, result: AttemptResult, status: DeliveryStatus): Promise<void> {
  const { attempts } = await db
    .updateTable('webhook_deliveries')
    .set((eb) => ({
      attempts: eb('attempts', '+', 1),
      status,
      last_status_code: result.statusCode,
      last_error: result.error,
      completed_at: status === 'pending' ? null : sql<Date>`now()`,
    }))
    .where('id', '=', deliveryId)
    .returning(['attempts'])
    .executeTakeFirstOrThrow();
  await db
    .insertInto('webhook_delivery_attempts')
    .values({ delivery_id: deliveryId, attempt: attempts, url: result.url, status_code: result.statusCode, latency_ms: result.latencyMs, error: result.error })
    .execute();
}

/** Ends a pending delivery that can no longer be attempted (assistant deleted, webhook removed). */
export async function abandonDelivery(db: Db, deliveryId: string, reason: string): Promise<void> {
  await db
    .updateTable('webhook_deliveries')
    .set({ status: 'failed', last_error: reason, completed_at: sql`now()` })
    .where('id', '=', deliveryId)
    .where('status', '=', 'pending')
    .execute();
}

/** Newest first, like the assistants list; `after` is a delivery id of this assistant. */
export async function listDeliveries(db: Db, assistantId: string, options: { limit: number; after?: string }): Promise<DeliveryRow[]> {
  let query = db.selectFrom('webhook_deliveries as d').selectAll('d').where('d.assistant_id', '=', assistantId);
  if (options.after !== undefined) {
    query = query.where(olderThanCursor('d', { table: 'webhook_deliveries', scopeColumn: 'assistant_id', scopeId: assistantId, id: options.after }));
  }
  return query.orderBy('d.created_at', 'desc').orderBy('d.id', 'desc').limit(options.limit).execute();
}

export async function attemptsOf(db: Db, deliveryIds: readonly string[]): Promise<AttemptRow[]> {
  if (deliveryIds.length === 0) return [];
  return db.selectFrom('webhook_delivery_attempts').selectAll().where('delivery_id', 'in', deliveryIds).orderBy('delivery_id').orderBy('attempt').execute();
}
