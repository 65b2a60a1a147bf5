/**
 * `npm run bench [-- [suite ...] [--write]]`: runs the benchmark suites (all,
 * or the ones named), prints their tables as markdown on stdout and, with
 * --write, appends them as a dated section to bench/RESULTS.md. Progress goes
 * to stderr. Exits 1 when a suite fails; nothing is written then.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Cleanup, runOnInterrupt } from './lib/cleanup.ts';
import { renderTable } from './lib/markdown.ts';
import { REPO_ROOT, RESULTS_FILE, resultsSectionHeader } from './lib/results.ts';
import type { Suite, SuiteContext } from './lib/suite.ts';
import { SUITES } from './suites/index.ts';

const RESULTS_HEADER = `# Benchmark results

Appended by \`npm run bench -- --write\` (one section per run, newest last).

Read the ratios, not the absolute numbers. Each ratio compares Hark with a
baseline measured in the same run (a bare Fastify 5 server, interleaved with
Hark's runs). These runs come from a 2-core machine that has other work on it,
and the load generator shares those 2 cores with the server under test, so
absolute req/s, latencies and milliseconds move a lot from run to run; the
ratios much less. Compare ratios between sections, never raw numbers. When a
server's CPU stays well under 100% during a load run, the load generator was
the limit: its req/s ratio then understates the gap, and the CPU-per-request
ratio is the better guide.
`;

function usage(): string {
  const names = SUITES.map((suite) => `  ${suite.name.padEnd(14)} ${suite.description}`).join('\n');
  return [
    'usage: npm run bench -- [suite ...] [--write]',
    '',
    '  --write        append the results to bench/RESULTS.md',
    '',
    `suites (default: all):\n${names}`,
    '',
    'environment:',
    '  DATABASE_URL       PostgreSQL server for scratch databases (default: try the local one; skip if absent)',
    '  BENCH_KEEP_TEMP=1  keep server logs and data dirs instead of removing them',
    '',
  ].join('\n');
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      options: { write: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } },
      allowPositionals: true,
    });
  } catch (error) {
    process.stderr.write(`bench: ${(error as Error).message}\n\n${usage()}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(usage());
    return 0;
  }
  const unknown = positionals.filter((name) => !SUITES.some((suite) => suite.name === name));
  if (unknown.length) {
    process.stderr.write(`bench: unknown suite ${unknown.join(', ')}\n\n${usage()}`);
    return 2;
  }
  const selected = positionals.length ? SUITES.filter((suite) => positionals.includes(suite.name)) : SUITES;

  const tempRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'hark-bench-'));
  const runCleanup = new Cleanup();
  const forgetRunCleanup = runOnInterrupt(runCleanup);
  if (process.env.BENCH_KEEP_TEMP) process.stderr.write(`bench: keeping ${tempRoot}\n`);
  else runCleanup.defer(() => fs.rmSync(tempRoot, { recursive: true, force: true }));

  const startedAt = new Date();
  const rendered: string[] = [];
  let failed = false;
  try {
    for (const suite of selected) {
      const markdown = await runSuite(suite, tempRoot);
      if (markdown === undefined) failed = true;
      else rendered.push(markdown);
    }
  } finally {
    await runCleanup.run();
    forgetRunCleanup();
  }

  if (rendered.length === 0) return 1;
  const section = [resultsSectionHeader(startedAt, selected.map((suite) => suite.name).join(', '), commandLine()), ...rendered].join('\n\n') + '\n';
  process.stdout.write(section);
  if (values.write) {
    if (failed) {
      process.stderr.write(`bench: a suite failed; ${path.relative(process.cwd(), RESULTS_FILE)} left unchanged\n`);
    } else {
      if (!fs.existsSync(RESULTS_FILE)) fs.writeFileSync(RESULTS_FILE, RESULTS_HEADER);
      fs.appendFileSync(RESULTS_FILE, `\n${section}`);
      process.stderr.write(`bench: appended to ${path.relative(process.cwd(), RESULTS_FILE)}\n`);
    }
  }
  return failed ? 1 : 0;
}

/** The suite's tables as markdown, or undefined when it failed (reported on stderr). */
async function runSuite(suite: Suite, tempRoot: string): Promise<string | undefined> {
  const cleanup = new Cleanup();
  const forget = runOnInterrupt(cleanup);
  const suiteDir = fs.mkdtempSync(path.join(tempRoot, `${suite.name}-`));
  const progress = (message: string) => process.stderr.write(`[${suite.name}] ${message}\n`);
  let logCount = 0;
  const ctx: SuiteContext = {
    repoRoot: REPO_ROOT,
    tempDir: (name) => fs.mkdtempSync(path.join(suiteDir, `${name}-`)),
    logFile: (name) => path.join(suiteDir, `${String(++logCount).padStart(3, '0')}-${name.replace(/[^\w.-]+/g, '_')}.log`),
    defer: (task) => cleanup.defer(task),
    progress,
  };
  const startedAt = performance.now();
  try {
    const tables = await suite.run(ctx);
    progress(`done in ${Math.round((performance.now() - startedAt) / 1000)} s`);
    return [`### ${suite.name}`, ...tables.map(renderTable)].join('\n\n');
  } catch (error) {
    process.stderr.write(`bench: suite ${suite.name} failed: ${(error as Error)?.stack ?? String(error)}\n`);
    return undefined;
  } finally {
    await cleanup.run();
    forget();
  }
}

/** How this run was started, to paste into a shell. */
function commandLine(): string {
  const args = process.argv.slice(2);
  if (process.env.npm_lifecycle_event === 'bench') return ['npm run bench', ...(args.length ? ['--', ...args] : [])].join(' ');
  return ['node --import tsx bench/run.ts', ...args].join(' ');
}

process.exitCode = await main();
