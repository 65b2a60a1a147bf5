import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export interface Secrets {
  /** Signs access tokens. */
  jwtSecret: string;
  /** Master key: seals stored secrets; purpose keys are derived from it. */
  secretsKey: Buffer;
}

interface StoredSecrets {
  authJwtSecret: string;
  secretsKey: string;
}

/**
 * Uses AUTH_JWT_SECRET and SECRETS_KEY when given; otherwise generates them
 * once into DATA_DIR/secrets.json (mode 0600) so a fresh clone works and
 * tokens survive restarts. Several processes sharing PostgreSQL must be given
 * the same values explicitly; `generated` tells start-up to warn about that.
 */
export function loadSecrets(dataDir: string, given: { jwtSecret?: string; secretsKey?: Buffer }): Secrets & { generated: boolean } {
  if (given.jwtSecret && given.secretsKey) return { jwtSecret: given.jwtSecret, secretsKey: given.secretsKey, generated: false };
  const file = path.join(dataDir, 'secrets.json');
  let stored: StoredSecrets;
  try {
    stored = JSON.parse(fs.readFileSync(file, 'utf8')) as StoredSecrets;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`cannot read ${file}: ${(error as Error).message}`);
    stored = { authJwtSecret: crypto.randomBytes(48).toString('base64url'), secretsKey: crypto.randomBytes(32).toString('hex') };
    fs.mkdirSync(dataDir, { recursive: true });
    try {
      fs.writeFileSync(file, JSON.stringify(stored, null, 2), { mode: 0o600, flag: 'wx' });
    } catch (writeError) {
      // Another process generated them first: use theirs.
      if ((writeError as NodeJS.ErrnoException).code !== 'EEXIST') throw writeError;
      stored = JSON.parse(fs.readFileSync(file, 'utf8')) as StoredSecrets;
    }
  }
  return {
    jwtSecret: given.jwtSecret ?? stored.authJwtSecret,
    secretsKey: given.secretsKey ?? Buffer.from(stored.secretsKey, 'hex'),
    generated: true,
  };
}

/** A key for one purpose, so one leaked derived key does not expose the others. */
export function deriveKey(master: Buffer, purpose: string): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', master, Buffer.alloc(0), `hark:${purpose}`, 32));
}
