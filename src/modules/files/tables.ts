import type { Generated } from 'kysely';

/** Row types of migrations/0013_workspace_files.sql. */
export interface FileTables {
  workspace_files: {
    id: Generated<string>;
    account_id: string;
    /** Display name. */
    name: string;
    /** The uploaded file's own name, used as the download name. */
    original_name: string;
    size_bytes: number;
    mime_type: string;
    sha256: string;
    blob_key: string;
    created_by: string | null;
    created_at: Generated<Date>;
  };
}
