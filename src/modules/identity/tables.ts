import type { ColumnType, Generated } from 'kysely';

/** A jsonb column with a database default: optional on insert, written as JSON text. */
type JsonWithDefault<T> = ColumnType<T, string | undefined, string>;

export interface IdentityTables {
  users: {
    id: Generated<string>;
    email: string;
    password_hash: string | null;
    email_confirmed_at: Date | null;
    user_metadata: JsonWithDefault<Record<string, unknown>>;
    mfa_secret_sealed: string | null;
    mfa_enabled_at: Date | null;
    created_at: Generated<Date>;
    updated_at: Generated<Date>;
  };
  auth_sessions: {
    id: Generated<string>;
    user_id: string;
    method: string;
    user_agent: string | null;
    ip: string | null;
    created_at: Generated<Date>;
    last_used_at: Generated<Date>;
    expires_at: Date;
    revoked_at: Date | null;
    revoked_reason: string | null;
  };
  refresh_tokens: {
    id: Generated<string>;
    session_id: string;
    token_hash: string;
    created_at: Generated<Date>;
    expires_at: Date;
    rotated_at: Date | null;
  };
  one_time_tokens: {
    id: Generated<string>;
    purpose: 'email_confirm' | 'magic_link' | 'invitation';
    email: string;
    user_id: string | null;
    token_hash: string;
    code_hash: string | null;
    attempts: Generated<number>;
    payload: JsonWithDefault<Record<string, unknown>>;
    created_at: Generated<Date>;
    expires_at: Date;
    used_at: Date | null;
  };
  oauth_identities: {
    provider: string;
    subject: string;
    user_id: string;
    email: string | null;
    created_at: Generated<Date>;
  };
  oauth_states: {
    state_hash: string;
    provider: string;
    code_verifier: string;
    redirect_to: string | null;
    created_at: Generated<Date>;
    expires_at: Date;
  };
  email_outbox: {
    id: Generated<string>;
    to_email: string;
    subject: string;
    body_text: string;
    kind: string;
    created_at: Generated<Date>;
    sent_at: Date | null;
    last_error: string | null;
  };
}
