import type { Generated } from 'kysely';

/** Row types of this module's tables (migrations/0012_prompt_presets.sql). */
export interface AiTables {
  /** §2.3: a user's personal prompt presets. Booleans here; the API shows them as 1/0. */
  prompt_presets: {
    id: Generated<string>;
    user_id: string;
    title: string;
    prompt: string;
    /** Provided presets the user can use but not change or delete. */
    is_default: Generated<boolean>;
    /** Shared templates (none yet: GET /templates answers an empty list). Never listed, changed or deleted as the user's own. */
    is_template: Generated<boolean>;
    created_at: Generated<Date>;
    updated_at: Generated<Date>;
  };
}
