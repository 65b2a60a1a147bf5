import { sql, type QueryExecutorProvider, type RawBuilder } from 'kysely';
import { isUuid } from '../ids.ts';

/** The row a list's cursor names: `id` in `table`, within one scope (`scopeColumn` = `scopeId`: a workspace, an assistant…). */
export interface CursorRow {
  table: string;
  scopeColumn: string;
  scopeId: string;
  id: string;
}

/**
 * The keyset condition of every newest-first list (ordered by created_at
 * desc, id desc): rows of `alias` strictly older than the cursor row, which is
 * looked up by id within the same scope (workspace, assistant…). The cursor
 * row is compared in SQL on (created_at, id): timestamps keep microseconds
 * there, which a JavaScript Date would lose, and the id breaks ties.
 */
export function olderThanCursor(alias: string, cursor: CursorRow): RawBuilder<boolean> {
  return sql<boolean>`(${sql.ref(`${alias}.created_at`)}, ${sql.ref(`${alias}.id`)}) < (select c.created_at, c.id from ${sql.table(cursor.table)} c where ${sql.ref(`c.${cursor.scopeColumn}`)} = ${cursor.scopeId} and c.id = ${cursor.id})`;
}

/**
 * Whether a cursor names a row of its scope (a UUID of a row there, soft
 * deleted ones included). Lists answer 400 for any other cursor rather than
 * an empty page, which would look like the end.
 */
export async function isCursorOf(db: QueryExecutorProvider, cursor: CursorRow): Promise<boolean> {
  if (!isUuid(cursor.id)) return false;
  const { rows } = await sql`select 1 from ${sql.table(cursor.table)} c where ${sql.ref(`c.${cursor.scopeColumn}`)} = ${cursor.scopeId} and c.id = ${cursor.id}`.execute(db);
  return rows.length > 0;
}
