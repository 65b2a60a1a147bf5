import { randomUUID } from 'node:crypto';
import { pipeline } from 'node:stream';
import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { uploadedFileName, type MultipartPart } from '../../platform/http/multipart.ts';
import { BlobTooLargeError, discardBlob } from '../../platform/storage/blob-store.ts';
import { accountsService, type Account } from '../accounts/service.ts';
import { assistantsService } from '../assistants/service.ts';
import { creditsService } from '../credits/service.ts';
import { ContentTypeSniffer, UnsupportedTypeError } from './content-type.ts';
import { PROCESS_FILE_JOB, type ProcessFileJob } from './pipeline/process.ts';
import { storageCharge, STORAGE_BLOCK_BYTES } from './storage-credits.ts';
import * as store from './store.ts';
import type { KbFileStatus } from './tables.ts';
import { isUuid } from '../../platform/ids.ts';

/** §8: download URLs are valid 5 minutes. */
export const DOWNLOAD_URL_TTL_SECONDS = 5 * 60;
export const MAX_FILENAME_LENGTH = 255;
export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export const KB_MESSAGES = {
  fileNotFound: 'Knowledge-base file not found',
  fileMissing: 'Send the document as multipart/form-data in a field named "file"',
  unsupportedType: 'Unsupported file type: upload a PDF, DOCX, TXT or MD document (the type is detected from the content)',
  deduplicated: 'An identical file is already in this library; the existing file is returned and no storage credits were charged',
  tooLarge: (maxBytes: number) => `File is too large: the knowledge-base limit is ${maxBytes} bytes${maxBytes === 1024 ** 3 ? ' (1 GiB)' : ''}`,
} as const;

/** §2.5 knowledge-base file. */
export interface KbFileView {
  id: string;
  filename: string;
  mime_type: string;
  size_bytes: number;
  status: KbFileStatus;
  status_error: string | null;
  char_count: number | null;
  chunk_count: number | null;
  created_at: string;
  updated_at: string;
  attachment_count?: number;
}

export type UploadResult =
  | { success: true; credits_charged: number; file: KbFileView }
  | { success: true; file: { id: string; status: KbFileStatus }; deduplicated: true; message: string };

export function toView(row: store.KbFileRow & { attachment_count?: number }): KbFileView {
  const view: KbFileView = {
    id: row.id,
    filename: row.filename,
    mime_type: row.mime_type,
    size_bytes: Number(row.size_bytes),
    status: row.status,
    status_error: row.status_error,
    char_count: row.char_count,
    chunk_count: row.chunk_count,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
  if (row.attachment_count !== undefined) view.attachment_count = Number(row.attachment_count);
  return view;
}

export const fileNotFound = () => new AppError('not_found', KB_MESSAGES.fileNotFound);

/** List cursors name a position (creation time in microseconds and id), so they survive the deletion of the file they came from. */
function encodeCursor(position: store.ListPosition): string {
  return Buffer.from(`${position.createdMicros}:${position.id}`).toString('base64url');
}

function decodeCursor(cursor: string): store.ListPosition {
  const match = /^(\d{1,17}):([0-9a-f-]{36})$/i.exec(Buffer.from(cursor, 'base64url').toString());
  if (!match || !isUuid(match[2]!)) {
    throw new AppError('validation_failed', 'cursor must be a next_cursor value from this list', [{ field: 'cursor', message: 'is not a cursor of this list' }]);
  }
  return { createdMicros: Number(match[1]), id: match[2]! };
}

export class KnowledgeBaseService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /** The workspace named by the request: an API key's own, or the user's `accountSlug` (required for users). */
  private async workspace(actor: Actor, accountSlug: string | undefined): Promise<Account> {
    return (await accountsService(this.ctx).access(actor, { accountSlug })).account;
  }

  /**
   * A file the actor may use: a member of its workspace or a key of it;
   * `accountSlug`, when given, must name that workspace. Anything else is
   * "not found", exactly like an unknown id.
   */
  private async locateFile(actor: Actor, fileId: string, accountSlug?: string): Promise<{ account: Account; file: store.KbFileRow }> {
    const accountId = isUuid(fileId) ? await store.accountOfFile(this.db.kysely, fileId) : undefined;
    if (!accountId) throw fileNotFound();
    let account: Account;
    try {
      ({ account } = await accountsService(this.ctx).access(actor, accountSlug === undefined ? { accountId } : { accountSlug }));
    } catch (error) {
      if (error instanceof AppError && error.code === 'not_found') throw fileNotFound();
      throw error;
    }
    if (account.id !== accountId) throw fileNotFound();
    const file = await store.findFile(this.db.kysely, account.id, fileId);
    if (!file) throw fileNotFound();
    return { account, file };
  }

  /**
   * POST /api/kb/files. Access is checked before the body is read. The file
   * streams straight to the blob store, hashed on the way, its type detected
   * from its first bytes (a refused type stops the write), cut off past
   * KB_MAX_FILE_BYTES. Then one transaction records it: the row (or the
   * existing file with the same content), the storage charge and the
   * processing job. A refused upload leaves neither a row nor a blob.
   */
  async upload(actor: Actor, input: { accountSlug?: string }, parts: AsyncIterable<MultipartPart>): Promise<UploadResult> {
    const account = await this.workspace(actor, input.accountSlug);
    const maxBytes = this.ctx.config.kb.maxFileBytes;
    let blobKey: string | undefined;
    try {
      let stored: { size: number; sha256: string; filename: string; mimeType: string } | undefined;
      for await (const part of parts) {
        if (part.kind === 'field') continue;
        const filename = uploadedFileName(part, stored !== undefined);
        if (filename === undefined) continue;
        if (filename.length > MAX_FILENAME_LENGTH) {
          part.stream.resume();
          throw new AppError('validation_failed', `The file name must be at most ${MAX_FILENAME_LENGTH} characters`, [{ field: 'file', message: 'name is too long' }]);
        }
        blobKey = `kb/${account.id}/${randomUUID()}`;
        const sniffer = new ContentTypeSniffer(filename);
        // pipeline() tears both down together: a refused type or size also stops the part's stream.
        const body = pipeline(part.stream, sniffer, () => {});
        const blob = await this.ctx.blobs.put(blobKey, body, { maxBytes });
        stored = { size: blob.size, sha256: blob.sha256, filename, mimeType: sniffer.mimeType };
      }
      if (stored === undefined || blobKey === undefined) throw new AppError('bad_request', KB_MESSAGES.fileMissing);
      const key = blobKey;
      const file = stored;
      const outcome = await this.db.transaction((trx) =>
        this.record(trx, { accountId: account.id, filename: file.filename, mimeType: file.mimeType, sizeBytes: file.size, sha256: file.sha256, blobKey: key, createdBy: actor.kind === 'user' ? actor.userId : null }),
      );
      if ('deduplicated' in outcome) await discardBlob(this.ctx.blobs, this.ctx.logger, key, 'a refused or duplicate knowledge-base upload');
      return outcome;
    } catch (error) {
      // put() leaves nothing behind when it fails, but a blob stored before a
      // later step failed must go; deleting a missing key is a no-op.
      if (blobKey !== undefined) await discardBlob(this.ctx.blobs, this.ctx.logger, blobKey, 'a refused or duplicate knowledge-base upload');
      if (error instanceof BlobTooLargeError) {
        throw new AppError('bad_request', KB_MESSAGES.tooLarge(maxBytes), [{ field: 'file', message: `must be at most ${maxBytes} bytes` }]);
      }
      if (error instanceof UnsupportedTypeError) throw new AppError('bad_request', KB_MESSAGES.unsupportedType, [{ field: 'file', message: 'must be a PDF, DOCX, TXT or MD document' }]);
      throw error;
    }
  }

  /**
   * The row, the charge and the job, together. The workspace's storage row is
   * locked first, so uploads of one workspace (identical ones included) take
   * turns: the first of several identical uploads inserts, the others meet
   * the unique (account_id, sha256) key and get its file.
   */
  private async record(trx: Tx, file: store.NewKbFile): Promise<UploadResult> {
    const paidBlocks = await store.lockStorageUsage(trx, file.accountId);
    const row = await store.insertFileUnlessDuplicate(trx, file);
    if (!row) {
      const existing = await store.findFileByContent(trx, file.accountId, file.sha256);
      if (!existing) throw new Error('a duplicate knowledge-base upload found no existing file');
      return { success: true, file: { id: existing.id, status: existing.status }, deduplicated: true, message: KB_MESSAGES.deduplicated };
    }
    const bytes = await store.storedBytes(trx, file.accountId);
    const charge = storageCharge(bytes, paidBlocks);
    if (charge.credits > 0) {
      try {
        await creditsService(this.ctx).post(trx, {
          accountId: file.accountId,
          amount: -charge.credits,
          reason: 'kb_storage',
          reference: `kb_file:${row.id}`,
          metadata: { file_id: row.id, filename: row.filename, size_bytes: file.sizeBytes, library_bytes: bytes, paid_blocks: charge.paidBlocks },
          createdBy: file.createdBy,
        });
      } catch (error) {
        if (error instanceof AppError && error.code === 'insufficient_credits') {
          throw new AppError(
            'insufficient_credits',
            `Insufficient credits: storing this file brings the library to ${bytes} bytes, which needs ${charge.credits} more storage credit${charge.credits === 1 ? '' : 's'} ` +
              `(the first 50 MiB are free, then 1 credit per started ${STORAGE_BLOCK_BYTES / 1024 / 1024} MiB). ${error.message.replace(/^Insufficient credits: /, '')}`,
          );
        }
        throw error;
      }
      await store.setPaidBlocks(trx, file.accountId, charge.paidBlocks);
    }
    await this.ctx.jobs.send(PROCESS_FILE_JOB, { fileId: row.id, generation: row.generation } satisfies ProcessFileJob, { trx });
    return { success: true, credits_charged: charge.credits, file: toView(row) };
  }

  /** GET /api/kb/files: newest first, in pages. */
  async list(
    actor: Actor,
    input: { accountSlug?: string; include?: string; limit?: number; cursor?: string },
  ): Promise<{ files: KbFileView[]; next_cursor: string | null }> {
    const account = await this.workspace(actor, input.accountSlug);
    const limit = input.limit ?? DEFAULT_PAGE_SIZE;
    const after = input.cursor === undefined ? undefined : decodeCursor(input.cursor);
    // One row more than asked tells whether another page exists without a count.
    const rows = await store.listFiles(this.db.kysely, account.id, { limit: limit + 1, after, attachmentCount: input.include === 'attachment_count' });
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return {
      files: page.map(toView),
      next_cursor: rows.length > limit && last ? encodeCursor({ createdMicros: Number(last.created_micros), id: last.id }) : null,
    };
  }

  async get(actor: Actor, fileId: string, accountSlug?: string): Promise<KbFileView> {
    return toView((await this.locateFile(actor, fileId, accountSlug)).file);
  }

  /** A signed URL for the original bytes under the original name, valid 5 minutes. */
  async downloadUrl(actor: Actor, fileId: string, accountSlug?: string): Promise<{ url: string; filename: string }> {
    const { file } = await this.locateFile(actor, fileId, accountSlug);
    const url = await this.ctx.blobs.signedUrl(file.blob_key, { expiresInSeconds: DOWNLOAD_URL_TTL_SECONDS, filename: file.filename, contentType: file.mime_type });
    return { url, filename: file.filename };
  }

  /**
   * POST reprocess: from any state back to pending with the chunks cleared
   * and a new generation, re-enqueued in the same transaction. A run of the
   * old generation still going writes nothing more. Chunks are re-embedded
   * with the current embedding model.
   */
  async reprocess(actor: Actor, fileId: string, accountSlug?: string): Promise<void> {
    const { account } = await this.locateFile(actor, fileId, accountSlug);
    await this.db.transaction(async (trx) => {
      const generation = await store.restartProcessing(trx, account.id, fileId);
      if (generation === undefined) throw fileNotFound();
      await this.ctx.jobs.send(PROCESS_FILE_JOB, { fileId, generation } satisfies ProcessFileJob, { trx });
    });
  }

  /**
   * DELETE: the row with its chunks, embeddings and attachments (cascades),
   * and the stored object. The object is deleted inside the row's
   * transaction, so a storage failure keeps the row and the request can be
   * repeated. Credits are not refunded (storage-credits.ts).
   */
  async remove(actor: Actor, fileId: string, accountSlug?: string): Promise<void> {
    const { account } = await this.locateFile(actor, fileId, accountSlug);
    await this.db.transaction(async (trx) => {
      const file = await store.findFile(trx, account.id, fileId, { lock: true });
      if (!file) throw fileNotFound();
      await this.ctx.blobs.delete(file.blob_key);
      await store.deleteFile(trx, account.id, fileId);
    });
  }

  /** GET /api/assistants/{assistantId}/knowledge-base: the attached files, in attachment order. */
  async assistantFiles(actor: Actor, assistantId: string, accountSlug?: string): Promise<KbFileView[]> {
    const account = await assistantsService(this.ctx).locate(actor, assistantId, accountSlug);
    return (await store.attachedFiles(this.db.kysely, account.id, assistantId)).map((row) => toView(row));
  }

  /** Attaches a library file of the assistant's workspace; `idempotent` when it already was. */
  async attach(actor: Actor, assistantId: string, input: { file_id: string; accountSlug?: string }): Promise<{ idempotent: boolean }> {
    const account = await assistantsService(this.ctx).locate(actor, assistantId, input.accountSlug);
    const file = isUuid(input.file_id) ? await store.findFile(this.db.kysely, account.id, input.file_id) : undefined;
    if (!file) throw fileNotFound();
    const attached = await store.attach(this.db.kysely, { assistantId, fileId: file.id, accountId: account.id });
    return { idempotent: !attached };
  }

  /** Detaches only (the file stays in the library); `idempotent` when it was not attached. */
  async detach(actor: Actor, assistantId: string, fileId: string, accountSlug?: string): Promise<{ idempotent: boolean }> {
    const account = await assistantsService(this.ctx).locate(actor, assistantId, accountSlug);
    const file = isUuid(fileId) ? await store.findFile(this.db.kysely, account.id, fileId) : undefined;
    if (!file) throw fileNotFound();
    return { idempotent: !(await store.detach(this.db.kysely, account.id, assistantId, fileId)) };
  }
}

export const knowledgeBaseService = perContext((ctx) => new KnowledgeBaseService(ctx));
