import { sql } from 'kysely';
import type { Tx } from '../../platform/db/database.ts';
import { vectorLiteral, type Db } from './store.ts';

/**
 * The SQL of knowledge-base search. Every query is limited to the files the
 * service passes (the ready files attached to one assistant of the caller's
 * workspace). The ranking queries return positions only; the content and the
 * similarity of the few chunks answered are read afterwards (chunksAt), so no
 * ranked-but-dropped row has its text read.
 */

export interface ChunkPosition {
  file_id: string;
  chunk_index: number;
}

export interface ChunkHit extends ChunkPosition {
  filename: string;
  page_number: number | null;
  content: string;
  similarity: number;
}

/**
 * Below this many candidate chunks the semantic search compares the query
 * with every one of them exactly: about 2,000 distances cost what one HNSW
 * walk does (the kb bench measured ~60 ms for an exact scan of 10,000).
 */
export const EXACT_SCAN_MAX_CHUNKS = 2_000;

/**
 * The full-text side ranks about this many chunks at most (estimated from the
 * lexeme statistics): ts_rank reads every matching chunk's tsvector (about
 * 3 µs each on PostgreSQL), so a query word found in most chunks would make
 * it rank most of the library.
 */
export const KEYWORD_RANKED_ROWS_BUDGET = 3_000;
/**
 * The hard cap behind the estimate: when even the rarest query lexeme is in
 * more chunks than this (a query of common words only), an arbitrary subset
 * of this many matching chunks is ranked, so the cost stays bounded.
 */
export const KEYWORD_RANKED_ROWS_MAX = 4_000;

/** The files usable for an assistant's search: attached, and how many of them are ready (with their chunk counts). */
export async function searchableFiles(db: Db, accountId: string, assistantId: string): Promise<{ attached: number; ready: Array<{ id: string; chunk_count: number }> }> {
  const rows = await db
    .selectFrom('kb_attachments as a')
    .innerJoin('kb_files as f', 'f.id', 'a.file_id')
    .select(['f.id', 'f.status', 'f.chunk_count'])
    .where('a.account_id', '=', accountId)
    .where('a.assistant_id', '=', assistantId)
    .execute();
  return {
    attached: rows.length,
    ready: rows.filter((r) => r.status === 'ready').map((r) => ({ id: r.id, chunk_count: r.chunk_count ?? 0 })),
  };
}

/**
 * The `limit` chunks nearest to the query vector, nearest first. With few
 * candidates the distance to each is computed exactly (the materialized CTE
 * keeps the planner off the HNSW index). With many, the HNSW index answers; a
 * file filter on an approximate index can starve it (the graph walk finds the
 * nearest chunks of *other* files and stops), so pgvector ≥ 0.8 is told to
 * keep scanning until enough rows pass the filter (iterative_scan), and the
 * candidate list (ef_search) is widened to the limit. Results are re-sorted by
 * distance since relaxed_order may return them slightly out of order.
 */
export async function semanticSearch(
  trx: Tx,
  input: { fileIds: string[]; candidateChunks: number; vector: number[]; model: string; limit: number; iterativeScan: boolean },
): Promise<ChunkPosition[]> {
  const query = vectorLiteral(input.vector);
  if (input.candidateChunks <= EXACT_SCAN_MAX_CHUNKS) {
    const { rows } = await sql<ChunkPosition>`
      with candidates as materialized (
        select c.file_id, c.chunk_index, c.embedding <=> ${query}::vector as distance
        from kb_chunks c
        where c.file_id = any(${input.fileIds}::uuid[]) and c.embedding_model = ${input.model}
      )
      select file_id, chunk_index from candidates
      order by distance, file_id, chunk_index
      limit ${input.limit}`.execute(trx);
    return rows;
  }
  // set_config(…, true) is SET LOCAL in one round trip (is_local: until the transaction ends).
  const efSearch = String(Math.min(1000, Math.max(40, input.limit * 2)));
  await (input.iterativeScan
    ? sql`select set_config('hnsw.ef_search', ${efSearch}, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)`
    : sql`select set_config('hnsw.ef_search', ${efSearch}, true)`
  ).execute(trx);
  const { rows } = await sql<ChunkPosition & { distance: number }>`
    select c.file_id, c.chunk_index, (c.embedding <=> ${query}::vector)::float8 as distance
    from kb_chunks c
    where c.file_id = any(${input.fileIds}::uuid[]) and c.embedding_model = ${input.model}
    order by c.embedding <=> ${query}::vector
    limit ${input.limit}`.execute(trx);
  return rows.sort((a, b) => a.distance - b.distance).map(({ file_id, chunk_index }) => ({ file_id, chunk_index }));
}

/** The english lexemes of a text (stemmed, stop words removed), as full-text search sees them. */
export async function queryLexemes(db: Db, text: string): Promise<string[]> {
  const { rows } = await sql<{ lexeme: string }>`select unnest(tsvector_to_array(to_tsvector('english', ${text}))) as lexeme`.execute(db);
  return rows.map((r) => r.lexeme);
}

/**
 * How often lexemes occur in kb_chunks.search_vector: the share of chunks
 * holding each of the most common ones, from the statistics ANALYZE keeps
 * (pg_stats.most_common_elems); `other` is the share assumed for a lexeme
 * not listed: half the least frequent listed one, as PostgreSQL's own
 * estimate for tsvector matches assumes (ts_selfuncs.c). Empty (nothing
 * known: every lexeme counts as rare) before the table was first analysed.
 */
export interface LexemeFrequencies {
  common: Map<string, number>;
  other: number;
}

export async function lexemeFrequencies(db: Db): Promise<LexemeFrequencies> {
  const { rows } = await sql<{ elems: string[] | null; freqs: number[] | null }>`
    select most_common_elems::text::text[] as elems, most_common_elem_freqs::float8[] as freqs
    from pg_stats where schemaname = current_schema() and tablename = 'kb_chunks' and attname = 'search_vector'`.execute(db);
  const elems = rows[0]?.elems ?? [];
  const freqs = rows[0]?.freqs ?? [];
  // After one frequency per element come the minimum and maximum of them and the share of null rows.
  const common = new Map(elems.map((elem, i) => [elem, freqs[i] ?? 0]));
  return { common, other: elems.length > 0 ? (freqs[elems.length] ?? 0) / 2 : 0 };
}

/**
 * The query's lexemes in groups to match on, rarest first: each group as
 * many as fit KEYWORD_RANKED_ROWS_BUDGET (each lexeme counted at its share of
 * `candidateChunks`), and never empty. The service matches the first group
 * and goes on to the next only while it has fewer hits than it needs. A
 * lexeme in a large share of the chunks barely tells them apart, and
 * ts_rank has no inverse document frequency to discount it; matching it
 * first would only make the search rank most of the library. A lexeme the
 * statistics do not list may be in no chunk at all, which is why a group that
 * finds too little is not the end. In a small library every lexeme fits the
 * first group.
 */
export function lexemeGroups(lexemes: readonly string[], frequencies: LexemeFrequencies, candidateChunks: number): string[][] {
  const share = (lexeme: string) => frequencies.common.get(lexeme) ?? frequencies.other;
  const rarestFirst = [...lexemes].sort((a, b) => share(a) - share(b) || a.localeCompare(b));
  const groups: string[][] = [];
  let group: string[] = [];
  let rows = 0;
  for (const lexeme of rarestFirst) {
    const expected = share(lexeme) * candidateChunks;
    if (group.length > 0 && rows + expected > KEYWORD_RANKED_ROWS_BUDGET) {
      groups.push(group);
      group = [];
      rows = 0;
    }
    group.push(lexeme);
    rows += expected;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/** A tsquery matching any of `lexemes` as they are (already normalised: no second stemming). */
function anyOf(lexemes: readonly string[]): string {
  return lexemes.map((lexeme) => `'${lexeme.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`).join(' | ');
}

/**
 * Full-text matches, recall first: chunks holding any of `match` (OR, not
 * the AND of plainto_tsquery), ranked by ts_rank against any of `rank` (all
 * the query's lexemes, common ones included: chunks where more of them occur
 * more often rank higher). Cover density (ts_rank_cd) costs about four times
 * as much per chunk and ranked the quality set no better (kb bench: keyword
 * recall@6 0.75–0.78 with it, 0.79 without).
 */
export async function keywordSearch(db: Db | Tx, input: { fileIds: string[]; match: readonly string[]; rank: readonly string[]; limit: number }): Promise<ChunkPosition[]> {
  if (input.match.length === 0) return [];
  const { rows } = await sql<ChunkPosition>`
    with matched as materialized (
      select c.file_id, c.chunk_index, c.search_vector
      from kb_chunks c
      where c.file_id = any(${input.fileIds}::uuid[]) and c.search_vector @@ ${anyOf(input.match)}::tsquery
      limit ${KEYWORD_RANKED_ROWS_MAX}
    )
    select file_id, chunk_index from matched
    order by ts_rank(search_vector, ${anyOf(input.rank)}::tsquery) desc, file_id, chunk_index
    limit ${input.limit}`.execute(db);
  return rows;
}

/** The chunks at these positions (the hits and their neighbours), with their cosine similarity to the query. */
export async function chunksAt(db: Db | Tx, positions: Array<{ fileId: string; chunkIndex: number }>, vector: number[]): Promise<ChunkHit[]> {
  if (positions.length === 0) return [];
  const query = vectorLiteral(vector);
  const { rows } = await sql<ChunkHit>`
    select c.file_id, f.filename, c.chunk_index, c.page_number, c.content, (1 - (c.embedding <=> ${query}::vector))::float8 as similarity
    from unnest(${positions.map((p) => p.fileId)}::uuid[], ${positions.map((p) => p.chunkIndex)}::int[]) as wanted(file_id, chunk_index)
    join kb_chunks c on c.file_id = wanted.file_id and c.chunk_index = wanted.chunk_index
    join kb_files f on f.id = c.file_id`.execute(db);
  return rows;
}

/** The installed pgvector version (iterative index scans need 0.8). */
export async function pgvectorVersion(db: Db): Promise<string> {
  const { rows } = await sql<{ extversion: string }>`select extversion from pg_extension where extname = 'vector'`.execute(db);
  return rows[0]?.extversion ?? '0';
}

/**
 * ANALYZE kb_chunks when it holds over 10% more rows than its statistics
 * describe, or was never analysed: keyword search reads the lexeme statistics,
 * and PGlite has no autovacuum to refresh them (PostgreSQL's would, later).
 * Cheap on a small table, rare on a big one (a tenth of it must be new).
 */
export async function refreshChunkStatistics(db: Db): Promise<void> {
  const { rows } = await sql<{ described: number; stored: number }>`
    select reltuples::float8 as described, (select count(*) from kb_chunks)::float8 as stored
    from pg_class where oid = 'kb_chunks'::regclass`.execute(db);
  const { described = -1, stored = 0 } = rows[0] ?? {};
  if (described < 0 || stored > described * 1.1) await sql`analyze kb_chunks`.execute(db);
}
