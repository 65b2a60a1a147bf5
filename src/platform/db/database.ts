import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { Kysely, PostgresDialect, sql, type PostgresPool, type PostgresPoolClient, type Transaction } from 'kysely';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { PGlitePool } from './pglite-pool.ts';
import type { Pool } from './pool.ts';
import type { Tables } from './tables.ts';

export type Tx = Transaction<Tables>;

export interface Database {
  readonly kind: 'pglite' | 'postgres';
  readonly pool: Pool;
  readonly kysely: Kysely<Tables>;
  /** For pg-boss on PostgreSQL, which keeps its own pool; undefined on PGlite. */
  readonly connectionString?: string;
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (trx: Tx) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export type DatabaseTarget =
  | { kind: 'postgres'; url: string }
  /** `dir` undefined: in memory (tests); otherwise a directory that this process owns. */
  | { kind: 'pglite'; dir?: string };

/** Start-up problems a person must fix; the message says how. */
export class DatabaseSetupError extends Error {
  override name = 'DatabaseSetupError';
}

export const MIN_PGVECTOR = '0.5.0';

const INT8_OID = 20;

export async function openDatabase(target: DatabaseTarget): Promise<Database> {
  return target.kind === 'postgres' ? openPostgres(target.url) : openPGlite(target.dir);
}

async function openPostgres(url: string): Promise<Database> {
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    application_name: 'hark',
    // PGlite returns bigint (count(*), sums) as numbers; do the same here so
    // both engines give services one shape. Hark never stores integers beyond
    // 2^53 (money is in minor units).
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
        oid === INT8_OID ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
    },
  });
  pool.on('error', () => {
    // An idle client lost its connection; pg replaces it on next use. Without
    // this listener the error would crash the process.
  });
  try {
    await pool.query('select 1');
    await assertPgvectorAvailable(pool, url);
  } catch (error) {
    await pool.end();
    if (error instanceof DatabaseSetupError) throw error;
    throw new DatabaseSetupError(`cannot connect to PostgreSQL at ${redact(url)}: ${(error as Error).message}`);
  }
  const kysely = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: preparingPool(pool) }) });
  return {
    kind: 'postgres',
    pool: pool as unknown as Pool,
    kysely,
    connectionString: url,
    transaction: (fn) => kysely.transaction().execute(fn),
    close: () => kysely.destroy(),
  };
}

const PREPARED_MARK = '/* prepared */ ';

/**
 * Put first in a statement (sql`${PREPARED}select …`) that runs often with
 * the same text: on PostgreSQL it becomes a named prepared statement on each
 * pooled connection, parsed once there, and after five executions PostgreSQL
 * may keep one generic plan instead of planning every time (kb bench, 100k
 * chunks: the four search statements spent ~1.7 ms a search planning; hybrid
 * p50 1–2 ms lower with them prepared). Only for statements whose text comes
 * from a fixed set of shapes (values as parameters): each distinct text
 * stays prepared on every connection for the connection's life. On PGlite
 * it is a comment.
 */
export const PREPARED = sql.raw(PREPARED_MARK);

/**
 * The pool Kysely sees on PostgreSQL: the same connections, with statements
 * marked PREPARED sent as named prepared statements (the name from the
 * text, so one name never means two texts). Each checkout gets its own
 * wrapper: pg's own pool.query users share these clients and must find
 * them unchanged.
 */
function preparingPool(pool: pg.Pool): PostgresPool {
  const nameOf = (text: string) => `hark_${crypto.createHash('sha256').update(text).digest('hex').slice(0, 32)}`;
  return {
    connect: async () => {
      const client = await pool.connect();
      const query = (text: string, values: readonly unknown[]) =>
        text.startsWith(PREPARED_MARK) ? client.query({ name: nameOf(text), text, values: [...values] }) : client.query(text, [...values]);
      return { query, release: () => client.release() } as unknown as PostgresPoolClient;
    },
    end: () => pool.end(),
  };
}

async function assertPgvectorAvailable(pool: pg.Pool, url: string): Promise<void> {
  const { rows } = await pool.query<{ default_version: string; installed_version: string | null }>(
    `select default_version, installed_version from pg_available_extensions where name = 'vector'`,
  );
  const version = rows[0]?.installed_version ?? rows[0]?.default_version;
  const howTo =
    'Install pgvector on the database server: on Debian or Ubuntu with PGDG packages `apt-get install postgresql-<major>-pgvector`; ' +
    'on Debian bookworm (no binary package) run `sudo scripts/install-pgvector.sh` from this repository, which builds it from source; ' +
    'on a managed PostgreSQL, enable the "vector" extension.';
  if (!version) {
    throw new DatabaseSetupError(`PostgreSQL at ${redact(url)} has no pgvector extension (Hark needs vector >= ${MIN_PGVECTOR}). ${howTo}`);
  }
  if (compareVersions(version, MIN_PGVECTOR) < 0) {
    throw new DatabaseSetupError(`PostgreSQL at ${redact(url)} has pgvector ${version}; Hark needs >= ${MIN_PGVECTOR}. ${howTo}`);
  }
}

async function openPGlite(dir: string | undefined): Promise<Database> {
  const releaseLock = dir ? lockDataDir(dir) : () => {};
  let pool: PGlitePool;
  try {
    const db = await PGlite.create({ dataDir: dir, extensions: { vector } });
    pool = new PGlitePool(db);
  } catch (error) {
    releaseLock();
    throw error;
  }
  // Kysely only reads rows and rowCount; our `command` is a plain string.
  const kysely = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: pool as unknown as PostgresPool }) });
  return {
    kind: 'pglite',
    pool,
    kysely,
    transaction: (fn) => pool.guard(() => kysely.transaction().execute(fn)),
    close: async () => {
      await kysely.destroy();
      releaseLock();
    },
  };
}

/**
 * PGlite files must only ever be opened by one process: a second one would
 * corrupt them. A lock file with our pid stops a second `npm start` on the same
 * DATA_DIR with a clear message; a stale lock of a dead process is taken over.
 * A lock file with our own pid is stale too (a restarted container is pid 1
 * again) unless this process holds the directory, which `openDataDirs` tells.
 */
const openDataDirs = new Set<string>();

function lockDataDir(dir: string): () => void {
  fs.mkdirSync(dir, { recursive: true });
  const key = fs.realpathSync(dir);
  if (openDataDirs.has(key)) {
    throw new DatabaseSetupError(
      `the embedded database in ${dir} is in use by this process; open it once and share it, or set DATABASE_URL to use PostgreSQL`,
    );
  }
  const lockFile = path.join(dir, 'hark.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(lockFile, String(process.pid), { flag: 'wx' });
      openDataDirs.add(key);
      return () => {
        openDataDirs.delete(key);
        fs.rmSync(lockFile, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = Number(fs.readFileSync(lockFile, 'utf8'));
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner)) {
        throw new DatabaseSetupError(
          `the embedded database in ${dir} is in use by process ${owner}; run one process per DATA_DIR, or set DATABASE_URL to share PostgreSQL between processes`,
        );
      }
      fs.rmSync(lockFile, { force: true });
    }
  }
  throw new DatabaseSetupError(`cannot lock the embedded database in ${dir}`);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map((n) => parseInt(n, 10) || 0);
  const pb = b.split('.').map((n) => parseInt(n, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const diff = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
}

/** Connection strings carry passwords; only host and database are ever shown. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.hostname}${parsed.port ? `:${parsed.port}` : ''}${parsed.pathname}`;
  } catch {
    return '(unparseable URL)';
  }
}
