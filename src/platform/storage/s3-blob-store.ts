import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  BlobNotFoundError,
  BlobTooLargeError,
  type BlobStore,
  type PutOptions,
  type SignedUrlOptions,
  type StoredBlob,
} from './blob-store.ts';
import { assertValidBlobKey } from './keys.ts';
import { MeasureStream } from './measure-stream.ts';

export interface S3BlobStoreOptions {
  /** For S3-compatible services (MinIO, R2, s3rver); omit for AWS. */
  endpoint?: string;
  bucket: string;
  region: string;
  /** Omit both to use the SDK's default credential chain (environment, instance role, ...). */
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle?: boolean;
}

/**
 * `attachment` with both an ASCII fallback `filename` and the exact name as
 * RFC 5987 `filename*`, so every client offers a sensible name and modern ones
 * the right one.
 */
export function attachmentContentDisposition(filename: string): string {
  const asciiFallback = filename.replace(/[^\x20-\x7e]|["\\]/g, '_');
  // encodeURIComponent leaves ' ( ) * unescaped, but RFC 5987 attr-chars exclude them.
  const extValue = encodeURIComponent(filename).replace(
    /['()*]/g,
    (char) => `%${char.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `attachment; filename="${asciiFallback}"; filename*=UTF-8''${extValue}`;
}

function isMissingObjectError(error: unknown): boolean {
  if (!(error instanceof S3ServiceException)) return false;
  // GetObject says NoSuchKey; HEAD responses have no body, so the SDK can only say NotFound.
  if (error.name === 'NoSuchKey' || error.name === 'NotFound') return true;
  // A missing bucket is a configuration problem, not a missing blob.
  return error.$metadata.httpStatusCode === 404 && error.name !== 'NoSuchBucket';
}

/** Blobs as objects in one S3 (or S3-compatible) bucket. */
export class S3BlobStore implements BlobStore {
  readonly kind = 's3';
  readonly #client: S3Client;
  readonly #bucket: string;

  constructor(options: S3BlobStoreOptions) {
    const { endpoint, bucket, region, accessKeyId, secretAccessKey, forcePathStyle } = options;
    if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
      throw new Error('accessKeyId and secretAccessKey must be given together');
    }
    this.#bucket = bucket;
    this.#client = new S3Client({
      region,
      ...(endpoint !== undefined && { endpoint }),
      ...(forcePathStyle !== undefined && { forcePathStyle }),
      ...(accessKeyId !== undefined && secretAccessKey !== undefined && { credentials: { accessKeyId, secretAccessKey } }),
    });
  }

  async put(key: string, body: Readable, options: PutOptions): Promise<StoredBlob> {
    let measure: MeasureStream;
    try {
      assertValidBlobKey(key);
      measure = new MeasureStream(options.maxBytes);
    } catch (error) {
      // The caller handed the stream over; leaving it unread could stall them forever.
      body.destroy();
      throw error;
    }

    const piping = pipeline(body, measure);
    const upload = new Upload({
      client: this.#client,
      params: {
        Bucket: this.#bucket,
        Key: key,
        Body: measure,
        ...(options.contentType !== undefined && { ContentType: options.contentType }),
      },
    });
    // Overflow is signalled by failing the measured stream, not by upload.abort().
    // abort() only makes done() reject at once; the AbortMultipartUpload request is
    // sent later, if ever (not at all while its readers still wait on the Body),
    // and its failure goes unobserved. A failing Body instead makes done() wait for
    // in-flight parts and abort the multipart upload before it rejects.
    // lib-storage stops reading when a request fails but does not promise to
    // release its Body; destroying it then releases the source and settles `piping`.
    const uploading = upload.done().catch((error: unknown) => {
      measure.destroy();
      throw error;
    });
    const [uploaded, piped] = await Promise.allSettled([uploading, piping]);

    if (measure.overflowed) {
      // Reported even when the abort request itself failed (done() then rejects
      // with that error): the caller's problem is the size, and an unfinished
      // multipart upload is never visible as an object.
      throw new BlobTooLargeError(measure.maxBytes);
    }
    if (uploaded.status === 'rejected') throw uploaded.reason;
    if (piped.status === 'rejected') throw piped.reason;
    return { key, ...measure.measurement() };
  }

  async get(key: string): Promise<Readable> {
    assertValidBlobKey(key);
    let body: unknown;
    try {
      ({ Body: body } = await this.#client.send(new GetObjectCommand({ Bucket: this.#bucket, Key: key })));
    } catch (error) {
      if (isMissingObjectError(error)) throw new BlobNotFoundError(key);
      throw error;
    }
    // In Node the SDK's HTTP handler always yields an IncomingMessage here.
    if (!(body instanceof Readable)) {
      throw new Error('S3 GetObject returned a non-stream body');
    }
    return body;
  }

  async delete(key: string): Promise<void> {
    assertValidBlobKey(key);
    // S3 answers 204 for missing keys too, which is exactly the idempotence wanted.
    await this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: key }));
  }

  async exists(key: string): Promise<boolean> {
    assertValidBlobKey(key);
    try {
      await this.#client.send(new HeadObjectCommand({ Bucket: this.#bucket, Key: key }));
      return true;
    } catch (error) {
      if (isMissingObjectError(error)) return false;
      throw error;
    }
  }

  async signedUrl(key: string, options: SignedUrlOptions): Promise<string> {
    assertValidBlobKey(key);
    const { expiresInSeconds, filename, contentType } = options;
    const command = new GetObjectCommand({
      Bucket: this.#bucket,
      Key: key,
      ...(filename !== undefined && { ResponseContentDisposition: attachmentContentDisposition(filename) }),
      ...(contentType !== undefined && { ResponseContentType: contentType }),
    });
    return getSignedUrl(this.#client, command, { expiresIn: expiresInSeconds });
  }

  async close(): Promise<void> {
    this.#client.destroy();
  }
}
