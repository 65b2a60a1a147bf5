/**
 * The platform's fixed costs, before any feature: how long Hark takes to
 * start, how much memory it holds, and how fast it answers its cheapest route
 * compared with Fastify alone. Runs on PGlite and, when reachable, PostgreSQL.
 */
import { cpuSeconds } from '../lib/cpu.ts';
import { ENGINE_LABEL, freshStorage, loggedReadyMs, startBareFastify, startHark, type Engine, type LogLevel, benchEngines } from '../lib/hark.ts';
import { runLoad, type LoadResult } from '../lib/load.ts';
import { fmt, fmtRatio, type Table } from '../lib/markdown.ts';
import { rssMiB } from '../lib/rss.ts';
import type { ServerProcess } from '../lib/server.ts';
import { median, sum } from '../lib/stats.ts';
import type { Suite, SuiteContext } from '../lib/suite.ts';
import { sleep } from '../lib/time.ts';

const FIRST_STARTS = 3;
const IDLE_MS = 2000;
const CONNECTIONS = 50;
const WARMUP_SECONDS = 2;
const LOAD_SECONDS = 10;
const ROUNDS = 2;
/** warn keeps per-request log lines out of the measurement; info is what people run by default. */
const LOAD_LOG_LEVELS: readonly LogLevel[] = ['warn', 'info'];
/** Info, the default, for start-up: it is what people see, and it logs the in-process ready time. */
const STARTUP_LOG_LEVEL: LogLevel = 'info';

interface StartupResult {
  server: string;
  engine: string;
  firstStartsMs: number[];
  restartMs?: number;
  /** What Hark itself logged for each first start (Hark only). */
  loggedMs: number[];
}

/** A load run plus what it cost the server. */
interface ServerRun extends LoadResult {
  /** CPU the server process used during the run, all threads. */
  serverCpuSeconds: number;
}

interface LoadPairing {
  engine: string;
  logLevel: LogLevel;
  /** Round i of the baseline ran just before round i of Hark. */
  bareRuns: ServerRun[];
  harkRuns: ServerRun[];
  harkIdleMiB: number;
  harkAfterLoadMiB: number;
}

interface LoadResults {
  bareIdleMiB: number;
  bareAfterLoadMiB: number;
  pairings: LoadPairing[];
}

export const foundation: Suite = {
  name: 'foundation',
  description: 'start-up time, idle and loaded RSS, GET /api/health throughput against bare Fastify (PGlite and PostgreSQL)',
  async run(ctx) {
    const { engines, skipped } = await benchEngines();

    const startup = await measureStartup(ctx, engines);
    const load = await measureLoad(ctx, engines);
    return [startupTable(startup, skipped), memoryTable(load, skipped), throughputTable(load, skipped)];
  },
};

async function measureStartup(ctx: SuiteContext, engines: Engine[]): Promise<StartupResult[]> {
  const results: StartupResult[] = [];

  const bare: StartupResult = { server: 'bare Fastify', engine: '—', firstStartsMs: [], loggedMs: [] };
  for (let i = 1; i <= FIRST_STARTS; i++) {
    const server = await startBareFastify(ctx, `startup-bare-${i}`);
    await server.stop();
    bare.firstStartsMs.push(server.msToReady);
    ctx.progress(`start-up: bare Fastify #${i}: ${Math.round(server.msToReady)} ms`);
  }
  results.push(bare);

  for (const engine of engines) {
    const engineLabel = ENGINE_LABEL[engine.kind];
    const result: StartupResult = { server: 'Hark', engine: engineLabel, firstStartsMs: [], loggedMs: [] };
    for (let i = 1; i <= FIRST_STARTS; i++) {
      const storage = await freshStorage(ctx, engine);
      const server = await startHark(ctx, storage, { label: `startup-${engine.kind}-${i}`, logLevel: STARTUP_LOG_LEVEL });
      await server.stop();
      result.firstStartsMs.push(server.msToReady);
      const logged = loggedReadyMs(server.logFile);
      if (logged !== undefined) result.loggedMs.push(logged);
      ctx.progress(`start-up: Hark ${engineLabel} first start #${i}: ${Math.round(server.msToReady)} ms`);

      if (i === FIRST_STARTS) {
        // Same DATA_DIR and database as the start just stopped: migrations are already applied.
        const restarted = await startHark(ctx, storage, { label: `startup-${engine.kind}-restart`, logLevel: STARTUP_LOG_LEVEL });
        await restarted.stop();
        result.restartMs = restarted.msToReady;
        ctx.progress(`start-up: Hark ${engineLabel} restart: ${Math.round(restarted.msToReady)} ms`);
      }
      await storage.release();
    }
    results.push(result);
  }
  return results;
}

async function measureLoad(ctx: SuiteContext, engines: Engine[]): Promise<LoadResults> {
  const bare = await startBareFastify(ctx, 'load-bare');
  await sleep(IDLE_MS);
  const bareIdleMiB = rssMiB(bare.pid);
  await warmUp(ctx, bare);

  const pairings: LoadPairing[] = [];
  for (const engine of engines) {
    const engineLabel = ENGINE_LABEL[engine.kind];
    for (const logLevel of LOAD_LOG_LEVELS) {
      const storage = await freshStorage(ctx, engine);
      const hark = await startHark(ctx, storage, { label: `load-${engine.kind}-${logLevel}`, logLevel });
      await sleep(IDLE_MS);
      const harkIdleMiB = rssMiB(hark.pid);
      await warmUp(ctx, hark);

      const pairing: LoadPairing = { engine: engineLabel, logLevel, bareRuns: [], harkRuns: [], harkIdleMiB, harkAfterLoadMiB: 0 };
      // Interleaved so that drift in the machine's load touches both servers alike
      // and each ratio compares runs taken seconds apart.
      for (let round = 1; round <= ROUNDS; round++) {
        for (const [server, runs] of [[bare, pairing.bareRuns], [hark, pairing.harkRuns]] as const) {
          const result = await measuredRun(server);
          runs.push(result);
          ctx.progress(`load: ${engineLabel} LOG_LEVEL=${logLevel} round ${round}: ${server.label} ${Math.round(result.requestsPerSecond)} req/s`);
        }
      }
      pairing.harkAfterLoadMiB = rssMiB(hark.pid);
      pairings.push(pairing);
      await hark.stop();
      await storage.release();
    }
  }

  const bareAfterLoadMiB = rssMiB(bare.pid);
  await bare.stop();
  return { bareIdleMiB, bareAfterLoadMiB, pairings };
}

async function measuredRun(server: ServerProcess): Promise<ServerRun> {
  const cpuBefore = cpuSeconds(server.pid);
  const result = await runLoad(`${server.baseUrl}/api/health`, { connections: CONNECTIONS, durationSeconds: LOAD_SECONDS });
  return { ...result, serverCpuSeconds: cpuSeconds(server.pid) - cpuBefore };
}

/** Lets the JIT compile the hot path before anything is measured. */
async function warmUp(ctx: SuiteContext, server: ServerProcess): Promise<void> {
  ctx.progress(`warm-up: ${server.label}`);
  await runLoad(`${server.baseUrl}/api/health`, { connections: CONNECTIONS, durationSeconds: WARMUP_SECONDS });
}

function startupTable(results: StartupResult[], skipped: string[]): Table {
  const bareMedian = median(results[0]!.firstStartsMs);
  return {
    title: 'Start-up to ready (ms)',
    columns: ['server', 'database', 'median first start', 'each first start', 'restart', 'logged by Hark (median)', 'median vs bare'],
    rows: results.map((result) => {
      const middle = median(result.firstStartsMs);
      return [
        result.server,
        result.engine,
        fmt(middle),
        result.firstStartsMs.map((ms) => fmt(ms)).join(', '),
        fmt(result.restartMs),
        result.loggedMs.length ? fmt(median(result.loggedMs)) : '—',
        result === results[0] ? '—' : fmtRatio(middle / bareMedian),
      ];
    }),
    notes: [
      `From spawning \`node --import tsx …\` until the ready route first answers 200 (Hark: \`/api/ready\`, bare: \`/api/health\`), polled every 50 ms; LOG_LEVEL=${STARTUP_LOG_LEVEL}.`,
      'A first start has a fresh DATA_DIR (and a fresh database on PostgreSQL), so it includes every migration; the restart reuses the last first start\'s data.',
      '"Logged by Hark" is the `ms` of its "Hark API ready" line: config loaded → listening. The rest of the median is Node, tsx and module loading.',
      ...skipped,
    ],
  };
}

function memoryTable(load: LoadResults, skipped: string[]): Table {
  return {
    title: 'Resident memory (RSS, MiB)',
    columns: ['server', 'database', 'LOG_LEVEL', 'idle', 'after load', 'idle vs bare', 'after load vs bare'],
    rows: [
      ['bare Fastify', '—', 'off', fmt(load.bareIdleMiB), fmt(load.bareAfterLoadMiB), '—', '—'],
      ...load.pairings.map((p) => [
        'Hark',
        p.engine,
        p.logLevel,
        fmt(p.harkIdleMiB),
        fmt(p.harkAfterLoadMiB),
        fmtRatio(p.harkIdleMiB / load.bareIdleMiB),
        fmtRatio(p.harkAfterLoadMiB / load.bareAfterLoadMiB),
      ]),
    ],
    notes: [
      `VmRSS from /proc/<pid>/status. Idle: ${IDLE_MS / 1000} s after ready, before any load. After load: once its warm-up and ${ROUNDS} measured runs are done (bare: after every pairing).`,
      ...skipped,
    ],
  };
}

function throughputTable(load: LoadResults, skipped: string[]): Table {
  const rows: string[][] = [];
  for (const p of load.pairings) {
    const rateRatios = p.harkRuns.map((run, i) => run.requestsPerSecond / p.bareRuns[i]!.requestsPerSecond);
    const cpuRatios = p.harkRuns.map((run, i) => cpuMicrosPerRequest(run) / cpuMicrosPerRequest(p.bareRuns[i]!));
    const pairing = `${p.engine}, LOG_LEVEL=${p.logLevel}`;
    rows.push([pairing, 'bare Fastify', ...loadCells(p.bareRuns), '—', '—']);
    rows.push([pairing, 'Hark', ...loadCells(p.harkRuns), ratioCell(rateRatios), ratioCell(cpuRatios)]);
  }
  return {
    title: 'GET /api/health throughput',
    columns: [
      'pairing',
      'server',
      'req/s (each round)',
      'p50 ms',
      'p99 ms',
      'errors',
      'non-2xx',
      'server CPU',
      'CPU µs/request',
      'Hark/bare req/s (each round)',
      'Hark/bare CPU per request (each round)',
    ],
    rows,
    notes: [
      `autocannon in the benchmark process, ${CONNECTIONS} connections, ${LOAD_SECONDS} s per run after a ${WARMUP_SECONDS} s warm-up of each server; ${ROUNDS} rounds of bare then Hark. Servers are separate processes.`,
      'req/s: median of the rounds (each round in parentheses); p50/p99: median of the rounds; errors and non-2xx: summed. Ratios: the median of each round\'s Hark/bare.',
      'Server CPU: CPU time of the server process during the run over the run\'s length (100% = one core). CPU µs/request: that CPU time over completed requests. The client shares the 2 cores, so when a server stays well below 100% the client was the limit and the req/s ratio understates the difference; the CPU per request ratio does not depend on who the limit was.',
      'Hark writes its log to a file; at info level that is one JSON line per request.',
      ...skipped,
    ],
  };
}

function cpuMicrosPerRequest(run: ServerRun): number {
  return (run.serverCpuSeconds * 1e6) / run.total;
}

function loadCells(runs: ServerRun[]): string[] {
  const rates = runs.map((run) => run.requestsPerSecond);
  return [
    `${fmt(median(rates))} (${rates.map((rate) => fmt(rate)).join(', ')})`,
    fmt(median(runs.map((run) => run.p50Ms)), 1),
    fmt(median(runs.map((run) => run.p99Ms)), 1),
    fmt(sum(runs.map((run) => run.errors))),
    fmt(sum(runs.map((run) => run.non2xx))),
    `${fmt(median(runs.map((run) => (100 * run.serverCpuSeconds) / run.durationSeconds)))}%`,
    fmt(median(runs.map(cpuMicrosPerRequest)), 1),
  ];
}

function ratioCell(roundRatios: number[]): string {
  return `${fmtRatio(median(roundRatios))} (${roundRatios.map(fmtRatio).join(', ')})`;
}
