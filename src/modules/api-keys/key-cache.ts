import pg from 'pg';
import type { AppContext } from '../../platform/context.ts';
import type { Database } from '../../platform/db/database.ts';

/** NOTIFY channel (store.ts notifyKeyChanged): the payload is the id of a key whose row changed. */
export const KEY_CHANGED_CHANNEL = 'hark_api_key_changed';
/** Backstop for changes made outside the service (manual SQL): such a change shows within this time. */
const TTL_MS = 30_000;
const MAX_ENTRIES = 10_000;
const RECONNECT_MS = 1000;

export interface KeyRecord {
  id: string;
  account_id: string;
  scopes: string[];
  rate_limit_per_hour: number;
  is_active: boolean;
  revoked_at: Date | null;
  expires_at: Date | null;
}

/**
 * The auth hook's key rows, by key hash, so a key-authenticated request costs
 * no database round trip: one per request more than halved throughput in
 * `npm run bench -- auth`. Revoking or disabling must still work at once, so
 * every write to a key invalidates it: in this process directly, and in every
 * other process through NOTIFY, sent inside the write's transaction (hence
 * delivered only once it commits) and received on a LISTEN connection.
 *
 * On PostgreSQL the cache is only used while that connection is listening;
 * when it drops, the cache is emptied and bypassed until it listens again, so
 * a missed notification can never keep a revoked key alive. PGlite is one
 * process per database, so in-process invalidation is all it needs.
 *
 * A load that started before an invalidation is not cached (`generation`):
 * it may have read the row as it was before the change.
 */
export class ApiKeyCache {
  private readonly entries = new Map<string, { record: KeyRecord; at: number }>();
  private generation = 0;
  private listener?: pg.Client;
  private listening: boolean;
  private connecting = false;
  private closed = false;
  private reconnectTimer?: NodeJS.Timeout;

  constructor(private readonly ctx: AppContext) {
    this.listening = ctx.db.kind === 'pglite';
  }

  /** Whether lookups are served from memory now (tests wait for it). */
  get active(): boolean {
    return this.listening && !this.closed;
  }

  /** A hit is answered synchronously: this runs on every key-authenticated request, and each promise costs there. */
  lookup(keyHash: string, load: () => Promise<KeyRecord | undefined>): KeyRecord | Promise<KeyRecord | undefined> {
    if (!this.active) {
      this.listen();
      return load();
    }
    const hit = this.entries.get(keyHash);
    if (hit && Date.now() - hit.at < TTL_MS) return hit.record;
    return this.loadAndKeep(keyHash, load);
  }

  private async loadAndKeep(keyHash: string, load: () => Promise<KeyRecord | undefined>): Promise<KeyRecord | undefined> {
    const generation = this.generation;
    const record = await load();
    // Unknown hashes are not cached: anyone can send those, and they would crowd out real keys.
    if (record && generation === this.generation && this.active) {
      this.entries.delete(keyHash);
      this.entries.set(keyHash, { record, at: Date.now() });
      if (this.entries.size > MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    }
    return record;
  }

  /** Drops key `id` from this process's cache; call after the write committed. */
  invalidate(id: string): void {
    this.generation++;
    for (const [hash, entry] of this.entries) if (entry.record.id === id) this.entries.delete(hash);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    this.clear();
    const listener = this.listener;
    this.listener = undefined;
    if (!listener) return;
    // Bounded: a connection to an unresponsive server must not hold up shutdown.
    await Promise.race([listener.end().catch(() => {}), new Promise<void>((resolve) => setTimeout(resolve, 2000).unref())]);
  }

  private clear(): void {
    this.generation++;
    this.entries.clear();
  }

  /** Starts the LISTEN connection on PostgreSQL if it is not up or coming up. */
  private listen(): void {
    if (this.closed || this.connecting || this.listener || !this.ctx.db.connectionString) return;
    this.connecting = true;
    // keepAlive: a silently dead connection would deliver nothing yet look healthy; TCP keepalive ends it.
    const client = new pg.Client({ connectionString: this.ctx.db.connectionString, application_name: 'hark-api-key-cache', keepAlive: true });
    const lost = (error?: unknown) => {
      if (this.listener !== client && !this.connecting) return;
      this.listening = false;
      this.listener = undefined;
      this.connecting = false;
      this.clear();
      client.end().catch(() => {});
      if (this.closed) return;
      if (error) this.ctx.logger.warn({ err: error }, 'API key cache: LISTEN connection lost; checking keys in the database until it is back');
      this.reconnectTimer = setTimeout(() => this.listen(), RECONNECT_MS);
      this.reconnectTimer.unref();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel === KEY_CHANGED_CHANNEL && message.payload) this.invalidate(message.payload);
    });
    client
      .connect()
      .then(() => client.query(`listen ${KEY_CHANGED_CHANNEL}`))
      .then(async () => {
        this.connecting = false;
        if (this.closed) {
          await client.end().catch(() => {});
          return;
        }
        this.listener = client;
        // Anything cached before this point could have missed a notification.
        this.clear();
        this.listening = true;
      })
      .catch(lost);
  }
}

const caches = new WeakMap<Database, ApiKeyCache>();

/**
 * One cache per database handle rather than per context object (perContext):
 * it caches that database's rows, and a runtime passes copies of its context
 * around (the Runtime object itself is one), which must all see one cache.
 */
export function apiKeyCache(ctx: AppContext): ApiKeyCache {
  let cache = caches.get(ctx.db);
  if (!cache) {
    cache = new ApiKeyCache(ctx);
    caches.set(ctx.db, cache);
  }
  return cache;
}
