import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { finished, PassThrough, type Readable } from 'node:stream';
import { AppError } from './errors.ts';

/**
 * What upload routes share: the multipart parser with per-route limits, the
 * request's parts as a stream of fields and files in arrival order, and
 * error answers that reach the client.
 *
 * An upload refused part-way (file over the limit, wrong type, no access) is
 * decided while the client is still sending. The parser then stops reading
 * the request, so the unread bytes pile up in the socket. If the connection
 * is closed with them unread (Node closes it right after the answer when the
 * client sent `Connection: close`; otherwise the keep-alive timeout or a
 * shutdown does), the kernel answers the arriving bytes with a TCP RST, and
 * a client that had not read the answer yet sees "connection reset" instead
 * of the 400. So before an answer is sent, whatever the client is still
 * sending is read and thrown away: by the time the answer goes out the
 * request is complete, and the connection can be closed or reused safely.
 * Draining is bounded (DRAIN_LIMITS): past it the answer is sent with
 * `Connection: close` and the client may see a reset, its own doing.
 */

export interface MultipartLimits {
  /** Bytes per file part; past it busboy truncates the part (set it above the route's own limit so the route decides). */
  fileSize: number;
  files: number;
  fields: number;
  fieldSize: number;
  parts: number;
  headerPairs?: number;
}

/** One part of a multipart body, in the order the client sent it. A file part's stream must be read to its end (or destroyed) before the next part arrives. */
export type MultipartPart =
  | { kind: 'field'; name: string; value: string; truncated: boolean }
  | { kind: 'file'; field: string; filename: string; mimetype: string; stream: Readable };

/**
 * The name of an upload's file, from the first part of the field `file` that
 * has one: browsers may send a path (old IE) and any name, so only its last
 * segment counts. Any other part (another field's file, a second file, a
 * form's file input left empty, which is sent with an empty name) is drained
 * and gives undefined: the caller skips it.
 */
export function uploadedFileName(part: Extract<MultipartPart, { kind: 'file' }>, alreadyHaveOne: boolean): string | undefined {
  const filename = part.filename.split(/[/\\]/).pop()!.trim();
  if (part.field === 'file' && !alreadyHaveOne && filename !== '') return filename;
  part.stream.resume();
  return undefined;
}

/** How long and how much of an unread request body is discarded before an answer goes out. */
export const DRAIN_LIMITS = { maxBytes: 1024 * 1024 * 1024, maxMs: 30_000 };

/**
 * Reads and discards the rest of the request body. Resolves true once the
 * request is complete (at once when it already was), false when the client
 * went away or kept sending past the limits.
 */
export function drainUnreadBody(request: FastifyRequest, limits = DRAIN_LIMITS): Promise<boolean> {
  const raw = request.raw;
  // readableEnded as well: injected requests (tests) are plain streams without `complete`.
  if (raw.complete || raw.readableEnded) return Promise.resolve(true);
  if (raw.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    let drained = 0;
    const finish = (complete: boolean) => {
      clearTimeout(timer);
      raw.off('data', count);
      raw.off('end', ended);
      raw.off('close', closed);
      if (!complete) raw.pause();
      resolve(complete);
    };
    const count = (chunk: Buffer) => {
      drained += chunk.length;
      if (drained > limits.maxBytes) finish(false);
    };
    const ended = () => finish(true);
    const closed = () => finish(raw.complete || raw.readableEnded);
    const timer = setTimeout(() => finish(false), limits.maxMs);
    raw.on('data', count);
    raw.once('end', ended);
    raw.once('close', closed);
    // The parser may still be attached to a part nobody reads; detach it so the bytes flow here.
    raw.unpipe();
    raw.resume();
  });
}

/**
 * Registers the multipart parser with `limits` in `scope` (an encapsulated
 * plugin, so the limits apply to its routes only), and holds every answer of
 * those routes until the request body has been read to its end.
 */
export async function registerMultipart(scope: FastifyInstance, limits: MultipartLimits): Promise<void> {
  await scope.register(multipart, { limits: { headerPairs: 50, ...limits } });
  scope.addHook('onSend', async (request, reply, payload) => {
    if (!(await drainUnreadBody(request))) reply.header('connection', 'close');
    return payload;
  });
}

/**
 * A file part's stream whose errors pass through `mapError` too: a body that
 * ends inside a file part (a client that stopped sending) fails the file's
 * stream, not the iteration, and would otherwise reach the route as an
 * unknown error, a 500. Destroying the returned stream destroys the part's.
 */
function mappedFileStream(file: Readable, mapError: (error: unknown) => unknown): Readable {
  // As @fastify/multipart does for the part itself: a part the route skips
  // (resume()) must not crash the process when the body ends inside it; a
  // consumer that reads it (pipeline, for await) still gets the error.
  const out = new PassThrough().on('error', () => {});
  // finished(), not an 'error' listener: the parser may have failed the part before it is handed over.
  finished(file, (error) => {
    if (!error) return;
    const mapped = mapError(error);
    out.destroy(mapped instanceof Error ? mapped : new Error(String(mapped)));
  });
  out.once('close', () => {
    if (!file.readableEnded && !file.destroyed) file.destroy();
  });
  return file.pipe(out);
}

/**
 * The request's parts in arrival order. Errors of the parser (limits,
 * malformed bodies), in the iteration and in file streams alike, pass
 * through `mapError`, which turns them into the route's own client errors.
 */
export async function* multipartParts(request: FastifyRequest, mapError: (error: unknown) => unknown): AsyncGenerator<MultipartPart> {
  try {
    for await (const part of request.parts()) {
      if (part.type === 'file') {
        // busboy reports `filename=""` (a form with no file chosen) as no name at all, despite the typings.
        const filename = (part.filename as string | undefined) ?? '';
        yield { kind: 'file', field: part.fieldname, filename, mimetype: part.mimetype, stream: mappedFileStream(part.file, mapError) };
      } else {
        yield { kind: 'field', name: part.fieldname, value: String(part.value), truncated: part.valueTruncated };
      }
    }
  } catch (error) {
    throw mapError(error);
  }
}

/**
 * @fastify/multipart's errors as client errors, for multipartParts: a body
 * over the size limit answers the route's `tooLarge()`, too many parts or
 * fields say `tooManyFields` (which fields to send), and anything else the
 * parser raises comes from a malformed body. An AppError thrown by the
 * route's own code while reading the parts passes through unchanged.
 */
export function multipartErrors(messages: { tooLarge: () => AppError; tooManyFields: string }): (error: unknown) => unknown {
  return (error) => {
    if (error instanceof AppError) return error;
    switch ((error as { code?: string } | null)?.code) {
      case 'FST_REQ_FILE_TOO_LARGE':
        return messages.tooLarge();
      case 'FST_FILES_LIMIT':
        return new AppError('bad_request', 'Send one file per request, in the field "file"');
      case 'FST_FIELDS_LIMIT':
      case 'FST_PARTS_LIMIT':
        return new AppError('bad_request', messages.tooManyFields);
      default:
        return new AppError('bad_request', `The multipart body could not be read: ${(error as Error).message}`, undefined, { cause: error });
    }
  };
}
