import { sql, type Kysely, type Selectable } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import type { ApiKeyTables } from './tables.ts';
import { KEY_CHANGED_CHANNEL } from './key-cache.ts';
import { olderThanCursor } from '../../platform/db/keyset.ts';

/**
 * Every SQL statement of the api-keys module except the auth hook's lookup
 * (authenticate.ts, on the hot path). Each statement that reads or writes a
 * key names its workspace, so a wrong id can never reach another tenant's row.
 * `db` is either the pool or a transaction handle.
 */
type Db = Kysely<Tables>;

export type ApiKeyRow = Omit<Selectable<ApiKeyTables['api_keys']>, 'key_hash'>;
export type ApiKeyEvent = ApiKeyTables['api_key_events']['event'];

/** Every column but the hash: nothing outside the auth hook ever needs it. */
const KEY_COLUMNS = [
  'id',
  'account_id',
  'name',
  'description',
  'environment',
  'key_prefix',
  'scopes',
  'rate_limit_per_hour',
  'last_used_at',
  'expires_at',
  'is_active',
  'revoked_at',
  'created_at',
  'created_by',
  'updated_at',
] as const;

export async function listKeys(db: Db, accountId: string, options: { includeRevoked: boolean }): Promise<ApiKeyRow[]> {
  let query = db.selectFrom('api_keys').select(KEY_COLUMNS).where('account_id', '=', accountId);
  if (!options.includeRevoked) query = query.where('revoked_at', 'is', null);
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').execute();
}

/** The workspace a key belongs to, or undefined; the caller checks access before touching the key. */
export async function accountOfKey(db: Db, id: string): Promise<string | undefined> {
  const row = await db.selectFrom('api_keys').select(['account_id']).where('id', '=', id).executeTakeFirst();
  return row?.account_id;
}

/** A key that is not revoked, locked until the transaction ends so concurrent writes apply one after the other. */
export async function lockLiveKey(db: Db, accountId: string, id: string): Promise<ApiKeyRow | undefined> {
  return db
    .selectFrom('api_keys')
    .select(KEY_COLUMNS)
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .forUpdate()
    .executeTakeFirst();
}

export interface NewKey {
  accountId: string;
  name: string;
  description: string | null;
  environment: 'live' | 'test';
  keyPrefix: string;
  keyHash: string;
  scopes: string[];
  rateLimitPerHour: number;
  expiresAt: Date | null;
  createdBy: string;
}

export async function insertKey(db: Db, key: NewKey): Promise<ApiKeyRow> {
  return db
    .insertInto('api_keys')
    .values({
      account_id: key.accountId,
      name: key.name,
      description: key.description,
      environment: key.environment,
      key_prefix: key.keyPrefix,
      key_hash: key.keyHash,
      scopes: JSON.stringify(key.scopes),
      rate_limit_per_hour: key.rateLimitPerHour,
      last_used_at: null,
      expires_at: key.expiresAt,
      revoked_at: null,
      created_by: key.createdBy,
    })
    .returning(KEY_COLUMNS)
    .executeTakeFirstOrThrow();
}

export interface KeyChanges {
  name?: string;
  description?: string | null;
  is_active?: boolean;
  expires_at?: Date | null;
  scopes?: string[];
  rate_limit_per_hour?: number;
}

export async function updateKey(db: Db, accountId: string, id: string, changes: KeyChanges): Promise<ApiKeyRow> {
  const { scopes, ...rest } = changes;
  return db
    .updateTable('api_keys')
    .set({ ...rest, ...(scopes === undefined ? {} : { scopes: JSON.stringify(scopes) }), updated_at: sql`now()` })
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .returning(KEY_COLUMNS)
    .executeTakeFirstOrThrow();
}

/** Revocation keeps the row (and so its events): is_active goes false too, so no reader can mistake it for usable. */
export async function revokeKey(db: Db, accountId: string, id: string): Promise<ApiKeyRow | undefined> {
  return db
    .updateTable('api_keys')
    .set({ revoked_at: sql`now()`, is_active: false, updated_at: sql`now()` })
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returning(KEY_COLUMNS)
    .executeTakeFirst();
}

export async function insertEvent(
  db: Db,
  event: { accountId: string; apiKeyId: string; event: ApiKeyEvent; actorUserId: string; changes: Record<string, unknown> },
): Promise<void> {
  await db
    .insertInto('api_key_events')
    .values({
      account_id: event.accountId,
      api_key_id: event.apiKeyId,
      event: event.event,
      actor_user_id: event.actorUserId,
      changes: JSON.stringify(event.changes),
    })
    .execute();
}

/**
 * Tells every API process's key cache (key-cache.ts) that key `id` changed.
 * Sent inside the write's transaction: PostgreSQL delivers it at commit, and
 * never if the write rolls back.
 */
export async function notifyKeyChanged(db: Db, id: string): Promise<void> {
  await sql`select pg_notify(${KEY_CHANGED_CHANNEL}, ${id})`.execute(db);
}

export interface EventRow {
  id: string;
  api_key_id: string;
  key_prefix: string;
  event: ApiKeyEvent;
  actor_user_id: string | null;
  changes: Record<string, unknown>;
  created_at: Date;
}

/**
 * Newest first, `limit` rows strictly older than the event `before`. The
 * cursor is compared in SQL on (created_at, id): timestamps keep microseconds
 * there, which a JavaScript Date would lose, and the id breaks ties.
 */
export async function listEvents(db: Db, accountId: string, options: { limit: number; before?: string }): Promise<EventRow[]> {
  let query = db
    .selectFrom('api_key_events as e')
    .innerJoin('api_keys as k', 'k.id', 'e.api_key_id')
    .select(['e.id', 'e.api_key_id', 'k.key_prefix', 'e.event', 'e.actor_user_id', 'e.changes', 'e.created_at'])
    .where('e.account_id', '=', accountId);
  if (options.before !== undefined) {
    query = query.where(olderThanCursor('e', { table: 'api_key_events', scopeColumn: 'account_id', scopeId: accountId, id: options.before }));
  }
  return query.orderBy('e.created_at', 'desc').orderBy('e.id', 'desc').limit(options.limit).execute();
}
