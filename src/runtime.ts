import path from 'node:path';
import pino, { type Logger } from 'pino';
import type { App } from './platform/http/app-type.ts';
import type { Config } from './config.ts';
import type { AppContext, HarkModule } from './platform/context.ts';
import { openDatabase, type DatabaseTarget } from './platform/db/database.ts';
import { migrate, readMigrations, type Migration } from './platform/db/migrate.ts';
import { JobQueue } from './platform/jobs/queue.ts';
import { sweepExpiredJob } from './platform/jobs/sweeper.ts';
import { deriveKey, loadSecrets } from './platform/crypto/secrets.ts';
import { createBlobStore } from './platform/storage/index.ts';
import { buildApp } from './app.ts';
import { Redis } from 'ioredis';
import { RateLimits } from './platform/http/rate-limit.ts';
import { embedderFor } from './providers/embeddings/index.ts';
import { Mailer, sendEmailJob } from './providers/email/index.ts';
import { MODULES } from './modules/index.ts';

export interface Runtime extends AppContext {
  migrations: Migration[];
  /** The HTTP API, when this process has the serve role. */
  app?: App;
  /** Stops taking requests, lets in-flight requests and jobs finish, closes the database. */
  close(): Promise<void>;
}

export interface RuntimeOptions {
  logger?: Logger;
  /** Overrides the database chosen from config (tests use in-memory PGlite or a scratch database). */
  database?: DatabaseTarget;
  /** The domain modules to run; tests add their own probes. */
  modules?: readonly HarkModule[];
}

/** Secrets never reach the log, whatever object they end up in. */
const REDACT = ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-service-secret"]', '*.password', '*.token', '*.secret'];

/**
 * Writes are buffered and flushed asynchronously: a synchronous write per
 * request line costs a measurable share of throughput. main.ts flushes before exit.
 */
export function createLogger(config: Config): Logger {
  return pino(
    { level: config.logLevel, redact: { paths: REDACT, censor: '[redacted]' } },
    pino.destination({ dest: 1, sync: false }),
  );
}

export function databaseTarget(config: Config): DatabaseTarget {
  return config.databaseUrl
    ? { kind: 'postgres', url: config.databaseUrl }
    : { kind: 'pglite', dir: path.resolve(config.dataDir, 'pglite') };
}

/** Builds everything a process needs for its roles, in dependency order. */
export async function startRuntime(config: Config, options: RuntimeOptions = {}): Promise<Runtime> {
  const logger = options.logger ?? createLogger(config);
  const modules = options.modules ?? MODULES;
  const secrets = loadSecrets(config.dataDir, { jwtSecret: config.authJwtSecret, secretsKey: config.secretsKey });
  if (secrets.generated && config.databaseUrl) {
    logger.warn('AUTH_JWT_SECRET or SECRETS_KEY not set: using secrets generated in DATA_DIR; set both explicitly when several processes share the database');
  }

  const db = await openDatabase(options.database ?? databaseTarget(config));
  const closers: Array<() => Promise<void>> = [() => db.close()];
  const closeAll = async () => {
    for (const close of closers.reverse()) {
      await close().catch((error: unknown) => logger.error({ err: error }, 'error during shutdown'));
    }
  };

  try {
    const migrations = await readMigrations();
    const { applied } = await migrate(db.pool, migrations);
    if (applied.length) logger.info({ applied }, 'migrations applied');

    const blobs = createBlobStore({
      storage: config.storage,
      dataDir: config.dataDir,
      baseUrl: config.baseUrl,
      signingKey: deriveKey(secrets.secretsKey, 'blob-urls'),
      s3: config.s3,
    });
    closers.push(() => blobs.close());

    const redis = config.redisUrl ? new Redis(config.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 2 }) : undefined;
    if (redis) {
      await redis.connect();
      closers.push(async () => void (await redis.quit()));
    }
    const jobs = new JobQueue(db, logger, {
      maintenanceSeconds: config.jobsMaintenanceSeconds,
      work: config.roles.has('work'),
      expireCapSeconds: config.jobsExpireSeconds,
    });
    const mailer = new Mailer(jobs, logger, config.smtpUrl);
    const ctx: AppContext = { config, logger, db, jobs, blobs, secrets, rateLimits: new RateLimits(redis), redis, mailer };
    // Registered before the job queue's closer, so it runs after it: no job is still embedding when the model worker ends.
    closers.push(async () => void (await embedderFor(ctx).close?.()));
    jobs.register([sweepExpiredJob(db, modules.flatMap((m) => m.expiringRecords ?? [])), sendEmailJob(db, config.smtpUrl, config.emailFrom)]);
    for (const module of modules) jobs.register(module.jobs?.(ctx) ?? []);
    await jobs.start();
    closers.push(() => jobs.stop(config.shutdownTimeoutMs));

    const app = config.roles.has('serve') ? await buildApp(ctx, migrations, modules) : undefined;
    // Fastify's close stops accepting and waits for in-flight requests; it runs first.
    if (app) closers.push(() => app.close());

    let closing: Promise<void> | undefined;
    // The runtime is the context itself (not a copy), so per-context services are shared with callers.
    return Object.assign(ctx, { migrations, app, close: () => (closing ??= closeAll()) });
  } catch (error) {
    await closeAll();
    throw error;
  }
}
