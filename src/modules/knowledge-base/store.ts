import { sql, type Kysely, type Selectable } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import type { KbFileStatus, KnowledgeBaseTables } from './tables.ts';

/**
 * The knowledge base's SQL for files, chunks, attachments and storage usage
 * (search queries are in search-queries.ts). Statements reached from a
 * request name the workspace, so an id of another workspace matches nothing;
 * the pipeline works on file ids it was handed by an upload of that workspace.
 * `db` is the pool or a transaction handle.
 */
export type Db = Kysely<Tables>;
export type KbFileRow = Selectable<KnowledgeBaseTables['kb_files']>;

const FILE_COLUMNS = [
  'id',
  'account_id',
  'filename',
  'mime_type',
  'size_bytes',
  'sha256',
  'blob_key',
  'status',
  'status_error',
  'char_count',
  'chunk_count',
  'generation',
  'embedding_model',
  'created_by',
  'created_at',
  'updated_at',
] as const;

/** The states a run moves through, in order; a run only ever moves a file forward along them. */
const PROCESSING_ORDER: readonly KbFileStatus[] = ['pending', 'parsing', 'embedding', 'indexing', 'ready'];

// ---- files ----

export interface NewKbFile {
  accountId: string;
  filename: string;
  mimeType: string;
  sizeBytes: number;
  sha256: string;
  blobKey: string;
  createdBy: string | null;
}

/** The new row, or undefined when the workspace already has a file with this content (the unique (account_id, sha256) key). */
export async function insertFileUnlessDuplicate(db: Db, file: NewKbFile): Promise<KbFileRow | undefined> {
  return db
    .insertInto('kb_files')
    .values({
      account_id: file.accountId,
      filename: file.filename,
      mime_type: file.mimeType,
      size_bytes: file.sizeBytes,
      sha256: file.sha256,
      blob_key: file.blobKey,
      created_by: file.createdBy,
    })
    .onConflict((oc) => oc.columns(['account_id', 'sha256']).doNothing())
    .returning(FILE_COLUMNS)
    .executeTakeFirst();
}

export async function findFileByContent(db: Db, accountId: string, sha256: string): Promise<KbFileRow | undefined> {
  return db.selectFrom('kb_files').select(FILE_COLUMNS).where('account_id', '=', accountId).where('sha256', '=', sha256).executeTakeFirst();
}

/** The workspace of a file; the caller checks access before anything else. */
export async function accountOfFile(db: Db, id: string): Promise<string | undefined> {
  const row = await db.selectFrom('kb_files').select(['account_id']).where('id', '=', id).executeTakeFirst();
  return row?.account_id;
}

export async function findFile(db: Db, accountId: string, id: string, options: { lock?: boolean } = {}): Promise<KbFileRow | undefined> {
  let query = db.selectFrom('kb_files').select(FILE_COLUMNS).where('account_id', '=', accountId).where('id', '=', id);
  if (options.lock) query = query.forUpdate();
  return query.executeTakeFirst();
}

/** For the pipeline, which is handed a file id by the job. */
export async function fileForProcessing(db: Db, id: string): Promise<KbFileRow | undefined> {
  return db.selectFrom('kb_files').select(FILE_COLUMNS).where('id', '=', id).executeTakeFirst();
}

/** A position in the newest-first listing: created_at in whole microseconds (exact, unlike a JavaScript Date) and the id. */
export interface ListPosition {
  createdMicros: number;
  id: string;
}

export type ListedFile = KbFileRow & { created_micros: number; attachment_count?: number };

const createdMicros = sql<number>`(extract(epoch from f.created_at) * 1000000)::bigint`;

/** Newest first, `limit` rows after `after`; with the number of assistants each file is attached to when asked. */
export async function listFiles(db: Db, accountId: string, options: { limit: number; after?: ListPosition; attachmentCount: boolean }): Promise<ListedFile[]> {
  let query = db
    .selectFrom('kb_files as f')
    .select(FILE_COLUMNS.map((c) => `f.${c}` as const))
    .select(createdMicros.as('created_micros'))
    .where('f.account_id', '=', accountId);
  if (options.after) {
    const at = sql`timestamptz 'epoch' + ${options.after.createdMicros} * interval '1 microsecond'`;
    query = query.where(sql<boolean>`(f.created_at, f.id) < (${at}, ${options.after.id}::uuid)`);
  }
  if (options.attachmentCount) {
    query = query.select((eb) =>
      eb
        .selectFrom('kb_attachments as a')
        // Assistants are deleted softly; a deleted one's attachments stay behind but no longer use the file.
        .innerJoin('assistants as s', 's.id', 'a.assistant_id')
        .select(sql<number>`count(*)::int`.as('n'))
        .whereRef('a.file_id', '=', 'f.id')
        .where('s.deleted_at', 'is', null)
        .as('attachment_count'),
    );
  }
  const rows = await query.orderBy('f.created_at', 'desc').orderBy('f.id', 'desc').limit(options.limit).execute();
  return rows as ListedFile[];
}

export async function deleteFile(db: Db, accountId: string, id: string): Promise<void> {
  await db.deleteFrom('kb_files').where('account_id', '=', accountId).where('id', '=', id).execute();
}

/**
 * POST reprocess: a new generation starting from pending, with the previous
 * run's results and chunks gone. Returns the new generation.
 */
export async function restartProcessing(db: Db, accountId: string, id: string): Promise<number | undefined> {
  const row = await db
    .updateTable('kb_files')
    .set({
      generation: sql`generation + 1`,
      status: 'pending',
      status_error: null,
      char_count: null,
      chunk_count: null,
      embedding_model: null,
      updated_at: sql`now()`,
    })
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .returning(['generation'])
    .executeTakeFirst();
  if (!row) return undefined;
  await db.deleteFrom('kb_chunks').where('file_id', '=', id).execute();
  return row.generation;
}

export interface StatusChange {
  char_count?: number;
  chunk_count?: number;
  embedding_model?: string;
}

/**
 * Moves a file of this generation forward to `to` (never back: a retried run
 * passes the states it already reached without rewinding them) and records
 * `change`. False when the run is stale: the file was deleted, reprocessed
 * (a newer generation) or already finished.
 */
export async function advance(db: Db, id: string, generation: number, to: KbFileStatus, change: StatusChange = {}): Promise<boolean> {
  const earlier = PROCESSING_ORDER.slice(0, PROCESSING_ORDER.indexOf(to));
  const result = await db
    .updateTable('kb_files')
    .set({
      status: earlier.length ? sql<KbFileStatus>`case when status in (${sql.join(earlier)}) then ${to} else status end` : to,
      ...change,
      updated_at: sql`now()`,
    })
    .where('id', '=', id)
    .where('generation', '=', generation)
    .where('status', 'not in', ['ready', 'failed'])
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The run's final answer when it cannot succeed; a stale run (other generation, deleted) changes nothing. */
export async function markFailed(db: Db, id: string, generation: number, error: string): Promise<boolean> {
  const result = await db
    .updateTable('kb_files')
    .set({ status: 'failed', status_error: error, updated_at: sql`now()` })
    .where('id', '=', id)
    .where('generation', '=', generation)
    .where('status', '!=', 'ready')
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Locks the file row for sharing until the transaction ends, when it still
 * is at `generation`: chunks are written under this lock, and reprocess and
 * delete take the row's exclusive lock, so a run that saw its generation here
 * finishes its write before the file moves on (and the next run's clean-up
 * removes it).
 */
export async function holdGeneration(db: Db, id: string, generation: number): Promise<boolean> {
  const row = await db.selectFrom('kb_files').select(['id']).where('id', '=', id).where('generation', '=', generation).forShare().executeTakeFirst();
  return row !== undefined;
}

// ---- chunks ----

export interface NewChunk {
  chunkIndex: number;
  pageNumber: number | null;
  content: string;
  embedding: number[];
}

/** pgvector's text form. */
export function vectorLiteral(values: readonly number[]): string {
  return `[${values.join(',')}]`;
}

/**
 * Stores embedded chunks. A chunk already stored at that position (a job
 * re-delivered after a crash got there first) is kept: never two rows at one
 * (file_id, chunk_index).
 */
export async function insertChunks(db: Db, file: { id: string; accountId: string }, model: string, chunks: readonly NewChunk[]): Promise<void> {
  if (chunks.length === 0) return;
  await db
    .insertInto('kb_chunks')
    .values(
      chunks.map((chunk) => ({
        file_id: file.id,
        account_id: file.accountId,
        chunk_index: chunk.chunkIndex,
        page_number: chunk.pageNumber,
        content: chunk.content,
        embedding: vectorLiteral(chunk.embedding),
        embedding_model: model,
      })),
    )
    .onConflict((oc) => oc.columns(['file_id', 'chunk_index']).doNothing())
    .execute();
}

/**
 * Removes what a resumed run cannot keep: chunks embedded with another model
 * and chunks past the end of the current chunking.
 */
export async function deleteUnusableChunks(db: Db, fileId: string, model: string, chunkCount: number): Promise<void> {
  await db
    .deleteFrom('kb_chunks')
    .where('file_id', '=', fileId)
    .where((eb) => eb.or([eb('embedding_model', '!=', model), eb('chunk_index', '>=', chunkCount)]))
    .execute();
}

/** Positions already stored with `model` (kept when a run resumes). */
export async function storedChunkIndexes(db: Db, fileId: string, model: string): Promise<Set<number>> {
  const rows = await db.selectFrom('kb_chunks').select(['chunk_index']).where('file_id', '=', fileId).where('embedding_model', '=', model).execute();
  return new Set(rows.map((r) => r.chunk_index));
}

// ---- attachments ----

/** True when newly attached, false when it already was. */
export async function attach(db: Db, link: { assistantId: string; fileId: string; accountId: string }): Promise<boolean> {
  const row = await db
    .insertInto('kb_attachments')
    .values({ assistant_id: link.assistantId, file_id: link.fileId, account_id: link.accountId })
    .onConflict((oc) => oc.columns(['assistant_id', 'file_id']).doNothing())
    .returning(['file_id'])
    .executeTakeFirst();
  return row !== undefined;
}

/** True when it was attached. */
export async function detach(db: Db, accountId: string, assistantId: string, fileId: string): Promise<boolean> {
  const result = await db
    .deleteFrom('kb_attachments')
    .where('account_id', '=', accountId)
    .where('assistant_id', '=', assistantId)
    .where('file_id', '=', fileId)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** The assistant's files in the order they were attached. */
export async function attachedFiles(db: Db, accountId: string, assistantId: string): Promise<KbFileRow[]> {
  return db
    .selectFrom('kb_attachments as a')
    .innerJoin('kb_files as f', 'f.id', 'a.file_id')
    .select(FILE_COLUMNS.map((c) => `f.${c}` as const))
    .where('a.account_id', '=', accountId)
    .where('a.assistant_id', '=', assistantId)
    .orderBy('a.created_at')
    .orderBy('f.id')
    .execute();
}

// ---- storage usage (credits) ----

/**
 * The workspace's paid blocks, its row locked until the transaction ends:
 * every upload of the workspace takes this lock first, so the bytes it counts
 * and the blocks it charges cannot interleave with another upload's.
 */
export async function lockStorageUsage(db: Db, accountId: string): Promise<number> {
  await db.insertInto('kb_storage_usage').values({ account_id: accountId }).onConflict((oc) => oc.column('account_id').doNothing()).execute();
  const row = await db.selectFrom('kb_storage_usage').select(['paid_blocks']).where('account_id', '=', accountId).forUpdate().executeTakeFirstOrThrow();
  return row.paid_blocks;
}

export async function setPaidBlocks(db: Db, accountId: string, paidBlocks: number): Promise<void> {
  await db.updateTable('kb_storage_usage').set({ paid_blocks: paidBlocks, updated_at: sql`now()` }).where('account_id', '=', accountId).execute();
}

/** Bytes of every file in the library, whatever its status. */
export async function storedBytes(db: Db, accountId: string): Promise<number> {
  const row = await db
    .selectFrom('kb_files')
    .select(sql<number>`coalesce(sum(size_bytes), 0)::bigint`.as('bytes'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow();
  return Number(row.bytes);
}
