import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Pool } from './pool.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../../migrations/', import.meta.url));

// Any constant shared by every Hark process works; this one spells "hark".
const MIGRATION_LOCK_KEY = 0x6861726b;

export interface Migration {
  version: string; // the file name's leading number, e.g. "0001"
  name: string; // the file name
  sql: string;
  checksum: string;
}

export class MigrationError extends Error {
  override name = 'MigrationError';
}

export async function readMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await fs.readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = /^(\d{4})_[a-z0-9_]+\.sql$/.exec(file);
    if (!match) throw new MigrationError(`migration file ${file} must be named NNNN_lowercase_name.sql`);
    const sql = await fs.readFile(path.join(dir, file), 'utf8');
    const version = match[1]!;
    if (migrations.some((m) => m.version === version)) throw new MigrationError(`two migrations share version ${version}`);
    migrations.push({ version, name: file, sql, checksum: crypto.createHash('sha256').update(sql).digest('hex') });
  }
  return migrations;
}

/**
 * Applies every migration not yet recorded, each in its own transaction, in
 * file order. A session advisory lock makes concurrent start-ups against one
 * PostgreSQL take turns: the second finds the work done. A recorded migration
 * whose file changed stops start-up, since the database no longer matches the code.
 */
export async function migrate(pool: Pool, migrations: Migration[]): Promise<{ applied: string[] }> {
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await client.query(`create table if not exists schema_migrations (
        version text primary key,
        name text not null,
        checksum text not null,
        applied_at timestamptz not null default now()
      )`);
      const { rows } = await client.query<{ version: string; name: string; checksum: string }>(
        'select version, name, checksum from schema_migrations',
      );
      const done = new Map(rows.map((r) => [r.version, r]));
      for (const migration of migrations) {
        const recorded = done.get(migration.version);
        if (recorded) {
          if (recorded.checksum !== migration.checksum) {
            throw new MigrationError(
              `migration ${migration.name} was changed after it was applied (as ${recorded.name}); add a new migration instead of editing an applied one`,
            );
          }
          continue;
        }
        await client.query('begin');
        try {
          await client.query(migration.sql);
          await client.query('insert into schema_migrations (version, name, checksum) values ($1, $2, $3)', [
            migration.version,
            migration.name,
            migration.checksum,
          ]);
          await client.query('commit');
        } catch (error) {
          await client.query('rollback');
          throw new MigrationError(`migration ${migration.name} failed: ${(error as Error).message}`);
        }
        applied.push(migration.name);
      }
    } finally {
      await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    client.release();
  }
  return { applied };
}

/** True when every migration file is recorded as applied (readiness). */
export async function migrationsApplied(pool: Pool, migrations: Migration[]): Promise<boolean> {
  const { rows } = await pool.query<{ version: string }>('select version from schema_migrations');
  const done = new Set(rows.map((r) => r.version));
  return migrations.every((m) => done.has(m.version));
}
