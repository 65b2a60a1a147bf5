import type { Generated, JSONColumnType } from 'kysely';

export interface ApiKeyTables {
  api_keys: {
    id: Generated<string>;
    account_id: string;
    name: string;
    description: string | null;
    environment: 'live' | 'test';
    key_prefix: string;
    key_hash: string;
    scopes: JSONColumnType<string[]>;
    rate_limit_per_hour: number;
    last_used_at: Date | null;
    expires_at: Date | null;
    is_active: Generated<boolean>;
    revoked_at: Date | null;
    created_at: Generated<Date>;
    created_by: string | null;
    updated_at: Generated<Date>;
  };
  api_key_events: {
    id: Generated<string>;
    account_id: string;
    api_key_id: string;
    event: 'created' | 'updated' | 'disabled' | 'enabled' | 'revoked';
    actor_user_id: string | null;
    changes: JSONColumnType<Record<string, unknown>>;
    created_at: Generated<Date>;
  };
}
