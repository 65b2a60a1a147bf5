import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import { AppError, type FieldError } from '../../platform/http/errors.ts';
import { dummyPasswordHash, hashPassword, verifyPassword } from '../../platform/crypto/passwords.ts';
import { randomToken, sha256Hex, unseal } from '../../platform/crypto/tokens.ts';
import { verifyTotp } from './mfa.ts';
import { ACCESS_TOKEN_SECONDS, AccessTokens } from './tokens.ts';
import * as store from './store.ts';

export interface ClientInfo {
  userAgent?: string;
  ip?: string;
}

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  expires_in: number;
  expires_at: number;
  user: { id: string; email: string };
}

/** Sign-in failures allowed per window before 429, per email and per client address. */
export const SIGN_IN_LIMITS = { perEmail: 10, perAddress: 50, windowSeconds: 15 * 60 };
const EMAIL_CONFIRM_SECONDS = 24 * 3600;

/** The minimum password policy: long enough, not trivially guessable. */
export function passwordProblems(password: string, email: string): FieldError[] {
  const problems: string[] = [];
  if (password.length < 8) problems.push('must be at least 8 characters');
  if (password.length > 128) problems.push('must be at most 128 characters');
  if (/^(.)\1*$/.test(password)) problems.push('must not repeat a single character');
  if (password.toLowerCase() === email.toLowerCase() || password.toLowerCase() === email.split('@')[0]?.toLowerCase()) {
    problems.push('must not be your email address');
  }
  return problems.map((message) => ({ field: 'password', message }));
}

export class IdentityService {
  readonly accessTokens: AccessTokens;

  constructor(private readonly ctx: AppContext) {
    this.accessTokens = new AccessTokens(ctx.secrets.jwtSecret);
  }

  private get db() {
    return this.ctx.db;
  }

  /** Starts a session and returns its first token pair; used by every sign-in method. */
  async startSession(trx: Tx, user: { id: string; email: string }, method: string, client: ClientInfo): Promise<TokenPair> {
    const session = await store.createSession(trx, { userId: user.id, method, userAgent: client.userAgent, ip: client.ip });
    return this.issuePair(trx, user, session.id);
  }

  private async issuePair(trx: Tx, user: { id: string; email: string }, sessionId: string): Promise<TokenPair> {
    const refreshToken = randomToken(32);
    await store.insertRefreshToken(trx, sessionId, sha256Hex(refreshToken));
    const access = await this.accessTokens.issue({ userId: user.id, sessionId });
    return {
      access_token: access.token,
      refresh_token: refreshToken,
      expires_in: ACCESS_TOKEN_SECONDS,
      expires_at: access.expiresAt,
      user: { id: user.id, email: user.email },
    };
  }

  async signUp(input: { email: string; password: string }, client: ClientInfo) {
    const problems = passwordProblems(input.password, input.email);
    if (problems.length) throw new AppError('validation_failed', `Password ${problems.map((p) => p.message).join('; ')}`, problems);
    const passwordHash = await hashPassword(input.password);
    const confirm = this.ctx.config.authEmailConfirm;
    return this.db.transaction(async (trx) => {
      const user = await store.insertUser(trx, { email: input.email, passwordHash, confirmed: !confirm });
      if (!user) {
        if (!confirm) throw new AppError('conflict', 'An account with this email already exists; sign in instead');
        // With confirmation on, answer exactly as for a new address so sign-up
        // does not reveal which emails have accounts; tell the owner instead.
        await this.ctx.mailer.send(trx, {
          to: input.email,
          kind: 'signup_existing',
          subject: 'Someone tried to create a Hark account with your email',
          text: 'An account with this email already exists. If this was you, sign in or reset your password. If not, you can ignore this email.',
        });
        return { needs_email_confirm: true as const, user: { id: crypto.randomUUID(), email: input.email, user_metadata: {} } };
      }
      if (confirm) {
        await this.sendConfirmation(trx, user);
        return { needs_email_confirm: true as const, user: { id: user.id, email: user.email, user_metadata: user.user_metadata } };
      }
      const pair = await this.startSession(trx, user, 'password', client);
      return { needs_email_confirm: false as const, ...pair, token_type: 'bearer' as const, user: { id: user.id, email: user.email, user_metadata: user.user_metadata } };
    });
  }

  private async sendConfirmation(trx: Tx, user: { id: string; email: string }) {
    const token = randomToken(32);
    await trx
      .insertInto('one_time_tokens')
      .values({
        purpose: 'email_confirm',
        email: user.email,
        user_id: user.id,
        token_hash: sha256Hex(token),
        code_hash: null,
        expires_at: new Date(Date.now() + EMAIL_CONFIRM_SECONDS * 1000),
        used_at: null,
      })
      .execute();
    const link = `${this.ctx.config.appUrl}/auth/confirm?token=${encodeURIComponent(token)}`;
    await this.ctx.mailer.send(trx, {
      to: user.email,
      kind: 'confirm_email',
      subject: 'Confirm your email for Hark',
      text: `Confirm your email address to finish creating your Hark account:\n\n${link}\n\nOr send this token to POST /api/auth/confirm: ${token}\n\nThe link expires in 24 hours.`,
    });
  }

  /** Confirms the address behind a confirmation token and signs the user in. */
  async confirmEmail(token: string, client: ClientInfo): Promise<TokenPair> {
    return this.db.transaction(async (trx) => {
      const row = await trx
        .updateTable('one_time_tokens')
        .set({ used_at: new Date() })
        .where('token_hash', '=', sha256Hex(token))
        .where('purpose', '=', 'email_confirm')
        .where('used_at', 'is', null)
        .where('expires_at', '>', new Date())
        .returning(['user_id'])
        .executeTakeFirst();
      if (!row?.user_id) throw new AppError('bad_request', 'This confirmation link is invalid, expired or already used');
      const user = await trx
        .updateTable('users')
        .set({ email_confirmed_at: new Date(), updated_at: new Date() })
        .where('id', '=', row.user_id)
        .returning(['id', 'email'])
        .executeTakeFirstOrThrow();
      return this.startSession(trx, user, 'email_confirm', client);
    });
  }

  /**
   * Throttled per email and per address; the same answer whether the email
   * exists or the password is wrong, and the same work (a hash check) either way.
   */
  async signIn(input: { email: string; password: string; mfa_code?: string }, client: ClientInfo): Promise<TokenPair> {
    const emailKey = input.email.toLowerCase();
    const addressKey = client.ip ?? 'unknown';
    const { perEmail, perAddress, windowSeconds } = SIGN_IN_LIMITS;
    const blocked =
      (await this.ctx.rateLimits.isBlocked('signin-email', emailKey, perEmail, windowSeconds)) ??
      (await this.ctx.rateLimits.isBlocked('signin-ip', addressKey, perAddress, windowSeconds));
    if (blocked) {
      throw new AppError('rate_limited', 'Too many failed sign-in attempts; try again later', undefined, {
        headers: { 'retry-after': String(blocked.retryAfter) },
      });
    }
    const fail = async (message = 'Invalid email or password'): Promise<never> => {
      await this.ctx.rateLimits.consume('signin-email', emailKey, perEmail, windowSeconds);
      await this.ctx.rateLimits.consume('signin-ip', addressKey, perAddress, windowSeconds);
      throw new AppError('unauthorized', message);
    };

    const user = await store.findUserByEmail(this.db.kysely, input.email);
    const passwordOk = await verifyPassword(input.password, user?.password_hash ?? (await dummyPasswordHash()));
    if (!user || !user.password_hash || !passwordOk) return fail();
    if (!user.email_confirmed_at) throw new AppError('forbidden', 'Confirm your email address before signing in');
    if (user.mfa_enabled_at) {
      if (!input.mfa_code) throw new AppError('mfa_required', 'This account uses two-factor authentication: send mfa_code with a current code');
      if (!(await this.checkMfaCode(user, input.mfa_code))) return fail('Invalid two-factor code');
    }
    await this.ctx.rateLimits.reset('signin-email', emailKey, perEmail, windowSeconds);
    return this.db.transaction((trx) => this.startSession(trx, user, 'password', client));
  }

  private async checkMfaCode(user: { id: string; mfa_secret_sealed: string | null }, code: string): Promise<boolean> {
    if (!user.mfa_secret_sealed) return false;
    return verifyTotp(unseal(this.ctx.secrets.secretsKey, user.mfa_secret_sealed), code);
  }

  /**
   * Exchanges a refresh token for a new pair. Each token works once: a second
   * use means it leaked (or a client raced itself), so the whole session is
   * revoked and every token of it stops working.
   */
  async refresh(refreshToken: string): Promise<TokenPair> {
    const outcome = await this.db.transaction(async (trx): Promise<{ error: string } | { pair: TokenPair }> => {
      const found = await store.findRefreshToken(trx, sha256Hex(refreshToken));
      if (!found) return { error: 'Refresh token is invalid' };
      if (found.revoked_at) return { error: 'This session has ended; sign in again' };
      if (found.rotated_at) {
        await store.revokeSession(trx, found.session_id, 'refresh_reuse');
        return { error: 'Refresh token was already used; the session has been revoked for safety' };
      }
      if (found.expires_at <= new Date() || found.session_expires_at <= new Date()) return { error: 'Refresh token has expired; sign in again' };
      const rotated = await store.markRotated(trx, found.id);
      if (Number(rotated.numUpdatedRows) !== 1) return { error: 'Refresh token was already used' };
      await store.touchSession(trx, found.session_id);
      const user = await store.findUserById(trx, found.user_id);
      if (!user) return { error: 'Refresh token is invalid' };
      return { pair: await this.issuePair(trx, user, found.session_id) };
    });
    // Thrown after the transaction so the reuse revocation is committed.
    if ('error' in outcome) throw new AppError('unauthorized', outcome.error);
    return outcome.pair;
  }

  /** Ends the session the refresh token belongs to; unknown tokens are already signed out. */
  async signOut(refreshToken: string): Promise<void> {
    await this.db.transaction(async (trx) => {
      const found = await store.findRefreshToken(trx, sha256Hex(refreshToken));
      if (found) await store.revokeSession(trx, found.session_id, 'sign_out');
    });
  }

  /** For the auth hook: a valid access token whose session is still active. */
  async verifyAccessToken(token: string): Promise<{ userId: string; sessionId: string } | null> {
    const claims = await this.accessTokens.verify(token);
    if (!claims) return null;
    const session = await store.activeSession(this.db.kysely, claims.sessionId, claims.userId);
    return session ? claims : null;
  }

  async listSessions(userId: string, currentSessionId: string) {
    const sessions = await store.listActiveSessions(this.db.kysely, userId);
    return sessions.map((s) => ({
      id: s.id,
      method: s.method,
      user_agent: s.user_agent,
      ip: s.ip,
      created_at: s.created_at.toISOString(),
      last_used_at: s.last_used_at.toISOString(),
      expires_at: s.expires_at.toISOString(),
      current: s.id === currentSessionId,
    }));
  }

  async revokeOwnSession(userId: string, sessionId: string): Promise<void> {
    const result = await this.db.kysely
      .updateTable('auth_sessions')
      .set({ revoked_at: new Date(), revoked_reason: 'user' })
      .where('id', '=', sessionId)
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) !== 1) throw new AppError('not_found', 'Session not found');
  }

  async getUser(userId: string) {
    const user = await store.findUserById(this.db.kysely, userId);
    if (!user) throw new AppError('not_found', 'User not found');
    return user;
  }
}

export const identityService = perContext((ctx) => new IdentityService(ctx));
