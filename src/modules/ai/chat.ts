/**
 * §4.4 `POST /api/llm/chat`: a chat-completion proxy to the LLM upstream for
 * desktop clients. The request is checked and rewritten here (model
 * allow-list, `-proxied` suffix, withheld options); the answer is the
 * upstream's bytes, passed on unparsed, so a streamed completion reaches the
 * client chunk by chunk at the upstream's pace.
 */
import { Transform, type Readable, type TransformCallback } from 'node:stream';
import { AppError, type FieldError } from '../../platform/http/errors.ts';
import { LlmError, type ChatCompletionRequest, type ChatMessage, type LlmProvider } from '../../providers/llm/index.ts';
import { notConfigured } from './service.ts';

/** §4.4 allow-list. A `-proxied` name is sent upstream without that suffix. */
export const CHAT_MODELS = [
  'llm-4.1',
  'llm-4.1-proxied',
  'llm-4o',
  'llm-4o-proxied',
  'llm-4o-mini',
  'llm-4o-mini-proxied',
  'llm-4.1-nano',
  'llm-4.1-nano-proxied',
  'llm-5-nano',
  'llm-5-nano-proxied',
  'llm-4o-mini-transcribe',
] as const;
export type ChatModel = (typeof CHAT_MODELS)[number];

export const CHAT_ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;

/**
 * Options a caller may not set, dropped before the request goes upstream
 * (every other option is forwarded unchanged, §4.4). Each one would act on
 * the operator's provider account rather than on this completion.
 */
export const WITHHELD_OPTIONS: ReadonlyMap<string, string> = new Map([
  ['user', "identifies the end user to the provider's abuse monitoring, which holds the operator's account responsible; a caller must not pick that identity"],
  ['safety_identifier', 'the newer name of `user`, withheld for the same reason'],
  ['store', "would keep the conversation in the operator's provider account, visible to its staff"],
  ['metadata', 'tags stored completions, which are withheld'],
  ['service_tier', 'would change the price the operator pays per token'],
]);

export interface ChatInput {
  model: ChatModel;
  messages: ChatMessage[];
  stream?: boolean;
  temperature?: number;
  [option: string]: unknown;
}

/** What to answer: the upstream body, as it comes. */
export interface ChatReply {
  contentType: string;
  body: Readable;
}

const PROXIED = '-proxied';

export function upstreamModel(model: string): string {
  return model.endsWith(PROXIED) ? model.slice(0, -PROXIED.length) : model;
}

/** The body sent upstream: the caller's, minus withheld options, with the upstream model name and an explicit `stream`. */
export function upstreamRequest(input: ChatInput): ChatCompletionRequest {
  const forwarded: Record<string, unknown> = {};
  for (const [option, value] of Object.entries(input)) {
    if (!WITHHELD_OPTIONS.has(option)) forwarded[option] = value;
  }
  return { ...forwarded, model: upstreamModel(input.model), messages: input.messages, stream: input.stream === true };
}

export class ChatService {
  constructor(private readonly llm: LlmProvider) {}

  /**
   * Resolves once the upstream has answered 2xx, with its body to relay;
   * rejects with the error to answer otherwise. Aborting `signal` (the client
   * went away) closes the upstream request, before or after it answered.
   */
  async complete(input: ChatInput, signal: AbortSignal): Promise<ChatReply> {
    checkContents(input.messages);
    if (!this.llm.configured) throw notConfigured();
    const request = upstreamRequest(input);
    let upstream;
    try {
      upstream = await this.llm.openChatCompletion(request, { signal });
    } catch (error) {
      throw chatError(error);
    }
    if (!request.stream) return { contentType: 'application/json; charset=utf-8', body: upstream.body };
    return { contentType: 'text/event-stream; charset=utf-8', body: relaySse(upstream.body) };
  }
}

/** Each message's content is text, an array of content parts, or null (assistant messages with tool_calls). */
function checkContents(messages: readonly ChatMessage[]): void {
  const details: FieldError[] = [];
  messages.forEach((message, i) => {
    const content: unknown = message.content;
    if (typeof content !== 'string' && !Array.isArray(content) && content !== null) {
      details.push({ field: `messages[${i}].content`, message: 'must be a string, an array of content parts, or null' });
    }
  });
  if (details.length) throw new AppError('validation_failed', `Invalid body: ${details.map((d) => `${d.field} ${d.message}`).join('; ')}`, details);
}

/** The §7 answer for an upstream failure: the caller's fault is 400, the upstream's (or our configuration's) 5xx. */
export function chatError(error: unknown): AppError {
  if (!(error instanceof LlmError)) return new AppError('bad_gateway', 'The model provider could not be used', undefined, { cause: error });
  switch (error.kind) {
    case 'not_configured':
      return notConfigured();
    case 'aborted':
      return new AppError('bad_request', 'The request was cancelled by the client');
    case 'unreachable':
    case 'timeout':
    case 'invalid_response':
      return new AppError('bad_gateway', error.message, undefined, { cause: error });
    case 'http': {
      const status = error.details.status ?? 0;
      // Our key was refused: a server configuration problem, not the caller's.
      if (status === 401 || status === 403) {
        return new AppError('bad_gateway', "The model provider refused this server's credentials (the operator should check LLM_API_KEY)", undefined, { cause: error });
      }
      if (status === 429) {
        const retry = error.details.retryAfterSeconds;
        return new AppError('rate_limited', 'The model provider is limiting requests from this server; try again later', undefined, {
          cause: error,
          headers: retry !== undefined ? { 'retry-after': String(retry) } : undefined,
        });
      }
      if (status >= 400 && status < 500) {
        const detail = error.details.upstreamMessage;
        return new AppError('bad_request', `The model provider rejected the request${detail ? `: ${detail}` : ` (HTTP ${status})`}`);
      }
      return new AppError('bad_gateway', `The model provider failed (HTTP ${status})`, undefined, { cause: error });
    }
  }
}

const DONE_AT_END = /data: ?\[DONE\]\s*$/;
/** Enough of the stream's end to recognise `data: [DONE]` and the line ending before it. */
const TAIL_BYTES = 64;

/**
 * Passes SSE bytes through untouched, remembering only the last few, so that
 * the stream can end with `data: [DONE]` (§6) even when the upstream did not
 * send one. An upstream that breaks off mid-stream gets an OpenAI-style error
 * event instead, and no [DONE]: the client can tell the answer is incomplete.
 */
export class SseRelay extends Transform {
  /** The last chunks, just enough of them to hold TAIL_BYTES (kept by reference: no copy per chunk). */
  private recent: Buffer[] = [];
  private recentBytes = 0;
  private interrupted = false;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.recent.push(chunk);
    this.recentBytes += chunk.length;
    while (this.recent.length > 1 && this.recentBytes - this.recent[0]!.length >= TAIL_BYTES) this.recentBytes -= this.recent.shift()!.length;
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    const tail = this.tail();
    if (!this.interrupted && !DONE_AT_END.test(tail)) this.push(`${separatorAfter(tail)}data: [DONE]\n\n`);
    callback();
  }

  /** Ends the stream with an error event (no [DONE]); a no-op once the client is gone or the stream ended. */
  interrupt(message: string): void {
    if (this.destroyed || this.writableEnded) return;
    this.interrupted = true;
    const event = { error: { message, type: 'upstream_error', code: 'bad_gateway' } };
    this.end(`${separatorAfter(this.tail())}data: ${JSON.stringify(event)}\n\n`);
  }

  private tail(): string {
    return Buffer.concat(this.recent).subarray(-TAIL_BYTES).toString('latin1');
  }
}

/** What must precede a new event so it does not run into a partial line the upstream left. */
function separatorAfter(tail: string): string {
  if (tail === '' || /\r?\n\r?\n$/.test(tail)) return '';
  return /\r?\n$/.test(tail) ? '\n' : '\n\n';
}

/**
 * Pipes the upstream body through an SseRelay. Backpressure runs end to end
 * (client socket ← relay ← upstream socket), and when the relay is destroyed
 * because the client left, the upstream body is destroyed too.
 */
export function relaySse(upstream: Readable): SseRelay {
  const relay = new SseRelay();
  upstream.on('error', (error: Error) => {
    relay.interrupt(error instanceof LlmError && error.kind === 'timeout' ? error.message : "The model provider's stream was interrupted");
  });
  upstream.on('close', () => {
    if (!upstream.readableEnded) relay.interrupt("The model provider's stream was interrupted");
  });
  relay.on('close', () => {
    if (!upstream.readableEnded) upstream.destroy();
  });
  upstream.pipe(relay);
  return relay;
}
