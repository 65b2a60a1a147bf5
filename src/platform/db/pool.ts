/**
 * The connection contract every part of Hark talks to, whichever engine is
 * underneath: `pg.Pool` satisfies it for PostgreSQL, `PGlitePool` for the
 * embedded database. Kysely, pg-boss and the migration runner all use it, so
 * there is one way to reach the database.
 */
export interface QueryResult<R> {
  command: string;
  rowCount: number;
  rows: R[];
}

export interface SqlClient {
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<QueryResult<R>>;
}

export interface PoolClient extends SqlClient {
  release(): void;
}

export interface Pool extends SqlClient {
  connect(): Promise<PoolClient>;
  end(): Promise<void>;
}
