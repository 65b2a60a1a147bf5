import type { Generated } from 'kysely';
import type { IdentityTables } from '../../modules/identity/tables.ts';
import type { AccountTables } from '../../modules/accounts/tables.ts';
import type { ApiKeyTables } from '../../modules/api-keys/tables.ts';
import type { AssistantTables } from '../../modules/assistants/tables.ts';
import type { CreditTables } from '../../modules/credits/tables.ts';
import type { AiTables } from '../../modules/ai/tables.ts';
import type { FileTables } from '../../modules/files/tables.ts';
import type { KnowledgeBaseTables } from '../../modules/knowledge-base/tables.ts';

/**
 * Row types of every table, for Kysely. Each module declares its own tables
 * next to its SQL; they are merged here so queries are checked against the
 * schema the migrations create.
 */
export interface PlatformTables {
  schema_migrations: {
    version: string;
    name: string;
    checksum: string;
    applied_at: Generated<Date>;
  };
}

export interface Tables
  extends PlatformTables,
    IdentityTables,
    AccountTables,
    ApiKeyTables,
    AssistantTables,
    CreditTables,
    AiTables,
    FileTables,
    KnowledgeBaseTables {}
