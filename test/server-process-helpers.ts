/**
 * The real server (`npm start`: `node --import tsx src/main.ts`) as a child
 * process of a test, on storage the test can stop, kill and reopen.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import pino from 'pino';
import { loadConfig } from '../src/config.ts';
import { startRuntime, type Runtime } from '../src/runtime.ts';
import { eventually, scratchDatabase, tempDir } from './helpers.ts';

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

export interface ServerProcess {
  child: ChildProcess;
  base: string;
  /** Every line the process wrote to stdout and stderr so far. */
  logs: () => string[];
  /** Its exit code; null when a signal ended it. */
  exited: Promise<number | null>;
}

/** Starts the server on a free port with `env` over this process's environment, and waits until /api/ready answers 200. */
export async function startServer(env: Record<string, string>, readyTimeoutMs = 60_000): Promise<ServerProcess> {
  const port = await freePort();
  const lines: string[] = [];
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    env: { ...process.env, PORT: String(port), LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => lines.push(...chunk.split('\n').filter(Boolean)));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => lines.push(...chunk.split('\n').filter(Boolean)));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const base = `http://127.0.0.1:${port}`;
  await eventually(
    'server ready',
    async () => {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`server exited early:\n${lines.join('\n')}`);
      const res = await fetch(`${base}/api/ready`).catch(() => undefined);
      return res?.status === 200;
    },
    readyTimeoutMs,
  );
  return { child, base, logs: () => lines, exited };
}

/** SIGKILL: no shutdown code runs, as when the machine or the container dies. Resolves once the process is gone. */
export async function killHard(server: ServerProcess): Promise<void> {
  server.child.kill('SIGKILL');
  await server.exited;
}

/** SIGTERM, and fails unless the process then exits cleanly. */
export async function stopGracefully(server: ServerProcess): Promise<void> {
  server.child.kill('SIGTERM');
  const code = await server.exited;
  if (code !== 0) throw new Error(`server exited with ${code} after SIGTERM:\n${server.logs().slice(-20).join('\n')}`);
}

/**
 * A DATA_DIR and, when DATABASE_URL is set, a scratch PostgreSQL database:
 * what several server processes started one after another share.
 */
export interface ServerStorage {
  /** DATA_DIR and DATABASE_URL for startServer (an empty DATABASE_URL means the embedded database). */
  env: Record<string, string>;
  /** startServer on this storage; `remove` kills it if it is still running then. */
  start(env?: Record<string, string>): Promise<ServerProcess>;
  /**
   * The same database opened in this process, for what the public API cannot
   * do or show. Serve role only, so no job runs here. Only while no server
   * process is running: the embedded database admits one process at a time.
   */
  open(): Promise<Runtime>;
  /** Kills servers still running (a failed test), then drops the database and the directory. */
  remove(): Promise<void>;
}

export async function serverStorage(): Promise<ServerStorage> {
  const data = tempDir();
  const database = await scratchDatabase();
  const env = { DATA_DIR: data.dir, DATABASE_URL: database.url ?? '' };
  const started: ServerProcess[] = [];
  return {
    env,
    async start(extra = {}) {
      const server = await startServer({ ...env, ...extra });
      started.push(server);
      return server;
    },
    open: () => startRuntime(loadConfig({ ...env, ROLES: 'serve', LOG_LEVEL: 'silent' }), { logger: pino({ level: 'silent' }) }),
    async remove() {
      // Their pipes would keep the test process alive; a server that already exited is not signalled again.
      await Promise.all(started.map((server) => (server.child.exitCode === null && server.child.signalCode === null ? killHard(server) : undefined)));
      await database.drop();
      data.remove();
    },
  };
}
