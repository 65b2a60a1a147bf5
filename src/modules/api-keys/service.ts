import crypto from 'node:crypto';
import { perContext, type AppContext } from '../../platform/context.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError, type FieldError } from '../../platform/http/errors.ts';
import { sha256Hex } from '../../platform/crypto/tokens.ts';
import { accountsService } from '../accounts/service.ts';
import * as store from './store.ts';
import { apiKeyCache } from './key-cache.ts';
import { isUuid } from '../../platform/ids.ts';
import { isCursorOf } from '../../platform/db/keyset.ts';

/** §5 rule 6. Other modules name their route scopes from this list. */
export const KNOWN_SCOPES = ['kb:read', 'kb:write', 'assistants:read', 'assistants:write', 'calls:create'] as const;
export type KnownScope = (typeof KNOWN_SCOPES)[number];

export const DEFAULT_SCOPES = ['*'];
export const DEFAULT_RATE_LIMIT_PER_HOUR = 1000;
export const MAX_RATE_LIMIT_PER_HOUR = 1_000_000;
export const MAX_EXPIRES_IN_DAYS = 3650;

export type Environment = 'live' | 'test';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** Largest multiple of 62 that fits a byte: bytes at or above it are dropped so every character is equally likely. */
const UNBIASED_BYTE_LIMIT = 256 - (256 % BASE62.length);
const VISIBLE_CHARS = 8;
const SECRET_CHARS = 48;
const DAY_MS = 24 * 3600 * 1000;

/** Uniform base62 string from the CSPRNG, by rejection sampling (no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    // About 3% of bytes are rejected; ask for a little more than needed.
    for (const byte of crypto.randomBytes(Math.ceil((length - out.length) * 1.1) + 4)) {
      if (byte >= UNBIASED_BYTE_LIMIT) continue;
      out += BASE62[byte % BASE62.length];
      if (out.length === length) break;
    }
  }
  return out;
}

/**
 * §5 rule 3: `svc_live_` or `svc_test_`, 8 visible characters, then 48 secret
 * ones. The prefix (with the visible part) is stored to recognise the key in
 * lists; the visible part is random too, so it tells nothing about the rest.
 */
export function generateKey(environment: Environment): { fullKey: string; keyPrefix: string } {
  const keyPrefix = `svc_${environment}_${randomBase62(VISIBLE_CHARS)}`;
  return { fullKey: `${keyPrefix}${randomBase62(SECRET_CHARS)}`, keyPrefix };
}

/**
 * A scope is `*`, a known scope, or `prefix*` covering at least one known
 * scope: a wildcard that matches nothing is almost always a typo, and an
 * unknown exact scope would silently grant nothing.
 */
export function scopeProblems(scopes: readonly string[], field = 'permissions.scopes'): FieldError[] {
  if (scopes.length === 0) return [{ field, message: 'must list at least one scope; use ["*"] for every scope' }];
  const problems: FieldError[] = [];
  scopes.forEach((scope, i) => {
    if (scope === '*' || (KNOWN_SCOPES as readonly string[]).includes(scope)) return;
    if (scope.endsWith('*') && KNOWN_SCOPES.some((known) => known.startsWith(scope.slice(0, -1)))) return;
    problems.push({
      field: `${field}[${i}]`,
      message: `unknown scope "${scope}"; use *, one of ${KNOWN_SCOPES.join(', ')}, or a prefix ending in * such as kb:*`,
    });
  });
  return problems;
}

/** §2.2 key metadata as every endpoint returns it; never the key or its hash. */
export interface ApiKeyMetadata {
  id: string;
  name: string;
  description: string | null;
  key_prefix: string;
  environment: Environment;
  permissions: { scopes: string[]; rate_limit_per_hour: number };
  last_used_at: string | null;
  expires_at: string | null;
  is_active: boolean;
  revoked_at: string | null;
  created_at: string;
  created_by: string | null;
}

export interface CreateInput {
  accountSlug: string;
  name: string;
  description?: string;
  environment?: Environment;
  expiresInDays?: number;
  permissions?: { scopes?: string[]; rate_limit_per_hour?: number };
}

export interface UpdateInput {
  name?: string;
  description?: string | null;
  isActive?: boolean;
  /** ISO 8601 date-time in the future, or null to remove the expiry. */
  expiresAt?: string | null;
  permissions?: { scopes?: string[]; rate_limit_per_hour?: number };
}

export interface AuditEvent {
  id: string;
  api_key_id: string;
  key_prefix: string;
  event: store.ApiKeyEvent;
  actor_user_id: string | null;
  changes: Record<string, unknown>;
  created_at: string;
}

const iso = (date: Date | null): string | null => (date ? date.toISOString() : null);

function metadata(row: store.ApiKeyRow): ApiKeyMetadata {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    key_prefix: row.key_prefix,
    environment: row.environment,
    permissions: { scopes: row.scopes, rate_limit_per_hour: row.rate_limit_per_hour },
    last_used_at: iso(row.last_used_at),
    expires_at: iso(row.expires_at),
    is_active: row.is_active,
    revoked_at: iso(row.revoked_at),
    created_at: row.created_at.toISOString(),
    created_by: row.created_by,
  };
}

/** Repeated scopes add nothing; keep the first of each, in order. */
function unique(scopes: readonly string[]): string[] {
  return [...new Set(scopes)];
}

function sameScopes(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((scope, i) => scope === b[i]);
}

/** Key management is for people (§4.2); the auth hook already refuses API keys on these routes. */
function requireUser(actor: Actor): Extract<Actor, { kind: 'user' }> {
  if (actor.kind !== 'user') throw new AppError('unauthorized', 'API keys are managed by signed-in workspace owners and admins, not by API keys');
  return actor;
}

export class ApiKeysService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /** §5 rule 5: any member sees metadata. Revoked keys only on request, newest first. */
  async list(actor: Actor, input: { accountSlug: string; includeRevoked?: boolean }): Promise<ApiKeyMetadata[]> {
    const { account } = await accountsService(this.ctx).access(requireUser(actor), { accountSlug: input.accountSlug }, 'member');
    const rows = await store.listKeys(this.db.kysely, account.id, { includeRevoked: input.includeRevoked ?? false });
    return rows.map(metadata);
  }

  /** Owners and admins; the plaintext is returned here once and never stored. */
  async create(actor: Actor, input: CreateInput): Promise<ApiKeyMetadata & { fullKey: string }> {
    const user = requireUser(actor);
    const { account } = await accountsService(this.ctx).access(user, { accountSlug: input.accountSlug }, 'admin');
    const scopes = unique(input.permissions?.scopes ?? DEFAULT_SCOPES);
    const problems = scopeProblems(scopes);
    if (problems.length) throw new AppError('validation_failed', `Invalid scopes: ${problems.map((p) => p.message).join('; ')}`, problems);
    const environment = input.environment ?? 'live';
    const expiresAt = input.expiresInDays === undefined ? null : new Date(Date.now() + input.expiresInDays * DAY_MS);
    const { fullKey, keyPrefix } = generateKey(environment);

    const row = await this.db.transaction(async (trx) => {
      const created = await store.insertKey(trx, {
        accountId: account.id,
        name: input.name,
        description: input.description ?? null,
        environment,
        keyPrefix,
        keyHash: sha256Hex(fullKey),
        scopes,
        rateLimitPerHour: input.permissions?.rate_limit_per_hour ?? DEFAULT_RATE_LIMIT_PER_HOUR,
        expiresAt,
        createdBy: user.userId,
      });
      await store.insertEvent(trx, {
        accountId: account.id,
        apiKeyId: created.id,
        event: 'created',
        actorUserId: user.userId,
        changes: {
          name: created.name,
          description: created.description,
          environment: created.environment,
          scopes: created.scopes,
          rate_limit_per_hour: created.rate_limit_per_hour,
          expires_at: iso(created.expires_at),
        },
      });
      return created;
    });
    return { ...metadata(row), fullKey };
  }

  /**
   * Owners and admins change the label, status, expiry and permissions; the
   * key value stays. One audit event per request: `disabled`/`enabled` when
   * is_active flips (with any other changes in the same event), otherwise
   * `updated`. A request that changes nothing writes nothing.
   */
  async update(actor: Actor, id: string, input: UpdateInput): Promise<ApiKeyMetadata> {
    const user = requireUser(actor);
    const problems = this.updateProblems(input);
    if (problems.length) throw new AppError('validation_failed', `Invalid update: ${problems.map((p) => `${p.field} ${p.message}`).join('; ')}`, problems);
    const accountId = await this.manageableAccount(user, id);

    const updated = await this.db.transaction(async (trx) => {
      const current = await store.lockLiveKey(trx, accountId, id);
      if (!current) throw keyNotFound();
      const set: store.KeyChanges = {};
      const changes: Record<string, { from: unknown; to: unknown }> = {};
      const note = <K extends keyof store.KeyChanges>(column: K, from: store.KeyChanges[K], to: store.KeyChanges[K], shown: (v: store.KeyChanges[K]) => unknown = (v) => v) => {
        set[column] = to;
        changes[column] = { from: shown(from), to: shown(to) };
      };
      if (input.name !== undefined && input.name !== current.name) note('name', current.name, input.name);
      if (input.description !== undefined && input.description !== current.description) note('description', current.description, input.description);
      if (input.isActive !== undefined && input.isActive !== current.is_active) note('is_active', current.is_active, input.isActive);
      if (input.expiresAt !== undefined) {
        const next = input.expiresAt === null ? null : new Date(input.expiresAt);
        if (next?.getTime() !== current.expires_at?.getTime()) note('expires_at', current.expires_at, next, (d) => iso(d as Date | null));
      }
      const scopes = input.permissions?.scopes && unique(input.permissions.scopes);
      if (scopes !== undefined && !sameScopes(scopes, current.scopes)) note('scopes', current.scopes, scopes);
      const limit = input.permissions?.rate_limit_per_hour;
      if (limit !== undefined && limit !== current.rate_limit_per_hour) note('rate_limit_per_hour', current.rate_limit_per_hour, limit);

      if (Object.keys(changes).length === 0) return current;
      const row = await store.updateKey(trx, accountId, id, set);
      const event = set.is_active === undefined ? 'updated' : set.is_active ? 'enabled' : 'disabled';
      await store.insertEvent(trx, { accountId, apiKeyId: id, event, actorUserId: user.userId, changes });
      await store.notifyKeyChanged(trx, id);
      return row;
    });
    // After the commit: the auth hook's cache must not serve the old row on the next request.
    apiKeyCache(this.ctx).invalidate(id);
    return metadata(updated);
  }

  /**
   * Owners and admins revoke: the key stops working at once (every process's
   * auth cache drops it, key-cache.ts) and the row and its history stay for the
   * audit log. Revoking a revoked key is 404, like any key that cannot be used.
   */
  async revoke(actor: Actor, id: string): Promise<void> {
    const user = requireUser(actor);
    const accountId = await this.manageableAccount(user, id);
    await this.db.transaction(async (trx) => {
      const current = await store.lockLiveKey(trx, accountId, id);
      if (!current) throw keyNotFound();
      const revoked = await store.revokeKey(trx, accountId, id);
      if (!revoked) throw keyNotFound();
      await store.insertEvent(trx, {
        accountId,
        apiKeyId: id,
        event: 'revoked',
        actorUserId: user.userId,
        changes: { is_active: { from: current.is_active, to: false }, revoked_at: { from: null, to: iso(revoked.revoked_at) } },
      });
      await store.notifyKeyChanged(trx, id);
    });
    apiKeyCache(this.ctx).invalidate(id);
  }

  /** The workspace's key events, newest first; owners and admins only since it shows who did what. */
  async audit(actor: Actor, input: { accountSlug: string; limit?: number; before?: string }): Promise<{ events: AuditEvent[]; next_before: string | null }> {
    const { account } = await accountsService(this.ctx).access(requireUser(actor), { accountSlug: input.accountSlug }, 'admin');
    const limit = input.limit ?? 50;
    if (input.before !== undefined && !(await isCursorOf(this.db.kysely, { table: 'api_key_events', scopeColumn: 'account_id', scopeId: account.id, id: input.before }))) {
      throw new AppError('validation_failed', 'before must be the id of an event of this workspace (a next_before value)', [
        { field: 'before', message: 'is not an event of this workspace' },
      ]);
    }
    // One row more than asked tells whether another page exists without a count.
    const rows = await store.listEvents(this.db.kysely, account.id, { limit: limit + 1, before: input.before });
    const page = rows.slice(0, limit);
    return {
      events: page.map((row) => ({ ...row, created_at: row.created_at.toISOString() })),
      next_before: rows.length > limit ? page[page.length - 1]!.id : null,
    };
  }

  private updateProblems(input: UpdateInput): FieldError[] {
    const problems: FieldError[] = [];
    const permissions = input.permissions;
    const given = [input.name, input.description, input.isActive, input.expiresAt, permissions].filter((v) => v !== undefined);
    if (given.length === 0) {
      problems.push({ field: 'body', message: 'must change at least one of name, description, isActive, expiresAt, permissions' });
    }
    if (permissions !== undefined && permissions.scopes === undefined && permissions.rate_limit_per_hour === undefined) {
      problems.push({ field: 'permissions', message: 'must contain scopes or rate_limit_per_hour' });
    }
    if (permissions?.scopes !== undefined) problems.push(...scopeProblems(permissions.scopes));
    if (typeof input.expiresAt === 'string') {
      const at = Date.parse(input.expiresAt);
      if (Number.isNaN(at)) problems.push({ field: 'expiresAt', message: 'must be an ISO 8601 date-time' });
      else if (at <= Date.now()) problems.push({ field: 'expiresAt', message: 'must be in the future; disable or revoke the key to stop it now' });
    }
    return problems;
  }

  /**
   * The workspace of key `id` when the user may manage it. A key of a
   * workspace the user is not in is "not found", exactly like an unknown id;
   * a plain member of the key's workspace gets 403.
   */
  private async manageableAccount(user: Actor, id: string): Promise<string> {
    const accountId = isUuid(id) ? await store.accountOfKey(this.db.kysely, id) : undefined;
    if (!accountId) throw keyNotFound();
    try {
      await accountsService(this.ctx).access(user, { accountId }, 'admin');
    } catch (error) {
      if (error instanceof AppError && error.code === 'not_found') throw keyNotFound();
      throw error;
    }
    return accountId;
  }
}

function keyNotFound(): AppError {
  return new AppError('not_found', 'API key not found');
}

export const apiKeysService = perContext((ctx) => new ApiKeysService(ctx));
