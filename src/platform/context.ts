import type { App } from './http/app-type.ts';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Database } from './db/database.ts';
import type { JobDefinition, JobQueue } from './jobs/queue.ts';
import type { ExpiringRecords } from './jobs/sweeper.ts';
import type { Secrets } from './crypto/secrets.ts';
import type { BlobStore } from './storage/blob-store.ts';
import type { RateLimits } from './http/rate-limit.ts';
import type { Redis } from 'ioredis';
import type { Mailer } from '../providers/email/index.ts';

/** The shared machinery every module's services are built from. */
export interface AppContext {
  config: Config;
  logger: Logger;
  db: Database;
  jobs: JobQueue;
  blobs: BlobStore;
  secrets: Secrets;
  /** Counters for API-key limits and sign-in throttling (Redis when REDIS_URL is set). */
  rateLimits: RateLimits;
  /** Present when REDIS_URL is set. */
  redis?: Redis;
  mailer: Mailer;
}

/**
 * A domain module plugs into the platform here: its routes, its job types,
 * and tables whose rows expire (swept by the platform sweeper).
 */
export interface HarkModule {
  name: string;
  routes?(app: App, ctx: AppContext): void | Promise<void>;
  jobs?(ctx: AppContext): JobDefinition[];
  expiringRecords?: ExpiringRecords[];
}

/**
 * One service instance per running context, created on first use: routes,
 * jobs, the auth hook and other modules' services share it without a
 * hand-written wiring list.
 */
export function perContext<T>(make: (ctx: AppContext) => T): (ctx: AppContext) => T {
  const instances = new WeakMap<AppContext, T>();
  return (ctx) => {
    let instance = instances.get(ctx);
    if (instance === undefined) {
      instance = make(ctx);
      instances.set(ctx, instance);
    }
    return instance;
  };
}
