import crypto from 'node:crypto';
import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import { AppError } from '../../platform/http/errors.ts';
import { deriveKey } from '../../platform/crypto/secrets.ts';
import { randomToken, safeEqual, sha256Hex, unseal } from '../../platform/crypto/tokens.ts';
import { identityService, SIGN_IN_LIMITS, type ClientInfo, type TokenPair } from './service.ts';
import { verifyTotp } from './mfa.ts';
import * as store from './store.ts';

/**
 * Sign-in by emailed one-time link or 6-digit code (spec §5 rule 1).
 *
 * Only existing users can sign in this way: an unknown address gets the same
 * answer and nothing is created or sent, so the endpoint neither reveals
 * which emails have accounts nor creates accounts for addresses typed by
 * someone else.
 */
export const MAGIC_LINK = {
  /** How long a link and its code work. */
  ttlSeconds: 15 * 60,
  /** Wrong codes allowed per issued code; then only the link still works. */
  maxCodeAttempts: 5,
  /** Sends allowed per address and per client address in one window (429 beyond). */
  sendsPerEmail: 5,
  sendsPerClient: 30,
  sendWindowSeconds: 15 * 60,
} as const;

export interface MagicLinkVerifyInput {
  token?: string;
  email?: string;
  code?: string;
  mfa_code?: string;
}

/** `failedAttempt` says which throttle a failure counts against; `email` is the user's for MFA failures. */
type VerifyOutcome = { pair: TokenPair } | { error: AppError; failedAttempt: 'code' | 'mfa' | 'none'; email?: string };

export class MagicLinkService {
  /** Codes are HMACed, not plainly hashed: a million 6-digit codes are no secret to a reader of a database dump. */
  private readonly codeKey: Buffer;

  constructor(private readonly ctx: AppContext) {
    this.codeKey = deriveKey(ctx.secrets.secretsKey, 'magic-link-codes');
  }

  private codeHash(tokenHash: string, code: string): string {
    return crypto.createHmac('sha256', this.codeKey).update(`${tokenHash}:${code}`).digest('hex');
  }

  /**
   * Emails a sign-in link and code to an existing user. The throttle counts
   * every request, known address or not, so a 429 says nothing about
   * whether the address has an account.
   */
  async send(email: string, client: ClientInfo): Promise<void> {
    const { sendsPerEmail, sendsPerClient, sendWindowSeconds } = MAGIC_LINK;
    for (const [purpose, key, points] of [
      ['magic-send-ip', client.ip ?? 'unknown', sendsPerClient],
      ['magic-send', email.toLowerCase(), sendsPerEmail],
    ] as const) {
      const decision = await this.ctx.rateLimits.consume(purpose, key, points, sendWindowSeconds);
      if (!decision.allowed) {
        throw new AppError('rate_limited', 'Too many sign-in emails requested; try again later', undefined, {
          headers: { 'retry-after': String(decision.retryAfter) },
        });
      }
    }

    const user = await store.findUserByEmail(this.ctx.db.kysely, email);
    if (!user) return;

    const token = randomToken(32);
    const code = String(crypto.randomInt(0, 1_000_000)).padStart(6, '0');
    const tokenHash = sha256Hex(token);
    await this.ctx.db.transaction(async (trx) => {
      // One live code per user: otherwise each outstanding code would add its
      // own attempts to a guesser's budget.
      await queries.expireLiveTokens(trx, user.id);
      await queries.insertToken(trx, {
        email: user.email,
        userId: user.id,
        tokenHash,
        codeHash: this.codeHash(tokenHash, code),
        expiresAt: new Date(Date.now() + MAGIC_LINK.ttlSeconds * 1000),
      });
      const link = `${this.ctx.config.appUrl}/auth/magic?token=${encodeURIComponent(token)}`;
      await this.ctx.mailer.send(trx, {
        to: user.email,
        kind: 'magic_link',
        subject: `Your Hark sign-in code: ${code}`,
        text:
          `Sign in to Hark with this link:\n\n${link}\n\nor enter this code: ${code}\n\n` +
          `The link and code work once and expire in 15 minutes; requesting a new one replaces them. ` +
          `If you did not ask to sign in, you can ignore this email.`,
      });
    });
  }

  /**
   * Signs in with the link's token or with email + code. Failures are
   * committed before the error is thrown, so a wrong code always counts.
   */
  async verify(input: MagicLinkVerifyInput, client: ClientInfo): Promise<TokenPair> {
    const byToken = input.token !== undefined;
    const byCode = input.email !== undefined || input.code !== undefined;
    if (byToken === byCode || (byCode && (!input.email || !input.code))) {
      throw new AppError('validation_failed', 'Send either token (from the link) or email and code', [
        { field: byToken ? 'token' : 'code', message: 'send either token, or email and code' },
      ]);
    }
    const { perEmail, perAddress, windowSeconds } = SIGN_IN_LIMITS;
    const addressKey = client.ip ?? 'unknown';
    const blocked = await this.ctx.rateLimits.isBlocked('signin-ip', addressKey, perAddress, windowSeconds);
    if (blocked) throw tooManyAttempts(blocked.retryAfter);

    const outcome = await this.ctx.db.transaction((trx) => this.verifyIn(trx, input, client));
    if ('pair' in outcome) return outcome.pair;
    if (outcome.failedAttempt !== 'none') {
      // Shared with password sign-in, so one address cannot spread its
      // guesses over several sign-in methods.
      await this.ctx.rateLimits.consume('signin-ip', addressKey, perAddress, windowSeconds);
    }
    if (outcome.failedAttempt === 'mfa' && outcome.email) {
      await this.ctx.rateLimits.consume('signin-email', outcome.email.toLowerCase(), perEmail, windowSeconds);
    }
    throw outcome.error;
  }

  private async verifyIn(trx: Tx, input: MagicLinkVerifyInput, client: ClientInfo): Promise<VerifyOutcome> {
    const fail = (message: string, failedAttempt: 'code' | 'mfa' | 'none' = 'code'): VerifyOutcome => ({
      error: new AppError('unauthorized', message),
      failedAttempt,
    });
    const row = input.token ? await queries.lockByTokenHash(trx, sha256Hex(input.token)) : await queries.lockNewestForEmail(trx, input.email!);
    const what = input.token ? 'sign-in link' : 'sign-in code';
    if (!row || !row.user_id) return fail(`This ${what} is invalid; request a new one`);
    if (row.used_at) return fail(`This ${what} was already used; request a new one`);
    if (row.expires_at <= new Date()) return fail(`This ${what} has expired or was replaced by a newer one; request a new one`, 'none');

    if (!input.token) {
      if (row.attempts >= MAGIC_LINK.maxCodeAttempts) return fail('Too many wrong codes for this sign-in code; request a new one');
      if (!row.code_hash || !safeEqual(this.codeHash(row.token_hash, input.code!), row.code_hash)) {
        const left = MAGIC_LINK.maxCodeAttempts - row.attempts - 1;
        await queries.countWrongCode(trx, row.id);
        return fail(left > 0 ? `Wrong code; ${left} attempt${left === 1 ? '' : 's'} left` : 'Wrong code; this code no longer works, request a new one');
      }
    }

    const user = await store.findUserById(trx, row.user_id);
    if (!user) return fail(`This ${what} is invalid; request a new one`);
    if (user.mfa_enabled_at) {
      // Checked before the token is spent, so the client can retry with a code.
      if (!input.mfa_code) {
        return { error: new AppError('mfa_required', 'This account uses two-factor authentication: send mfa_code with a current code'), failedAttempt: 'none' };
      }
      const emailBlocked = await this.ctx.rateLimits.isBlocked('signin-email', user.email.toLowerCase(), SIGN_IN_LIMITS.perEmail, SIGN_IN_LIMITS.windowSeconds);
      if (emailBlocked) return { error: tooManyAttempts(emailBlocked.retryAfter), failedAttempt: 'none' };
      const secret = user.mfa_secret_sealed ? unseal(this.ctx.secrets.secretsKey, user.mfa_secret_sealed) : undefined;
      if (!secret || !verifyTotp(secret, input.mfa_code)) return { ...fail('Invalid two-factor code', 'mfa'), email: user.email };
    }

    if (!(await queries.markUsed(trx, row.id))) return fail(`This ${what} was already used; request a new one`);
    await proveEmailOwnership(trx, user);
    return { pair: await identityService(this.ctx).startSession(trx, user, 'magic_link', client) };
  }
}

function tooManyAttempts(retryAfter: number): AppError {
  return new AppError('rate_limited', 'Too many failed sign-in attempts; try again later', undefined, { headers: { 'retry-after': String(retryAfter) } });
}

/**
 * A sign-in that proves the user controls the address (emailed link, or a
 * provider-verified email) confirms it. If it had never been confirmed, the
 * password on the account was set by someone who never proved they own the
 * address (possibly an attacker pre-registering it), so it is removed.
 */
export async function proveEmailOwnership(trx: Tx, user: { id: string; email_confirmed_at: Date | null }): Promise<void> {
  if (user.email_confirmed_at) return;
  await trx.updateTable('users').set({ email_confirmed_at: new Date(), password_hash: null, updated_at: new Date() }).where('id', '=', user.id).execute();
}

/** SQL of this file (one_time_tokens rows with purpose magic_link). */
const queries = {
  expireLiveTokens(trx: Tx, userId: string) {
    return trx
      .updateTable('one_time_tokens')
      .set({ expires_at: new Date() })
      .where('purpose', '=', 'magic_link')
      .where('user_id', '=', userId)
      .where('used_at', 'is', null)
      .where('expires_at', '>', new Date())
      .execute();
  },

  insertToken(trx: Tx, row: { email: string; userId: string; tokenHash: string; codeHash: string; expiresAt: Date }) {
    return trx
      .insertInto('one_time_tokens')
      .values({
        purpose: 'magic_link',
        email: row.email,
        user_id: row.userId,
        token_hash: row.tokenHash,
        code_hash: row.codeHash,
        expires_at: row.expiresAt,
        used_at: null,
      })
      .execute();
  },

  /** Locked, so concurrent uses of one token or code take turns. */
  lockByTokenHash(trx: Tx, tokenHash: string) {
    return trx
      .selectFrom('one_time_tokens')
      .select(['id', 'user_id', 'token_hash', 'code_hash', 'attempts', 'expires_at', 'used_at'])
      .where('token_hash', '=', tokenHash)
      .where('purpose', '=', 'magic_link')
      .forUpdate()
      .executeTakeFirst();
  },

  /** The code most recently sent to this address (older ones are expired on each send). */
  lockNewestForEmail(trx: Tx, email: string) {
    return trx
      .selectFrom('one_time_tokens')
      .select(['id', 'user_id', 'token_hash', 'code_hash', 'attempts', 'expires_at', 'used_at'])
      .where('purpose', '=', 'magic_link')
      .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
      .orderBy('created_at', 'desc')
      .limit(1)
      .forUpdate()
      .executeTakeFirst();
  },

  countWrongCode(trx: Tx, id: string) {
    return trx
      .updateTable('one_time_tokens')
      .set((eb) => ({ attempts: eb('attempts', '+', 1) }))
      .where('id', '=', id)
      .execute();
  },

  async markUsed(trx: Tx, id: string): Promise<boolean> {
    const result = await trx.updateTable('one_time_tokens').set({ used_at: new Date() }).where('id', '=', id).where('used_at', 'is', null).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },
};

export const magicLinkService = perContext((ctx) => new MagicLinkService(ctx));
