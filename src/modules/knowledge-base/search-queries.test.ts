import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, call, createKey, createWorkspace, signUp, uniqueEmail } from '../../../test/fixtures.ts';
import { compareVersions } from '../../platform/db/database.ts';
import { EMBEDDING_DIMENSIONS } from '../../providers/embeddings/index.ts';
import { keywordSearch, pgvectorVersion, searchScopeSummary, semanticSearch, type SearchScope } from './search-queries.ts';
import { vectorLiteral } from './store.ts';

/**
 * The search statements on the real database, with files and chunks written
 * straight into it (random unit vectors, numbered texts): what each
 * statement returns for one assistant's scope when its workspace also holds
 * files it must not see. The HNSW statement runs whenever the caller says
 * the scope holds more than EXACT_SCAN_MAX_CHUNKS chunks, so it is asked
 * with candidateChunks above that.
 */
const MODEL = 'test-model';
const CHUNKS_PER_FILE = 60;

function randomUnitVector(): number[] {
  const values = Array.from({ length: EMBEDDING_DIMENSIONS }, () => crypto.randomInt(-1000, 1000) / 1000);
  const norm = Math.hypot(...values);
  return values.map((value) => value / norm);
}

const cosineDistance = (a: number[], b: number[]) => 1 - a.reduce((sum, x, i) => sum + x * b[i]!, 0);

describe('knowledge-base search statements', () => {
  let rt: TestRuntime;
  let scope: SearchScope;
  let iterativeScan: boolean;
  /** Every inserted chunk by file label: attached+ready (searchable), ready but not attached, attached but still processing. */
  const chunks: Record<'searchable' | 'unattached' | 'processing', Array<{ fileId: string; chunkIndex: number; embedding: number[] }>> = {
    searchable: [],
    unattached: [],
    processing: [],
  };

  before(async () => {
    rt = await startTestRuntime();
    const owner = await signUp(rt, uniqueEmail('kb-sql'));
    const ws = await createWorkspace(rt, owner, 'Statements Co');
    const key = await createKey(rt, owner, ws);
    const assistantId = (await call(rt, { method: 'POST', url: '/api/assistants', headers: bearer(key.fullKey), payload: { name: 'SQL' } })).json().assistant.id;
    scope = { assistantId };
    iterativeScan = compareVersions(await pgvectorVersion(rt.db.kysely), '0.8.0') >= 0;

    for (const [label, status, attached] of [
      ['searchable', 'ready', true],
      ['unattached', 'ready', false],
      ['processing', 'embedding', true],
    ] as const) {
      const file = await rt.db.kysely
        .insertInto('kb_files')
        .values({ account_id: ws.id, filename: `${label}.txt`, mime_type: 'text/plain', size_bytes: 1, sha256: crypto.randomUUID(), blob_key: crypto.randomUUID(), status, chunk_count: CHUNKS_PER_FILE })
        .returning('id')
        .executeTakeFirstOrThrow();
      if (attached) await rt.db.kysely.insertInto('kb_attachments').values({ assistant_id: assistantId, file_id: file.id, account_id: ws.id }).execute();
      for (let chunkIndex = 0; chunkIndex < CHUNKS_PER_FILE; chunkIndex++) {
        const embedding = randomUnitVector();
        chunks[label].push({ fileId: file.id, chunkIndex, embedding });
        await rt.db.kysely
          .insertInto('kb_chunks')
          .values({
            file_id: file.id,
            account_id: ws.id,
            chunk_index: chunkIndex,
            content: `Chunk ${chunkIndex} of the ${label} file mentions ${chunkIndex % 2 === 0 ? 'warranty' : 'shipping'} terms${chunkIndex % 10 === 0 ? ' and warranty warranty claims' : ''}.`,
            embedding: vectorLiteral(embedding),
            embedding_model: MODEL,
          })
          .execute();
      }
    }
  });
  after(async () => {
    await rt?.destroy();
  });

  test('the summary counts attached and ready files and ready chunks, and gives the query lexemes', async () => {
    const summary = await searchScopeSummary(rt.db.kysely, scope, 'Were the refunds delivered?');
    assert.deepEqual(
      { ...summary, lexemes: [...summary.lexemes].sort() },
      { attached: 2, ready: 1, chunks: CHUNKS_PER_FILE, lexemes: ['deliv', 'refund'] },
    );
    const elsewhere = await searchScopeSummary(rt.db.kysely, { ...scope, assistantId: crypto.randomUUID() }, 'refunds');
    assert.deepEqual({ attached: elsewhere.attached, ready: elsewhere.ready, chunks: elsewhere.chunks }, { attached: 0, ready: 0, chunks: 0 });
  });

  for (const [path, candidateChunks] of [
    ['exact scan', CHUNKS_PER_FILE],
    ['HNSW index', 100_000],
  ] as const) {
    test(`semantic search (${path}) returns the scope's nearest chunks, nearest first, and no other file's`, async () => {
      const target = chunks.searchable[7]!;
      const limit = 12;
      const hits = await semanticSearch(rt.db.kysely, { ...scope, candidateChunks, vector: target.embedding, model: MODEL, limit, iterativeScan });
      assert.equal(hits.length, limit);
      assert.deepEqual(hits[0], { file_id: target.fileId, chunk_index: target.chunkIndex });
      assert.ok(hits.every((hit) => hit.file_id === target.fileId));
      const distances = hits.map((hit) => cosineDistance(target.embedding, chunks.searchable[hit.chunk_index]!.embedding));
      assert.deepEqual(distances, [...distances].sort((a, b) => a - b));
      // The settings the HNSW statement makes end with it.
      const { rows } = await sql<{ iterative: string | null }>`select current_setting('hnsw.iterative_scan', true) as iterative`.execute(rt.db.kysely);
      assert.notEqual(rows[0]?.iterative, 'relaxed_order');
    });
  }

  test('semantic search skips chunks of another embedding model', async () => {
    const hits = await semanticSearch(rt.db.kysely, { ...scope, candidateChunks: 100_000, vector: chunks.searchable[3]!.embedding, model: 'other-model', limit: 5, iterativeScan });
    assert.deepEqual(hits, []);
  });

  test("keyword search ranks the scope's matching chunks, most occurrences first, and no other file's", async () => {
    const hits = await keywordSearch(rt.db.kysely, { ...scope, match: ['warranti'], rank: ['warranti', 'claim'], limit: 40 });
    const searchableFile = chunks.searchable[0]!.fileId;
    assert.ok(hits.every((hit) => hit.file_id === searchableFile));
    // Every even chunk mentions warranty; 0, 10, 20, … mention it three times and "claims" too, so they come first.
    assert.equal(hits.length, CHUNKS_PER_FILE / 2);
    assert.deepEqual(
      hits.slice(0, 6).map((hit) => hit.chunk_index),
      [0, 10, 20, 30, 40, 50],
    );
    assert.deepEqual(await keywordSearch(rt.db.kysely, { ...scope, match: [], rank: ['warranti'], limit: 5 }), []);
  });
});
