/**
 * Hark under a realistic mix instead of one cheap route: API keys of several
 * workspaces reading and writing assistants and reading credits for 30 s
 * (bench/lib/mix.ts), on PGlite and on PostgreSQL, against the bare Fastify
 * baseline in the same run. Any non-2xx answer of the mix fails the suite;
 * the only intended errors are the 429s of one key with a low hourly limit,
 * counted on their own.
 */
import { cpuSeconds } from '../lib/cpu.ts';
import { ENGINE_LABEL, freshStorage, startBareFastify, startHark, benchEngines, type LogLevel } from '../lib/hark.ts';
import { runLoad } from '../lib/load.ts';
import { fmt, fmtRatio, type Table } from '../lib/markdown.ts';
import {
  describeUnexpected,
  formatStatuses,
  LIMITED_RATE_LIMIT_PER_HOUR,
  LIMITED_REQUESTS_PER_SECOND,
  MIX_CONNECTIONS,
  MIX_DESCRIPTION,
  prepareMix,
  runMix,
  type MixResult,
} from '../lib/mix.ts';
import { rssMiB } from '../lib/rss.ts';
import type { Suite } from '../lib/suite.ts';
import { sleep } from '../lib/time.ts';

const WARMUP_SECONDS = 5;
const LOAD_SECONDS = 30;
const IDLE_MS = 2000;
/** Keeps per-request log lines out of the measurement, as in the auth suite. */
const LOG_LEVEL: LogLevel = 'warn';

interface Measured {
  server: 'bare Fastify' | 'Hark';
  engine: string;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  completed: number;
  seconds: number;
  errors: number;
  /** Non-2xx answers, by status when known. */
  non2xx: string;
  cpuSeconds: number;
  rssBeforeMiB: number;
  rssAfterMiB: number;
  mix?: MixResult;
}

export const load: Suite = {
  name: 'load',
  description: `mixed API-key reads and writes across workspaces for ${LOAD_SECONDS} s: throughput, p50/p99, errors by status, RSS, against bare Fastify (PGlite, PostgreSQL)`,
  async run(ctx) {
    const { engines, skipped } = await benchEngines();
    const pairs: Array<{ bare: Measured; hark: Measured }> = [];
    const problems: string[] = [];

    for (const engine of engines) {
      const engineLabel = ENGINE_LABEL[engine.kind];

      // The baseline right before Hark on every engine, so both see the same machine.
      const bareServer = await startBareFastify(ctx, `load-bare-${engine.kind}`);
      await sleep(IDLE_MS);
      const bareBefore = rssMiB(bareServer.pid);
      await runLoad(`${bareServer.baseUrl}/api/health`, { connections: MIX_CONNECTIONS, durationSeconds: WARMUP_SECONDS });
      const bareCpu = cpuSeconds(bareServer.pid);
      const bareRun = await runLoad(`${bareServer.baseUrl}/api/health`, { connections: MIX_CONNECTIONS, durationSeconds: LOAD_SECONDS });
      const bare: Measured = {
        server: 'bare Fastify',
        engine: engineLabel,
        requestsPerSecond: bareRun.requestsPerSecond,
        p50Ms: bareRun.p50Ms,
        p99Ms: bareRun.p99Ms,
        completed: bareRun.total,
        seconds: bareRun.durationSeconds,
        errors: bareRun.errors,
        non2xx: bareRun.non2xx ? String(bareRun.non2xx) : 'none',
        cpuSeconds: cpuSeconds(bareServer.pid) - bareCpu,
        rssBeforeMiB: bareBefore,
        rssAfterMiB: rssMiB(bareServer.pid),
      };
      await bareServer.stop();
      ctx.progress(`${engineLabel}: bare Fastify ${Math.round(bare.requestsPerSecond)} req/s`);

      const storage = await freshStorage(ctx, engine);
      const server = await startHark(ctx, storage, { label: `load-${engine.kind}`, logLevel: LOG_LEVEL });
      const setup = await prepareMix(server.baseUrl);
      await sleep(IDLE_MS);
      const rssBeforeMiB = rssMiB(server.pid);
      ctx.progress(`${engineLabel}: warm-up`);
      await runMix(server.baseUrl, setup, { connections: MIX_CONNECTIONS, durationSeconds: WARMUP_SECONDS });
      const cpuBefore = cpuSeconds(server.pid);
      const mix = await runMix(server.baseUrl, setup, { connections: MIX_CONNECTIONS, durationSeconds: LOAD_SECONDS });
      const hark: Measured = {
        server: 'Hark',
        engine: engineLabel,
        requestsPerSecond: mix.requestsPerSecond,
        p50Ms: mix.p50Ms,
        p99Ms: mix.p99Ms,
        completed: mix.completed,
        seconds: mix.seconds,
        errors: mix.errors,
        non2xx: formatStatuses(mix.byStatus, (status) => status < 200 || status >= 300),
        cpuSeconds: cpuSeconds(server.pid) - cpuBefore,
        rssBeforeMiB,
        rssAfterMiB: rssMiB(server.pid),
        mix,
      };
      await server.stop();
      await storage.release();
      ctx.progress(`${engineLabel}: Hark ${Math.round(hark.requestsPerSecond)} req/s, non-2xx ${hark.non2xx}, throttled key ${formatStatuses(mix.limited)}`);

      const unexpected = describeUnexpected(mix.unexpected);
      if (unexpected) problems.push(`${engineLabel}: unintended non-2xx answers: ${unexpected}`);
      if (mix.errors > 0 || bare.errors > 0) problems.push(`${engineLabel}: ${mix.errors} connection errors or timeouts (bare: ${bare.errors})`);
      if (!mix.limited[429]) problems.push(`${engineLabel}: the throttled key got no 429 (${formatStatuses(mix.limited)})`);
      pairs.push({ bare, hark });
    }
    // After both engines ran, so one engine's failure still shows the other's numbers in the log.
    if (problems.length) throw new Error(problems.join('\n'));
    return [throughputTable(pairs, skipped), memoryTable(pairs, skipped)];
  },
};

function cpuMicrosPerRequest(run: Measured): number {
  return (run.cpuSeconds * 1e6) / run.completed;
}

function throughputTable(pairs: Array<{ bare: Measured; hark: Measured }>, skipped: string[]): Table {
  const rows: string[][] = [];
  for (const { bare, hark } of pairs) {
    const cells = (run: Measured, route: string) => [
      run.server,
      run.engine,
      route,
      fmt(run.requestsPerSecond),
      fmt(run.p50Ms, 1),
      fmt(run.p99Ms, 1),
      fmt(run.errors),
      run.non2xx,
      `${fmt((100 * run.cpuSeconds) / run.seconds)}%`,
      fmt(cpuMicrosPerRequest(run), 1),
    ];
    rows.push([...cells(bare, 'GET /api/health'), '—', '—', '—']);
    rows.push([
      ...cells(hark, 'mix'),
      formatStatuses(hark.mix!.limited),
      fmtRatio(hark.requestsPerSecond / bare.requestsPerSecond),
      fmtRatio(cpuMicrosPerRequest(hark) / cpuMicrosPerRequest(bare)),
    ]);
  }
  return {
    title: `Mixed API-key workload, ${LOAD_SECONDS} s`,
    columns: [
      'server',
      'database',
      'requests',
      'req/s',
      'p50 ms',
      'p99 ms',
      'errors',
      'non-2xx by status',
      'server CPU',
      'CPU µs/request',
      'throttled key answers by status',
      'Hark/bare req/s',
      'Hark/bare CPU per request',
    ],
    rows,
    notes: [
      `Mix: ${MIX_DESCRIPTION}. Keys have rate_limit_per_hour 1000000 and scopes assistants:read and assistants:write; each workspace starts with 5 assistants, and every POST adds one.`,
      `Throttled key: a sixth key (rate_limit_per_hour ${LIMITED_RATE_LIMIT_PER_HOUR}) asks GET /api/assistants ${LIMITED_REQUESTS_PER_SECOND} times a second on its own connection during the warm-up and the run; its 429s are intended and reported only in their own column. Any other non-2xx answer, connection error or timeout fails the suite.`,
      `autocannon in the benchmark process, ${MIX_CONNECTIONS} connections, ${LOAD_SECONDS} s after a ${WARMUP_SECONDS} s warm-up; Hark with LOG_LEVEL=${LOG_LEVEL}, on a fresh DATA_DIR (and a fresh database on PostgreSQL). The baseline (bench/lib/bare-fastify.ts, GET /api/health) ran just before Hark on each engine.`,
      'req/s: completed answers over the run. p50/p99: 2xx answers. Server CPU: CPU time of the server process during the run over its length (100% = one core). The client shares the 2 cores with the server, so the req/s ratio understates the gap when the server CPU is well below 200%; CPU per request does not depend on who the limit was.',
      'The ratios compare a mix of database reads and writes with the framework floor (a constant answer): they show what a real request costs over an empty one.',
      ...skipped,
    ],
  };
}

function memoryTable(pairs: Array<{ bare: Measured; hark: Measured }>, skipped: string[]): Table {
  const rows: string[][] = [];
  for (const { bare, hark } of pairs) {
    rows.push(['bare Fastify', bare.engine, fmt(bare.rssBeforeMiB), fmt(bare.rssAfterMiB), '—', '—']);
    rows.push(['Hark', hark.engine, fmt(hark.rssBeforeMiB), fmt(hark.rssAfterMiB), fmtRatio(hark.rssBeforeMiB / bare.rssBeforeMiB), fmtRatio(hark.rssAfterMiB / bare.rssAfterMiB)]);
  }
  return {
    title: 'Resident memory around the mixed workload (RSS, MiB)',
    columns: ['server', 'database', 'before', 'after', 'before vs bare', 'after vs bare'],
    rows,
    notes: [
      `VmRSS from /proc/<pid>/status. Before: ${IDLE_MS / 1000} s after the workspaces were set up, before any load. After: at the end of the ${LOAD_SECONDS} s run (warm-up before it).`,
      ...skipped,
    ],
  };
}
