import { sql } from 'kysely';
import type { Tx } from '../../platform/db/database.ts';
import { vectorLiteral, type Db } from './store.ts';

/**
 * The SQL of knowledge-base search. Every query is limited to the files the
 * service passes (the ready files attached to one assistant of the caller's
 * workspace) and returns the cosine similarity of each chunk to the query.
 */

export interface ChunkHit {
  file_id: string;
  filename: string;
  chunk_index: number;
  page_number: number | null;
  content: string;
  similarity: number;
}

/** Below this many candidate chunks the semantic search compares the query with every one of them exactly. */
export const EXACT_SCAN_MAX_CHUNKS = 20_000;

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

const hitColumns = (query: string) => sql`c.file_id, f.filename, c.chunk_index, c.page_number, c.content, (1 - (c.embedding <=> ${query}::vector))::float8 as similarity`;

/**
 * The `limit` chunks nearest to the query vector. With few candidates the
 * distance to each is computed exactly (the materialized CTE keeps the
 * planner off the HNSW index). With many, the HNSW index answers; a file
 * filter on an approximate index can starve it (the graph walk finds the
 * nearest chunks of *other* files and stops), so pgvector ≥ 0.8 is told to
 * keep scanning until enough rows pass the filter (iterative_scan), and the
 * candidate list (ef_search) is widened to the limit. Results are re-sorted by
 * similarity since relaxed_order may return them slightly out of order.
 */
export async function semanticSearch(
  trx: Tx,
  input: { fileIds: string[]; candidateChunks: number; vector: number[]; model: string; limit: number; iterativeScan: boolean },
): Promise<ChunkHit[]> {
  const query = vectorLiteral(input.vector);
  if (input.candidateChunks <= EXACT_SCAN_MAX_CHUNKS) {
    const { rows } = await sql<ChunkHit>`
      with candidates as materialized (
        select c.file_id, c.chunk_index, c.page_number, c.content, c.embedding
        from kb_chunks c
        where c.file_id = any(${input.fileIds}::uuid[]) and c.embedding_model = ${input.model}
      )
      select ${hitColumns(query)}
      from candidates c join kb_files f on f.id = c.file_id
      order by c.embedding <=> ${query}::vector, c.file_id, c.chunk_index
      limit ${input.limit}`.execute(trx);
    return rows;
  }
  // SET cannot take parameters; both values are integers or constants chosen here.
  await sql.raw(`set local hnsw.ef_search = ${Math.min(1000, Math.max(40, input.limit * 2))}`).execute(trx);
  if (input.iterativeScan) await sql.raw(`set local hnsw.iterative_scan = relaxed_order`).execute(trx);
  const { rows } = await sql<ChunkHit>`
    select ${hitColumns(query)}
    from kb_chunks c join kb_files f on f.id = c.file_id
    where c.file_id = any(${input.fileIds}::uuid[]) and c.embedding_model = ${input.model}
    order by c.embedding <=> ${query}::vector
    limit ${input.limit}`.execute(trx);
  return rows.sort((a, b) => b.similarity - a.similarity);
}

/**
 * Full-text matches, recall first: any of the query's lexemes (OR, not the
 * AND of plainto_tsquery), ranked by ts_rank_cd (cover density: chunks where
 * more terms occur close together rank higher). A query of stop words only
 * has no lexemes and matches nothing.
 */
export async function keywordSearch(db: Db | Tx, input: { fileIds: string[]; text: string; vector: number[]; limit: number }): Promise<ChunkHit[]> {
  const query = vectorLiteral(input.vector);
  const { rows } = await sql<ChunkHit>`
    with q as (select replace(plainto_tsquery('english', ${input.text})::text, ' & ', ' | ')::tsquery as terms)
    select ${hitColumns(query)}
    from q, kb_chunks c join kb_files f on f.id = c.file_id
    where c.file_id = any(${input.fileIds}::uuid[]) and c.search_vector @@ q.terms
    order by ts_rank_cd(c.search_vector, q.terms) desc, c.file_id, c.chunk_index
    limit ${input.limit}`.execute(db);
  return rows;
}

/** The chunks at these positions (neighbours of the primary hits). */
export async function chunksAt(db: Db | Tx, positions: Array<{ fileId: string; chunkIndex: number }>, vector: number[]): Promise<ChunkHit[]> {
  if (positions.length === 0) return [];
  const query = vectorLiteral(vector);
  const { rows } = await sql<ChunkHit>`
    select ${hitColumns(query)}
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
