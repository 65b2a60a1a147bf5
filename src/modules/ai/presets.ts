import { perContext, type AppContext } from '../../platform/context.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError, type FieldError } from '../../platform/http/errors.ts';
import * as store from './store.ts';
import { isUuid } from '../../platform/ids.ts';

export const PRESET_TITLE_MAX = 200;
/** §8: prompts are at most 20000 characters. */
export const PRESET_PROMPT_MAX = 20_000;

/** §2.3 as the API shows it: flags as 1/0, `uid` repeating `user_id` for older clients. */
export interface Preset {
  id: string;
  user_id: string;
  uid: string;
  title: string;
  prompt: string;
  is_default: 0 | 1;
  is_template: 0 | 1;
  created_at: string;
  updated_at: string;
}

function toPreset(row: store.PresetRow): Preset {
  return {
    id: row.id,
    user_id: row.user_id,
    uid: row.user_id,
    title: row.title,
    prompt: row.prompt,
    is_default: row.is_default ? 1 : 0,
    is_template: row.is_template ? 1 : 0,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** "Truthy" in the spec's sense, and not only whitespace, which would make a blank title or prompt. */
function given(value: string | undefined): value is string {
  return value !== undefined && value.trim() !== '';
}

/**
 * §4.4 prompt presets: personal to the signed-in user. Another user's
 * preset, a default, a template and an unknown id all look the same: 404.
 */
export class PresetsService {
  constructor(private readonly ctx: AppContext) {}

  async list(actor: Actor): Promise<Preset[]> {
    const rows = await store.listPresets(this.ctx.db.kysely, userOf(actor));
    return rows.map(toPreset);
  }

  async create(actor: Actor, input: { title: string; prompt: string }): Promise<Preset> {
    const problems: FieldError[] = [];
    if (!given(input.title)) problems.push({ field: 'title', message: 'must not be empty' });
    if (!given(input.prompt)) problems.push({ field: 'prompt', message: 'must not be empty' });
    if (problems.length) throw new AppError('validation_failed', 'title and prompt are both required', problems);
    return toPreset(await store.insertPreset(this.ctx.db.kysely, userOf(actor), { title: input.title.trim(), prompt: input.prompt }));
  }

  /** Only the non-empty fields change: an empty string never clears one (§4.4). */
  async update(actor: Actor, id: string, input: { title?: string; prompt?: string }): Promise<Preset> {
    const changes: { title?: string; prompt?: string } = {};
    if (given(input.title)) changes.title = input.title.trim();
    if (given(input.prompt)) changes.prompt = input.prompt;
    if (changes.title === undefined && changes.prompt === undefined) {
      throw new AppError('validation_failed', 'Give a non-empty title or prompt to change', [
        { field: 'title', message: 'or prompt must be a non-empty string' },
      ]);
    }
    const userId = userOf(actor);
    const row = isUuid(id) ? await store.updateEditablePreset(this.ctx.db.kysely, userId, id, changes) : undefined;
    if (!row) throw presetNotFound();
    return toPreset(row);
  }

  async remove(actor: Actor, id: string): Promise<{ changes: number }> {
    const userId = userOf(actor);
    const changes = isUuid(id) ? await store.deleteEditablePreset(this.ctx.db.kysely, userId, id) : 0;
    if (changes === 0) throw presetNotFound();
    return { changes };
  }

  /** Shared templates are not offered yet; the endpoint exists so clients can ask (§4.4). */
  templates(): Preset[] {
    return [];
  }
}

function presetNotFound(): AppError {
  return new AppError('not_found', 'Preset not found (default and template presets cannot be changed or deleted)');
}

function userOf(actor: Actor): string {
  if (actor.kind !== 'user') throw new AppError('unauthorized', 'Presets belong to a signed-in user; use a Bearer access token');
  return actor.userId;
}

export const presetsService = perContext((ctx) => new PresetsService(ctx));
