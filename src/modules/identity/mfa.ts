import * as OTPAuth from 'otpauth';
import { perContext, type AppContext } from '../../platform/context.ts';
import { AppError } from '../../platform/http/errors.ts';
import { seal, unseal } from '../../platform/crypto/tokens.ts';
import * as store from './store.ts';

const ISSUER = 'Hark';

function totp(secret: string, label = 'user'): OTPAuth.TOTP {
  return new OTPAuth.TOTP({ issuer: ISSUER, label, algorithm: 'SHA1', digits: 6, period: 30, secret: OTPAuth.Secret.fromBase32(secret) });
}

/** A 6-digit code from the current, previous or next 30-second step (clock drift). */
export function verifyTotp(secret: string, code: string): boolean {
  if (!/^\d{6}$/.test(code)) return false;
  return totp(secret).validate({ token: code, window: 1 }) !== null;
}

/**
 * TOTP multi-factor authentication: enroll (a new secret and otpauth URI),
 * verify (the first valid code turns MFA on), disable (needs a valid code).
 * The secret is sealed with SECRETS_KEY, never stored in the clear.
 */
export class MfaService {
  constructor(private readonly ctx: AppContext) {}

  async enroll(userId: string): Promise<{ secret: string; otpauth_url: string }> {
    const user = await store.findUserById(this.ctx.db.kysely, userId);
    if (!user) throw new AppError('not_found', 'User not found');
    if (user.mfa_enabled_at) throw new AppError('conflict', 'Two-factor authentication is already on; disable it first to enroll a new device');
    const secret = new OTPAuth.Secret({ size: 20 }).base32;
    await this.ctx.db.kysely
      .updateTable('users')
      .set({ mfa_secret_sealed: seal(this.ctx.secrets.secretsKey, secret), updated_at: new Date() })
      .where('id', '=', userId)
      .execute();
    return { secret, otpauth_url: totp(secret, user.email).toString() };
  }

  async verify(userId: string, code: string): Promise<void> {
    const user = await store.findUserById(this.ctx.db.kysely, userId);
    if (!user?.mfa_secret_sealed) throw new AppError('bad_request', 'Enroll first: POST /api/auth/mfa/enroll');
    if (!verifyTotp(unseal(this.ctx.secrets.secretsKey, user.mfa_secret_sealed), code)) throw new AppError('bad_request', 'Invalid two-factor code', [{ field: 'code', message: 'is not a current code' }]);
    await this.ctx.db.kysely.updateTable('users').set({ mfa_enabled_at: user.mfa_enabled_at ?? new Date(), updated_at: new Date() }).where('id', '=', userId).execute();
  }

  async disable(userId: string, code: string): Promise<void> {
    const user = await store.findUserById(this.ctx.db.kysely, userId);
    if (!user?.mfa_enabled_at || !user.mfa_secret_sealed) throw new AppError('bad_request', 'Two-factor authentication is not on');
    if (!verifyTotp(unseal(this.ctx.secrets.secretsKey, user.mfa_secret_sealed), code)) throw new AppError('bad_request', 'Invalid two-factor code', [{ field: 'code', message: 'is not a current code' }]);
    await this.ctx.db.kysely.updateTable('users').set({ mfa_enabled_at: null, mfa_secret_sealed: null, updated_at: new Date() }).where('id', '=', userId).execute();
  }
}

export const mfaService = perContext((ctx) => new MfaService(ctx));
