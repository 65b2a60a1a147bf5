import PgBoss from 'pg-boss';
import { CompiledQuery, sql } from 'kysely';
import type { Logger } from 'pino';
import type { Database, Tx } from '../db/database.ts';

/**
 * A job type in the catalogue: its queue name, retry and expiry policy, and
 * the handler that runs in the `work` role. Payloads are JSON objects.
 */
export interface JobDefinition<P extends object = object> {
  name: string;
  /** Attempts after the first failure before the job is dead-lettered. */
  retryLimit?: number;
  /** Seconds before the first retry; doubled on each retry when `retryBackoff`. */
  retryDelaySeconds?: number;
  retryBackoff?: boolean;
  /**
   * Visibility timeout: a job active for longer (its worker died or hung) is
   * failed by queue maintenance and retried by another worker.
   */
  expireInSeconds?: number;
  /** Cron expression (minute resolution) for a recurring job. */
  schedule?: string;
  /** Jobs of this type run in parallel in one process. */
  concurrency?: number;
  handler(payload: P, job: { id: string; retryCount: number }): Promise<void>;
}

export function defineJob<P extends object>(definition: JobDefinition<P>): JobDefinition<P> {
  return definition;
}

export interface SendOptions {
  /** Enqueue inside this transaction: the job exists only if the transaction commits. */
  trx?: Tx;
  startAfterSeconds?: number;
  /** At most one queued job with this key per queue at a time. */
  singletonKey?: string;
}

export const DEAD_LETTER_SUFFIX = '__dead';
const QUEUE_SCHEMA = 'pgboss';
// Serialises queue creation between processes; any constant shared by every Hark process ("hrkq").
const QUEUE_LOCK_KEY = 0x68726b71;

/**
 * Durable jobs on the application database, through pg-boss. On PostgreSQL
 * pg-boss keeps its own small pool; on PGlite it shares the single embedded
 * connection through our pool, which serialises it with everything else.
 */
export class JobQueue {
  private readonly boss: PgBoss;
  private readonly definitions = new Map<string, JobDefinition>();
  private readonly workerIds = new Map<string, string[]>();
  private started = false;
  private working = false;

  constructor(
    private readonly db: Database,
    private readonly logger: Logger,
    private readonly options: {
      maintenanceSeconds: number;
      work: boolean;
      /** When set, no job type keeps a run active longer than this before it is delivered again (JOBS_EXPIRE_SECONDS). */
      expireCapSeconds?: number;
    },
  ) {
    const connection: PgBoss.ConstructorOptions =
      db.kind === 'postgres' && db.connectionString
        ? { connectionString: db.connectionString, max: 4, application_name: 'hark-jobs' }
        : { db: { executeSql: (text, values) => db.pool.query(text, values) } };
    this.boss = new PgBoss({
      ...connection,
      schema: QUEUE_SCHEMA,
      maintenanceIntervalSeconds: options.maintenanceSeconds,
      // Only the work role keeps the clock for cron schedules.
      schedule: options.work,
    });
    this.boss.on('error', (error) => this.logger.error({ err: error }, 'job queue error'));
  }

  register(definitions: readonly JobDefinition[]): void {
    for (const definition of definitions) {
      if (this.definitions.has(definition.name)) throw new Error(`job ${definition.name} is defined twice`);
      this.definitions.set(definition.name, definition as JobDefinition);
    }
  }

  /** Creates the queues; in the work role, also runs their handlers and cron schedules. */
  async start(): Promise<void> {
    try {
      await this.takingTurns(async () => {
        await this.boss.start();
        this.started = true;
        await this.createQueues();
      });
      if (this.options.work) {
        // One process owns an embedded database (its DATA_DIR lock), so an active job found at start-up belongs to a process that died.
        if (this.db.kind === 'pglite') await this.reclaimOrphanedJobs();
        await this.startWorkers();
      }
    } catch (error) {
      // The caller only stops a queue that started: leave no pool or timers behind.
      await this.stop(0).catch(() => {});
      throw error;
    }
  }

  /**
   * pg-boss creates a queue by inserting its row and then altering the job
   * table that references it, so two processes starting at the same moment
   * deadlock on PostgreSQL (pg-boss's own start creates its cron queue the same
   * way). Start-ups take turns under a transaction-scoped advisory lock; PGlite
   * has a single process, so nothing to race with there.
   */
  private async takingTurns(fn: () => Promise<void>): Promise<void> {
    if (this.db.kind !== 'postgres') return fn();
    await this.db.transaction(async (trx) => {
      await sql`select pg_advisory_xact_lock(${QUEUE_LOCK_KEY})`.execute(trx);
      await fn();
    });
  }

  /**
   * Creates each queue and its dead-letter queue, then writes the current
   * policy onto them: createQueue leaves an existing queue as it was, so
   * without the update a changed retry or expiry policy (in code or through
   * JOBS_EXPIRE_SECONDS) would never reach an existing install.
   */
  private async createQueues(): Promise<void> {
    for (const definition of this.definitions.values()) {
      const deadLetter = definition.name + DEAD_LETTER_SUFFIX;
      const deadLetterPolicy = { name: deadLetter, retentionDays: 14 };
      const policy = {
        name: definition.name,
        deadLetter,
        retryLimit: definition.retryLimit ?? 3,
        retryDelay: definition.retryDelaySeconds ?? 5,
        retryBackoff: definition.retryBackoff ?? true,
        expireInSeconds: Math.min(definition.expireInSeconds ?? 15 * 60, this.options.expireCapSeconds ?? Infinity),
      };
      for (const queue of [deadLetterPolicy, policy]) {
        await this.boss.createQueue(queue.name, queue);
        await this.boss.updateQueue(queue.name, queue);
      }
    }
  }

  /**
   * Fails every active job as an attempt that died with its worker, so it is
   * retried now (or dead-lettered when out of retries) instead of after its
   * expiry, which for a knowledge-base file is half an hour. Only safe when no
   * other live process can be running those jobs.
   */
  async reclaimOrphanedJobs(): Promise<number> {
    const { rows } = await sql<{ name: string; id: string }>`select name, id::text as id from ${sql.table(`${QUEUE_SCHEMA}.job`)} where state = 'active'`.execute(
      this.db.kysely,
    );
    for (const { name, id } of rows) await this.boss.fail(name, id, { message: 'the process running this job ended before it finished' });
    if (rows.length > 0) this.logger.warn({ jobs: rows.length }, 'retrying jobs left active by a process that ended');
    return rows.length;
  }

  private async startWorkers(): Promise<void> {
    for (const definition of this.definitions.values()) {
      const ids: string[] = [];
      for (let i = 0; i < (definition.concurrency ?? 1); i++) {
        ids.push(
          await this.boss.work<object>(
            definition.name,
            // With metadata, so the handler learns which attempt this is (retryCount).
            { batchSize: 1, pollingIntervalSeconds: 1, includeMetadata: true },
            async ([job]) => {
              if (!job) return;
              await this.run(definition, job);
            },
          ),
        );
      }
      this.workerIds.set(definition.name, ids);
      if (definition.schedule) await this.boss.schedule(definition.name, definition.schedule, {});
    }
    this.working = true;
  }

  private async run(definition: JobDefinition, job: PgBoss.JobWithMetadata<object>): Promise<void> {
    const retryCount = job.retryCount;
    const started = performance.now();
    try {
      await definition.handler(job.data, { id: job.id, retryCount });
      this.logger.info({ job: definition.name, jobId: job.id, ms: Math.round(performance.now() - started) }, 'job done');
    } catch (error) {
      this.logger.warn({ job: definition.name, jobId: job.id, err: error }, 'job failed');
      throw error;
    }
  }

  async send(name: string, payload: object, options: SendOptions = {}): Promise<string | null> {
    if (!this.definitions.has(name)) throw new Error(`unknown job ${name}`);
    const sendOptions: PgBoss.SendOptions = {};
    if (options.startAfterSeconds) sendOptions.startAfter = options.startAfterSeconds;
    if (options.singletonKey) sendOptions.singletonKey = options.singletonKey;
    const trx = options.trx;
    if (trx) {
      sendOptions.db = {
        executeSql: async (text, values) => trx.executeQuery(CompiledQuery.raw(text, values ?? [])),
      };
    }
    const id = await this.boss.send(name, payload, sendOptions);
    // Wake a local worker now instead of at its next poll (a job sent inside
    // a transaction is found at the next poll, after the commit).
    if (!trx) for (const workerId of this.workerIds.get(name) ?? []) this.boss.notifyWorker(workerId);
    return id;
  }

  /** Direct access for tests and tools: job state, fetch without a handler. */
  get engine(): PgBoss {
    return this.boss;
  }

  get isWorking(): boolean {
    return this.working;
  }

  async stop(timeoutMs: number): Promise<void> {
    if (!this.started) return;
    this.started = false;
    this.working = false;
    await this.boss.stop({ graceful: true, timeout: Math.max(timeoutMs, 1000), wait: true, close: true });
  }
}
