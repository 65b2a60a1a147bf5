import { sql, type RawBuilder } from 'kysely';

/**
 * The keyset condition of every newest-first list (ordered by created_at
 * desc, id desc): rows of `alias` strictly older than the cursor row, which is
 * looked up by id within the same scope (workspace, assistant…). The cursor
 * row is compared in SQL on (created_at, id): timestamps keep microseconds
 * there, which a JavaScript Date would lose, and the id breaks ties.
 */
export function olderThanCursor(alias: string, cursor: { table: string; scopeColumn: string; scopeId: string; id: string }): RawBuilder<boolean> {
  return sql<boolean>`(${sql.ref(`${alias}.created_at`)}, ${sql.ref(`${alias}.id`)}) < (select c.created_at, c.id from ${sql.table(cursor.table)} c where ${sql.ref(`c.${cursor.scopeColumn}`)} = ${cursor.scopeId} and c.id = ${cursor.id})`;
}
