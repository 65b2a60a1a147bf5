import type { ChildProcess } from 'node:child_process';

type Task = () => Promise<void> | void;

/**
 * Undo work in reverse order of setup (stop a server before dropping the
 * database it is connected to), even when the benchmark fails or is
 * interrupted. A task that fails is reported and the rest still run.
 */
export class Cleanup {
  private readonly tasks: Task[] = [];

  defer(task: Task): void {
    this.tasks.push(task);
  }

  async run(): Promise<void> {
    for (let task = this.tasks.pop(); task; task = this.tasks.pop()) {
      try {
        await task();
      } catch (error) {
        process.stderr.write(`bench: cleanup step failed: ${(error as Error).message}\n`);
      }
    }
  }
}

const liveChildren = new Set<ChildProcess>();
const activeCleanups = new Set<Cleanup>();
let handlersInstalled = false;

/** How long an interrupted run may spend on orderly cleanup before exiting anyway. */
const INTERRUPT_CLEANUP_MS = 20_000;

/**
 * Makes sure `child` does not outlive this process. Orderly cleanup stops
 * children gracefully; this is the last resort for exits that skip it
 * (process.exit, an uncaught exception): 'exit' handlers must be synchronous,
 * so the child gets SIGKILL.
 */
export function trackChild(child: ChildProcess): void {
  installHandlers();
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
}

/** Runs `cleanup` when this process is interrupted (Ctrl-C, SIGTERM) before it finishes normally. */
export function runOnInterrupt(cleanup: Cleanup): () => void {
  installHandlers();
  activeCleanups.add(cleanup);
  return () => activeCleanups.delete(cleanup);
}

function installHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on('exit', () => {
    for (const child of liveChildren) child.kill('SIGKILL');
  });
  let interrupted = false;
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      // A second signal means "now": the 'exit' handler still kills children.
      if (interrupted) process.exit(130);
      interrupted = true;
      process.stderr.write(`bench: ${signal}: stopping servers and removing scratch data\n`);
      const deadline = setTimeout(() => process.exit(130), INTERRUPT_CLEANUP_MS);
      void runInterruptCleanups().finally(() => {
        clearTimeout(deadline);
        process.exit(130);
      });
    });
  }
}

/** Newest first, like the tasks inside each: the run's temp root goes after the suite's servers. */
async function runInterruptCleanups(): Promise<void> {
  for (const cleanup of [...activeCleanups].reverse()) await cleanup.run();
}
