import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadConfig, type Config } from '../src/config.ts';
import type { DatabaseTarget } from '../src/platform/db/database.ts';
import { startRuntime, type Runtime } from '../src/runtime.ts';
import pino from 'pino';
import type { HarkModule } from '../src/platform/context.ts';
import { MODULES } from '../src/modules/index.ts';

/**
 * Where tests keep their data: in-memory PGlite by default; with DATABASE_URL,
 * a fresh PostgreSQL database per call, dropped by `drop()`. Never mocked.
 */
export async function scratchDatabase(): Promise<{ target: DatabaseTarget; url?: string; drop(): Promise<void> }> {
  const adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) return { target: { kind: 'pglite' }, drop: async () => {} };
  const name = `hark_test_${process.pid}_${crypto.randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    target: { kind: 'postgres', url: url.toString() },
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query(`drop database if exists ${name} with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}

export function tempDir(prefix = 'hark-test-'): { dir: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

export function testConfig(env: Record<string, string> = {}, dataDir?: string): Config {
  return loadConfig({ LOG_LEVEL: 'silent', DATA_DIR: dataDir ?? tempDir().dir, JOBS_MAINTENANCE_SECONDS: '1', ...env });
}

export interface TestRuntime extends Runtime {
  /** Closes the runtime and removes its database and files. */
  destroy(): Promise<void>;
}

/** A full runtime (database, migrations, jobs, blobs, HTTP app) on scratch storage. */
/**
 * `modules` are added to the platform's; a module in `replace` takes the place
 * of the platform module with the same name (e.g. one built with test timings).
 */
export async function startTestRuntime(
  env: Record<string, string> = {},
  options: { modules?: HarkModule[]; replace?: HarkModule[] } = {},
): Promise<TestRuntime> {
  const data = tempDir();
  const database = await scratchDatabase();
  const config = testConfig(env, data.dir);
  const runtime = await startRuntime(config, {
    database: database.target,
    logger: pino({ level: 'silent' }),
    modules: [...MODULES.map((m) => options.replace?.find((r) => r.name === m.name) ?? m), ...(options.modules ?? [])],
  });
  return Object.assign(runtime, {
    async destroy() {
      await runtime.close();
      await database.drop();
      data.remove();
    },
  });
}

/** Polls until `probe` returns a truthy value; fails with `what` after `timeoutMs`. */
export async function eventually<T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
