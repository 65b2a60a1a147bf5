/**
 * Sections of bench/RESULTS.md for runs outside `npm run bench` (the soak),
 * in the same style as the runner's: a dated heading, the command, the
 * machine and the commit, then the tables.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCH_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REPO_ROOT = path.resolve(BENCH_DIR, '..');
export const RESULTS_FILE = path.join(BENCH_DIR, 'RESULTS.md');

/** `## <date>: <title>` with the command that produced it, the machine and the commit. */
export function resultsSectionHeader(startedAt: Date, title: string, command: string): string {
  const date = `${startedAt.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
  const cpu = os.cpus()[0]?.model.trim() ?? 'unknown CPU';
  return [
    `## ${date}: ${title}`,
    '',
    `- command: \`${command}\``,
    `- node ${process.version}, nproc ${os.availableParallelism()}, ${cpu}, ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM`,
    `- commit ${gitRevision()}`,
  ].join('\n');
}

/** Appends `section` to bench/RESULTS.md (which `npm run bench -- --write` creates with its header). */
export function appendResults(section: string): void {
  if (!fs.existsSync(RESULTS_FILE)) fs.writeFileSync(RESULTS_FILE, '# Benchmark results\n');
  fs.appendFileSync(RESULTS_FILE, `\n${section.trimEnd()}\n`);
}

function gitRevision(): string {
  try {
    const git = (...args: string[]) => execFileSync('git', args, { cwd: REPO_ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = git('status', '--porcelain') !== '';
    return `${git('rev-parse', '--short', 'HEAD')}${dirty ? ' with uncommitted changes' : ''}`;
  } catch {
    return 'unknown (not a git checkout)';
  }
}
