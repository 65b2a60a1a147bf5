import { sql, type Kysely, type Selectable } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import type { AiTables } from './tables.ts';

/**
 * Every SQL statement of the ai module. Each one names the owner, so an id
 * of another user's preset can never reach that row. `db` is the pool or a
 * transaction handle.
 */
type Db = Kysely<Tables>;

export type PresetRow = Selectable<AiTables['prompt_presets']>;

/**
 * A user's presets, defaults first, then by title. Titles compare
 * case-insensitively (then exactly, then by id) so the order is the same
 * whatever the database's collation.
 */
export async function listPresets(db: Db, userId: string): Promise<PresetRow[]> {
  return db
    .selectFrom('prompt_presets')
    .selectAll()
    .where('user_id', '=', userId)
    .where('is_template', '=', false)
    .orderBy('is_default', 'desc')
    .orderBy(sql`lower(title)`)
    .orderBy('title')
    .orderBy('id')
    .execute();
}

export async function insertPreset(db: Db, userId: string, preset: { title: string; prompt: string }): Promise<PresetRow> {
  return db
    .insertInto('prompt_presets')
    .values({ user_id: userId, title: preset.title, prompt: preset.prompt })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Changes a preset only if `userId` owns it and it is neither a default nor a template; undefined otherwise. */
export async function updateEditablePreset(db: Db, userId: string, id: string, changes: { title?: string; prompt?: string }): Promise<PresetRow | undefined> {
  return db
    .updateTable('prompt_presets')
    .set({ ...changes, updated_at: sql`now()` })
    .where('id', '=', id)
    .where('user_id', '=', userId)
    .where('is_default', '=', false)
    .where('is_template', '=', false)
    .returningAll()
    .executeTakeFirst();
}

/** Deletes under the same rule as updates; the number of rows deleted (0 or 1). */
export async function deleteEditablePreset(db: Db, userId: string, id: string): Promise<number> {
  const result = await db
    .deleteFrom('prompt_presets')
    .where('id', '=', id)
    .where('user_id', '=', userId)
    .where('is_default', '=', false)
    .where('is_template', '=', false)
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
