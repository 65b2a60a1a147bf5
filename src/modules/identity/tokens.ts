import { createSecretKey, type KeyObject } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';

/** Access tokens live 15 minutes; clients refresh with their refresh token. */
export const ACCESS_TOKEN_SECONDS = 15 * 60;
/** A refresh token (and so a session) lasts 30 days from its last refresh. */
export const REFRESH_TOKEN_SECONDS = 30 * 24 * 3600;

const ISSUER = 'hark';
const AUDIENCE = 'hark-api';

export interface AccessClaims {
  userId: string;
  sessionId: string;
}

export class AccessTokens {
  // A KeyObject, imported once: with raw bytes jose re-imports the key on every verification.
  private readonly key: KeyObject;

  constructor(secret: string) {
    this.key = createSecretKey(Buffer.from(secret, 'utf8'));
  }

  async issue(claims: AccessClaims, now = Date.now()): Promise<{ token: string; expiresAt: number }> {
    const issuedAt = Math.floor(now / 1000);
    const expiresAt = issuedAt + ACCESS_TOKEN_SECONDS;
    const token = await new SignJWT({ sid: claims.sessionId })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(claims.userId)
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(issuedAt)
      .setExpirationTime(expiresAt)
      .sign(this.key);
    return { token, expiresAt };
  }

  /** The claims of a valid, unexpired token signed by us; null otherwise. */
  async verify(token: string): Promise<AccessClaims | null> {
    try {
      const { payload } = await jwtVerify(token, this.key, { issuer: ISSUER, audience: AUDIENCE, algorithms: ['HS256'] });
      if (typeof payload.sub !== 'string' || typeof payload.sid !== 'string') return null;
      return { userId: payload.sub, sessionId: payload.sid };
    } catch (error) {
      if (error instanceof joseErrors.JOSEError) return null;
      throw error;
    }
  }
}
