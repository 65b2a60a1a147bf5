/** The embeddings provider's interface and errors (implementations: local.ts, openai.ts). */

/** The pgvector column is vector(512): every provider answers this many numbers. */
export const EMBEDDING_DIMENSIONS = 512;

export interface Embedder {
  /** Recorded on every chunk; changing it makes reprocess re-embed. e.g. 'use-lite-512-sentence-mean', 'openai:text-embedding-3-small@512' */
  readonly model: string;
  /** Unit-length vectors of EMBEDDING_DIMENSIONS numbers, one per input, same order. */
  embed(texts: string[]): Promise<number[][]>;
  /** The vector a search query is compared with the stored chunks' by; a unit vector like embed()'s. */
  embedQuery(text: string): Promise<number[]>;
  close?(): Promise<void>;
}

/**
 * Why embedding failed. Messages are safe to log and to show as a file's
 * status_error: they never carry the API key or a raw upstream body.
 */
export type EmbeddingsErrorKind =
  /** EMBEDDINGS_PROVIDER=openai without LLM_BASE_URL. */
  | 'not_configured'
  /** No connection to the upstream. */
  | 'unreachable'
  /** The upstream did not answer in time. */
  | 'timeout'
  /** A non-2xx answer; `status` and `upstreamMessage` say more. */
  | 'http'
  /** A 2xx answer that is not the embeddings we asked for. */
  | 'invalid_response'
  /** The local model failed to load or to run. */
  | 'model'
  /** The embedder was closed while the request waited. */
  | 'closed';

export class EmbeddingsError extends Error {
  override name = 'EmbeddingsError';
  constructor(
    readonly kind: EmbeddingsErrorKind,
    message: string,
    readonly details: { status?: number; upstreamMessage?: string } = {},
  ) {
    super(message);
  }
}

/**
 * Scales a vector to length 1 (cosine distance then equals 1 - dot product).
 * An all-zero vector has no direction; it is refused rather than stored as NaNs.
 */
export function toUnitLength(vector: ArrayLike<number>): number[] {
  let sumOfSquares = 0;
  for (let i = 0; i < vector.length; i++) sumOfSquares += vector[i]! * vector[i]!;
  const norm = Math.sqrt(sumOfSquares);
  if (!(norm > 0) || !Number.isFinite(norm)) throw new EmbeddingsError('invalid_response', 'The embedding model returned a zero or non-finite vector');
  return Array.from(vector, (value) => value / norm);
}
