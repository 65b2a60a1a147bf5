import type { FastifyReply } from 'fastify';
import { perContext, type AppContext } from '../../platform/context.ts';
import { AppError } from '../../platform/http/errors.ts';
import { API_KEY_PATTERN } from '../../platform/http/auth.ts';
import { sha256Hex } from '../../platform/crypto/tokens.ts';
import { apiKeyCache } from './key-cache.ts';

/** `last_used_at` is written at most this often per key, not on every request. */
const LAST_USED_WRITE_INTERVAL_MS = 60_000;
const RATE_WINDOW_SECONDS = 3600;

/**
 * The API-key half of the auth hook: find the key by the SHA-256 of what was
 * sent (the plaintext is never stored, and a hash lookup leaks no timing about
 * other keys), refuse revoked, disabled and expired keys at once, count the
 * request against the key's hourly limit and report it in X-RateLimit-*.
 */
export class ApiKeyAuthenticator {
  private readonly lastUsedWrites = new Map<string, number>();

  constructor(private readonly ctx: AppContext) {}

  async authenticate(key: string, reply: FastifyReply): Promise<{ apiKeyId: string; accountId: string; scopes: string[] } | null> {
    if (!API_KEY_PATTERN.test(key) || key.length > 100) return null;
    const hash = sha256Hex(key);
    const row = await apiKeyCache(this.ctx).lookup(hash, () =>
      this.ctx.db.kysely
        .selectFrom('api_keys')
        .select(['id', 'account_id', 'scopes', 'rate_limit_per_hour', 'is_active', 'revoked_at', 'expires_at'])
        .where('key_hash', '=', hash)
        .executeTakeFirst(),
    );
    if (!row || row.revoked_at) return null;
    if (!row.is_active) throw new AppError('unauthorized', 'This API key is disabled');
    if (row.expires_at && row.expires_at <= new Date()) throw new AppError('unauthorized', 'This API key has expired');

    const limit = await this.ctx.rateLimits.consume('api-key', row.id, row.rate_limit_per_hour, RATE_WINDOW_SECONDS);
    reply.header('x-ratelimit-limit', String(limit.limit));
    reply.header('x-ratelimit-remaining', String(limit.remaining));
    reply.header('x-ratelimit-reset', String(limit.resetAt));
    if (!limit.allowed) {
      throw new AppError('rate_limited', `This API key is limited to ${limit.limit} requests per hour; retry after ${limit.retryAfter} seconds`, undefined, {
        headers: { 'retry-after': String(limit.retryAfter) },
      });
    }
    this.touch(row.id);
    return { apiKeyId: row.id, accountId: row.account_id, scopes: row.scopes };
  }

  /** Best effort and off the request path: a lost update only delays last_used_at. */
  private touch(id: string): void {
    const now = Date.now();
    if (now - (this.lastUsedWrites.get(id) ?? 0) < LAST_USED_WRITE_INTERVAL_MS) return;
    this.lastUsedWrites.set(id, now);
    if (this.lastUsedWrites.size > 100_000) this.lastUsedWrites.clear();
    this.ctx.db.kysely
      .updateTable('api_keys')
      .set({ last_used_at: new Date(now) })
      .where('id', '=', id)
      .execute()
      .catch((error: unknown) => this.ctx.logger.warn({ err: error, apiKeyId: id }, 'could not record API key use'));
  }
}

export const apiKeyAuthenticator = perContext((ctx) => new ApiKeyAuthenticator(ctx));
