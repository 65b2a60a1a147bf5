/**
 * Every setting Hark reads, parsed and validated in one place.
 *
 * Each entry of SETTINGS names one environment variable, its default and how
 * to read it. `loadConfig` turns an environment into a typed `Config` or throws
 * a `ConfigError` whose message is the one line start-up prints. The README's
 * configuration table and `.env.example` list the same variables (a test keeps
 * them in step).
 */

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    detail: string,
  ) {
    super(`Invalid configuration: ${variable} ${detail}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

const ROLE_NAMES = ['serve', 'work'] as const;
export type Role = (typeof ROLE_NAMES)[number];
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const CARRIERS = ['sandbox', 'carrier-a', 'carrier-b'] as const;
/** §8: a knowledge-base file is at most 1 GiB; KB_MAX_FILE_BYTES can lower it, never raise it. */
export const KB_FILE_LIMIT_BYTES = 1024 * 1024 * 1024;

/** Every variable Hark reads, with its default as documented (the README table mirrors this). */
export const SETTINGS = {
  PORT: { default: '3000', meaning: 'port the API listens on' },
  HOST: { default: '127.0.0.1', meaning: 'address the API listens on' },
  DATA_DIR: { default: './.data', meaning: 'embedded database, local blobs, generated secrets' },
  DATABASE_URL: { default: '', meaning: 'PostgreSQL connection string; unset: embedded PGlite in DATA_DIR' },
  REDIS_URL: { default: '', meaning: 'Redis for rate-limit counters and caches; unset: in-process' },
  BASE_URL: { default: 'http://HOST:PORT', meaning: 'public API address (signed URLs)' },
  APP_URL: { default: 'http://HOST:PORT', meaning: 'public application address (redirects, email links)' },
  ROLES: { default: 'serve,work', meaning: 'roles this process runs: serve (HTTP API), work (background jobs)' },
  AUTH_JWT_SECRET: { default: 'generated into DATA_DIR', meaning: 'signs access tokens (at least 32 characters)' },
  AUTH_EMAIL_CONFIRM: { default: 'false', meaning: 'true: sign-up needs an email confirmation' },
  SECRETS_KEY: { default: 'generated into DATA_DIR', meaning: 'seals stored secrets and signs blob URLs (64 hex characters = 32 bytes)' },
  LLM_BASE_URL: { default: '', meaning: 'OpenAI-compatible upstream for chat, prompt utilities and builders' },
  LLM_API_KEY: { default: '', meaning: 'API key sent to LLM_BASE_URL' },
  EMBEDDINGS_PROVIDER: { default: 'local', meaning: 'local (offline model) or openai (uses the LLM upstream)' },
  STORAGE: { default: 'local', meaning: 'local (files in DATA_DIR) or s3' },
  S3_ENDPOINT: { default: '', meaning: 'S3-compatible endpoint; unset: AWS' },
  S3_BUCKET: { default: '', meaning: 'bucket (required with STORAGE=s3)' },
  S3_REGION: { default: 'us-east-1', meaning: 'bucket region' },
  S3_ACCESS_KEY_ID: { default: '', meaning: 'S3 access key id; unset: the SDK default chain' },
  S3_SECRET_ACCESS_KEY: { default: '', meaning: 'S3 secret access key' },
  BILLING_WEBHOOK_SECRET: { default: '', meaning: 'verifies the billing-signature header' },
  CARRIER: { default: 'sandbox', meaning: 'sandbox, carrier-a or carrier-b' },
  CARRIER_A_API_URL: { default: '', meaning: 'carrier-a REST base URL' },
  CARRIER_A_API_KEY: { default: '', meaning: 'carrier-a API key' },
  CARRIER_A_PUBLIC_KEY: { default: '', meaning: 'base64 ED25519 public key for carrier-a webhooks; unset: that webhook answers 503' },
  CARRIER_B_API_URL: { default: '', meaning: 'carrier-b REST base URL' },
  CARRIER_B_ACCOUNT_SID: { default: '', meaning: 'carrier-b account SID' },
  CARRIER_B_AUTH_TOKEN: { default: '', meaning: 'carrier-b auth token' },
  LIVEKIT_URL: { default: '', meaning: 'realtime media server URL' },
  LIVEKIT_API_KEY: { default: '', meaning: 'realtime media server API key' },
  LIVEKIT_API_SECRET: { default: '', meaning: 'realtime media server API secret' },
  LEAD_ADS_VERIFY_TOKEN: { default: '', meaning: 'lead-ads webhook verification token' },
  LEAD_ADS_APP_SECRET: { default: '', meaning: 'lead-ads webhook signature secret' },
  OAUTH_GOOGLE_CLIENT_ID: { default: '', meaning: 'Google sign-in OAuth client id; Google sign-in is on when it and its secret are set' },
  OAUTH_GOOGLE_CLIENT_SECRET: { default: '', meaning: 'Google sign-in OAuth client secret' },
  OAUTH_GOOGLE_ISSUER_URL: { default: 'https://accounts.google.com', meaning: 'OpenID Connect issuer for Google sign-in; endpoints come from its /.well-known/openid-configuration' },
  OAUTH_GITHUB_CLIENT_ID: { default: '', meaning: 'GitHub sign-in OAuth app client id; GitHub sign-in is on when it and its secret are set' },
  OAUTH_GITHUB_CLIENT_SECRET: { default: '', meaning: 'GitHub sign-in OAuth app client secret' },
  OAUTH_GITHUB_URL: { default: 'https://github.com', meaning: 'GitHub web address (authorize and token endpoints under /login/oauth)' },
  OAUTH_GITHUB_API_URL: { default: 'https://api.github.com', meaning: 'GitHub REST API address (/user, /user/emails)' },
  SMTP_URL: { default: '', meaning: 'outgoing email (smtp://user:pass@host:port); unset: outbox table only' },
  EMAIL_FROM: { default: 'Hark <no-reply@localhost>', meaning: 'sender of outgoing email' },
  LOG_LEVEL: { default: 'info', meaning: 'pino level: fatal, error, warn, info, debug, trace, silent' },
  BODY_LIMIT_BYTES: { default: '1048576', meaning: 'largest JSON or form body accepted (uploads have their own limits)' },
  SHUTDOWN_TIMEOUT_MS: { default: '15000', meaning: 'how long graceful shutdown waits for requests and jobs' },
  JOBS_MAINTENANCE_SECONDS: { default: '30', meaning: 'how often the queue expires stuck jobs (held by a dead worker) and schedules retries' },
  JOBS_EXPIRE_SECONDS: {
    default: '',
    meaning: 'cap on how long a job may stay active before it is taken as dead and delivered again (unset: each job type\'s own, e.g. 30 min for knowledge-base files)',
  },
  KB_MAX_FILE_BYTES: { default: '1073741824', meaning: 'largest knowledge-base upload in bytes (§8: 1 GiB); may only be lowered' },
  KB_MAX_TEXT_CHARS: { default: '10000000', meaning: 'a knowledge-base file whose extracted text is longer fails processing instead of exhausting memory' },
} as const;

export type SettingName = keyof typeof SETTINGS;

export interface S3Config {
  endpoint?: string;
  bucket: string;
  region: string;
  accessKeyId?: string;
  secretAccessKey?: string;
}

/** A social sign-in provider that is switched on (client id and secret both set). */
export interface OAuthClientConfig {
  clientId: string;
  clientSecret: string;
}

export interface OAuthConfig {
  google?: OAuthClientConfig & { issuerUrl: string };
  github?: OAuthClientConfig & { url: string; apiUrl: string };
}

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl?: string;
  redisUrl?: string;
  baseUrl: string;
  appUrl: string;
  roles: ReadonlySet<Role>;
  authJwtSecret?: string;
  authEmailConfirm: boolean;
  secretsKey?: Buffer;
  llm: { baseUrl?: string; apiKey?: string };
  embeddingsProvider: 'local' | 'openai';
  storage: 'local' | 's3';
  s3?: S3Config;
  billingWebhookSecret?: string;
  carrier: (typeof CARRIERS)[number];
  carrierA: { apiUrl?: string; apiKey?: string; publicKey?: string };
  carrierB: { apiUrl?: string; accountSid?: string; authToken?: string };
  livekit: { url?: string; apiKey?: string; apiSecret?: string };
  leadAds: { verifyToken?: string; appSecret?: string };
  oauth: OAuthConfig;
  smtpUrl?: string;
  emailFrom: string;
  logLevel: (typeof LOG_LEVELS)[number];
  bodyLimitBytes: number;
  shutdownTimeoutMs: number;
  jobsMaintenanceSeconds: number;
  /** Undefined: each job type keeps its own expiry. */
  jobsExpireSeconds?: number;
  kb: { maxFileBytes: number; maxTextChars: number };
}

function optional(env: Env, name: SettingName): string | undefined {
  const value = env[name]?.trim();
  return value ? value : undefined;
}

function oneOf<T extends string>(env: Env, name: SettingName, allowed: readonly T[], fallback: T): T {
  const value = optional(env, name) ?? fallback;
  if (!(allowed as readonly string[]).includes(value)) {
    throw new ConfigError(name, `must be one of ${allowed.join(', ')} (got "${value}")`);
  }
  return value as T;
}

function integer(env: Env, name: SettingName, fallback: number, min: number, max: number): number {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < min || value > max) {
    throw new ConfigError(name, `must be an integer from ${min} to ${max} (got "${raw}")`);
  }
  return value;
}

function boolean(env: Env, name: SettingName, fallback: boolean): boolean {
  const raw = optional(env, name)?.toLowerCase();
  if (raw === undefined) return fallback;
  if (['true', '1', 'yes'].includes(raw)) return true;
  if (['false', '0', 'no'].includes(raw)) return false;
  throw new ConfigError(name, `must be true or false (got "${raw}")`);
}

function url(env: Env, name: SettingName, protocols: readonly string[]): string | undefined {
  const raw = optional(env, name);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, `must be a URL starting with ${protocols.join(' or ')}`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must be a URL starting with ${protocols.join(' or ')} (got "${parsed.protocol}")`);
  }
  return raw.replace(/\/+$/, '');
}

function roles(env: Env): ReadonlySet<Role> {
  const raw = optional(env, 'ROLES') ?? 'serve,work';
  const names = raw.split(',').map((r) => r.trim()).filter(Boolean);
  const unknown = names.filter((r) => !(ROLE_NAMES as readonly string[]).includes(r));
  if (names.length === 0 || unknown.length > 0) {
    throw new ConfigError('ROLES', `must be a comma-separated list of ${ROLE_NAMES.join(', ')} (got "${raw}")`);
  }
  return new Set(names as Role[]);
}

function secretsKey(env: Env): Buffer | undefined {
  const raw = optional(env, 'SECRETS_KEY');
  if (raw === undefined) return undefined;
  if (!/^[0-9a-fA-F]{64}$/.test(raw)) {
    throw new ConfigError('SECRETS_KEY', 'must be 64 hexadecimal characters (32 bytes); generate one with `openssl rand -hex 32`');
  }
  return Buffer.from(raw, 'hex');
}

function jwtSecret(env: Env): string | undefined {
  const raw = optional(env, 'AUTH_JWT_SECRET');
  if (raw !== undefined && raw.length < 32) {
    throw new ConfigError('AUTH_JWT_SECRET', `must be at least 32 characters (got ${raw.length})`);
  }
  return raw;
}

function s3(env: Env, storage: 'local' | 's3'): S3Config | undefined {
  if (storage !== 's3') return undefined;
  const bucket = optional(env, 'S3_BUCKET');
  if (!bucket) throw new ConfigError('S3_BUCKET', 'is required when STORAGE=s3');
  const accessKeyId = optional(env, 'S3_ACCESS_KEY_ID');
  const secretAccessKey = optional(env, 'S3_SECRET_ACCESS_KEY');
  if (Boolean(accessKeyId) !== Boolean(secretAccessKey)) {
    throw new ConfigError(accessKeyId ? 'S3_SECRET_ACCESS_KEY' : 'S3_ACCESS_KEY_ID', 'must be set together with its pair');
  }
  return {
    endpoint: url(env, 'S3_ENDPOINT', ['http:', 'https:']),
    bucket,
    region: optional(env, 'S3_REGION') ?? 'us-east-1',
    accessKeyId,
    secretAccessKey,
  };
}

/** Client id and secret of one provider: both or neither, so a half-configured provider fails at start-up. */
function oauthClient(env: Env, idName: SettingName, secretName: SettingName): OAuthClientConfig | undefined {
  const clientId = optional(env, idName);
  const clientSecret = optional(env, secretName);
  if (!clientId && !clientSecret) return undefined;
  if (!clientId) throw new ConfigError(idName, `is required when ${secretName} is set`);
  if (!clientSecret) throw new ConfigError(secretName, `is required when ${idName} is set`);
  return { clientId, clientSecret };
}

function oauth(env: Env): OAuthConfig {
  // URLs are validated even when the provider is off, so a typo shows at once.
  const issuerUrl = url(env, 'OAUTH_GOOGLE_ISSUER_URL', ['http:', 'https:']) ?? 'https://accounts.google.com';
  const githubUrl = url(env, 'OAUTH_GITHUB_URL', ['http:', 'https:']) ?? 'https://github.com';
  const githubApiUrl = url(env, 'OAUTH_GITHUB_API_URL', ['http:', 'https:']) ?? 'https://api.github.com';
  const google = oauthClient(env, 'OAUTH_GOOGLE_CLIENT_ID', 'OAUTH_GOOGLE_CLIENT_SECRET');
  const github = oauthClient(env, 'OAUTH_GITHUB_CLIENT_ID', 'OAUTH_GITHUB_CLIENT_SECRET');
  return {
    google: google && { ...google, issuerUrl },
    github: github && { ...github, url: githubUrl, apiUrl: githubApiUrl },
  };
}

export function loadConfig(env: Env = process.env): Config {
  const port = integer(env, 'PORT', 3000, 0, 65535);
  const host = optional(env, 'HOST') ?? '127.0.0.1';
  const ownAddress = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  const storage = oneOf(env, 'STORAGE', ['local', 's3'] as const, 'local');
  return {
    port,
    host,
    dataDir: optional(env, 'DATA_DIR') ?? './.data',
    databaseUrl: url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
    baseUrl: url(env, 'BASE_URL', ['http:', 'https:']) ?? ownAddress,
    appUrl: url(env, 'APP_URL', ['http:', 'https:']) ?? ownAddress,
    roles: roles(env),
    authJwtSecret: jwtSecret(env),
    authEmailConfirm: boolean(env, 'AUTH_EMAIL_CONFIRM', false),
    secretsKey: secretsKey(env),
    llm: { baseUrl: url(env, 'LLM_BASE_URL', ['http:', 'https:']), apiKey: optional(env, 'LLM_API_KEY') },
    embeddingsProvider: oneOf(env, 'EMBEDDINGS_PROVIDER', ['local', 'openai'] as const, 'local'),
    storage,
    s3: s3(env, storage),
    billingWebhookSecret: optional(env, 'BILLING_WEBHOOK_SECRET'),
    carrier: oneOf(env, 'CARRIER', CARRIERS, 'sandbox'),
    carrierA: {
      apiUrl: url(env, 'CARRIER_A_API_URL', ['http:', 'https:']),
      apiKey: optional(env, 'CARRIER_A_API_KEY'),
      publicKey: optional(env, 'CARRIER_A_PUBLIC_KEY'),
    },
    carrierB: {
      apiUrl: url(env, 'CARRIER_B_API_URL', ['http:', 'https:']),
      accountSid: optional(env, 'CARRIER_B_ACCOUNT_SID'),
      authToken: optional(env, 'CARRIER_B_AUTH_TOKEN'),
    },
    livekit: {
      url: url(env, 'LIVEKIT_URL', ['http:', 'https:', 'ws:', 'wss:']),
      apiKey: optional(env, 'LIVEKIT_API_KEY'),
      apiSecret: optional(env, 'LIVEKIT_API_SECRET'),
    },
    leadAds: { verifyToken: optional(env, 'LEAD_ADS_VERIFY_TOKEN'), appSecret: optional(env, 'LEAD_ADS_APP_SECRET') },
    oauth: oauth(env),
    smtpUrl: url(env, 'SMTP_URL', ['smtp:', 'smtps:']),
    emailFrom: optional(env, 'EMAIL_FROM') ?? 'Hark <no-reply@localhost>',
    logLevel: oneOf(env, 'LOG_LEVEL', LOG_LEVELS, 'info'),
    bodyLimitBytes: integer(env, 'BODY_LIMIT_BYTES', 1_048_576, 1024, 100 * 1_048_576),
    shutdownTimeoutMs: integer(env, 'SHUTDOWN_TIMEOUT_MS', 15_000, 0, 600_000),
    jobsMaintenanceSeconds: integer(env, 'JOBS_MAINTENANCE_SECONDS', 30, 1, 3600),
    jobsExpireSeconds: optional(env, 'JOBS_EXPIRE_SECONDS') === undefined ? undefined : integer(env, 'JOBS_EXPIRE_SECONDS', 0, 10, 86_400),
    kb: {
      maxFileBytes: integer(env, 'KB_MAX_FILE_BYTES', KB_FILE_LIMIT_BYTES, 1, KB_FILE_LIMIT_BYTES),
      maxTextChars: integer(env, 'KB_MAX_TEXT_CHARS', 10_000_000, 1, 1_000_000_000),
    },
  };
}
