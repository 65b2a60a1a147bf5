import crypto from 'node:crypto';

/** URL-safe random token with `bytes` of entropy. */
export function randomToken(bytes = 32): string {
  return crypto.randomBytes(bytes).toString('base64url');
}

/** Hex SHA-256: how bearer secrets (refresh tokens, API keys, one-time links) are stored. */
export function sha256Hex(value: string | Buffer): string {
  // One-shot crypto.hash skips the Hash object: it runs on every API-key request.
  return crypto.hash('sha256', value, 'hex');
}

/** Constant-time comparison that is also safe for inputs of different lengths. */
export function safeEqual(a: string | Buffer, b: string | Buffer): boolean {
  const left = crypto.createHash('sha256').update(a).digest();
  const right = crypto.createHash('sha256').update(b).digest();
  return crypto.timingSafeEqual(left, right) && Buffer.byteLength(a) === Buffer.byteLength(b);
}

const SEAL_VERSION = 'v1';

/** AES-256-GCM: for secrets that must be read back (TOTP seeds, trigger secrets). */
export function seal(key: Buffer, plaintext: string): string {
  const iv = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', key, iv);
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [SEAL_VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.');
}

export function unseal(key: Buffer, sealed: string): string {
  const [version, iv, tag, body] = sealed.split('.');
  if (version !== SEAL_VERSION || !iv || !tag || body === undefined) throw new Error('sealed value has an unknown format');
  const decipher = crypto.createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
}
