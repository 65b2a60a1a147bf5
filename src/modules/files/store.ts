import type { Kysely, Selectable } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import type { FileTables } from './tables.ts';

/**
 * Every SQL statement of the workspace-files module. Each names the
 * workspace, so a file id of another workspace matches nothing. `db` is the
 * pool or a transaction handle.
 */
type Db = Kysely<Tables>;

export type FileRow = Selectable<FileTables['workspace_files']>;

const FILE_COLUMNS = ['id', 'account_id', 'name', 'original_name', 'size_bytes', 'mime_type', 'sha256', 'blob_key', 'created_by', 'created_at'] as const;

export interface NewFile {
  accountId: string;
  name: string;
  originalName: string;
  sizeBytes: number;
  mimeType: string;
  sha256: string;
  blobKey: string;
  createdBy: string;
}

export async function insertFile(db: Db, file: NewFile): Promise<FileRow> {
  return db
    .insertInto('workspace_files')
    .values({
      account_id: file.accountId,
      name: file.name,
      original_name: file.originalName,
      size_bytes: file.sizeBytes,
      mime_type: file.mimeType,
      sha256: file.sha256,
      blob_key: file.blobKey,
      created_by: file.createdBy,
    })
    .returning(FILE_COLUMNS)
    .executeTakeFirstOrThrow();
}

export async function findFile(db: Db, accountId: string, id: string): Promise<FileRow | undefined> {
  return db.selectFrom('workspace_files').select(FILE_COLUMNS).where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
}

/** Locked until the transaction ends, so two concurrent deletes of one file do not both remove it. */
export async function lockFile(db: Db, accountId: string, id: string): Promise<FileRow | undefined> {
  return db
    .selectFrom('workspace_files')
    .select(FILE_COLUMNS)
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst();
}

export async function deleteFile(db: Db, accountId: string, id: string): Promise<void> {
  await db.deleteFrom('workspace_files').where('account_id', '=', accountId).where('id', '=', id).execute();
}
