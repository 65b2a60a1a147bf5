import type { AppContext } from '../../platform/context.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { compareVersions } from '../../platform/db/database.ts';
import { isUuid } from '../../platform/ids.ts';
import type { Embedder } from '../../providers/embeddings/index.ts';
import { assistantsService } from '../assistants/service.ts';
import {
  keywordSearch,
  lexemeFrequencies,
  lexemeGroups,
  pgvectorVersion,
  rankedHits,
  searchScopeSummary,
  semanticSearch,
  type ChunkPosition,
  type LexemeFrequencies,
  type SearchScope,
} from './search-queries.ts';
import { vectorLiteral } from './store.ts';

export const SEARCH_MODES = ['hybrid', 'semantic', 'keyword'] as const;
export type SearchMode = (typeof SEARCH_MODES)[number];
export const MAX_QUERY_CHARS = 2000;
export const MAX_TOP_K = 20;
export const DEFAULT_TOP_K = 6;
/** Reciprocal rank fusion constant (Cormack et al.): a hit's score is Σ 1 / (k + rank) over the lists that ranked it. */
export const RRF_K = 60;
/** Each list contributes this many candidates per requested hit to the fusion. */
const CANDIDATES_PER_HIT = 5;
/** How long the lexeme statistics are reused: they change only when ANALYZE runs, and reading them costs a query. */
const LEXEME_FREQUENCIES_TTL_MS = 60_000;
/** Lexeme groups the full-text side tries at most (each ranks about KEYWORD_RANKED_ROWS_BUDGET rows). */
const KEYWORD_GROUPS = 3;

export type SearchReason = 'no_files_attached' | 'no_ready_files' | 'no_matches';
export type MatchType = 'semantic' | 'keyword';

/** §2.5 search hit. */
export interface SearchHit {
  rank: number;
  file_id: string;
  filename: string;
  chunk_index: number;
  page_number: number | null;
  content: string;
  similarity: number;
  match_type: MatchType;
  adjacent: boolean;
}

/**
 * Where a search's time went, for the Server-Timing header: the whole
 * search, and how long the query's embedding took (absent when the search
 * ended before it was needed). The embedding overlaps the lookups and the
 * full-text side, so it is part of `totalMs`, not an addition to it.
 */
export interface SearchTiming {
  totalMs: number;
  embeddingMs?: number;
}

export interface SearchResult {
  hits: SearchHit[];
  reason?: SearchReason;
  timing: SearchTiming;
}

export interface SearchInput {
  assistant_id: string;
  query: string;
  top_k?: number;
  mode?: SearchMode;
  accountSlug?: string;
}

const key = (hit: ChunkPosition) => `${hit.file_id}:${hit.chunk_index}`;

export class KnowledgeBaseSearch {
  private iterativeScan?: Promise<boolean>;
  private frequencies?: { readAt: number; value: Promise<LexemeFrequencies> };

  constructor(
    private readonly ctx: AppContext,
    private readonly embedder: (ctx: AppContext) => Embedder,
  ) {}

  /**
   * POST /api/kb/search over the ready files attached to the assistant. The
   * primary hits come first (rank 1..), then the chunks right before and
   * after each primary that are not hits themselves (`adjacent: true`), in
   * the order of their primaries; ranks number the whole list.
   */
  async search(actor: Actor, input: SearchInput): Promise<SearchResult> {
    if (input.query.trim() === '') {
      throw new AppError('validation_failed', 'Invalid body: query must not be blank', [{ field: 'query', message: 'must not be blank' }]);
    }
    const startedAt = performance.now();
    let embeddingMs: number | undefined;
    const timing = (): SearchTiming => ({ totalMs: performance.now() - startedAt, ...(embeddingMs === undefined ? {} : { embeddingMs }) });
    const embedder = this.embedder(this.ctx);
    // Every mode needs the query's vector (hits carry their similarity), so it is computed from the start, while the
    // assistant and its files are looked up and the full-text side runs (about 5 ms with the local model).
    // A request refused meanwhile leaves it unused.
    // As a pgvector literal, built once for the two statements that read it.
    const queryVector = embedder.embedQuery(input.query).then((vector) => {
      embeddingMs = performance.now() - startedAt;
      return vectorLiteral(vector);
    });
    queryVector.catch(() => {});

    const located = assistantsService(this.ctx).locate(actor, input.assistant_id, input.accountSlug);
    // An id that is no UUID names no assistant: locate answers 404 without asking the database.
    if (!isUuid(input.assistant_id)) await located;
    // The statements below start before locate has answered (they name only the assistant, and nothing they find
    // is used unless it answers), so the assistant check's round trips overlap the search instead of preceding it.
    const db = this.ctx.db.kysely;
    const scope: SearchScope = { assistantId: input.assistant_id };
    const topK = input.top_k ?? DEFAULT_TOP_K;
    const mode = input.mode ?? 'hybrid';
    const candidates = topK * CANDIDATES_PER_HIT;
    const summary = searchScopeSummary(db, scope, input.query);

    // The two lists run side by side, each on its own pooled connection on PostgreSQL (PGlite has one connection,
    // which takes the statements in turn): the full-text side needs no vector, and the semantic side starts as soon as
    // the vector is known, while the full-text side still runs.
    const keywordSide = summary.then(({ chunks, lexemes }) => (mode === 'semantic' || chunks === 0 ? [] : this.keywordSearch(scope, chunks, lexemes, candidates)));
    keywordSide.catch(() => {});
    const semanticSide = Promise.all([queryVector, summary, this.supportsIterativeScan()]).then(([vector, { chunks }, iterativeScan]) =>
      mode === 'keyword' || chunks === 0 ? [] : semanticSearch(db, { ...scope, vector, model: embedder.model, candidateChunks: chunks, limit: candidates, iterativeScan }),
    );
    semanticSide.catch(() => {});

    await located;
    const { attached, ready } = await summary;
    if (attached === 0) return { hits: [], reason: 'no_files_attached', timing: timing() };
    if (ready === 0) return { hits: [], reason: 'no_ready_files', timing: timing() };
    const [vector, semantic, keyword] = await Promise.all([queryVector, semanticSide, keywordSide]);
    // Fusion and the hits' text (and their similarity, which every mode reports) in one statement.
    const rows = semantic.length + keyword.length === 0 ? [] : await rankedHits(db, { vector, semantic, keyword, topK, rrfK: RRF_K });
    if (rows.length === 0) return { hits: [], reason: 'no_matches', timing: timing() };
    const hits = rows.map(
      (row, i): SearchHit => ({
        rank: i + 1,
        file_id: row.file_id,
        filename: row.filename,
        chunk_index: row.chunk_index,
        page_number: row.page_number,
        content: row.content,
        similarity: Number(row.similarity),
        match_type: row.semantic ? 'semantic' : 'keyword',
        adjacent: row.adjacent,
      }),
    );
    return { hits, timing: timing() };
  }

  /**
   * Full-text candidates: the chunks holding the rarest lexemes first, then
   * those holding the next group while fewer than `limit` were found
   * (search-queries.ts lexemeGroups), at most KEYWORD_GROUPS groups, so the
   * rows ranked stay bounded whatever the query; each group's chunks ranked
   * by all the query's lexemes.
   */
  private async keywordSearch(scope: SearchScope, candidateChunks: number, lexemes: string[], limit: number): Promise<ChunkPosition[]> {
    const frequencies = await this.lexemeFrequencies();
    const hits = new Map<string, ChunkPosition>();
    for (const group of lexemeGroups(lexemes, frequencies, candidateChunks).slice(0, KEYWORD_GROUPS)) {
      for (const hit of await keywordSearch(this.ctx.db.kysely, { ...scope, match: group, rank: lexemes, limit })) if (!hits.has(key(hit))) hits.set(key(hit), hit);
      if (hits.size >= limit) break;
    }
    return [...hits.values()].slice(0, limit);
  }

  private lexemeFrequencies(): Promise<LexemeFrequencies> {
    const now = Date.now();
    if (!this.frequencies || now - this.frequencies.readAt > LEXEME_FREQUENCIES_TTL_MS) {
      const value = lexemeFrequencies(this.ctx.db.kysely);
      // A failed read is not kept: the next search asks again.
      value.catch(() => {
        if (this.frequencies?.value === value) this.frequencies = undefined;
      });
      this.frequencies = { readAt: now, value };
    }
    return this.frequencies.value;
  }

  /** pgvector ≥ 0.8 (iterative index scans), read once; a failed read is not kept: the next search asks again. */
  private supportsIterativeScan(): Promise<boolean> {
    if (!this.iterativeScan) {
      const read = pgvectorVersion(this.ctx.db.kysely).then((version) => compareVersions(version, '0.8.0') >= 0);
      read.catch(() => {
        if (this.iterativeScan === read) this.iterativeScan = undefined;
      });
      this.iterativeScan = read;
    }
    return this.iterativeScan;
  }
}
