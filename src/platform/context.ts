import type { App } from './http/app-type.ts';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Database } from './db/database.ts';
import type { JobDefinition, JobQueue } from './jobs/queue.ts';
import type { ExpiringRecords } from './jobs/sweeper.ts';
import type { Secrets } from './crypto/secrets.ts';
import type { BlobStore } from './storage/blob-store.ts';

/** The shared machinery every module's services are built from. */
export interface AppContext {
  config: Config;
  logger: Logger;
  db: Database;
  jobs: JobQueue;
  blobs: BlobStore;
  secrets: Secrets;
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
