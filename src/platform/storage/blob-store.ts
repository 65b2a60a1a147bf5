import type { Logger } from 'pino';
import type { Readable } from 'node:stream';

/** What a finished write reports: the bytes actually stored and their digest, computed while streaming. */
export interface StoredBlob {
  key: string;
  size: number;
  sha256: string; // lowercase hex
}

export interface PutOptions {
  /** Writing stops with BlobTooLargeError once more than this many bytes have arrived; nothing is left behind. */
  maxBytes: number;
  contentType?: string;
}

export interface SignedUrlOptions {
  expiresInSeconds: number;
  /** Suggested download name (Content-Disposition: attachment). */
  filename?: string;
  contentType?: string;
}

/**
 * Where uploaded bytes live. Keys are relative paths chosen by the caller
 * (for example `accounts/<uuid>/kb/<uuid>`); implementations never trust them
 * to stay inside their root and reject `..`, absolute paths and empty segments.
 */
export interface BlobStore {
  readonly kind: 'local' | 's3';
  put(key: string, body: Readable, options: PutOptions): Promise<StoredBlob>;
  /** Streams the bytes; throws BlobNotFoundError when the key does not exist. */
  get(key: string): Promise<Readable>;
  /** Idempotent: deleting a missing key is not an error. */
  delete(key: string): Promise<void>;
  exists(key: string): Promise<boolean>;
  /** A URL that serves the bytes without other credentials until it expires. */
  signedUrl(key: string, options: SignedUrlOptions): Promise<string>;
  close(): Promise<void>;
}

export class BlobTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`blob exceeds the limit of ${maxBytes} bytes`);
    this.name = 'BlobTooLargeError';
  }
}

export class BlobNotFoundError extends Error {
  constructor(readonly key: string) {
    super('blob not found');
    this.name = 'BlobNotFoundError';
  }
}

export class InvalidBlobKeyError extends Error {
  constructor(readonly key: string) {
    super('invalid blob key');
    this.name = 'InvalidBlobKeyError';
  }
}

/**
 * Deletes the blob of an upload that was refused or turned out a duplicate.
 * A failure is logged, not thrown: the request's own answer matters more to
 * the client, and the log line names the orphan for cleanup.
 */
export async function discardBlob(blobs: BlobStore, logger: Logger, key: string, what: string): Promise<void> {
  try {
    await blobs.delete(key);
  } catch (error) {
    logger.error({ err: error, key }, `could not delete the blob of ${what}`);
  }
}
