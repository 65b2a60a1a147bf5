import { sql, type RawBuilder } from 'kysely';
import { PREPARED } from '../../platform/db/database.ts';
import type { Db } from './store.ts';

/**
 * The SQL of knowledge-base search. The statements that rank
 * (semanticSearch, keywordSearch) are limited to the ready files attached
 * to one assistant (SearchScope) and return positions only; the statement
 * that answers (rankedHits) reads the text of the few chunks it returns, so
 * no ranked-but-dropped row has its text read. The four statements of
 * every search are PREPARED (their texts come in a few shapes, values as
 * parameters), so PostgreSQL does not plan them anew each time.
 */

export interface ChunkPosition {
  file_id: string;
  chunk_index: number;
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

/**
 * Whose files a search covers: the ready files attached to one assistant.
 * The statements trust the assistant id: the service uses their answers
 * only once it has checked that the caller may use that assistant.
 */
export interface SearchScope {
  assistantId: string;
}

/**
 * The scope's files as a subquery, so each search statement reads them in
 * its own snapshot (a file detached or reprocessed meanwhile is never half
 * in) and no file list travels to the database: a 1,000-file list as a
 * parameter cost ~2 ms a statement to send, parse and plan (kb bench, 100k
 * chunks).
 */
function searchableFileIds(scope: SearchScope) {
  return sql`
    select a.file_id from kb_attachments a join kb_files f on f.id = a.file_id
    where a.assistant_id = ${scope.assistantId} and f.status = 'ready'`;
}

/**
 * In one round trip: how many files are attached, how many of those are
 * ready and how many chunks they hold, and the query's english lexemes
 * (stemmed, stop words removed) as full-text search sees them.
 */
export async function searchScopeSummary(db: Db, scope: SearchScope, text: string): Promise<{ attached: number; ready: number; chunks: number; lexemes: string[] }> {
  const { rows } = await sql<{ attached: number; ready: number; chunks: number; lexemes: string[] }>`${PREPARED}
    select count(*)::int as attached,
      (count(*) filter (where f.status = 'ready'))::int as ready,
      (coalesce(sum(f.chunk_count) filter (where f.status = 'ready'), 0))::int as chunks,
      array(select unnest(tsvector_to_array(to_tsvector('english', ${text})))) as lexemes
    from kb_attachments a join kb_files f on f.id = a.file_id
    where a.assistant_id = ${scope.assistantId}`.execute(db);
  return rows[0]!;
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
 * recall@6 0.75–0.78 with it, 0.79 without). Each chunk is ranked by the scan
 * that reads it, so no tsvector (~1.8 kB) is copied into an intermediate
 * result: that copy was about half the query's time at 100k chunks. The
 * scope's files are read once (materialized) into the hash table each
 * matching chunk is joined with; joined as a subquery, the planner often
 * checked each chunk with two index lookups instead, and as an IN list it
 * deduplicated the files first (kb bench, 100k chunks, 100 logged queries:
 * about 6.1 ms a statement against 7.1 with IN and 9.0 with the subquery
 * join, the same answers).
 */
export async function keywordSearch(db: Db, input: SearchScope & { match: readonly string[]; rank: readonly string[]; limit: number }): Promise<ChunkPosition[]> {
  if (input.match.length === 0) return [];
  const { rows } = await sql<ChunkPosition>`${PREPARED}
    with searchable as materialized (${searchableFileIds(input)})
    select file_id, chunk_index from (
      select c.file_id, c.chunk_index, ts_rank(c.search_vector, ${anyOf(input.rank)}::tsquery) as rank
      from kb_chunks c join searchable on searchable.file_id = c.file_id
      where c.search_vector @@ ${anyOf(input.match)}::tsquery
      limit ${KEYWORD_RANKED_ROWS_MAX}
    ) matched
    order by rank desc, file_id, chunk_index
    limit ${input.limit}`.execute(db);
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

/** A search hit as the answering statement returns it: primaries first, then their neighbours. */
export interface RankedHit extends ChunkPosition {
  filename: string;
  page_number: number | null;
  content: string;
  similarity: number;
  /** The vector search ranked it (or the primary it neighbours); otherwise only the full-text search did. */
  semantic: boolean;
  adjacent: boolean;
}

/**
 * The semantic list: the `limit` chunks of the scope nearest to the query
 * vector, nearest first (ties by position). It runs as soon as the vector is
 * known, alongside the full-text side (nearestChunks says how it searches).
 */
export async function semanticSearch(db: Db, input: SemanticSearchInput): Promise<ChunkPosition[]> {
  if (input.limit === 0) return [];
  const { rows } = await semanticSearchStatement(input).execute(db);
  return rows;
}

/** The query vector as a pgvector literal (store.ts vectorLiteral), built once per search for both statements that read it. */
type SemanticSearchInput = SearchScope & { vector: string; model: string; candidateChunks: number; limit: number; iterativeScan: boolean };

/** semanticSearch's statement (its tests read its plan); limit > 0. */
export function semanticSearchStatement(input: SemanticSearchInput): RawBuilder<ChunkPosition> {
  // The vector is sent once (~9 kB as text) and read by the index scan and the distance alike.
  return sql<ChunkPosition>`${PREPARED}
    with query_vector as (select ${input.vector}::vector as embedding)
    select file_id, chunk_index from (${nearestChunks(input, sql`(select embedding from query_vector)`)}) nearest
    order by distance, file_id, chunk_index`;
}

/**
 * The answer once both lists are known: the semantic and full-text lists
 * (each best first) fused by reciprocal rank fusion (Cormack et al.: a
 * chunk's score is Σ 1 / (rrfK + rank) over the lists that ranked it), the
 * `topK` best as primaries (ties: better semantic rank, then position), then
 * the chunks right before and after each primary that are not primaries
 * themselves, in the order of their primaries (a neighbour of two goes with
 * the first), each with its text and cosine similarity to the query. Only
 * these chunks have their text and embedding read.
 */
export async function rankedHits(
  db: Db,
  input: { vector: string; semantic: readonly ChunkPosition[]; keyword: readonly ChunkPosition[]; topK: number; rrfK: number },
): Promise<RankedHit[]> {
  const ranked = (list: readonly ChunkPosition[]) => sql`
    select file_id, chunk_index, rank
    from unnest(${list.map((hit) => hit.file_id)}::uuid[], ${list.map((hit) => hit.chunk_index)}::int[]) with ordinality as l(file_id, chunk_index, rank)`;
  const { rows } = await sql<RankedHit>`${PREPARED}
    with fused as (
      select coalesce(s.file_id, k.file_id) as file_id, coalesce(s.chunk_index, k.chunk_index) as chunk_index, s.rank is not null as semantic,
        row_number() over (
          order by coalesce(1::float8 / (${input.rrfK} + s.rank), 0) + coalesce(1::float8 / (${input.rrfK} + k.rank), 0) desc,
            s.rank nulls last, coalesce(s.file_id, k.file_id), coalesce(s.chunk_index, k.chunk_index)
        ) as position
      from (${ranked(input.semantic)}) s full join (${ranked(input.keyword)}) k on k.file_id = s.file_id and k.chunk_index = s.chunk_index
    ),
    primaries as (select file_id, chunk_index, semantic, position from fused where position <= ${input.topK} order by position limit ${input.topK}),
    wanted as (
      select file_id, chunk_index, semantic, false as adjacent, position, 0 as side from primaries
      union all
      select * from (
        select distinct on (p.file_id, p.chunk_index + step.delta) p.file_id, p.chunk_index + step.delta, p.semantic, true, p.position, step.side
        from primaries p cross join (values (-1, 1), (1, 2)) as step(delta, side)
        where p.chunk_index + step.delta >= 0
          and not exists (select 1 from primaries q where q.file_id = p.file_id and q.chunk_index = p.chunk_index + step.delta)
        order by p.file_id, p.chunk_index + step.delta, p.position, step.side
      ) neighbours
    )
    select c.file_id, f.filename, c.chunk_index, c.page_number, c.content, (1 - (c.embedding <=> ${input.vector}::vector))::float8 as similarity,
      w.semantic, w.adjacent
    from wanted w
    join kb_chunks c on c.file_id = w.file_id and c.chunk_index = w.chunk_index
    join kb_files f on f.id = c.file_id
    order by w.adjacent, w.position, w.side`.execute(db);
  return rows;
}

/**
 * The `limit` chunks of the scope nearest to the query vector, with their
 * distances, in no particular order (semanticSearch orders them). With few
 * candidates the distance to each is computed exactly (the materialized CTE
 * keeps the planner off the HNSW index). With many, the HNSW index answers; a
 * file filter on an approximate index can starve it (the graph walk finds the
 * nearest chunks of *other* files and stops), so pgvector ≥ 0.8 is told to
 * keep scanning until enough rows pass the filter (iterative_scan), and the
 * candidate list (ef_search) is widened to the limit; relaxed_order may
 * return them slightly out of order.
 *
 * The LIMIT clause's subquery makes those two settings: PostgreSQL evaluates
 * a LIMIT before it pulls the first row from the index scan, and
 * set_config(…, true) lasts until the statement's own transaction ends. One
 * statement instead of BEGIN, SET LOCAL, the query and COMMIT on a dedicated
 * connection, which cost more than the HNSW walk itself (kb bench, 100k
 * chunks: ~7.5 ms against ~3 ms).
 */
function nearestChunks(input: SemanticSearchInput, query: RawBuilder<unknown>) {
  if (input.candidateChunks <= EXACT_SCAN_MAX_CHUNKS) {
    return sql`
      with candidates as materialized (
        select c.file_id, c.chunk_index, (c.embedding <=> ${query})::float8 as distance
        from kb_chunks c
        where c.file_id in (${searchableFileIds(input)}) and c.embedding_model = ${input.model}
      )
      select file_id, chunk_index, distance from candidates
      order by distance, file_id, chunk_index
      limit ${input.limit}`;
  }
  const efSearch = String(Math.min(1000, Math.max(40, input.limit * 2)));
  const settings = input.iterativeScan
    ? sql`set_config('hnsw.ef_search', ${efSearch}, true) is not null and set_config('hnsw.iterative_scan', 'relaxed_order', true) is not null`
    : sql`set_config('hnsw.ef_search', ${efSearch}, true) is not null`;
  return sql`
    select c.file_id, c.chunk_index, (c.embedding <=> ${query})::float8 as distance
    from kb_chunks c
    where c.file_id in (${searchableFileIds(input)}) and c.embedding_model = ${input.model}
    order by c.embedding <=> ${query}
    limit (select ${input.limit}::int where ${settings})`;
}
