import { Transform, type TransformCallback } from 'node:stream';
import { detectMimeType, type KbMimeType } from './pipeline/parse.ts';

/** How much of the start of a file detectMimeType looks at (the contract asks for at least 8 KiB when the file is that long). */
export const SNIFF_BYTES = 8 * 1024;

export class UnsupportedTypeError extends Error {
  override name = 'UnsupportedTypeError';
  constructor() {
    super('unsupported knowledge-base file type');
  }
}

/**
 * Pass-through on the way to the blob store that detects the file's type
 * from its first SNIFF_BYTES (and its name). Bytes are held back only until
 * the type is known, so the upload still streams; a file of another type
 * fails the stream with UnsupportedTypeError at that point, which stops the
 * write and leaves nothing stored, instead of storing up to 1 GiB first.
 */
export class ContentTypeSniffer extends Transform {
  #head: Buffer[] = [];
  #headLength = 0;
  #type: KbMimeType | undefined;

  constructor(private readonly filename: string) {
    super();
  }

  /** The detected type; known once the stream finished. */
  get mimeType(): KbMimeType {
    if (this.#type === undefined) throw new Error('ContentTypeSniffer.mimeType read before the stream finished');
    return this.#type;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.#type !== undefined) return callback(null, chunk);
    this.#head.push(chunk);
    this.#headLength += chunk.length;
    if (this.#headLength < SNIFF_BYTES) return callback();
    this.#decide(callback);
  }

  override _flush(callback: TransformCallback): void {
    if (this.#type !== undefined) return callback();
    this.#decide(callback);
  }

  #decide(callback: TransformCallback): void {
    const held = Buffer.concat(this.#head);
    this.#head = [];
    const type = detectMimeType(held.subarray(0, SNIFF_BYTES), this.filename);
    if (type === null) return callback(new UnsupportedTypeError());
    this.#type = type;
    callback(null, held);
  }
}
