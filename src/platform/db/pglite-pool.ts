import { AsyncLocalStorage } from 'node:async_hooks';
import type { PGlite, Results } from '@electric-sql/pglite';
import type { Pool, PoolClient, QueryResult } from './pool.ts';

/**
 * PGlite is one Postgres backend: a transaction on it is visible to every
 * caller of the same instance. This pool hands out that single backend to one
 * borrower at a time, so a transaction opened through `connect()` is never
 * interleaved with statements from other requests or the job worker.
 *
 * Asking for the connection again from inside the code that already holds it
 * would wait forever; instead it fails at once with a message naming the bug
 * (a query that should have used the transaction handle).
 */
export class PGlitePool implements Pool {
  private tail: Promise<void> = Promise.resolve();
  private readonly holder = new AsyncLocalStorage<{ held: boolean }>();
  private ended = false;

  constructor(private readonly db: PGlite) {}

  /** Runs `fn` in a context where re-entering the pool is detected rather than deadlocking. */
  guard<T>(fn: () => Promise<T>): Promise<T> {
    if (this.holder.getStore()?.held) return Promise.reject(reentryError());
    return this.holder.run({ held: false }, fn);
  }

  async connect(): Promise<PoolClient> {
    if (this.ended) throw new Error('database pool is closed');
    const context = this.holder.getStore();
    if (context?.held) throw reentryError();
    let release!: () => void;
    const turn = new Promise<void>((resolve) => (release = resolve));
    const previous = this.tail;
    this.tail = previous.then(() => turn);
    await previous;
    if (context) context.held = true;
    let released = false;
    return {
      query: (text, params) => this.run(text, params),
      release: () => {
        if (released) return;
        released = true;
        if (context) context.held = false;
        release();
      },
    };
  }

  async query<R>(text: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
    const client = await this.connect();
    try {
      return await client.query<R>(text, params);
    } finally {
      client.release();
    }
  }

  async end(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    await this.tail;
    await this.db.close();
  }

  private async run<R>(text: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
    // Without parameters use the simple protocol, which (like node-postgres)
    // accepts several statements at once: migrations and pg-boss rely on it.
    if (!params || params.length === 0) {
      const results = await this.db.exec(text);
      return toQueryResult<R>(results[results.length - 1]);
    }
    return toQueryResult<R>(await this.db.query<R>(text, params as unknown[]));
  }
}

function toQueryResult<R>(result: Results<unknown> | undefined): QueryResult<R> {
  if (!result) return { command: '', rowCount: 0, rows: [] };
  const command = (result as { command?: string }).command ?? '';
  return {
    command,
    rowCount: result.affectedRows ?? result.rows.length,
    rows: result.rows as R[],
  };
}

function reentryError(): Error {
  return new Error(
    'database deadlock avoided: code inside a transaction asked for another connection while its transaction holds the embedded database; use the transaction handle',
  );
}
