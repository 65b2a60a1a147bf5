/**
 * `npm run soak [-- [--minutes N] [--engine pglite|postgres] [--write]]`:
 * the load suite's mixed API-key workload (bench/lib/mix.ts) against one
 * server for a long stretch (10 minutes unless told otherwise), printing
 * throughput, p50/p99 latency and RSS for every minute, and whether RSS and
 * latency stayed flat: the last minute against the second (the first holds
 * the JIT warm-up). Not part of `npm run bench` or CI: it is slow on purpose.
 * With --write, appends its table to bench/RESULTS.md like the runner does.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Cleanup, runOnInterrupt } from './lib/cleanup.ts';
import { cpuSeconds } from './lib/cpu.ts';
import { benchEngines, ENGINE_LABEL, freshStorage, startHark, type Engine, type LogLevel } from './lib/hark.ts';
import { fmt, fmtRatio, renderTable, type Table } from './lib/markdown.ts';
import {
  describeUnexpected,
  formatStatuses,
  LIMITED_RATE_LIMIT_PER_HOUR,
  MIX_CONNECTIONS,
  MIX_DESCRIPTION,
  prepareMix,
  runMix,
  type MixStats,
} from './lib/mix.ts';
import { appendResults, REPO_ROOT, resultsSectionHeader } from './lib/results.ts';
import { rssMiB } from './lib/rss.ts';
import type { SuiteContext } from './lib/suite.ts';

const DEFAULT_MINUTES = 10;
const WINDOW_SECONDS = 60;
const LOG_LEVEL: LogLevel = 'warn';
/** What "flat" allows between the reference minute and the last one, on a shared, noisy machine. */
const FLAT = { rss: 1.1, p50: 1.5, p99: 2 };

interface Minute extends MixStats {
  rssMiB: number;
  cpuPercent: number;
}

function usage(): string {
  return [
    'usage: npm run soak -- [--minutes N] [--engine pglite|postgres] [--write]',
    '',
    `  --minutes N    how long to run (default ${DEFAULT_MINUTES}, or SOAK_MINUTES)`,
    '  --engine E     pglite or postgres (default: postgres when reachable, else pglite)',
    '  --write        append the table to bench/RESULTS.md',
    '',
  ].join('\n');
}

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        minutes: { type: 'string' },
        engine: { type: 'string' },
        write: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (error) {
    process.stderr.write(`soak: ${(error as Error).message}\n\n${usage()}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(usage());
    return 0;
  }
  const minutes = Number(values.minutes ?? process.env.SOAK_MINUTES ?? DEFAULT_MINUTES);
  if (!Number.isInteger(minutes) || minutes < 2) {
    process.stderr.write(`soak: --minutes must be a whole number of at least 2 (got ${values.minutes ?? process.env.SOAK_MINUTES})\n`);
    return 2;
  }
  const { engines } = await benchEngines();
  const engine = pickEngine(engines, values.engine);
  if (typeof engine === 'string') {
    process.stderr.write(`soak: ${engine}\n\n${usage()}`);
    return 2;
  }

  const cleanup = new Cleanup();
  const forget = runOnInterrupt(cleanup);
  const startedAt = new Date();
  try {
    const { table, problems } = await soak(suiteContext(cleanup), engine, minutes);
    const section = [resultsSectionHeader(startedAt, 'soak', commandLine()), '### soak', renderTable(table)].join('\n\n') + '\n';
    process.stdout.write(section);
    if (problems.length) {
      process.stderr.write(`soak: failed:\n${problems.join('\n')}\n`);
      if (values.write) process.stderr.write('soak: bench/RESULTS.md left unchanged\n');
      return 1;
    }
    if (values.write) {
      appendResults(section);
      process.stderr.write('soak: appended to bench/RESULTS.md\n');
    }
    return 0;
  } finally {
    await cleanup.run();
    forget();
  }
}

function pickEngine(engines: Engine[], wanted: string | undefined): Engine | string {
  if (wanted === undefined) return engines.find((engine) => engine.kind === 'postgres') ?? engines[0]!;
  const engine = engines.find((candidate) => candidate.kind === wanted);
  if (engine) return engine;
  return wanted === 'postgres' ? 'PostgreSQL is not reachable (set DATABASE_URL)' : `unknown engine ${wanted}`;
}

/** What the suites get from the runner, for the helpers that start Hark on scratch storage. */
function suiteContext(cleanup: Cleanup): SuiteContext {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'hark-soak-'));
  if (process.env.BENCH_KEEP_TEMP) process.stderr.write(`soak: keeping ${root}\n`);
  else cleanup.defer(() => fs.rmSync(root, { recursive: true, force: true }));
  let logCount = 0;
  return {
    repoRoot: REPO_ROOT,
    tempDir: (name) => fs.mkdtempSync(path.join(root, `${name}-`)),
    logFile: (name) => path.join(root, `${String(++logCount).padStart(3, '0')}-${name}.log`),
    defer: (task) => cleanup.defer(task),
    progress: (message) => process.stderr.write(`[soak] ${message}\n`),
  };
}

async function soak(ctx: SuiteContext, engine: Engine, minutes: number): Promise<{ table: Table; problems: string[] }> {
  const engineLabel = ENGINE_LABEL[engine.kind];
  const storage = await freshStorage(ctx, engine);
  const server = await startHark(ctx, storage, { label: `soak-${engine.kind}`, logLevel: LOG_LEVEL });
  const setup = await prepareMix(server.baseUrl);
  const rssBefore = rssMiB(server.pid);
  ctx.progress(`${engineLabel}: ${minutes} min of the mix, RSS ${fmt(rssBefore)} MiB before`);

  const perMinute: Minute[] = [];
  let cpuAtWindowStart = cpuSeconds(server.pid);
  const result = await runMix(server.baseUrl, setup, {
    connections: MIX_CONNECTIONS,
    durationSeconds: minutes * 60,
    window: {
      seconds: WINDOW_SECONDS,
      onWindow(stats, index) {
        const cpu = cpuSeconds(server.pid);
        const minute: Minute = { ...stats, rssMiB: rssMiB(server.pid), cpuPercent: (100 * (cpu - cpuAtWindowStart)) / stats.seconds };
        cpuAtWindowStart = cpu;
        perMinute.push(minute);
        ctx.progress(`minute ${index + 1}: ${fmt(minute.requestsPerSecond)} req/s, p50 ${fmt(minute.p50Ms, 1)} ms, p99 ${fmt(minute.p99Ms, 1)} ms, RSS ${fmt(minute.rssMiB)} MiB`);
      },
    },
  });
  await server.stop();
  await storage.release();

  const problems: string[] = [];
  const unexpected = describeUnexpected(result.unexpected);
  if (unexpected) problems.push(`unintended non-2xx answers: ${unexpected}`);
  if (result.errors > 0) problems.push(`${result.errors} connection errors or timeouts`);
  if (perMinute.length < 2) problems.push(`only ${perMinute.length} whole minute(s) measured`);
  return { table: soakTable(engineLabel, minutes, rssBefore, perMinute, result.limited), problems };
}

function soakTable(engineLabel: string, minutes: number, rssBefore: number, perMinute: Minute[], limited: Record<number, number>): Table {
  // The second minute, once the JIT has compiled the hot paths; the first when only two ran.
  const reference = perMinute[perMinute.length > 2 ? 1 : 0]!;
  const last = perMinute.at(-1)!;
  const ratio = (pick: (minute: Minute) => number) => pick(last) / pick(reference);
  const rss = ratio((m) => m.rssMiB);
  const p50 = ratio((m) => m.p50Ms);
  const p99 = ratio((m) => m.p99Ms);
  const verdict = (value: number, limit: number) => `${fmtRatio(value)} (${value <= limit ? 'flat' : 'grew'}: at most ${limit}× allowed)`;
  const referenceName = `minute ${perMinute.indexOf(reference) + 1}`;
  return {
    title: `Soak: the mixed API-key workload for ${minutes} minutes on ${engineLabel}`,
    columns: ['minute', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx by status', 'server CPU', 'RSS MiB at its end'],
    rows: perMinute.map((minute, index) => [
      String(index + 1),
      fmt(minute.requestsPerSecond),
      fmt(minute.p50Ms, 1),
      fmt(minute.p99Ms, 1),
      formatStatuses(minute.byStatus, (status) => status < 200 || status >= 300),
      `${fmt(minute.cpuPercent)}%`,
      fmt(minute.rssMiB),
    ]),
    notes: [
      `Last minute against ${referenceName}: RSS ${verdict(rss, FLAT.rss)}, p50 ${verdict(p50, FLAT.p50)}, p99 ${verdict(p99, FLAT.p99)}, req/s ${fmtRatio(ratio((m) => m.requestsPerSecond))}. RSS before any load: ${fmt(rssBefore)} MiB.`,
      `Mix: ${MIX_DESCRIPTION}. Every POST adds an assistant, so the workspaces grow during the run (the lists stay one page).`,
      `autocannon in the benchmark process, ${MIX_CONNECTIONS} connections; Hark with LOG_LEVEL=${LOG_LEVEL} on a fresh DATA_DIR (and a fresh database on PostgreSQL). p50/p99: 2xx answers of that minute. Server CPU: 100% = one core.`,
      `Throttled key (rate_limit_per_hour ${LIMITED_RATE_LIMIT_PER_HOUR}, on its own connection, not in the rows): ${formatStatuses(limited)}; its 429s are intended.`,
      'The machine is shared with other work and has 2 cores, which the load generator shares with the server: minute-to-minute swings of req/s and p99 come partly from that, so read the trend, not single minutes.',
    ],
  };
}

/** How this run was started, to paste into a shell. */
function commandLine(): string {
  const args = process.argv.slice(2);
  const env = process.env.SOAK_MINUTES && !args.some((arg) => arg.startsWith('--minutes')) ? [`SOAK_MINUTES=${process.env.SOAK_MINUTES}`] : [];
  if (process.env.npm_lifecycle_event === 'soak') return [...env, 'npm run soak', ...(args.length ? ['--', ...args] : [])].join(' ');
  return [...env, 'node --import tsx bench/soak.ts', ...args].join(' ');
}

process.exitCode = await main();
