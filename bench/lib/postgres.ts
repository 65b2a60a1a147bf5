import crypto from 'node:crypto';
import pg from 'pg';

/** Where the benchmarks look for PostgreSQL when DATABASE_URL is not set (the local install has pgvector). */
export const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export type PostgresAvailability =
  | { available: true; adminUrl: string }
  | { available: false; reason: string };

/**
 * The server to create scratch databases on. DATABASE_URL, when set, must
 * work: the person asked for it, so failing loudly beats a silently missing
 * row. Without it the default local server is tried, and its absence only
 * skips the PostgreSQL rows.
 */
export async function findPostgres(env: NodeJS.ProcessEnv = process.env): Promise<PostgresAvailability> {
  const explicit = env.DATABASE_URL?.trim();
  const adminUrl = explicit || DEFAULT_POSTGRES_URL;
  const problem = await probe(adminUrl);
  if (!problem) return { available: true, adminUrl };
  if (explicit) throw new Error(`DATABASE_URL is set but not usable for benchmarks: ${problem}`);
  return { available: false, reason: `${redact(adminUrl)}: ${problem}` };
}

/** Why Hark could not run on this server, or undefined when it can. */
async function probe(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    // Hark refuses to start on PostgreSQL without pgvector.
    const { rows } = await client.query(`select 1 from pg_available_extensions where name = 'vector'`);
    return rows.length === 0 ? 'pgvector is not installed (npm run install-pgvector)' : undefined;
  } catch (error) {
    return (error as Error).message || String(error);
  } finally {
    await client.end().catch(() => {});
  }
}

export interface ScratchDatabase {
  name: string;
  url: string;
  /** Drops it even while something is still connected. Safe to call more than once. */
  drop(): Promise<void>;
}

export async function createScratchDatabase(adminUrl: string, prefix = 'hark_bench'): Promise<ScratchDatabase> {
  // Lower-case letters, digits and underscores only: safe to splice into SQL unquoted.
  const name = `${prefix}_${process.pid}_${crypto.randomBytes(4).toString('hex')}`;
  await adminQuery(adminUrl, `create database ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  let dropped = false;
  return {
    name,
    url: url.toString(),
    async drop() {
      if (dropped) return;
      await adminQuery(adminUrl, `drop database if exists ${name} with (force)`);
      dropped = true;
    },
  };
}

/** A server setting as SHOW prints it (e.g. shared_buffers "128MB"). */
export function serverSetting(adminUrl: string, name: string): Promise<string> {
  return withAdminClient(adminUrl, async (client) => (await client.query<{ setting: string }>('select current_setting($1) as setting', [name])).rows[0]!.setting);
}

async function adminQuery(adminUrl: string, statement: string): Promise<void> {
  await withAdminClient(adminUrl, (client) => client.query(statement));
}

async function withAdminClient<T>(adminUrl: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

/** A connection string fit for output: no password. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable URL)';
  }
}
