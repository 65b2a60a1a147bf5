import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, call, createKey, createWorkspace, signUp, uniqueEmail } from '../../../test/fixtures.ts';
import { compareVersions } from '../../platform/db/database.ts';
import { EMBEDDING_DIMENSIONS } from '../../providers/embeddings/index.ts';
import { RRF_K } from './search.ts';
import { keywordSearch, pgvectorVersion, rankedHits, searchScopeSummary, semanticSearch, semanticSearchStatement, type ChunkPosition, type SearchScope } from './search-queries.ts';
import { insertChunks, vectorLiteral } from './store.ts';

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
      const written = Array.from({ length: CHUNKS_PER_FILE }, (_, chunkIndex) => ({
        chunkIndex,
        pageNumber: null,
        content: `Chunk ${chunkIndex} of the ${label} file mentions ${chunkIndex % 2 === 0 ? 'warranty' : 'shipping'} terms${chunkIndex % 10 === 0 ? ' and warranty warranty claims' : ''}.`,
        embedding: randomUnitVector(),
      }));
      await insertChunks(rt.db.kysely, { id: file.id, accountId: ws.id }, MODEL, written);
      chunks[label].push(...written.map(({ chunkIndex, embedding }) => ({ fileId: file.id, chunkIndex, embedding })));
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

  /** The `limit` searchable chunks nearest to `vector`, worked out here from the embeddings. */
  const nearestSearchable = (vector: number[], limit: number): ChunkPosition[] =>
    chunks.searchable
      .map((chunk) => ({ file_id: chunk.fileId, chunk_index: chunk.chunkIndex, distance: cosineDistance(vector, chunk.embedding) }))
      .sort((a, b) => a.distance - b.distance)
      .slice(0, limit)
      .map(({ file_id, chunk_index }) => ({ file_id, chunk_index }));

  /**
   * What rankedHits must answer, worked out here: `semantic` fused with
   * `keyword` by reciprocal rank fusion, the top `topK`, then their
   * neighbours.
   */
  function expectedHits(semantic: ChunkPosition[], keyword: ChunkPosition[], topK: number) {
    const key = (p: ChunkPosition) => `${p.file_id}:${p.chunk_index}`;
    const fused = new Map<string, { position: ChunkPosition; score: number; semanticRank: number }>();
    semantic.forEach((position, i) => fused.set(key(position), { position, score: 1 / (RRF_K + i + 1), semanticRank: i }));
    keyword.forEach((position, i) => {
      const entry = fused.get(key(position));
      if (entry) entry.score += 1 / (RRF_K + i + 1);
      else fused.set(key(position), { position, score: 1 / (RRF_K + i + 1), semanticRank: Number.POSITIVE_INFINITY });
    });
    const primaries = [...fused.values()]
      .sort((a, b) => b.score - a.score || a.semanticRank - b.semanticRank || a.position.chunk_index - b.position.chunk_index)
      .slice(0, topK)
      .map(({ position, semanticRank }) => ({ file_id: position.file_id, chunk_index: position.chunk_index, semantic: semanticRank !== Number.POSITIVE_INFINITY, adjacent: false }));
    const taken = new Set(primaries.map(key));
    const neighbours = primaries.flatMap((primary) =>
      [primary.chunk_index - 1, primary.chunk_index + 1].flatMap((chunk_index) => {
        const position = { file_id: primary.file_id, chunk_index };
        if (chunk_index < 0 || chunk_index >= CHUNKS_PER_FILE || taken.has(key(position))) return [];
        taken.add(key(position));
        return [{ ...position, semantic: primary.semantic, adjacent: true }];
      }),
    );
    return [...primaries, ...neighbours];
  }

  const searchableAt = (indexes: number[]) => indexes.map((i) => ({ file_id: chunks.searchable[i]!.fileId, chunk_index: i }));

  for (const [path, candidateChunks] of [
    ['exact scan', CHUNKS_PER_FILE],
    ['HNSW index', 100_000],
  ] as const) {
    test(`the semantic list (${path}) is the scope's nearest chunks of the model, nearest first`, async () => {
      const vector = chunks.searchable[5]!.embedding;
      const input = { ...scope, iterativeScan, vector: vectorLiteral(vector), model: MODEL, candidateChunks, limit: 12 };
      assert.deepEqual(await semanticSearch(rt.db.kysely, input), nearestSearchable(vector, 12));
      assert.deepEqual(await semanticSearch(rt.db.kysely, { ...input, model: 'other-model' }), []);
      // Above EXACT_SCAN_MAX_CHUNKS the statement orders by the index's own expression, so the index can answer it: the
      // table holds too few rows for the planner to choose the index by cost alone, so sorting is made prohibitive
      // while it plans, which leaves the index as the only cheap way to the order asked for.
      const plan = await rt.db.transaction(async (trx) => {
        await sql`set local enable_sort = off`.execute(trx);
        return (await sql<{ 'QUERY PLAN': string }>`explain ${semanticSearchStatement(input)}`.execute(trx)).rows.map((row) => row['QUERY PLAN']).join('\n');
      });
      if (candidateChunks > CHUNKS_PER_FILE) assert.match(plan, /Index Scan using kb_chunks_embedding_idx/);
      else assert.doesNotMatch(plan, /kb_chunks_embedding_idx/);
      // The settings the HNSW statement makes end with it.
      const { rows } = await sql<{ iterative: string | null }>`select current_setting('hnsw.iterative_scan', true) as iterative`.execute(rt.db.kysely);
      assert.notEqual(rows[0]?.iterative, 'relaxed_order');
    });
  }

  for (const [mode, semanticLimit, keyword] of [
    ['vector only', 12, () => []],
    ['full text only', 0, () => searchableAt([40, 3, 59, 0, 22, 41, 17])],
    ['hybrid', 12, () => searchableAt([5, 40, 3, 59, 0, 22, 41, 17, 8, 9])],
  ] as const) {
    test(`the answering statement (${mode}) fuses, picks the primaries, adds their neighbours and reads their text`, async () => {
      const vector = chunks.searchable[5]!.embedding;
      const semantic = nearestSearchable(vector, semanticLimit);
      const hits = await rankedHits(rt.db.kysely, { vector: vectorLiteral(vector), semantic, keyword: keyword(), topK: 5, rrfK: RRF_K });
      assert.deepEqual(
        hits.map(({ file_id, chunk_index, semantic, adjacent }) => ({ file_id, chunk_index, semantic, adjacent })),
        expectedHits(semantic, keyword(), 5),
      );
      for (const hit of hits) {
        assert.equal(hit.filename, 'searchable.txt');
        assert.match(hit.content, new RegExp(`^Chunk ${hit.chunk_index} of the searchable file`));
        assert.ok(Math.abs(hit.similarity - (1 - cosineDistance(vector, chunks.searchable[hit.chunk_index]!.embedding))) < 1e-5);
      }
    });
  }

  test('the full-text index takes new chunks straight into its posting lists, leaving no pending list for searches to scan', async () => {
    const { rows } = await sql<{ options: string[] | null }>`select reloptions as options from pg_class where relname = 'kb_chunks_search_idx'`.execute(rt.db.kysely);
    assert.deepEqual(rows[0]?.options, ['fastupdate=off']);
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
