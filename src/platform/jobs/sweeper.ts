import { sql } from 'kysely';
import type { Database } from '../db/database.ts';
import { defineJob } from './queue.ts';

/** A table whose rows are deleted once `column` (a timestamptz) is in the past. */
export interface ExpiringRecords {
  table: string;
  column: string;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;
const BATCH = 5000;

export const SWEEP_JOB = 'platform.sweep-expired';

/**
 * Deletes expired rows (refresh tokens, one-time codes, OAuth states, ...)
 * in small batches so it never holds long locks. Runs every five minutes in
 * the work role; safe to run twice at once.
 */
export function sweepExpiredJob(db: Database, targets: readonly ExpiringRecords[]) {
  for (const { table, column } of targets) {
    if (!IDENTIFIER.test(table) || !IDENTIFIER.test(column)) throw new Error(`invalid sweep target ${table}.${column}`);
  }
  return defineJob<{ now?: string }>({
    name: SWEEP_JOB,
    schedule: '*/5 * * * *',
    retryLimit: 2,
    expireInSeconds: 10 * 60,
    async handler() {
      for (const { table, column } of targets) {
        for (;;) {
          const result = await sql`
            delete from ${sql.table(table)} where ctid in (
              select ctid from ${sql.table(table)} where ${sql.ref(column)} < now() limit ${BATCH}
            )`.execute(db.kysely);
          if (Number(result.numAffectedRows ?? 0) < BATCH) break;
        }
      }
    },
  });
}
