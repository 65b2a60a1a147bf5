/**
 * An OpenAI-compatible chat-completions client on node:http(s).
 *
 * Plain node:http rather than fetch: the chat proxy hands the upstream body
 * to its client as a Node stream with backpressure, and an IncomingMessage is
 * one already (fetch would add a web-stream conversion per chunk). Connections
 * are kept alive, so a proxied request does not pay a TCP (and TLS) handshake.
 */
import http, { type IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import https from 'node:https';
import { VERSION } from '../../version.ts';
import {
  LlmError,
  type ChatCompletion,
  type ChatCompletionRequest,
  type LlmCallOptions,
  type LlmProvider,
  type UpstreamResponse,
} from './types.ts';

export interface LlmTimeouts {
  /** Establishing a new connection (TCP and TLS). */
  connectMs: number;
  /**
   * From sending the request to the answer's headers. Long: a non-streaming
   * completion answers only once the whole text is generated.
   */
  responseMs: number;
  /** Longest silence while the body arrives (between two streamed chunks, say). */
  idleMs: number;
}

export const DEFAULT_LLM_TIMEOUTS: LlmTimeouts = { connectMs: 10_000, responseMs: 180_000, idleMs: 60_000 };

/** Error bodies are read this far for their message, never further. */
const ERROR_BODY_LIMIT = 64 * 1024;
/** A parsed (non-streaming) completion larger than this is refused rather than buffered. */
const COMPLETION_BODY_LIMIT = 8 * 1024 * 1024;
const MESSAGE_LIMIT = 300;

/** Network failures that mean "could not reach the upstream" (as opposed to a bug of ours). */
const RESET_CODES = new Set(['ECONNRESET', 'EPIPE']);

export class OpenAiCompatibleLlm implements LlmProvider {
  /** Where completions are requested, as http.request options (worked out once, not per request). */
  private readonly endpoint?: { protocol: string; hostname: string; port: string; path: string };
  private readonly transport: typeof http | typeof https;
  private readonly agent: http.Agent;
  private readonly apiKey?: string;

  constructor(
    settings: { baseUrl?: string; apiKey?: string },
    private readonly timeouts: LlmTimeouts = DEFAULT_LLM_TIMEOUTS,
  ) {
    // config.ts has already checked the URL and dropped trailing slashes.
    const url = settings.baseUrl ? new URL(`${settings.baseUrl}/chat/completions`) : undefined;
    // Brackets off an IPv6 host: http.request wants the bare address.
    this.endpoint = url && { protocol: url.protocol, hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: url.port, path: `${url.pathname}${url.search}` };
    this.apiKey = settings.apiKey;
    const secure = this.endpoint?.protocol === 'https:';
    this.transport = secure ? https : http;
    // lifo: the most recently used connection is the least likely to have been closed by the upstream meanwhile.
    const agentOptions = { keepAlive: true, scheduling: 'lifo' as const };
    this.agent = secure ? new https.Agent(agentOptions) : new http.Agent(agentOptions);
  }

  get configured(): boolean {
    return this.endpoint !== undefined;
  }

  close(): void {
    this.agent.destroy();
  }

  async openChatCompletion(body: ChatCompletionRequest, options: LlmCallOptions = {}): Promise<UpstreamResponse> {
    const stream = body.stream === true;
    const res = await this.post(Buffer.from(JSON.stringify(body)), stream ? 'text/event-stream' : 'application/json', options.signal);
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      const text = await readUpTo(res, ERROR_BODY_LIMIT).then((read) => read.text, () => '');
      throw new LlmError('http', `The model provider answered HTTP ${status}`, {
        status,
        upstreamMessage: errorMessageOf(text, this.apiKey),
        retryAfterSeconds: retryAfter(res.headers['retry-after']),
      });
    }
    // A web page here almost always means LLM_BASE_URL points at the wrong address.
    const type = res.headers['content-type'];
    const expected = stream ? 'event-stream' : 'json';
    if (type !== undefined && !type.toLowerCase().includes(expected)) {
      res.destroy();
      throw new LlmError('invalid_response', `The model provider answered ${type.split(';')[0]} instead of ${stream ? 'text/event-stream' : 'JSON'}; check LLM_BASE_URL`);
    }
    return { status, headers: res.headers, body: res };
  }

  async chatCompletion(body: ChatCompletionRequest, options: LlmCallOptions = {}): Promise<ChatCompletion> {
    const { body: res } = await this.openChatCompletion({ ...body, stream: false }, options);
    const read = await readUpTo(res, COMPLETION_BODY_LIMIT).catch((error: unknown) => {
      throw classify(error, options.signal);
    });
    if (read.truncated) throw new LlmError('invalid_response', `The model provider's answer is larger than ${COMPLETION_BODY_LIMIT} bytes`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(read.text);
    } catch {
      throw new LlmError('invalid_response', "The model provider's answer is not valid JSON");
    }
    if (!isCompletion(parsed)) throw new LlmError('invalid_response', "The model provider's answer is not a chat completion");
    return parsed;
  }

  /**
   * Sends one request and resolves with the answer once its headers are in,
   * whatever the status. A request that went out on a kept-alive connection
   * the upstream had just closed is retried once on a new one: it never
   * reached the upstream, so sending it again cannot run it twice.
   */
  private post(payload: Buffer, accept: string, signal: AbortSignal | undefined, retried = false): Promise<IncomingMessage> {
    const endpoint = this.endpoint;
    if (!endpoint) return Promise.reject(new LlmError('not_configured', 'LLM_BASE_URL is not set'));
    if (signal?.aborted) return Promise.reject(new LlmError('aborted', 'The request was cancelled'));
    const headers: http.OutgoingHttpHeaders = {
      'content-type': 'application/json',
      'content-length': payload.length,
      accept,
      // The body is relayed byte for byte, so it must not arrive compressed.
      'accept-encoding': 'identity',
      'user-agent': `hark/${VERSION}`,
    };
    // Only our own key goes upstream: the caller's credentials never leave Hark.
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    const { connectMs, responseMs, idleMs } = this.timeouts;

    return new Promise((resolve, reject) => {
      const req = this.transport.request({ ...endpoint, method: 'POST', agent: this.agent, headers, signal });
      let answered = false;
      const responseTimer = setTimeout(
        () => req.destroy(new LlmError('timeout', `The model provider did not answer within ${Math.round(responseMs / 1000)} s`)),
        responseMs,
      );
      req.on('socket', (socket) => {
        socket.setNoDelay(true);
        if (!socket.connecting) return;
        const connectTimer = setTimeout(
          () => req.destroy(new LlmError('unreachable', `The model provider could not be reached (no connection within ${Math.round(connectMs / 1000)} s)`)),
          connectMs,
        );
        const clear = () => clearTimeout(connectTimer);
        socket.once('connect', clear);
        socket.once('close', clear);
      });
      req.on('error', (error: NodeJS.ErrnoException) => {
        clearTimeout(responseTimer);
        // Once answered, failures surface on the response body instead.
        if (answered) return;
        if (!retried && req.reusedSocket && RESET_CODES.has(error.code ?? '') && !signal?.aborted) {
          resolve(this.post(payload, accept, signal, true));
          return;
        }
        reject(classify(error, signal));
      });
      req.on('response', (res) => {
        answered = true;
        clearTimeout(responseTimer);
        // Whoever reads the body attaches its own error handling; until then a
        // failure (the caller aborting, say) must not become an uncaught error.
        res.on('error', () => {});
        res.setTimeout(idleMs, () => res.destroy(new LlmError('timeout', `The model provider sent nothing for ${Math.round(idleMs / 1000)} s`)));
        resolve(res);
      });
      req.end(payload);
    });
  }
}

/** Reads a body up to `limit` bytes; a longer one is cut (and its connection closed) rather than buffered whole. */
async function readUpTo(res: Readable, limit: number): Promise<{ text: string; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      chunks.push(chunk.subarray(0, chunk.length - (size - limit)));
      res.destroy();
      return { text: Buffer.concat(chunks).toString('utf8'), truncated: true };
    }
    chunks.push(chunk);
  }
  return { text: Buffer.concat(chunks).toString('utf8'), truncated: false };
}

function classify(error: unknown, signal: AbortSignal | undefined): LlmError {
  if (error instanceof LlmError) return error;
  if (signal?.aborted || (error as Error)?.name === 'AbortError') return new LlmError('aborted', 'The request was cancelled');
  const code = (error as NodeJS.ErrnoException)?.code;
  return new LlmError('unreachable', `The model provider could not be reached${code ? ` (${code})` : ''}`);
}

/**
 * The human-readable message of an OpenAI-style error body (`{error:
 * {message}}`, `{error: "..."}` or `{message}`), sanitised; undefined for
 * anything else, so a raw body (an HTML page, a stack trace) never travels on.
 */
export function errorMessageOf(text: string, apiKey: string | undefined): string | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof body !== 'object' || body === null) return undefined;
  const { error, message } = body as { error?: unknown; message?: unknown };
  const found =
    typeof error === 'object' && error !== null && typeof (error as { message?: unknown }).message === 'string'
      ? (error as { message: string }).message
      : typeof error === 'string'
        ? error
        : typeof message === 'string'
          ? message
          : undefined;
  if (found === undefined) return undefined;
  const clean = sanitizeUpstreamMessage(found, apiKey ? [apiKey] : []);
  return clean || undefined;
}

/**
 * Makes an upstream's error message fit to show a client: no credentials
 * (ours, echoed back in "Incorrect API key provided: sk-...", or any other
 * key-looking token), no control characters, at most 300 characters.
 */
export function sanitizeUpstreamMessage(raw: string, secrets: readonly string[] = []): string {
  let text = raw;
  for (const secret of secrets) if (secret) text = text.split(secret).join('[redacted]');
  text = text
    .replace(/\b(?:sk|pk|rk|svc_live|svc_test)[-_][A-Za-z0-9*._-]{4,}/g, '[redacted]')
    .replace(/\bBearer\s+\S+/gi, 'Bearer [redacted]')
    // eslint-disable-next-line no-control-regex -- stripping control characters is the point
    .replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return text.length > MESSAGE_LIMIT ? `${text.slice(0, MESSAGE_LIMIT - 1)}…` : text;
}

function retryAfter(header: string | undefined): number | undefined {
  if (header === undefined || !/^\d{1,6}$/.test(header.trim())) return undefined;
  return Number(header.trim());
}

function isCompletion(value: unknown): value is ChatCompletion {
  if (typeof value !== 'object' || value === null) return false;
  const choices = (value as { choices?: unknown }).choices;
  return Array.isArray(choices) && choices.every((c) => typeof c === 'object' && c !== null && typeof (c as { message?: unknown }).message === 'object');
}
