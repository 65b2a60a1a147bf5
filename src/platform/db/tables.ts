import type { Generated } from 'kysely';

/**
 * Row types of every table, for Kysely. Each module adds its own tables here
 * (one interface per module, merged below) so queries are checked against the
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

export type Tables = PlatformTables;
