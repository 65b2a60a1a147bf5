import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { BlobTooLargeError } from './blob-store.ts';

export interface Measurement {
  size: number;
  sha256: string;
}

/**
 * Pass-through that counts and hashes bytes on their way to storage, and fails
 * with BlobTooLargeError as soon as more than `maxBytes` have arrived, so an
 * oversized upload is cut off instead of being written in full first.
 *
 * The byte count is deliberately not exposed as `size` or `length`: lib-storage's
 * Upload sniffs those properties on its Body to guess the total length, and a
 * live counter there would make it plan the wrong number of parts.
 */
export class MeasureStream extends Transform {
  readonly maxBytes: number;
  #byteCount = 0;
  #overflowed = false;
  readonly #hash: Hash = createHash('sha256');
  #sha256: string | undefined;

  constructor(maxBytes: number) {
    super();
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) {
      throw new RangeError(`maxBytes must be a non-negative integer, got ${maxBytes}`);
    }
    this.maxBytes = maxBytes;
  }

  /** True once the limit was crossed; stores use it to report the overflow even if cleanup failed differently. */
  get overflowed(): boolean {
    return this.#overflowed;
  }

  get byteCount(): number {
    return this.#byteCount;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#byteCount += chunk.length;
    if (this.#byteCount > this.maxBytes) {
      this.#overflowed = true;
      callback(new BlobTooLargeError(this.maxBytes));
      return;
    }
    this.#hash.update(chunk);
    callback(null, chunk);
  }

  /** Size and digest of everything that passed through; available once the stream finished. */
  measurement(): Measurement {
    if (!this.writableFinished) {
      throw new Error('MeasureStream.measurement() called before the stream finished');
    }
    // Hash#digest may only be called once, and callers may ask more than once.
    this.#sha256 ??= this.#hash.digest('hex');
    return { size: this.#byteCount, sha256: this.#sha256 };
  }
}
