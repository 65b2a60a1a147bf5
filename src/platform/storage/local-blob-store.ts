import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  BlobNotFoundError,
  InvalidBlobKeyError,
  type BlobStore,
  type PutOptions,
  type SignedUrlOptions,
  type StoredBlob,
} from './blob-store.ts';
import { assertValidBlobKey, encodeBlobKeyPath } from './keys.ts';
import { MeasureStream } from './measure-stream.ts';

export interface LocalBlobStoreOptions {
  root: string;
  /** Public origin (and optional path prefix) the signed URLs point at, e.g. `https://hark.example.com`. */
  baseUrl: string;
  signingKey: Buffer;
  /** Milliseconds since the epoch; injectable so expiry can be tested without waiting. */
  now?: () => number;
}

export type SignedRequestVerification =
  | { ok: true; filename?: string; contentType?: string }
  | { ok: false; reason: 'expired' | 'bad_signature' };

/**
 * Partial uploads are written here and renamed into place. It sits inside the
 * root so the rename stays on one filesystem (and is therefore atomic); keys
 * starting with this segment are refused so they cannot collide with it.
 */
const TEMP_DIR_NAME = '.tmp';

/** Versioned domain tag, so a MAC made for anything else with the same key can never pass as a blob URL. */
const SIGNATURE_CONTEXT = 'hark.blob-url.v1';

const SIGNATURE_HEX = /^[0-9a-f]{64}$/i;
const UNIX_SECONDS = /^\d{1,15}$/;

/** Errors meaning "nothing is stored under this key" (a missing file, or a path through a file or into a directory). */
const ABSENT_CODES = new Set(['ENOENT', 'ENOTDIR', 'EISDIR']);

function isAbsentError(error: unknown): boolean {
  return error instanceof Error && ABSENT_CODES.has((error as NodeJS.ErrnoException).code ?? '');
}

/** Blobs as plain files under a directory, served through signed `/api/blobs/*` URLs. */
export class LocalBlobStore implements BlobStore {
  readonly kind = 'local';
  readonly #root: string;
  /** The root with a trailing separator, for the containment check. */
  readonly #rootPrefix: string;
  readonly #tempDir: string;
  readonly #baseUrl: string;
  readonly #signingKey: Buffer;
  readonly #now: () => number;

  constructor(options: LocalBlobStoreOptions) {
    if (options.signingKey.length < 32) {
      throw new RangeError('signingKey must be at least 32 bytes');
    }
    this.#root = resolve(options.root);
    this.#rootPrefix = this.#root.endsWith(sep) ? this.#root : this.#root + sep;
    this.#tempDir = join(this.#root, TEMP_DIR_NAME);
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.#signingKey = options.signingKey;
    this.#now = options.now ?? Date.now;
  }

  async put(key: string, body: Readable, options: PutOptions): Promise<StoredBlob> {
    let destination: string;
    let measure: MeasureStream;
    try {
      destination = this.#pathFor(key);
      measure = new MeasureStream(options.maxBytes);
    } catch (error) {
      // The caller handed the stream over; leaving it unread could stall them forever.
      body.destroy();
      throw error;
    }

    const tempPath = join(this.#tempDir, randomUUID());
    try {
      await mkdir(this.#tempDir, { recursive: true });
      // `flush` fsyncs before close, so a crash right after the rename cannot leave a truncated blob.
      await pipeline(body, measure, createWriteStream(tempPath, { flags: 'wx', flush: true }));
      await mkdir(dirname(destination), { recursive: true });
      await rename(tempPath, destination);
    } catch (error) {
      body.destroy();
      await rm(tempPath, { force: true });
      throw error;
    }
    return { key, ...measure.measurement() };
  }

  async get(key: string): Promise<Readable> {
    const path = this.#pathFor(key);
    let handle: FileHandle;
    try {
      handle = await open(path, 'r');
    } catch (error) {
      if (isAbsentError(error)) throw new BlobNotFoundError(key);
      throw error;
    }
    try {
      // Opening a directory succeeds on Linux; a key that is only a prefix of other keys is not a blob.
      if (!(await handle.stat()).isFile()) throw new BlobNotFoundError(key);
    } catch (error) {
      await handle.close();
      throw error;
    }
    // Opening eagerly (rather than createReadStream(path)) turns a missing file into a
    // rejected promise here instead of an error event after the caller started streaming.
    return handle.createReadStream();
  }

  async delete(key: string): Promise<void> {
    try {
      await unlink(this.#pathFor(key));
    } catch (error) {
      if (!isAbsentError(error)) throw error;
    }
  }

  async exists(key: string): Promise<boolean> {
    try {
      return (await stat(this.#pathFor(key))).isFile();
    } catch (error) {
      if (isAbsentError(error)) return false;
      throw error;
    }
  }

  async signedUrl(key: string, options: SignedUrlOptions): Promise<string> {
    assertValidBlobKey(key);
    const { expiresInSeconds, filename, contentType } = options;
    if (!Number.isSafeInteger(expiresInSeconds) || expiresInSeconds <= 0) {
      throw new RangeError(`expiresInSeconds must be a positive integer, got ${expiresInSeconds}`);
    }
    const expires = String(Math.floor(this.#now() / 1000) + expiresInSeconds);
    const query = new URLSearchParams({ expires });
    if (filename !== undefined) query.set('filename', filename);
    if (contentType !== undefined) query.set('type', contentType);
    query.set('sig', this.#sign(key, expires, filename, contentType).toString('hex'));
    return `${this.#baseUrl}/api/blobs/${encodeBlobKeyPath(key)}?${query.toString()}`;
  }

  /**
   * Checks the query of a request for a URL made by signedUrl. `key` is the
   * decoded path after `/api/blobs/`. Only the returned filename and content
   * type may be used to build the response: they are the signed ones.
   */
  verifySignedRequest(key: string, query: Record<string, string | undefined>): SignedRequestVerification {
    const { expires, sig, filename, type: contentType } = query;
    // typeof guards against query parsers that turn repeated parameters into arrays.
    if (typeof expires !== 'string' || typeof sig !== 'string' || !UNIX_SECONDS.test(expires) || !SIGNATURE_HEX.test(sig)) {
      return { ok: false, reason: 'bad_signature' };
    }
    const expected = this.#sign(key, expires, filename, contentType);
    // Both are 32 bytes here (the regex fixed the length), which timingSafeEqual requires.
    if (!timingSafeEqual(Buffer.from(sig, 'hex'), expected)) {
      return { ok: false, reason: 'bad_signature' };
    }
    // Expiry is checked only after the signature, so a forged `expires` reads as forged, not as expired.
    if (this.#now() > Number(expires) * 1000) {
      return { ok: false, reason: 'expired' };
    }
    return {
      ok: true,
      ...(filename !== undefined && { filename }),
      ...(contentType !== undefined && { contentType }),
    };
  }

  async close(): Promise<void> {}

  #sign(key: string, expires: string, filename: string | undefined, contentType: string | undefined): Buffer {
    // A JSON array keeps the fields apart whatever characters they hold, and
    // null keeps "no filename" distinct from an empty one.
    const payload = JSON.stringify([SIGNATURE_CONTEXT, key, expires, filename ?? null, contentType ?? null]);
    return createHmac('sha256', this.#signingKey).update(payload, 'utf8').digest();
  }

  #pathFor(key: string): string {
    assertValidBlobKey(key);
    if (key === TEMP_DIR_NAME || key.startsWith(`${TEMP_DIR_NAME}/`)) {
      throw new InvalidBlobKeyError(key);
    }
    const path = resolve(this.#root, key);
    // Validation already rules out escapes; this is the backstop should the rules ever loosen.
    if (!path.startsWith(this.#rootPrefix)) {
      throw new InvalidBlobKeyError(key);
    }
    return path;
  }
}
