import type { Table } from './markdown.ts';

/** What a suite gets from the runner. */
export interface SuiteContext {
  /** Repository root; servers are spawned from here. */
  repoRoot: string;
  /** A new empty directory under this run's temp root (removed when the run ends). */
  tempDir(name: string): string;
  /** A new file path for a child process's output, under the run's temp root. */
  logFile(name: string): string;
  /** Runs `task` when the suite ends, also on failure or Ctrl-C; newest first. */
  defer(task: () => Promise<void> | void): void;
  /** A progress line for the person watching (stderr: stdout carries only the results). */
  progress(message: string): void;
}

/**
 * One benchmark suite: a module under bench/suites/ listed in
 * bench/suites/index.ts. `run` returns tables of formatted cells; the runner
 * prints them and, with --write, appends them to bench/RESULTS.md.
 */
export interface Suite {
  /** What to pass on the command line to run only this suite. */
  name: string;
  /** One line, shown by --help. */
  description: string;
  run(ctx: SuiteContext): Promise<Table[]>;
}
