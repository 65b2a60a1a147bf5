import fs from 'node:fs';
import { createScratchDatabase, findPostgres } from './postgres.ts';
import { startServer, type ServerProcess } from './server.ts';
import type { SuiteContext } from './suite.ts';

/** Where a Hark process keeps its data: always a DATA_DIR, plus a database on PostgreSQL. */
export type Engine = { kind: 'pglite' } | { kind: 'postgres'; adminUrl: string };

/** The engines a suite runs on: PGlite always, PostgreSQL when reachable (else a note saying why not). */
export async function benchEngines(): Promise<{ engines: Engine[]; postgres?: Extract<Engine, { kind: 'postgres' }>; skipped: string[] }> {
  const found = await findPostgres();
  if (!found.available) return { engines: [{ kind: 'pglite' }], skipped: [`PostgreSQL rows skipped: ${found.reason}.`] };
  const postgres = { kind: 'postgres' as const, adminUrl: found.adminUrl };
  return { engines: [{ kind: 'pglite' }, postgres], postgres, skipped: [] };
}

export const ENGINE_LABEL: Record<Engine['kind'], string> = { pglite: 'PGlite', postgres: 'PostgreSQL' };

export interface HarkStorage {
  engine: Engine['kind'];
  dataDir: string;
  /** Set on PostgreSQL: a scratch database only this storage uses. */
  databaseUrl?: string;
  /** Drops the database and removes the data dir now rather than at the end of the suite. Stop the server first. */
  release(): Promise<void>;
}

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** A fresh DATA_DIR and, on PostgreSQL, a fresh database: a first start runs every migration. */
export async function freshStorage(ctx: SuiteContext, engine: Engine): Promise<HarkStorage> {
  const dataDir = ctx.tempDir(`data-${engine.kind}`);
  const removeDir = () => fs.rmSync(dataDir, { recursive: true, force: true });
  if (engine.kind === 'pglite') {
    ctx.defer(removeDir);
    return { engine: engine.kind, dataDir, release: async () => removeDir() };
  }
  const database = await createScratchDatabase(engine.adminUrl);
  const release = async () => {
    await database.drop();
    removeDir();
  };
  ctx.defer(release);
  return { engine: engine.kind, dataDir, databaseUrl: database.url, release };
}

/** `npm start` on `storage`, as its own process; stopped when the suite ends if not before. */
export async function startHark(ctx: SuiteContext, storage: HarkStorage, options: { label: string; logLevel: LogLevel }): Promise<ServerProcess> {
  const server = await startServer({
    label: options.label,
    // The command behind `npm start`, without npm's own process in between.
    args: ['--import', 'tsx', 'src/main.ts'],
    cwd: ctx.repoRoot,
    env: {
      DATA_DIR: storage.dataDir,
      // Removed for PGlite, so a DATABASE_URL meant for the benchmark runner does not leak in.
      DATABASE_URL: storage.databaseUrl,
      LOG_LEVEL: options.logLevel,
    },
    readyPath: '/api/ready',
    logFile: ctx.logFile(options.label),
  });
  ctx.defer(() => server.stop());
  return server;
}

/** The bare Fastify baseline (bench/lib/bare-fastify.ts) as its own process. */
export function startBareFastify(ctx: SuiteContext, label = 'bare-fastify'): Promise<ServerProcess> {
  return startScript(ctx, label, 'bench/lib/bare-fastify.ts', '/api/health');
}

/** The fake OpenAI-compatible upstream (test/fake-llm-upstream.ts) as its own process; Hark reaches it at `${baseUrl}/v1`. */
export function startFakeLlmUpstream(ctx: SuiteContext, label = 'fake-llm-upstream'): Promise<ServerProcess> {
  return startScript(ctx, label, 'test/fake-llm-upstream.ts', '/health');
}

/** A TypeScript server of this repository as its own process, stopped with the suite. */
async function startScript(ctx: SuiteContext, label: string, script: string, readyPath: string): Promise<ServerProcess> {
  const server = await startServer({ label, args: ['--import', 'tsx', script], cwd: ctx.repoRoot, env: {}, readyPath, logFile: ctx.logFile(label) });
  ctx.defer(() => server.stop());
  return server;
}

/**
 * The `ms` Hark logs with "Hark API ready": from config loaded to listening,
 * so it leaves out Node, tsx and module loading. Only logged at info level.
 */
export function loggedReadyMs(logFile: string): number | undefined {
  for (const line of fs.readFileSync(logFile, 'utf8').split('\n')) {
    if (!line.includes('"Hark API ready"')) continue;
    try {
      const entry = JSON.parse(line) as { msg?: unknown; ms?: unknown };
      if (entry.msg === 'Hark API ready' && typeof entry.ms === 'number') return entry.ms;
    } catch {
      // Not a log line (e.g. a stack trace mentioning the message); keep looking.
    }
  }
  return undefined;
}
