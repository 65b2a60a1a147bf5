/**
 * Grows a workspace's knowledge base to tens of thousands of chunks without
 * the pipeline: embedding 100k chunks with the local model would take hours
 * on the benchmark machine. Rows go straight into kb_files, kb_chunks and
 * kb_attachments (migrations/0014_knowledge_base.sql), generated inside the
 * database so no vectors travel over the wire:
 *
 * - each vector is one of the workspace's real chunk embeddings plus uniform
 *   noise, scaled back to unit length (cosine ≈ 0.8 to its source), so the
 *   vectors cluster the way real embeddings do rather than being spread
 *   evenly over the sphere, which would flatter the HNSW index;
 * - each text is 110 to 150 words with Zipf-like frequencies (the word of
 *   frequency rank r is drawn with probability ∝ 1/r) over `words` mixed
 *   with generated pseudo-words (SYNTHETIC_VOCABULARY words in all), ranks
 *   assigned by a seeded shuffle. Natural text is like that: a few words are
 *   in most passages, most words in very few. Drawing the ~1,200 words of the
 *   quality set uniformly, as this did first, put nearly every query word in
 *   nearly every chunk, which no real library does; now the query words of
 *   the quality set land anywhere from "in most chunks" to "in a handful",
 *   so full-text search meets both common and selective terms;
 * - every file is `ready` and attached to the assistant, so all chunks are
 *   searchable through it.
 *
 * As a bulk load would do, the HNSW and full-text (GIN) indexes are dropped
 * before the insert and built again after it (with their definitions from
 * the migrations, read back from pg_indexes), and the tables are vacuumed and
 * analysed: building once is several times faster than inserting into the
 * graph and the posting lists row by row (the GIN index takes every insert
 * straight into its posting lists: migration 0016), and without the vacuum
 * PostgreSQL's autovacuum would take up the new rows during the measurement.
 *
 * The server must be stopped on PGlite (one process per data directory); the
 * suite stops it on PostgreSQL too so both engines are treated alike.
 */
import { openDatabase, type DatabaseTarget } from '../../src/platform/db/database.ts';
import type { PoolClient } from '../../src/platform/db/pool.ts';
import { seededRandom } from './kb.ts';

export interface GrowOptions {
  accountId: string;
  assistantId: string;
  /** Chunks the workspace should hold afterwards (real ones included). */
  targetChunks: number;
  /** The words synthetic texts are made of. */
  words: readonly string[];
  progress(message: string): void;
}

export interface Growth {
  chunksBefore: number;
  chunksAfter: number;
  insertSeconds: number;
  indexSeconds: number;
}

const CHUNKS_PER_FILE = 100;
/** Distinct words of the synthetic texts: the given words plus pseudo-words up to this many. */
export const SYNTHETIC_VOCABULARY = 20_000;
const PSEUDO_WORD_SYLLABLES = ['ka', 'lo', 'mi', 'ner', 'tu', 'sa', 'vok', 'ri', 'dan', 'pel', 'zo', 'quin', 'ba', 'te', 'gor', 'fi'];
const FILES_PER_STATEMENT = 20;
/** Per dimension, uniform in ±NOISE/2: noise of length ≈ 0.75 on a unit vector. */
const NOISE = 0.115;
/** HNSW builds fastest when the whole graph fits in maintenance memory (about 0.6 GB at 100k × 512 dimensions). */
const INDEX_BUILD_MEMORY = { pglite: '512MB', postgres: '1GB' } as const;

/**
 * `words` plus made-up words (three or four syllables of a fixed set, so
 * not English stop words) up to SYNTHETIC_VOCABULARY, in a seeded random order:
 * the position is the word's frequency rank in the synthetic texts.
 */
export function syntheticVocabulary(words: readonly string[], seed = 7): string[] {
  const all = new Set(words);
  const random = seededRandom(seed);
  const syllable = () => PSEUDO_WORD_SYLLABLES[Math.floor(random() * PSEUDO_WORD_SYLLABLES.length)]!;
  while (all.size < SYNTHETIC_VOCABULARY) all.add(`${syllable()}${syllable()}${syllable()}${random() < 0.5 ? syllable() : ''}`);
  const ranked = [...all];
  for (let i = ranked.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [ranked[i], ranked[j]] = [ranked[j]!, ranked[i]!];
  }
  return ranked;
}

export function growWorkspace(target: DatabaseTarget, options: GrowOptions): Promise<Growth> {
  return withClient(target, (client) => grow(client, target.kind, options));
}

/**
 * Gives the workspace `credits` as a grant, straight in the ledger and the
 * balance (there is no public API for grants): a 1 GiB upload needs storage
 * credits a new workspace does not have. The server must be stopped.
 */
export function grantCredits(target: DatabaseTarget, accountId: string, credits: number): Promise<void> {
  return withClient(target, async (client) => {
    await client.query('begin');
    const balance = await client.query<{ credits: string }>(
      `insert into credit_balances (account_id, credits) values ($1, $2)
       on conflict (account_id) do update set credits = credit_balances.credits + excluded.credits, updated_at = now()
       returning credits`,
      [accountId, credits],
    );
    await client.query(`insert into credit_ledger (account_id, amount, reason, reference, balance_after) values ($1, $2, 'grant', 'bench:kb', $3)`, [
      accountId,
      credits,
      balance.rows[0]!.credits,
    ]);
    await client.query('commit');
  });
}

async function withClient<T>(target: DatabaseTarget, work: (client: PoolClient) => Promise<T>): Promise<T> {
  const db = await openDatabase(target);
  const client = await db.pool.connect();
  try {
    return await work(client);
  } finally {
    client.release();
    await db.close();
  }
}

async function grow(client: PoolClient, engine: DatabaseTarget['kind'], options: GrowOptions): Promise<Growth> {
  const count = async () => Number((await client.query<{ n: number }>('select count(*)::int as n from kb_chunks where account_id = $1', [options.accountId])).rows[0]!.n);
  const chunksBefore = await count();
  const needed = options.targetChunks - chunksBefore;
  if (needed <= 0) return { chunksBefore, chunksAfter: chunksBefore, insertSeconds: 0, indexSeconds: 0 };

  const template = (
    await client.query<{ embedding_model: string; created_by: string | null }>(
      `select c.embedding_model, f.created_by from kb_chunks c join kb_files f on f.id = c.file_id where c.account_id = $1 limit 1`,
      [options.accountId],
    )
  ).rows[0];
  if (!template) throw new Error('the workspace has no real chunks to derive synthetic ones from');

  // The real embeddings the synthetic ones scatter around, numbered for a cheap lookup.
  await client.query('drop table if exists bench_bases');
  await client.query(
    `create temporary table bench_bases as
       select (row_number() over (order by id) - 1)::int as n, embedding from kb_chunks
        where account_id = $1 and file_id not in (select id from kb_files where filename like 'synthetic-%')`,
    [options.accountId],
  );
  await client.query('alter table bench_bases add primary key (n)');
  const bases = Number((await client.query<{ n: number }>('select count(*)::int as n from bench_bases')).rows[0]!.n);

  const index = (await client.query<{ indexname: string; indexdef: string }>(
    `select indexname, indexdef from pg_indexes where tablename = 'kb_chunks' and (indexdef ilike '%using hnsw%' or indexdef ilike '%using gin%')`,
  )).rows;
  for (const { indexname } of index) await client.query(`drop index ${indexname}`);

  const vocabulary = syntheticVocabulary(options.words);
  const insertStarted = performance.now();
  const firstFile = Number((await client.query<{ n: number }>(`select count(*)::int as n from kb_files where filename like 'synthetic-%'`)).rows[0]!.n) + 1;
  const files = Math.ceil(needed / CHUNKS_PER_FILE);
  for (let from = 0; from < files; from += FILES_PER_STATEMENT) {
    const to = Math.min(files, from + FILES_PER_STATEMENT) - 1;
    await client.query(
      `with numbered as (
         select g, least($3::int, $4::int - g * $3::int) as chunks from generate_series($1::int, $2::int) g
       ), files as (
         insert into kb_files (account_id, filename, mime_type, size_bytes, sha256, blob_key, status, char_count, chunk_count, embedding_model, created_by)
         select $5, 'synthetic-' || lpad((g + $6::int)::text, 6, '0') || '.txt', 'text/plain', 0,
                'synthetic-' || (g + $6::int), 'bench-synthetic/' || gen_random_uuid(), 'ready', 0, chunks, $7, $8
           from numbered
         returning id, chunk_count
       )
       insert into kb_chunks (file_id, account_id, chunk_index, content, embedding, embedding_model)
       select files.id, $5, i,
              -- floor(N^u) for uniform u is k with probability ln((k+1)/k) / ln N: ∝ 1/k, Zipf with exponent 1.
              (select string_agg(($9::text[])[floor(power($10::float8, random()))::int], ' ')
                 from generate_series(1, 110 + (i * 7) % 41)),
              l2_normalize(b.embedding + (select array_agg((random() - 0.5) * $11::float8)::vector from generate_series(1, 512 + 0 * i))),
              $7
         from files
        cross join lateral generate_series(0, files.chunk_count - 1) i
         join bench_bases b on b.n = mod(abs(hashtext(files.id::text)) + i, $12::int)`,
      [from, to, CHUNKS_PER_FILE, needed, options.accountId, firstFile, template.embedding_model, template.created_by, vocabulary, vocabulary.length, NOISE, bases],
    );
    const inserted = Math.min(needed, (to + 1) * CHUNKS_PER_FILE);
    // A line per 10% is enough to show it moves.
    if (Math.floor((inserted * 10) / needed) > Math.floor(((inserted - FILES_PER_STATEMENT * CHUNKS_PER_FILE) * 10) / needed)) {
      options.progress(`synthetic chunks: ${inserted} of ${needed} inserted`);
    }
  }
  await client.query(
    `insert into kb_attachments (assistant_id, file_id, account_id)
     select $1, id, account_id from kb_files where account_id = $2 on conflict do nothing`,
    [options.assistantId, options.accountId],
  );
  const insertSeconds = (performance.now() - insertStarted) / 1000;

  const indexStarted = performance.now();
  await client.query(`set maintenance_work_mem = '${INDEX_BUILD_MEMORY[engine]}'`);
  for (const { indexdef } of index) await client.query(indexdef);
  const indexSeconds = (performance.now() - indexStarted) / 1000;
  await client.query('drop table bench_bases');
  // As after any bulk load: on PostgreSQL autovacuum would otherwise take up the new rows during the measurement.
  for (const table of ['kb_files', 'kb_chunks', 'kb_attachments']) await client.query(`vacuum (analyze) ${table}`);
  return { chunksBefore, chunksAfter: await count(), insertSeconds, indexSeconds };
}
