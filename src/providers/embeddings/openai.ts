/**
 * Embeddings from the OpenAI-compatible upstream (EMBEDDINGS_PROVIDER=openai):
 * POST {LLM_BASE_URL}/embeddings, the same base-URL convention as chat
 * completions (`https://api.openai.com/v1` + `/chat/completions`).
 *
 * text-embedding-3-small is asked for 512 dimensions (`dimensions`), the
 * size of the pgvector column, so both providers fill the same index.
 */
import { errorMessageOf } from '../llm/index.ts';
import { VERSION } from '../../version.ts';
import { EMBEDDING_DIMENSIONS, EmbeddingsError, toUnitLength, type Embedder } from './types.ts';

export const OPENAI_EMBEDDING_MODEL = 'text-embedding-3-small';

export interface OpenAiEmbedderOptions {
  /** Whole request, connection included. */
  timeoutMs?: number;
  /** Inputs per upstream request (OpenAI takes at most 2,048 and 300,000 tokens). */
  maxInputsPerRequest?: number;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_MAX_INPUTS = 256;
/** Error bodies are read this far for their message. */
const ERROR_BODY_LIMIT = 64 * 1024;

interface EmbeddingsResponse {
  data: Array<{ index: number; embedding: number[] }>;
}

export class OpenAiEmbedder implements Embedder {
  readonly model = `openai:${OPENAI_EMBEDDING_MODEL}@${EMBEDDING_DIMENSIONS}`;
  private readonly endpoint?: string;
  private readonly apiKey?: string;
  private readonly timeoutMs: number;
  private readonly maxInputs: number;

  constructor(settings: { baseUrl?: string; apiKey?: string }, options: OpenAiEmbedderOptions = {}) {
    // config.ts has already checked the URL and dropped trailing slashes.
    this.endpoint = settings.baseUrl ? `${settings.baseUrl}/embeddings` : undefined;
    this.apiKey = settings.apiKey;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxInputs = options.maxInputsPerRequest ?? DEFAULT_MAX_INPUTS;
  }

  async embed(texts: string[]): Promise<number[][]> {
    const vectors: number[][] = [];
    for (let start = 0; start < texts.length; start += this.maxInputs) {
      vectors.push(...(await this.request(texts.slice(start, start + this.maxInputs))));
    }
    return vectors;
  }

  /** The model embeds a query as any other text. */
  async embedQuery(text: string): Promise<number[]> {
    const [vector] = await this.request([text]);
    if (!vector) throw new EmbeddingsError('invalid_response', 'The embeddings upstream returned no vector for the query');
    return vector;
  }

  async close(): Promise<void> {
    // fetch keeps no connections of ours to release.
  }

  private async request(input: string[]): Promise<number[][]> {
    if (!this.endpoint) throw new EmbeddingsError('not_configured', 'EMBEDDINGS_PROVIDER=openai needs LLM_BASE_URL');
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json', 'user-agent': `hark/${VERSION}` };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    const body = JSON.stringify({ model: OPENAI_EMBEDDING_MODEL, input, dimensions: EMBEDDING_DIMENSIONS, encoding_format: 'float' });

    let res: Response;
    let text: string;
    try {
      res = await fetch(this.endpoint, { method: 'POST', headers, body, signal: AbortSignal.timeout(this.timeoutMs) });
      text = res.ok ? await res.text() : await readUpTo(res, ERROR_BODY_LIMIT);
    } catch (error) {
      if ((error as Error)?.name === 'TimeoutError') {
        throw new EmbeddingsError('timeout', `The embeddings provider did not answer within ${Math.round(this.timeoutMs / 1000)} s`);
      }
      const code = ((error as Error)?.cause as NodeJS.ErrnoException | undefined)?.code;
      throw new EmbeddingsError('unreachable', `The embeddings provider could not be reached${code ? ` (${code})` : ''}`);
    }

    if (!res.ok) {
      throw new EmbeddingsError('http', `The embeddings provider answered HTTP ${res.status}`, {
        status: res.status,
        upstreamMessage: errorMessageOf(text, this.apiKey),
      });
    }
    return this.vectorsOf(text, input.length);
  }

  private vectorsOf(text: string, count: number): number[][] {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new EmbeddingsError('invalid_response', "The embeddings provider's answer is not JSON; check LLM_BASE_URL");
    }
    if (!isEmbeddingsResponse(parsed) || parsed.data.length !== count) {
      throw new EmbeddingsError('invalid_response', `The embeddings provider's answer does not hold ${count} embeddings`);
    }
    const vectors = new Array<number[]>(count);
    for (const { index, embedding } of parsed.data) {
      if (!Number.isInteger(index) || index < 0 || index >= count || vectors[index]) {
        throw new EmbeddingsError('invalid_response', "The embeddings provider's answer has missing or repeated indexes");
      }
      if (embedding.length !== EMBEDDING_DIMENSIONS) {
        throw new EmbeddingsError(
          'invalid_response',
          `The embeddings provider returned ${embedding.length} dimensions instead of ${EMBEDDING_DIMENSIONS}; its model must accept "dimensions"`,
        );
      }
      vectors[index] = toUnitLength(embedding);
    }
    return vectors;
  }
}

function isEmbeddingsResponse(value: unknown): value is EmbeddingsResponse {
  const data = (value as { data?: unknown } | null)?.data;
  return (
    Array.isArray(data) &&
    data.every(
      (item: { index?: unknown; embedding?: unknown } | null) =>
        typeof item?.index === 'number' && Array.isArray(item.embedding) && item.embedding.every((n) => typeof n === 'number' && Number.isFinite(n)),
    )
  );
}

/** Reads a body up to `limit` bytes; a longer one is cut and its connection closed. */
async function readUpTo(res: Response, limit: number): Promise<string> {
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    chunks.push(chunk);
    size += chunk.length;
    // Leaving the loop cancels the stream, which closes the connection.
    if (size >= limit) break;
  }
  return Buffer.concat(chunks).subarray(0, limit).toString('utf8');
}

