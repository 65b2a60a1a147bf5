import { join } from 'node:path';
import type { BlobStore } from './blob-store.ts';
import { LocalBlobStore } from './local-blob-store.ts';
import { S3BlobStore } from './s3-blob-store.ts';

export type { BlobStore, PutOptions, SignedUrlOptions, StoredBlob } from './blob-store.ts';
export { BlobNotFoundError, BlobTooLargeError, InvalidBlobKeyError } from './blob-store.ts';
export { assertValidBlobKey, encodeBlobKeyPath } from './keys.ts';
export { LocalBlobStore, type LocalBlobStoreOptions, type SignedRequestVerification } from './local-blob-store.ts';
export { S3BlobStore, attachmentContentDisposition, type S3BlobStoreOptions } from './s3-blob-store.ts';

export interface BlobStoreConfig {
  storage: 'local' | 's3';
  /** Local blobs go to `<dataDir>/blobs`. */
  dataDir: string;
  /** Public origin of this API; local signed URLs point at `<baseUrl>/api/blobs/...`. */
  baseUrl: string;
  /** HMAC key for local signed URLs (at least 32 bytes). */
  signingKey: Buffer;
  s3?: {
    endpoint?: string;
    bucket: string;
    region: string;
    accessKeyId?: string;
    secretAccessKey?: string;
  };
}

export function createBlobStore(cfg: BlobStoreConfig): BlobStore {
  switch (cfg.storage) {
    case 'local':
      return new LocalBlobStore({ root: join(cfg.dataDir, 'blobs'), baseUrl: cfg.baseUrl, signingKey: cfg.signingKey });
    case 's3': {
      if (cfg.s3 === undefined) {
        throw new Error("storage 's3' needs s3 settings (bucket, region)");
      }
      const { endpoint, ...rest } = cfg.s3;
      // Custom endpoints are S3-compatible services (MinIO, s3rver, ...), which rarely
      // have the wildcard DNS that virtual-hosted bucket addressing needs.
      return new S3BlobStore(endpoint === undefined ? rest : { ...rest, endpoint, forcePathStyle: true });
    }
    default: {
      // Unreachable for well-typed callers; config read from the environment may still say anything.
      const unknownStorage: never = cfg.storage;
      throw new Error(`unknown storage backend: ${String(unknownStorage)}`);
    }
  }
}
