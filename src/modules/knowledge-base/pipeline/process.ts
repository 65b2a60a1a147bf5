import type { Readable } from 'node:stream';
import type { AppContext } from '../../../platform/context.ts';
import { defineJob, type JobDefinition } from '../../../platform/jobs/queue.ts';
import type { Embedder } from '../../../providers/embeddings/index.ts';
import * as store from '../store.ts';
import { chunkPages, type TextChunk } from './chunk.ts';
import { ExtractionError, extractText, type KbMimeType } from './parse.ts';
import { refreshChunkStatistics } from '../search-queries.ts';

/**
 * Processing a knowledge-base file, as one durable job per (file, generation):
 *
 *   pending → parsing (read the blob, extract the text: char_count; chunk it:
 *   chunk_count) → embedding (embed the chunks in batches, storing each batch
 *   as it is embedded) → indexing (check every chunk is stored; the HNSW and
 *   full-text indexes are maintained by the database as rows arrive) → ready.
 *
 * Any step can fail → failed with status_error. A document that cannot be
 * read (ExtractionError, text over KB_MAX_TEXT_CHARS) fails at once; other
 * errors (storage, database, embeddings upstream) are thrown so the queue
 * retries, and the last attempt marks the file failed.
 *
 * Crash safety: a worker that dies mid-file leaves its job active; the queue
 * expires it (expireInSeconds) and delivers it again. The run then starts
 * over from the blob but keeps every chunk already stored with the current
 * embedding model (chunking is deterministic, so positions mean the same
 * text) and embeds only the rest; chunks are inserted with ON CONFLICT DO
 * NOTHING on (file_id, chunk_index), so even two runs at once never store a
 * position twice. Each job carries its generation: after reprocess (a new
 * generation) a stale run writes nothing, because every status change and
 * every batch of chunks is conditional on the generation still being current.
 */

export const PROCESS_FILE_JOB = 'kb.process-file';

export interface ProcessFileJob {
  fileId: string;
  generation: number;
}

export interface PipelineOptions {
  /** Attempts after the first failure before the file is marked failed. */
  retryLimit: number;
  /** Seconds before the first retry (doubling after); 0 retries at once (tests). */
  retryDelaySeconds: number;
  /** Chunks embedded and stored together: the work a crash can lose. */
  embedBatchSize: number;
  /**
   * A run active for longer is taken to have died with its worker and is
   * delivered again. Generous, since a large document takes minutes to
   * embed locally; an overlap with a slow live run is harmless (see above).
   */
  expireInSeconds: number;
  /** Which embedder to use; the configured provider unless a test supplies its own. */
  embedder: (ctx: AppContext) => Embedder;
}

/** A run whose file moved on (deleted, reprocessed, finished): it stops without writing. */
class StaleRun extends Error {
  override name = 'StaleRun';
}

/** A document that no retry can help with; its message becomes status_error. */
class UnprocessableFile extends Error {
  override name = 'UnprocessableFile';
}

const MAX_STATUS_ERROR = 1000;

async function readAll(stream: Readable, expectedBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of stream) {
    chunks.push(chunk as Buffer);
    length += (chunk as Buffer).length;
  }
  if (length !== expectedBytes) throw new Error(`the stored file has ${length} bytes, expected ${expectedBytes}`);
  return Buffer.concat(chunks, length);
}

export class FileProcessor {
  constructor(
    private readonly ctx: AppContext,
    private readonly options: PipelineOptions,
  ) {}

  private get db() {
    return this.ctx.db.kysely;
  }

  /** The job handler: one attempt at the file's current generation. */
  async run(job: ProcessFileJob, attempt: { retryCount: number }): Promise<void> {
    const file = await store.fileForProcessing(this.db, job.fileId);
    if (!file || file.generation !== job.generation || file.status === 'ready' || file.status === 'failed') return;
    try {
      await this.process(file);
    } catch (error) {
      if (error instanceof StaleRun) return;
      if (error instanceof UnprocessableFile || error instanceof ExtractionError) {
        await store.markFailed(this.db, file.id, file.generation, error.message.slice(0, MAX_STATUS_ERROR));
        return;
      }
      if (attempt.retryCount >= this.options.retryLimit) {
        const reason = error instanceof Error ? error.message : String(error);
        await store.markFailed(this.db, file.id, file.generation, `Processing failed after ${attempt.retryCount + 1} attempts: ${reason}`.slice(0, MAX_STATUS_ERROR));
        this.ctx.logger.error({ err: error, fileId: file.id }, 'knowledge-base file failed after its last attempt');
        return;
      }
      throw error;
    }
  }

  private async process(file: store.KbFileRow): Promise<void> {
    const { id, generation } = file;
    await this.advance(id, generation, 'parsing');
    const bytes = await readAll(await this.ctx.blobs.get(file.blob_key), Number(file.size_bytes));
    const pages = await extractText(file.mime_type as KbMimeType, bytes);
    const charCount = pages.reduce((sum, page) => sum + page.text.length, 0);
    const maxChars = this.ctx.config.kb.maxTextChars;
    if (charCount > maxChars) {
      throw new UnprocessableFile(
        `The extracted text has ${charCount} characters, more than the limit of ${maxChars} (KB_MAX_TEXT_CHARS); split the document into smaller files`,
      );
    }
    await this.advance(id, generation, 'parsing', { char_count: charCount });
    const chunks = chunkPages(pages);
    await this.advance(id, generation, 'embedding', { chunk_count: chunks.length });

    const embedder = this.options.embedder(this.ctx);
    await this.embedAndStore(file, chunks, embedder);

    await this.advance(id, generation, 'indexing');
    const stored = await store.storedChunkIndexes(this.db, id, embedder.model);
    if (stored.size !== chunks.length) {
      // Something removed chunks under us without a new generation; the retry redoes them.
      throw new Error(`expected ${chunks.length} chunks of ${embedder.model}, found ${stored.size}`);
    }
    await this.advance(id, generation, 'ready', { embedding_model: embedder.model });
    // Keyword search sizes its queries with the lexeme statistics; the file is ready whether or not this works.
    await refreshChunkStatistics(this.db).catch((error: unknown) => this.ctx.logger.warn({ err: error }, 'could not refresh the knowledge-base chunk statistics'));
  }

  /**
   * Embeds the chunks not yet stored with this model, a batch at a time,
   * storing each batch before embedding the next, so a crash loses at most
   * one batch of work.
   */
  private async embedAndStore(file: store.KbFileRow, chunks: TextChunk[], embedder: Embedder): Promise<void> {
    await this.ctx.db.transaction(async (trx) => {
      if (!(await store.holdGeneration(trx, file.id, file.generation))) throw new StaleRun();
      await store.deleteUnusableChunks(trx, file.id, embedder.model, chunks.length);
    });
    const done = await store.storedChunkIndexes(this.db, file.id, embedder.model);
    const todo = chunks.filter((chunk) => !done.has(chunk.chunkIndex));
    for (let start = 0; start < todo.length; start += this.options.embedBatchSize) {
      const batch = todo.slice(start, start + this.options.embedBatchSize);
      const vectors = await embedder.embed(batch.map((chunk) => chunk.content));
      if (vectors.length !== batch.length) throw new Error(`the embedder returned ${vectors.length} vectors for ${batch.length} texts`);
      await this.ctx.db.transaction(async (trx) => {
        if (!(await store.holdGeneration(trx, file.id, file.generation))) throw new StaleRun();
        await store.insertChunks(
          trx,
          { id: file.id, accountId: file.account_id },
          embedder.model,
          batch.map((chunk, i) => ({ chunkIndex: chunk.chunkIndex, pageNumber: chunk.pageNumber, content: chunk.content, embedding: vectors[i]! })),
        );
      });
    }
  }

  private async advance(id: string, generation: number, to: Parameters<typeof store.advance>[3], change?: store.StatusChange): Promise<void> {
    if (!(await store.advance(this.db, id, generation, to, change))) throw new StaleRun();
  }
}

export function processFileJob(ctx: AppContext, options: PipelineOptions): JobDefinition<ProcessFileJob> {
  const processor = new FileProcessor(ctx, options);
  return defineJob<ProcessFileJob>({
    name: PROCESS_FILE_JOB,
    retryLimit: options.retryLimit,
    retryDelaySeconds: options.retryDelaySeconds,
    retryBackoff: options.retryDelaySeconds > 0,
    expireInSeconds: options.expireInSeconds,
    // Extraction and local embedding are CPU-bound; one file at a time per process leaves room for requests.
    concurrency: 1,
    handler: (payload, job) => processor.run(payload, job),
  });
}
