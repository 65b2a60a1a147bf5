/**
 * The knowledge base end to end, through the public HTTP API with an API key,
 * on PGlite and (when reachable) PostgreSQL. Targets (issue "Knowledge base"):
 *
 * - retrieval quality: recall@6 and MRR of the quality set
 *   (test/fixtures/kb-quality/, whose README gives the relevance rule) for
 *   search mode semantic, keyword and hybrid; hybrid recall@6 ≥ 0.9 with the
 *   default (local) embedder;
 * - ingestion throughput: generated text and a generated PDF, from the start
 *   of the upload until the file is ready;
 * - search latency with 10k and 100k chunks in one workspace, query embedding
 *   included; on PostgreSQL at 100k: p50 ≤ 15 ms, p99 ≤ 50 ms. The chunks
 *   beyond the real ones are synthetic (bench/lib/kb-synthetic.ts says how);
 * - peak RSS growth of the API process while a 1 GiB file is uploaded
 *   (ROLES=serve, so nothing processes it): < 100 MB.
 *
 * Environment (to shorten a run while working on one part):
 *   BENCH_KB_CHUNKS        workspace sizes for the latency table (default 10000,100000)
 *   BENCH_KB_UPLOAD_BYTES  size of the memory-test upload (default 1073741824)
 *   BENCH_KB_SECTIONS      which parts to run, of quality,ingestion,latency,upload (default all)
 *   BENCH_KB_ENGINES       which databases, of pglite,postgres (default both; postgres only when reachable)
 *   BENCH_KB_EMBEDDER      local (default: the offline model) or upstream: EMBEDDINGS_PROVIDER=openai against
 *                          the fake upstream (test/fake-llm-upstream.ts, its own process), which answers at once,
 *                          so the latency table shows the search without the model's time. Its vectors mean
 *                          nothing, so only the latency section runs with it.
 */
import path from 'node:path';
import { ENGINE_LABEL, freshStorage, startFakeLlmUpstream, type Engine, type HarkStorage, benchEngines } from '../lib/hark.ts';
import {
  firstRelevantRank,
  generatedPdf,
  generatedProse,
  loadQualitySet,
  QUESTION_KINDS,
  retrievalScores,
  vocabulary,
  type QualityQuestion,
  type QualitySet,
} from '../lib/kb.ts';
import { KbClient, SEARCH_MODES, type KbFile, type SearchMode } from '../lib/kb-client.ts';
import { grantCredits, growWorkspace, type Growth } from '../lib/kb-synthetic.ts';
import type { DatabaseTarget } from '../../src/platform/db/database.ts';
import { percentile } from '../lib/load.ts';
import { serverSetting } from '../lib/postgres.ts';
import { fmt, type Table } from '../lib/markdown.ts';
import { rssMiB } from '../lib/rss.ts';
import { startServer, type ServerProcess } from '../lib/server.ts';
import { sum } from '../lib/stats.ts';
import type { Suite, SuiteContext } from '../lib/suite.ts';
import { sleep } from '../lib/time.ts';

/** warn: per-request log lines would be part of every latency measured. */
const LOG_LEVEL = 'warn';
const TOP_K = 6;
const TARGET_HYBRID_RECALL = 0.9;
const READY_TIMEOUT_MS = 30 * 60_000;
const INGEST_TEXT_BYTES = 2 ** 20;
const INGEST_PDF_PAGES = 100;
const LATENCY_WARMUP = 30;
/** Queries per mode in the latency table; hybrid (the default, and the target's mode) gets the most. */
const LATENCY_QUERIES: Record<SearchMode, number> = { hybrid: 240, semantic: 120, keyword: 120 };
/** Turns the 68 questions into distinct queries, so no query embedding is ever asked twice (a cache would flatter the numbers). */
const QUERY_PREFIXES = ['', 'Quick question: ', 'Could you tell me: ', 'I need to know: ', 'Hi there. ', 'A customer asks: ', 'Please help: ', 'One more thing: ', 'Hello! '];
/** Other openings, kept out of sight while the query weighting (src/providers/embeddings/local.ts embedQuery) was designed on QUERY_PREFIXES: do its gains carry over? */
const OTHER_OPENINGS = ['Hey, quick one. ', 'Good morning! I have a question. ', 'Sorry to bother you again, but ', 'Hi, this is Anna from accounting. ', 'So my manager asked me to check: ', 'Right, next thing. ', 'Thanks for that. Another one: '];
const TARGET_LATENCY = { chunks: 100_000, p50Ms: 15, p99Ms: 50 };
const RSS_SAMPLE_MS = 100;
const TARGET_RSS_GROWTH_MB = 100;
/** The prose block the big upload repeats: generating a whole GiB would cost the client CPU the server needs. */
const UPLOAD_BLOCK_BYTES = 2 ** 20;
/** Storage credits for the big upload (§8: one per 50 MiB beyond the first 50 MiB), with room to spare. */
const UPLOAD_CREDITS = 100;

const CHUNK_SIZES = (process.env.BENCH_KB_CHUNKS ?? '10000,100000').split(',').map(Number);
const UPLOAD_BYTES = Number(process.env.BENCH_KB_UPLOAD_BYTES ?? 2 ** 30);
const SECTIONS = ['quality', 'ingestion', 'latency', 'upload'] as const;
type Section = (typeof SECTIONS)[number];
const SECTIONS_RUN = new Set((process.env.BENCH_KB_SECTIONS ?? SECTIONS.join(',')).split(',').map((name) => name.trim()));
for (const name of SECTIONS_RUN) {
  if (!SECTIONS.includes(name as Section)) throw new Error(`BENCH_KB_SECTIONS: unknown section ${JSON.stringify(name)} (known: ${SECTIONS.join(', ')})`);
}
const runs = (section: Section) => SECTIONS_RUN.has(section);
const ENGINES_RUN = new Set((process.env.BENCH_KB_ENGINES ?? 'pglite,postgres').split(',').map((name) => name.trim()));
const EMBEDDERS = ['local', 'upstream'] as const;
type EmbedderChoice = (typeof EMBEDDERS)[number];
const EMBEDDER = (process.env.BENCH_KB_EMBEDDER ?? 'local') as EmbedderChoice;
if (!EMBEDDERS.includes(EMBEDDER)) throw new Error(`BENCH_KB_EMBEDDER: unknown embedder ${JSON.stringify(EMBEDDER)} (known: ${EMBEDDERS.join(', ')})`);
if (EMBEDDER === 'upstream' && [...SECTIONS_RUN].some((name) => name !== 'latency')) {
  throw new Error("BENCH_KB_EMBEDDER=upstream measures latency only (the fake upstream's vectors carry no meaning): set BENCH_KB_SECTIONS=latency");
}
const EMBEDDER_LABEL: Record<EmbedderChoice, string> = { local: 'local model', upstream: 'instant upstream' };

interface QualityRow {
  engine: string;
  mode: SearchMode;
  /** First relevant primary rank per question (undefined: none in the top TOP_K). */
  ranks: Map<QualityQuestion, number | undefined>;
}

interface IngestionRow {
  engine: string;
  input: string;
  file: KbFile;
  pages?: number;
  seconds: number;
}

interface LatencyRow {
  engine: string;
  growth: Growth;
  mode: SearchMode;
  latenciesMs: number[];
  /** The server's Server-Timing `embedding` metric per query: how long the query took to embed. */
  embeddingMs: number[];
  /** Each query's first relevant rank among the top_k hits, as in the quality table: does the answer survive 100k other chunks? */
  ranks: Array<number | undefined>;
  /** Queries that found nothing: a sign the synthetic data is not searchable. */
  empty: number;
}

interface MemoryRow {
  engine: string;
  bytes: number;
  seconds: number;
  beforeMiB: number;
  peakMiB: number;
  samples: number;
}

/** The quality set asked again after conversational openings: how much filler costs recall. */
interface PrefixedRow {
  engine: string;
  mode: SearchMode;
  openings: 'bench' | 'other';
  ranks: Array<number | undefined>;
}

interface Results {
  quality: QualityRow[];
  prefixed: PrefixedRow[];
  ingestion: IngestionRow[];
  latency: LatencyRow[];
  memory: MemoryRow[];
}

export const kb: Suite = {
  name: 'kb',
  description: 'knowledge base: recall@6 and MRR per search mode, ingestion throughput, search latency at 10k and 100k chunks, RSS while uploading 1 GiB',
  async run(ctx) {
    const { engines, postgres, skipped } = await benchEngines();
    const set = loadQualitySet(ctx.repoRoot);
    // Search latency on PostgreSQL depends on how much of the indexes its buffer cache holds.
    const postgresCache = postgres && ENGINES_RUN.has('postgres') ? await serverSetting(postgres.adminUrl, 'shared_buffers') : undefined;
    const results: Results = { quality: [], prefixed: [], ingestion: [], latency: [], memory: [] };
    const embedderEnv = EMBEDDER === 'upstream' ? await startEmbeddingsUpstream(ctx) : {};
    for (const engine of engines.filter((candidate) => ENGINES_RUN.has(candidate.kind))) {
      if (runs('quality') || runs('ingestion') || runs('latency')) await measureRetrieval(ctx, engine, set, results, embedderEnv);
      if (runs('upload')) await measureUploadMemory(ctx, engine, results);
    }
    const tables: Array<[Section, Table]> = [
      ['quality', qualityTable(set, results.quality, results.prefixed, skipped)],
      ['ingestion', ingestionTable(results.ingestion, skipped)],
      ['latency', latencyTable(results.latency, postgresCache, skipped)],
      ['upload', memoryTable(results.memory, skipped)],
    ];
    return tables.filter(([section]) => runs(section)).map(([, table]) => table);
  },
};

async function startKbServer(ctx: SuiteContext, storage: HarkStorage, label: string, env: Record<string, string> = {}): Promise<ServerProcess> {
  const server = await startServer({
    label,
    args: ['--import', 'tsx', 'src/main.ts'],
    cwd: ctx.repoRoot,
    env: { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl, LOG_LEVEL, ...env },
    readyPath: '/api/ready',
    logFile: ctx.logFile(label),
  });
  ctx.defer(() => server.stop());
  return server;
}

/** The server settings that make Hark embed through the fake upstream (BENCH_KB_EMBEDDER=upstream). */
async function startEmbeddingsUpstream(ctx: SuiteContext): Promise<Record<string, string>> {
  const fake = await startFakeLlmUpstream(ctx);
  return { EMBEDDINGS_PROVIDER: 'openai', LLM_BASE_URL: `${fake.baseUrl}/v1`, LLM_API_KEY: 'bench-upstream-key' };
}

/** Quality, ingestion and latency share one workspace: its real chunks seed the synthetic ones. */
async function measureRetrieval(ctx: SuiteContext, engine: Engine, set: QualitySet, results: Results, embedderEnv: Record<string, string>): Promise<void> {
  const engineLabel = ENGINE_LABEL[engine.kind];
  const storage = await freshStorage(ctx, engine);
  let server = await startKbServer(ctx, storage, `kb-${engine.kind}`, embedderEnv);
  let client = await KbClient.create(server.baseUrl, engine.kind);

  ctx.progress(`${engineLabel}: uploading the quality set (${set.documents.length} documents)`);
  const uploaded = await Promise.all(set.documents.map((doc) => client.upload(doc.filename, doc.mimeType, doc.bytes)));
  for (const file of uploaded) {
    await client.attach(file.id);
    await client.waitReady(file.id, READY_TIMEOUT_MS);
  }
  for (const mode of runs('quality') ? SEARCH_MODES : []) {
    const ranks = new Map<QualityQuestion, number | undefined>();
    for (const question of set.questions) ranks.set(question, firstRelevantRank(await client.search(question.question, mode, TOP_K), question, TOP_K));
    results.quality.push({ engine: engineLabel, mode, ranks });
    const scores = retrievalScores([...ranks.values()]);
    ctx.progress(`${engineLabel} ${mode}: recall@${TOP_K} ${fmt(scores.recall, 3)}, MRR ${fmt(scores.mrr, 3)}`);
  }
  for (const [openings, prefixes] of runs('quality') ? ([['bench', QUERY_PREFIXES.filter(Boolean)], ['other', OTHER_OPENINGS]] as const) : []) {
    for (const mode of ['semantic', 'hybrid'] as const) {
      const ranks: Array<number | undefined> = [];
      for (const prefix of prefixes) {
        for (const question of set.questions) ranks.push(firstRelevantRank(await client.search(`${prefix}${question.question}`, mode, TOP_K), question, TOP_K));
      }
      results.prefixed.push({ engine: engineLabel, mode, openings, ranks });
      ctx.progress(`${engineLabel} ${mode} after ${openings} openings: recall@${TOP_K} ${fmt(retrievalScores(ranks).recall, 3)}`);
    }
  }

  const vocab = vocabulary(set);
  const inputs = runs('ingestion')
    ? [
        { input: `generated text, ${fmt(INGEST_TEXT_BYTES / 2 ** 20)} MiB`, filename: 'ingest-corpus.txt', mimeType: 'text/plain', bytes: Buffer.from(generatedProse(vocab, INGEST_TEXT_BYTES, 1)) },
        { input: `generated PDF, ${INGEST_PDF_PAGES} pages`, filename: 'ingest-corpus.pdf', mimeType: 'application/pdf', bytes: await generatedPdf(vocab, INGEST_PDF_PAGES, 2), pages: INGEST_PDF_PAGES },
      ]
    : [];
  // In a workspace of their own: the latency table's workspace holds the quality set only whichever sections run (its
  // prose, made of the quality set's words, and the synthetic copies of its chunks would otherwise crowd out the answers).
  const ingester = inputs.length > 0 ? await KbClient.create(server.baseUrl, `${engine.kind}-ingestion`) : undefined;
  // One at a time, so each has the processing workers to itself.
  for (const { input, filename, mimeType, bytes, pages } of inputs) {
    ctx.progress(`${engineLabel}: ingesting ${input}`);
    const startedAt = performance.now();
    const created = await ingester!.upload(filename, mimeType, bytes);
    const file = await ingester!.waitReady(created.id, READY_TIMEOUT_MS);
    const seconds = (performance.now() - startedAt) / 1000;
    results.ingestion.push({ engine: engineLabel, input, file, pages, seconds });
    ctx.progress(`${engineLabel}: ${input}: ${file.chunk_count} chunks ready in ${fmt(seconds, 1)} s`);
  }

  const target = databaseTarget(storage);
  let queryOffset = 0;
  for (const chunks of runs('latency') ? CHUNK_SIZES : []) {
    // PGlite's files belong to one process at a time; PostgreSQL gets the same treatment so both rows mean the same.
    await server.stop();
    ctx.progress(`${engineLabel}: growing the workspace to ${chunks} chunks`);
    const growth = await growWorkspace(target, { accountId: client.accountId, assistantId: client.assistantId, targetChunks: chunks, words: vocab, progress: ctx.progress });
    ctx.progress(`${engineLabel}: ${growth.chunksAfter} chunks (insert ${fmt(growth.insertSeconds)} s, index ${fmt(growth.indexSeconds)} s)`);
    server = await startKbServer(ctx, storage, `kb-${engine.kind}-${chunks}`, embedderEnv);
    client = client.at(server.baseUrl);

    const queries = distinctQueries(set);
    for (let i = 0; i < LATENCY_WARMUP; i++) await client.search(`${queries[i % queries.length]!.text} (warm-up ${chunks})`, 'hybrid', TOP_K);
    const rows = SEARCH_MODES.map((mode): LatencyRow => ({ engine: engineLabel, growth, mode, latenciesMs: [], embeddingMs: [], ranks: [], empty: 0 }));
    // Modes take turns query by query, so drift in the machine's load touches them alike.
    const rounds = Math.max(...Object.values(LATENCY_QUERIES));
    for (let i = 0; i < rounds; i++) {
      for (const row of rows) {
        if (i >= LATENCY_QUERIES[row.mode]) continue;
        const { text, question } = queries[queryOffset++ % queries.length]!;
        const startedAt = performance.now();
        const { hits, embeddingMs } = await client.timedSearch(text, row.mode, TOP_K);
        row.latenciesMs.push(performance.now() - startedAt);
        if (embeddingMs !== undefined) row.embeddingMs.push(embeddingMs);
        row.ranks.push(firstRelevantRank(hits, question, TOP_K));
        if (hits.length === 0) row.empty++;
      }
    }
    for (const row of rows) {
      results.latency.push(row);
      const sorted = Float64Array.from(row.latenciesMs).sort();
      ctx.progress(`${engineLabel} ${growth.chunksAfter} chunks ${row.mode}: p50 ${fmt(percentile(sorted, 50), 1)} ms, p99 ${fmt(percentile(sorted, 99), 1)} ms`);
    }
  }
  await server.stop();
  await storage.release();
}

/** Where the server started on `storage` keeps its database (src/runtime.ts), for the bench to write to while it is stopped. */
function databaseTarget(storage: HarkStorage): DatabaseTarget {
  return storage.databaseUrl ? { kind: 'postgres', url: storage.databaseUrl } : { kind: 'pglite', dir: path.join(storage.dataDir, 'pglite') };
}

function distinctQueries(set: QualitySet): Array<{ text: string; question: QualityQuestion }> {
  return QUERY_PREFIXES.flatMap((prefix) => set.questions.map((question) => ({ text: `${prefix}${question.question}`, question })));
}

/** A server that only serves (ROLES=serve): the upload is stored and stays pending, so only the upload path is measured. */
async function measureUploadMemory(ctx: SuiteContext, engine: Engine, results: Results): Promise<void> {
  const engineLabel = ENGINE_LABEL[engine.kind];
  const storage = await freshStorage(ctx, engine);
  const setup = await startKbServer(ctx, storage, `kb-upload-setup-${engine.kind}`, { ROLES: 'serve' });
  const owner = await KbClient.create(setup.baseUrl, `upload-${engine.kind}`);
  await setup.stop();
  await grantCredits(databaseTarget(storage), owner.accountId, UPLOAD_CREDITS);
  const server = await startKbServer(ctx, storage, `kb-upload-${engine.kind}`, { ROLES: 'serve' });
  const client = owner.at(server.baseUrl);
  // A small upload first, so the upload path's code is loaded before the baseline is read.
  const warmUp = await client.upload('warm-up.txt', 'text/plain', Buffer.from('Kestrel warm-up upload.\n'));
  await client.deleteFile(warmUp.id);
  await sleep(2000);

  const block = Buffer.from(generatedProse(vocabulary(loadQualitySet(ctx.repoRoot)), UPLOAD_BLOCK_BYTES, 3));
  const beforeMiB = rssMiB(server.pid);
  let peakMiB = beforeMiB;
  let samples = 0;
  const sampler = setInterval(() => {
    peakMiB = Math.max(peakMiB, rssMiB(server.pid));
    samples++;
  }, RSS_SAMPLE_MS);
  ctx.progress(`${engineLabel}: uploading ${fmt(UPLOAD_BYTES / 2 ** 20)} MiB (RSS before: ${fmt(beforeMiB)} MiB)`);
  const startedAt = performance.now();
  let file: KbFile;
  try {
    file = await client.uploadStream('one-gibibyte.txt', 'text/plain', UPLOAD_BYTES, (remaining) => block.subarray(0, Math.min(remaining, block.length)));
  } finally {
    clearInterval(sampler);
  }
  const seconds = (performance.now() - startedAt) / 1000;
  peakMiB = Math.max(peakMiB, rssMiB(server.pid));
  if (file.size_bytes !== UPLOAD_BYTES) throw new Error(`the server stored ${file.size_bytes} bytes of ${UPLOAD_BYTES}`);
  await client.deleteFile(file.id);
  results.memory.push({ engine: engineLabel, bytes: UPLOAD_BYTES, seconds, beforeMiB, peakMiB, samples });
  ctx.progress(`${engineLabel}: upload took ${fmt(seconds, 1)} s, RSS peak ${fmt(peakMiB)} MiB (+${fmt(peakMiB - beforeMiB)} MiB)`);
  await server.stop();
  await storage.release();
}

function qualityTable(set: QualitySet, rows: QualityRow[], prefixed: PrefixedRow[], skipped: string[]): Table {
  const counts = Object.fromEntries(QUESTION_KINDS.map((kind) => [kind, set.questions.filter((q) => q.kind === kind).length]));
  const misses = rows
    .filter((row) => row.mode === 'hybrid')
    .map((row) => {
      const missed = [...row.ranks].filter(([, rank]) => rank === undefined).map(([question]) => question.id);
      return `${row.engine} hybrid misses: ${missed.length ? missed.join(', ') : 'none'}.`;
    });
  return {
    title: `Retrieval quality: ${set.questions.length} questions, top_k ${TOP_K}`,
    columns: ['database', 'mode', `recall@${TOP_K}`, 'MRR', `recall@${TOP_K} exact (${counts.exact})`, `recall@${TOP_K} paraphrase (${counts.paraphrase})`, 'target'],
    rows: rows.map((row) => {
      const all = retrievalScores([...row.ranks.values()]);
      const byKind = QUESTION_KINDS.map((kind) => retrievalScores([...row.ranks].filter(([q]) => q.kind === kind).map(([, rank]) => rank)).recall);
      const target = row.mode !== 'hybrid' ? '—' : all.recall >= TARGET_HYBRID_RECALL ? `met (≥ ${TARGET_HYBRID_RECALL})` : `missed (< ${TARGET_HYBRID_RECALL})`;
      return [row.engine, row.mode, fmt(all.recall, 3), fmt(all.mrr, 3), fmt(byKind[0], 3), fmt(byKind[1], 3), target];
    }).concat(prefixed.map((row) => {
      const scores = retrievalScores(row.ranks);
      return [row.engine, `${row.mode}, after ${row.openings === 'bench' ? 'a conversational opening' : 'another opening'}`, fmt(scores.recall, 3), fmt(scores.mrr, 3), '—', '—', '—'];
    })),
    notes: [
      `test/fixtures/kb-quality/: ${set.documents.length} documents (${fmt(sum(set.documents.map((d) => d.bytes.length)) / 1024)} KiB), uploaded through POST /api/kb/files and attached to one assistant; each question asked once per mode through POST /api/kb/search with an API key. Default embedder (EMBEDDINGS_PROVIDER=local).`,
      `A hit is relevant when it is a chunk of the question's document holding the answer passage (whitespace and case normalised), or at least 80% of its words in a row when a chunk boundary split it. Only primary hits count (adjacent: false). MRR over the same ${TOP_K} hits (0 when none is relevant).`,
      'exact: the question names a code, SKU, plan code or number of the passage; paraphrase: the question shares few words with the passage.',
      `"after a conversational opening": every question asked again after each of ${QUERY_PREFIXES.length - 1} openings a caller might say first (${QUERY_PREFIXES.filter(Boolean).map((prefix) => JSON.stringify(prefix.trim())).join(', ')}), ${(QUERY_PREFIXES.length - 1) * set.questions.length} queries per row; the latency table asks these same strings. "after another opening": the same with ${OTHER_OPENINGS.length} openings that were not looked at while the query weighting was designed (${OTHER_OPENINGS.map((prefix) => JSON.stringify(prefix.trim())).join(', ')}).`,
      ...misses,
      ...skipped,
    ],
  };
}

function ingestionTable(rows: IngestionRow[], skipped: string[]): Table {
  return {
    title: 'Ingestion throughput: upload until ready',
    columns: ['database', 'input', 'size (MB)', 'characters extracted', 'chunks', 'seconds to ready', 'MB/s of text', 'PDF pages/s', 'chunks embedded/s'],
    rows: rows.map((row) => [
      row.engine,
      row.input,
      fmt(row.file.size_bytes / 1e6, 2),
      fmt(row.file.char_count ?? undefined),
      fmt(row.file.chunk_count ?? undefined),
      fmt(row.seconds, 1),
      fmt((row.file.char_count ?? Number.NaN) / 1e6 / row.seconds, 3),
      row.pages ? fmt(row.pages / row.seconds, 1) : '—',
      fmt((row.file.chunk_count ?? Number.NaN) / row.seconds, 1),
    ]),
    notes: [
      `One file at a time on a server running both roles (serve, work), LOG_LEVEL=${LOG_LEVEL}, default local embedder. The time runs from the start of the upload until GET /api/kb/files/{id} (polled every 100 ms) first says ready, so it includes queueing, extraction, chunking, embedding and indexing.`,
      'Text: made-up sentences of the quality set\'s vocabulary with a heading every 6 paragraphs. PDF: the same kind of prose drawn with pdf-lib, Helvetica 10 pt, about 3,500 characters a page. MB/s of text counts extracted characters (10^6 per MB).',
      ...skipped,
    ],
  };
}

function latencyTable(rows: LatencyRow[], postgresCache: string | undefined, skipped: string[]): Table {
  return {
    title: 'Search latency: POST /api/kb/search, one workspace, one query at a time (ms)',
    columns: ['database', 'embedder', 'chunks', 'mode', 'queries', 'p50', 'p99', 'mean', 'query embedding p50', `recall@${TOP_K}`, 'empty answers', 'synthetic insert s', 'index build s', 'target'],
    rows: rows.map((row) => {
      const sorted = Float64Array.from(row.latenciesMs).sort();
      const [p50, p99] = [percentile(sorted, 50), percentile(sorted, 99)];
      const embeddingP50 = row.embeddingMs.length > 0 ? percentile(Float64Array.from(row.embeddingMs).sort(), 50) : Number.NaN;
      const targeted = EMBEDDER === 'local' && row.engine === ENGINE_LABEL.postgres && row.mode === 'hybrid' && row.growth.chunksAfter >= TARGET_LATENCY.chunks;
      const met = p50 <= TARGET_LATENCY.p50Ms && p99 <= TARGET_LATENCY.p99Ms;
      return [
        row.engine,
        EMBEDDER_LABEL[EMBEDDER],
        String(row.growth.chunksAfter),
        row.mode,
        String(row.latenciesMs.length),
        fmt(p50, 1),
        fmt(p99, 1),
        fmt(sum(row.latenciesMs) / row.latenciesMs.length, 1),
        fmt(embeddingP50, 1),
        fmt(retrievalScores(row.ranks).recall, 3),
        String(row.empty),
        fmt(row.growth.insertSeconds),
        fmt(row.growth.indexSeconds),
        targeted ? `${met ? 'met' : 'missed'} (p50 ≤ ${TARGET_LATENCY.p50Ms}, p99 ≤ ${TARGET_LATENCY.p99Ms})` : '—',
      ];
    }),
    notes: [
      `From sending the request to the whole answer, in the benchmark process, top_k ${TOP_K}, after ${LATENCY_WARMUP} warm-up queries; every query is a different string (a question of the quality set with one of ${QUERY_PREFIXES.length} prefixes), so each one is embedded by the server. The three modes take turns query by query.`,
      'The workspace holds the quality set (real chunks and embeddings; the ingestion corpus goes to a workspace of its own) plus synthetic chunks inserted straight into the database while the server was stopped: each vector is a real chunk embedding plus noise, renormalised (cosine ≈ 0.8 to it); each text 110 to 150 words with Zipf-like frequencies (probability ∝ 1/rank) over the quality set\'s ~1,200 words mixed with pseudo-words, 20,000 words in all, ranks shuffled, so a query word is in anything from most chunks to a handful (the first version drew words uniformly from the quality vocabulary alone, which put nearly every query word in nearly every chunk, unlike any real library, and made every keyword query rank most of the library); every file ready and attached to the assistant searched. The HNSW and full-text indexes are dropped for the insert and built again after it (the migrations\' definitions, maintenance_work_mem 1 GB on PostgreSQL, 512 MB on PGlite; "index build s"), then the tables are vacuumed and analysed, as after any bulk load: otherwise autovacuum would start on the new rows in the middle of the measurement.',
      `query embedding p50: the server's own measure of how long each query took to embed (its Server-Timing \`embedding\` metric), which runs while the assistant and its files are looked up and the full-text side searches; it is part of the latency, not an addition to it. recall@${TOP_K}: as in the quality table (the answer passage among the first ${TOP_K} primary hits), now among all the workspace's chunks; two things lower it, apart: most of these queries open with conversational filler (the quality table's "after a conversational opening" rows show what that alone costs), and the synthetic chunks are near copies of the real ones (vectors at cosine ≈ 0.8 to them, texts of the same words), far closer rivals than other documents would be.`,
      `embedder: ${EMBEDDER === 'local' ? 'the default offline model (Universal Sentence Encoder lite on ONNX Runtime in a worker thread)' : 'EMBEDDINGS_PROVIDER=openai against the fake upstream on this machine, which answers at once (BENCH_KB_EMBEDDER=upstream): the search without the model\'s time; its recall means nothing'}.`,
      `The target applies on PostgreSQL with ${TARGET_LATENCY.chunks / 1000}k chunks, hybrid mode, query embedding included.`,
      ...(postgresCache
        ? [
            `PostgreSQL: the machine's server as configured, shared_buffers ${postgresCache}; at 100k chunks the HNSW index, the full-text index and the chunk table take about 0.5 GB, so with a smaller cache part of every search reads pages from the operating system's cache.`,
          ]
        : []),
      'recall@6 at 100k also depends on the HNSW graph, which pgvector builds with random levels: on one 100k workspace, four builds of the same index gave semantic recall@6 0.265 to 0.397 over these 612 queries.',
      ...skipped,
    ],
  };
}

function memoryTable(rows: MemoryRow[], skipped: string[]): Table {
  return {
    title: 'API process memory while a 1 GiB file is uploaded (RSS, MiB)',
    columns: ['database', 'upload (MiB)', 'seconds', 'MB/s', 'RSS before', 'RSS peak', 'peak growth', 'target'],
    rows: rows.map((row) => {
      const growthMB = ((row.peakMiB - row.beforeMiB) * 2 ** 20) / 1e6;
      return [
        row.engine,
        fmt(row.bytes / 2 ** 20),
        fmt(row.seconds, 1),
        fmt(row.bytes / 1e6 / row.seconds),
        fmt(row.beforeMiB),
        fmt(row.peakMiB),
        `${fmt(row.peakMiB - row.beforeMiB)} (${fmt(growthMB)} MB)`,
        growthMB < TARGET_RSS_GROWTH_MB ? `met (< ${TARGET_RSS_GROWTH_MB} MB)` : `missed (≥ ${TARGET_RSS_GROWTH_MB} MB)`,
      ];
    }),
    notes: [
      `ROLES=serve (no worker: the file stays pending), LOG_LEVEL=${LOG_LEVEL}, after one small upload and 2 s idle. One multipart POST /api/kb/files with Content-Length, its body produced while it is sent (a 1 MiB block of generated prose repeated), so the client holds no file; the server streams it into its blob directory. The workspace gets 100 storage credits first (a ledger grant written to the database), since a new one cannot pay for 1 GiB; the file is deleted afterwards.`,
      `VmRSS of the server process from /proc/<pid>/status every ${RSS_SAMPLE_MS} ms during the upload; growth = peak − the reading just before it.`,
      ...skipped,
    ],
  };
}
