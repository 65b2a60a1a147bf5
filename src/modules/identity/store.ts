import { sql, type Kysely } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import { REFRESH_TOKEN_SECONDS } from './tokens.ts';

type Db = Kysely<Tables>;

export const userColumns = ['id', 'email', 'password_hash', 'email_confirmed_at', 'user_metadata', 'mfa_secret_sealed', 'mfa_enabled_at', 'created_at'] as const;

export function findUserByEmail(db: Db, email: string) {
  return db
    .selectFrom('users')
    .select(userColumns)
    .where(sql`lower(email)`, '=', email.toLowerCase())
    .executeTakeFirst();
}

export function findUserById(db: Db, id: string) {
  return db.selectFrom('users').select(userColumns).where('id', '=', id).executeTakeFirst();
}

export async function insertUser(db: Db, user: { email: string; passwordHash: string | null; confirmed: boolean; metadata?: Record<string, unknown> }) {
  return db
    .insertInto('users')
    .values({
      email: user.email,
      password_hash: user.passwordHash,
      email_confirmed_at: user.confirmed ? new Date() : null,
      user_metadata: JSON.stringify(user.metadata ?? {}),
    })
    .onConflict((oc) => oc.expression(sql`lower(email)`).doNothing())
    .returning(userColumns)
    .executeTakeFirst();
}

export async function createSession(db: Db, session: { userId: string; method: string; userAgent?: string; ip?: string }) {
  return db
    .insertInto('auth_sessions')
    .values({
      user_id: session.userId,
      method: session.method,
      user_agent: session.userAgent?.slice(0, 500) ?? null,
      ip: session.ip ?? null,
      expires_at: new Date(Date.now() + REFRESH_TOKEN_SECONDS * 1000),
      revoked_at: null,
      revoked_reason: null,
    })
    .returning(['id'])
    .executeTakeFirstOrThrow();
}

export function insertRefreshToken(db: Db, sessionId: string, tokenHash: string) {
  return db
    .insertInto('refresh_tokens')
    .values({ session_id: sessionId, token_hash: tokenHash, expires_at: new Date(Date.now() + REFRESH_TOKEN_SECONDS * 1000), rotated_at: null })
    .execute();
}

/** The refresh token with its session, locked so concurrent refreshes take turns. */
export function findRefreshToken(db: Db, tokenHash: string) {
  return db
    .selectFrom('refresh_tokens as t')
    .innerJoin('auth_sessions as s', 's.id', 't.session_id')
    .select(['t.id', 't.session_id', 't.expires_at', 't.rotated_at', 's.user_id', 's.revoked_at', 's.expires_at as session_expires_at'])
    .where('t.token_hash', '=', tokenHash)
    .forUpdate()
    .executeTakeFirst();
}

export function markRotated(db: Db, tokenId: string) {
  return db.updateTable('refresh_tokens').set({ rotated_at: new Date() }).where('id', '=', tokenId).where('rotated_at', 'is', null).executeTakeFirst();
}

export function touchSession(db: Db, sessionId: string) {
  return db
    .updateTable('auth_sessions')
    .set({ last_used_at: new Date(), expires_at: new Date(Date.now() + REFRESH_TOKEN_SECONDS * 1000) })
    .where('id', '=', sessionId)
    .execute();
}

export function revokeSession(db: Db, sessionId: string, reason: string) {
  return db
    .updateTable('auth_sessions')
    .set({ revoked_at: new Date(), revoked_reason: reason })
    .where('id', '=', sessionId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
}

export function activeSession(db: Db, sessionId: string, userId: string) {
  return db
    .selectFrom('auth_sessions')
    .select(['id'])
    .where('id', '=', sessionId)
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', new Date())
    .executeTakeFirst();
}

export function listActiveSessions(db: Db, userId: string) {
  return db
    .selectFrom('auth_sessions')
    .select(['id', 'method', 'user_agent', 'ip', 'created_at', 'last_used_at', 'expires_at'])
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', new Date())
    .orderBy('last_used_at', 'desc')
    .execute();
}
