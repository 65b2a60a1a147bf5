import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { trackChild } from './cleanup.ts';
import { sleep } from './time.ts';

export interface ServerOptions {
  /** Names the server in errors and progress lines. */
  label: string;
  /** Arguments to this Node binary, e.g. ['--import', 'tsx', 'src/main.ts']. */
  args: string[];
  cwd: string;
  /** Added to this process's environment; `undefined` removes a variable. PORT and HOST are set here. */
  env: Record<string, string | undefined>;
  /** Polled until it answers 200. */
  readyPath: string;
  /** Receives the server's stdout and stderr. */
  logFile: string;
  pollIntervalMs?: number;
  readyTimeoutMs?: number;
}

export interface ServerProcess {
  label: string;
  pid: number;
  baseUrl: string;
  /** From spawn until `readyPath` first answered 200 (includes Node and tsx start-up). */
  msToReady: number;
  logFile: string;
  /** SIGTERM, then SIGKILL if it has not exited in time. Safe to call more than once. */
  stop(): Promise<void>;
}

const HOST = '127.0.0.1';
const STOP_TIMEOUT_MS = 30_000;

/**
 * Spawns a server as a child process on a free port and waits until it is
 * ready. Output goes to a file, not a pipe: a pipe this process had to drain
 * would cost it CPU during load runs, and an undrained one would stall the
 * server once full.
 */
export async function startServer(options: ServerOptions): Promise<ServerProcess> {
  const port = await freePort();
  const baseUrl = `http://${HOST}:${port}`;
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [name, value] of Object.entries({ ...options.env, PORT: String(port), HOST })) {
    if (value === undefined) delete env[name];
    else env[name] = value;
  }

  const output = fs.openSync(options.logFile, 'a');
  const startedAt = performance.now();
  let child: ChildProcess;
  try {
    child = spawn(process.execPath, options.args, { cwd: options.cwd, env, stdio: ['ignore', output, output] });
  } finally {
    // The child holds its own copy of the descriptor.
    fs.closeSync(output);
  }
  trackChild(child);
  let exitStatus: string | undefined;
  // A child that failed to spawn emits 'error' and never 'exit'.
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exitStatus = signal ?? `code ${code}`;
      resolve();
    });
    child.once('error', (error) => {
      exitStatus = `spawn error: ${error.message}`;
      resolve();
    });
  });

  const stop = async () => {
    if (exitStatus !== undefined) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
  };

  try {
    const msToReady = await waitForReady(`${baseUrl}${options.readyPath}`, startedAt, {
      intervalMs: options.pollIntervalMs ?? 50,
      timeoutMs: options.readyTimeoutMs ?? 120_000,
      exitStatus: () => exitStatus,
    });
    if (child.pid === undefined) throw new Error('no pid');
    return { label: options.label, pid: child.pid, baseUrl, msToReady, logFile: options.logFile, stop };
  } catch (error) {
    await stop();
    throw new Error(`${options.label} did not become ready: ${(error as Error).message}\n--- last lines of ${options.logFile} ---\n${tail(options.logFile, 20)}`);
  }
}

async function waitForReady(
  url: string,
  startedAt: number,
  options: { intervalMs: number; timeoutMs: number; exitStatus: () => string | undefined },
): Promise<number> {
  for (;;) {
    const attemptAt = performance.now();
    if ((await statusOf(url, options.intervalMs * 20)) === 200) return performance.now() - startedAt;
    const status = options.exitStatus();
    if (status) throw new Error(`exited (${status})`);
    if (performance.now() - startedAt > options.timeoutMs) throw new Error(`timed out after ${options.timeoutMs} ms`);
    // Poll on a fixed cadence: a slow answer does not add a full interval on top.
    await sleep(Math.max(0, options.intervalMs - (performance.now() - attemptAt)));
  }
}

/** Status code of a GET, or undefined when nothing answers. A fresh connection each time: no keep-alive socket outlives the poll. */
export function statusOf(url: string, timeoutMs: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const request = http.get(url, { agent: false, timeout: timeoutMs }, (response) => {
      response.resume();
      resolve(response.statusCode);
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(undefined));
  });
}

/** A port nothing listens on right now (the OS picks it; another process could still take it before the server binds). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, HOST, () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

function tail(file: string, lines: number): string {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no output)';
  }
}
