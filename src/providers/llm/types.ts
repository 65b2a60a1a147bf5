/** The language-model upstream's interface and errors (implementations: openai-compatible.ts). */
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';

/** One chat message as OpenAI-compatible APIs take it; extra fields (name, tool_calls, ...) pass through. */
export interface ChatMessage {
  role: string;
  content: string | readonly unknown[] | null;
  [field: string]: unknown;
}

/** A chat-completion request body; every option besides these is forwarded as given. */
export interface ChatCompletionRequest {
  model: string;
  messages: readonly ChatMessage[];
  stream?: boolean;
  temperature?: number;
  [option: string]: unknown;
}

/** §2.4, as far as Hark reads it; the upstream's JSON may carry more. */
export interface ChatCompletion {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{ index: number; message: { role: string; content: string | null }; finish_reason: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** A 2xx answer whose body has not been read: the caller streams it on, byte for byte. */
export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The raw body. Destroying it (or aborting the request's signal) closes the upstream request. */
  body: Readable;
}

export interface LlmCallOptions {
  /** Aborting it closes the upstream connection at once (the caller went away). */
  signal?: AbortSignal;
}

/**
 * Why a call failed. Messages are safe to log and to show: they never carry
 * upstream bodies or the API key (an upstream error message is sanitised
 * and truncated first, see `upstreamMessage`).
 */
export type LlmErrorKind =
  /** LLM_BASE_URL is not set. */
  | 'not_configured'
  /** No connection, connection refused or reset before an answer. */
  | 'unreachable'
  /** No answer (headers) in time, or the body stalled. */
  | 'timeout'
  /** A non-2xx answer; `status` and `upstreamMessage` say more. */
  | 'http'
  /** A 2xx answer that is not what an OpenAI-compatible API sends. */
  | 'invalid_response'
  /** Our caller aborted (the client disconnected). */
  | 'aborted';

export class LlmError extends Error {
  override name = 'LlmError';
  constructor(
    readonly kind: LlmErrorKind,
    message: string,
    readonly details: { status?: number; upstreamMessage?: string; retryAfterSeconds?: number } = {},
  ) {
    super(message);
  }
}

export interface LlmProvider {
  /** False until LLM_BASE_URL is set: every call then fails with kind `not_configured`. */
  readonly configured: boolean;
  /**
   * POSTs a chat-completion request and resolves once a 2xx answer's headers
   * arrived, leaving its body unread. Non-2xx answers reject with kind `http`.
   */
  openChatCompletion(body: ChatCompletionRequest, options?: LlmCallOptions): Promise<UpstreamResponse>;
  /** A non-streaming completion, parsed. */
  chatCompletion(body: ChatCompletionRequest, options?: LlmCallOptions): Promise<ChatCompletion>;
  /** Closes idle keep-alive connections. */
  close(): void;
}
