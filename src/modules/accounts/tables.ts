import type { Generated } from 'kysely';

export type Role = 'owner' | 'admin' | 'member';

export interface AccountTables {
  accounts: {
    id: Generated<string>;
    slug: string;
    name: string;
    created_by: string | null;
    created_at: Generated<Date>;
    updated_at: Generated<Date>;
  };
  memberships: {
    account_id: string;
    user_id: string;
    role: Role;
    created_at: Generated<Date>;
  };
  onboarding_starts: {
    client_token: string;
    user_id: string;
    account_id: string;
    created_at: Generated<Date>;
  };
}
