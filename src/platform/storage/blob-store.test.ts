import assert from 'node:assert/strict';
import { createCipheriv, createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import type { Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import {
  BlobNotFoundError,
  BlobTooLargeError,
  InvalidBlobKeyError,
  type BlobStore,
  type StoredBlob,
} from './blob-store.ts';
import { createBlobStore } from './index.ts';
import { LocalBlobStore } from './local-blob-store.ts';
import { S3BlobStore, attachmentContentDisposition } from './s3-blob-store.ts';

const MiB = 1024 * 1024;

// ---------------------------------------------------------------------------
// Bodies: deterministic pseudo-random bytes, streamed in odd-sized chunks so
// part boundaries never line up with chunk boundaries.
// ---------------------------------------------------------------------------

function* pseudoRandomChunks(totalBytes: number, seed: string): Generator<Buffer> {
  // AES-CTR over zeros is a fast, seedable byte stream.
  const key = createHash('sha256').update(seed).digest().subarray(0, 16);
  const cipher = createCipheriv('aes-128-ctr', key, Buffer.alloc(16));
  const chunkBytes = 64 * 1024 + 7;
  for (let remaining = totalBytes; remaining > 0; remaining -= chunkBytes) {
    yield cipher.update(Buffer.alloc(Math.min(chunkBytes, remaining)));
  }
}

/** Size and digest of a generated body, computed without going through any store. */
function expectedMeasurement(totalBytes: number, seed: string): Omit<StoredBlob, 'key'> {
  const hash = createHash('sha256');
  let size = 0;
  for (const chunk of pseudoRandomChunks(totalBytes, seed)) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { size, sha256: hash.digest('hex') };
}

interface TestBody {
  stream: Readable;
  /** How many bytes the source has produced so far, to tell a cut-off upload from one read to the end. */
  producedBytes(): number;
}

function streamedBody(totalBytes: number, seed: string): TestBody {
  let produced = 0;
  function* counted(): Generator<Buffer> {
    for (const chunk of pseudoRandomChunks(totalBytes, seed)) {
      produced += chunk.length;
      yield chunk;
    }
  }
  return { stream: Readable.from(counted(), { objectMode: false }), producedBytes: () => produced };
}

function bodyOf(content: string | Buffer): Readable {
  return Readable.from([Buffer.from(content)], { objectMode: false });
}

async function measureStream(stream: Readable): Promise<Omit<StoredBlob, 'key'>> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of stream) {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    hash.update(bytes);
    size += bytes.length;
  }
  return { size, sha256: hash.digest('hex') };
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

function uniqueKey(label: string): string {
  return `accounts/${randomUUID()}/${label}`;
}

const INVALID_KEYS = ['../x', '/abs', 'a//b', 'a/./b', '', '.', '..', 'a/..', 'a/', 'a\\b', 'a\0b', 'a\nb', 'k'.repeat(1025)];

// ---------------------------------------------------------------------------
// The contract every BlobStore must meet.
// ---------------------------------------------------------------------------

interface StoreHarness {
  store: BlobStore;
  /** Fails if a rejected put left anything behind besides the (absent) key: temp files, multipart uploads. */
  assertNoLeftovers(): Promise<void>;
}

function describeBlobStoreContract(harness: () => StoreHarness): void {
  describe('BlobStore contract', () => {
    it('streams a multi-megabyte body in and out unchanged', async () => {
      const { store } = harness();
      const key = uniqueKey('recording.wav');
      const totalBytes = 12 * MiB + 3;
      const expected = expectedMeasurement(totalBytes, 'round-trip');
      const body = streamedBody(totalBytes, 'round-trip');

      const stored = await store.put(key, body.stream, { maxBytes: 64 * MiB, contentType: 'audio/wav' });

      assert.deepEqual(stored, { key, ...expected });
      assert.equal(body.stream.readableEnded, true);
      assert.equal(await store.exists(key), true);
      assert.deepEqual(await measureStream(await store.get(key)), expected);
    });

    it('accepts a body of exactly maxBytes', async () => {
      const { store } = harness();
      const key = uniqueKey('exact');
      const stored = await store.put(key, streamedBody(1000, 'exact').stream, { maxBytes: 1000 });
      assert.deepEqual(stored, { key, ...expectedMeasurement(1000, 'exact') });
      assert.equal((await readAll(await store.get(key))).length, 1000);
    });

    it('stores an empty body', async () => {
      const { store } = harness();
      const key = uniqueKey('empty');
      const stored = await store.put(key, Readable.from([], { objectMode: false }), { maxBytes: 0 });
      assert.deepEqual(stored, { key, size: 0, sha256: sha256Hex('') });
      assert.equal((await readAll(await store.get(key))).length, 0);
    });

    it('overwrites an existing key', async () => {
      const { store } = harness();
      const key = uniqueKey('overwrite');
      await store.put(key, bodyOf('first version'), { maxBytes: 100 });
      await store.put(key, bodyOf('second'), { maxBytes: 100 });
      assert.equal((await readAll(await store.get(key))).toString(), 'second');
    });

    it('rejects a body one byte over the limit and leaves nothing behind', async () => {
      const { store, assertNoLeftovers } = harness();
      const key = uniqueKey('one-over');
      const body = streamedBody(1001, 'one-over');

      await assert.rejects(store.put(key, body.stream, { maxBytes: 1000 }), (error: unknown) => {
        assert.ok(error instanceof BlobTooLargeError);
        assert.equal(error.maxBytes, 1000);
        return true;
      });

      assert.equal(body.stream.destroyed, true, 'the source must be released');
      assert.equal(await store.exists(key), false);
      await assert.rejects(store.get(key), BlobNotFoundError);
      await assertNoLeftovers();
    });

    it('cuts off a multi-megabyte body over the limit without reading it to the end', async () => {
      const { store, assertNoLeftovers } = harness();
      const key = uniqueKey('too-big');
      const totalBytes = 12 * MiB;
      const body = streamedBody(totalBytes, 'too-big');

      await assert.rejects(store.put(key, body.stream, { maxBytes: 7 * MiB }), BlobTooLargeError);

      assert.equal(body.stream.destroyed, true, 'the source must be released');
      assert.ok(body.producedBytes() < totalBytes, `read ${body.producedBytes()} of ${totalBytes} bytes`);
      assert.equal(await store.exists(key), false);
      await assertNoLeftovers();
    });

    it('keeps the previous blob when an overwrite is too large', async () => {
      const { store } = harness();
      const key = uniqueKey('keep-previous');
      await store.put(key, bodyOf('small'), { maxBytes: 10 });
      await assert.rejects(store.put(key, bodyOf('far too large'), { maxBytes: 10 }), BlobTooLargeError);
      assert.equal((await readAll(await store.get(key))).toString(), 'small');
    });

    it('fails the put with the source error when the source breaks, leaving nothing behind', async () => {
      const { store, assertNoLeftovers } = harness();
      const key = uniqueKey('broken-source');
      async function* breaksAfterOneMiB(): AsyncGenerator<Buffer> {
        yield randomBytes(MiB);
        throw new Error('client went away');
      }

      await assert.rejects(
        store.put(key, Readable.from(breaksAfterOneMiB(), { objectMode: false }), { maxBytes: 10 * MiB }),
        { message: 'client went away' },
      );

      assert.equal(await store.exists(key), false);
      await assertNoLeftovers();
    });

    it('reports a missing key as BlobNotFoundError', async () => {
      const { store } = harness();
      const key = uniqueKey('never-written');
      await assert.rejects(store.get(key), (error: unknown) => {
        assert.ok(error instanceof BlobNotFoundError);
        assert.equal(error.key, key);
        return true;
      });
      assert.equal(await store.exists(key), false);
    });

    it('treats a key that is only a prefix of other keys as missing', async () => {
      const { store } = harness();
      const prefix = uniqueKey('folder');
      await store.put(`${prefix}/inner`, bodyOf('x'), { maxBytes: 10 });
      assert.equal(await store.exists(prefix), false);
      await assert.rejects(store.get(prefix), BlobNotFoundError);
    });

    it('deletes idempotently', async () => {
      const { store } = harness();
      const key = uniqueKey('to-delete');
      await store.put(key, bodyOf('bye'), { maxBytes: 10 });

      await store.delete(key);
      assert.equal(await store.exists(key), false);
      await assert.rejects(store.get(key), BlobNotFoundError);

      await store.delete(key);
      await store.delete(uniqueKey('never-written'));
    });

    it('rejects invalid keys on every operation and releases the body', async () => {
      const { store } = harness();
      for (const key of INVALID_KEYS) {
        const body = bodyOf('payload');
        await assert.rejects(store.put(key, body, { maxBytes: 100 }), InvalidBlobKeyError, `put ${JSON.stringify(key)}`);
        assert.equal(body.destroyed, true, `put ${JSON.stringify(key)} must release the body`);
        await assert.rejects(store.get(key), InvalidBlobKeyError, `get ${JSON.stringify(key)}`);
        await assert.rejects(store.exists(key), InvalidBlobKeyError, `exists ${JSON.stringify(key)}`);
        await assert.rejects(store.delete(key), InvalidBlobKeyError, `delete ${JSON.stringify(key)}`);
        await assert.rejects(
          store.signedUrl(key, { expiresInSeconds: 60 }),
          InvalidBlobKeyError,
          `signedUrl ${JSON.stringify(key)}`,
        );
      }
    });

    it('accepts keys with spaces and non-ASCII characters', async () => {
      const { store } = harness();
      const key = uniqueKey('Réunion notes (1).wav');
      await store.put(key, bodyOf('ünïcödé'), { maxBytes: 100 });
      assert.equal((await readAll(await store.get(key))).toString(), 'ünïcödé');
    });
  });
}

// ---------------------------------------------------------------------------
// Local filesystem
// ---------------------------------------------------------------------------

describe('LocalBlobStore', () => {
  const baseUrl = 'https://hark.example.test';
  const signingKey = randomBytes(32);
  let tempDir: string;
  let root: string;
  let nowMs = Date.UTC(2030, 0, 1);
  let store: LocalBlobStore;

  before(async () => {
    tempDir = await mkdtemp(join(tmpdir(), 'hark-local-blobs-'));
    // A root that does not exist yet: the store has to create it.
    root = join(tempDir, 'blobs');
    store = new LocalBlobStore({ root, baseUrl: `${baseUrl}/`, signingKey, now: () => nowMs });
  });

  after(async () => {
    await store.close();
    await rm(tempDir, { recursive: true, force: true });
  });

  describeBlobStoreContract(() => ({
    store,
    async assertNoLeftovers() {
      const tempFiles = await readdir(join(root, '.tmp')).catch((error: NodeJS.ErrnoException) => {
        if (error.code === 'ENOENT') return [];
        throw error;
      });
      assert.deepEqual(tempFiles, []);
    },
  }));

  it('stores blobs as files under the root', async () => {
    const key = uniqueKey('on-disk');
    await store.put(key, bodyOf('bytes on disk'), { maxBytes: 100 });
    assert.equal((await stat(join(root, key))).size, 'bytes on disk'.length);
  });

  it('refuses signing keys shorter than 32 bytes', () => {
    assert.throws(() => new LocalBlobStore({ root, baseUrl, signingKey: randomBytes(16) }), RangeError);
  });

  it('is what createBlobStore builds for local storage, rooted at <dataDir>/blobs', async () => {
    const built = createBlobStore({ storage: 'local', dataDir: tempDir, baseUrl, signingKey });
    assert.ok(built instanceof LocalBlobStore);
    const key = uniqueKey('via-factory');
    await built.put(key, bodyOf('factory'), { maxBytes: 100 });
    assert.equal((await readAll(await store.get(key))).toString(), 'factory');
  });

  it('reserves the temp directory name', async () => {
    for (const key of ['.tmp', '.tmp/x']) {
      await assert.rejects(store.put(key, bodyOf('x'), { maxBytes: 10 }), InvalidBlobKeyError);
      await assert.rejects(store.get(key), InvalidBlobKeyError);
    }
  });

  describe('signed URLs', () => {
    const key = 'accounts/a b/Réunion.wav';

    async function signedQuery(
      options: { filename?: string; contentType?: string; expiresInSeconds?: number } = {},
    ): Promise<{ url: URL; query: Record<string, string> }> {
      const url = new URL(await store.signedUrl(key, { expiresInSeconds: 300, ...options }));
      return { url, query: Object.fromEntries(url.searchParams) };
    }

    it('points at /api/blobs/<encoded key> on the base URL', async () => {
      const { url, query } = await signedQuery({ filename: 'notes.wav', contentType: 'audio/wav' });
      assert.equal(url.origin, baseUrl);
      assert.equal(url.pathname, '/api/blobs/accounts/a%20b/R%C3%A9union.wav');
      assert.equal(query.expires, String(Math.floor(nowMs / 1000) + 300));
      assert.equal(query.filename, 'notes.wav');
      assert.equal(query.type, 'audio/wav');
      assert.match(query.sig ?? '', /^[0-9a-f]{64}$/);
    });

    it('verifies an untampered request and returns the signed filename and type', async () => {
      const { query } = await signedQuery({ filename: 'Réunion "notes".wav', contentType: 'audio/wav' });
      assert.deepEqual(store.verifySignedRequest(key, query), {
        ok: true,
        filename: 'Réunion "notes".wav',
        contentType: 'audio/wav',
      });
    });

    it('verifies a request without filename or type', async () => {
      const { query } = await signedQuery();
      assert.deepEqual(store.verifySignedRequest(key, query), { ok: true });
    });

    it('rejects a tampered, truncated or missing signature', async () => {
      const { query } = await signedQuery({ filename: 'a.wav' });
      const sig = query.sig ?? '';
      const flipped = (sig[0] === '0' ? '1' : '0') + sig.slice(1);
      for (const badSig of [flipped, sig.slice(0, -2), `${sig}00`, sig.replace(/./g, 'z'), undefined]) {
        assert.deepEqual(store.verifySignedRequest(key, { ...query, sig: badSig }), {
          ok: false,
          reason: 'bad_signature',
        });
      }
    });

    it('rejects any change to the signed fields', async () => {
      const { query } = await signedQuery({ filename: 'a.wav', contentType: 'audio/wav' });
      const tampered: Array<Record<string, string | undefined>> = [
        { ...query, expires: String(Number(query.expires) + 3600) },
        { ...query, expires: undefined },
        { ...query, filename: 'evil.html' },
        { ...query, filename: undefined },
        { ...query, filename: '' },
        { ...query, type: 'text/html' },
        { ...query, type: undefined },
      ];
      for (const forged of tampered) {
        assert.deepEqual(store.verifySignedRequest(key, forged), { ok: false, reason: 'bad_signature' });
      }
      assert.deepEqual(store.verifySignedRequest('accounts/a b/other.wav', query), {
        ok: false,
        reason: 'bad_signature',
      });
    });

    it('rejects fields that were never signed', async () => {
      const { query } = await signedQuery();
      // An empty value is still a value: it must not stand in for an absent one.
      for (const unsigned of [{ type: 'text/html' }, { filename: 'x.html' }, { type: '' }, { filename: '' }]) {
        assert.deepEqual(store.verifySignedRequest(key, { ...query, ...unsigned }), {
          ok: false,
          reason: 'bad_signature',
        });
      }
    });

    it('rejects URLs signed with another key', async () => {
      const other = new LocalBlobStore({ root, baseUrl, signingKey: randomBytes(32), now: () => nowMs });
      const query = Object.fromEntries(new URL(await other.signedUrl(key, { expiresInSeconds: 300 })).searchParams);
      assert.deepEqual(store.verifySignedRequest(key, query), { ok: false, reason: 'bad_signature' });
    });

    it('expires once the clock passes the expiry time', async () => {
      const startMs = nowMs;
      try {
        const { query } = await signedQuery({ expiresInSeconds: 60, filename: 'a.wav' });
        const expiresMs = Number(query.expires) * 1000;

        nowMs = expiresMs;
        assert.deepEqual(store.verifySignedRequest(key, query), { ok: true, filename: 'a.wav' });

        nowMs = expiresMs + 1;
        assert.deepEqual(store.verifySignedRequest(key, query), { ok: false, reason: 'expired' });
      } finally {
        nowMs = startMs;
      }
    });

    it('refuses non-positive lifetimes', async () => {
      await assert.rejects(store.signedUrl(key, { expiresInSeconds: 0 }), RangeError);
      await assert.rejects(store.signedUrl(key, { expiresInSeconds: -5 }), RangeError);
    });
  });
});

// ---------------------------------------------------------------------------
// S3, against a real s3rver
// ---------------------------------------------------------------------------

interface KoaContext {
  method: string;
  query: Record<string, string | string[] | undefined>;
  status: number;
  body: unknown;
}
type KoaMiddleware = (ctx: KoaContext, next: () => Promise<void>) => Promise<void>;

interface S3rverInstance {
  run(): Promise<AddressInfo>;
  close(): Promise<void>;
  httpServer: Server;
  /** Koa's middleware list; composed when the server starts. */
  middleware: KoaMiddleware[];
  store: { getResourcePath(bucket: string, key: string | undefined, resource: string): string };
}
type S3rverConstructor = new (options: {
  address: string;
  port: number;
  directory: string;
  silent: boolean;
  configureBuckets: Array<{ name: string }>;
}) => S3rverInstance;

// s3rver ships no type declarations; the interfaces above cover what these tests touch.
const S3rver = createRequire(import.meta.url)('s3rver') as S3rverConstructor;

describe('S3BlobStore', () => {
  const bucket = 'hark-test';
  let s3rverDir: string;
  let server: S3rverInstance;
  let store: S3BlobStore;
  let uploadsDir: string;
  const requests: Array<{ method: string; url: string }> = [];
  /** s3rver lacks AbortMultipartUpload; the shim below supplies it unless a test wants to see it refused. */
  let abortSupported = true;

  before(async () => {
    s3rverDir = await mkdtemp(join(tmpdir(), 'hark-s3rver-'));
    server = new S3rver({
      address: '127.0.0.1',
      port: 0,
      directory: s3rverDir,
      silent: true,
      configureBuckets: [{ name: bucket }],
    });
    uploadsDir = server.store.getResourcePath(bucket, undefined, 'uploads');
    // Emulates S3's AbortMultipartUpload (DELETE ?uploadId=...) by discarding the
    // upload's parts, so the tests can check that no multipart upload is left behind.
    server.middleware.unshift(async (ctx, next) => {
      const { uploadId } = ctx.query;
      if (!abortSupported || ctx.method !== 'DELETE' || typeof uploadId !== 'string' || !/^[0-9a-f]+$/.test(uploadId)) {
        return next();
      }
      const uploadDir = join(uploadsDir, uploadId);
      const found = await stat(uploadDir).then(() => true, () => false);
      if (found) await rm(uploadDir, { recursive: true });
      ctx.status = found ? 204 : 404;
    });
    const { port } = await server.run();
    server.httpServer.on('request', (request: { method?: string; url?: string }) => {
      requests.push({ method: request.method ?? '', url: request.url ?? '' });
    });
    store = new S3BlobStore({
      endpoint: `http://127.0.0.1:${port}`,
      bucket,
      region: 'us-east-1',
      // s3rver checks signatures against these fixed credentials.
      accessKeyId: 'S3RVER',
      secretAccessKey: 'S3RVER',
      forcePathStyle: true,
    });
  });

  after(async () => {
    await store.close();
    await server.close();
    await rm(s3rverDir, { recursive: true, force: true });
  });

  async function pendingMultipartUploads(): Promise<string[]> {
    return readdir(uploadsDir).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return [];
      throw error;
    });
  }

  function requestsFor(key: string): Array<{ method: string; url: string }> {
    return requests.filter(({ url }) => url.startsWith(`/${bucket}/${key}?`) || url === `/${bucket}/${key}`);
  }

  describeBlobStoreContract(() => ({
    store,
    async assertNoLeftovers() {
      assert.deepEqual(await pendingMultipartUploads(), []);
    },
  }));

  it('aborts the multipart upload when the limit is crossed after parts were sent', async () => {
    const key = uniqueKey('multipart-overflow');
    await assert.rejects(store.put(key, streamedBody(12 * MiB, 'mpu').stream, { maxBytes: 7 * MiB }), BlobTooLargeError);

    const seen = requestsFor(key);
    assert.ok(seen.some((r) => r.method === 'POST' && /[?&]uploads(=|&|$)/.test(r.url)), 'a multipart upload was started');
    assert.ok(seen.some((r) => r.method === 'DELETE' && /[?&]uploadId=/.test(r.url)), 'the multipart upload was aborted');
    assert.ok(!seen.some((r) => r.method === 'POST' && /[?&]uploadId=/.test(r.url)), 'the multipart upload was never completed');
    assert.deepEqual(await pendingMultipartUploads(), []);
    assert.equal(await store.exists(key), false);
  });

  it('still reports BlobTooLargeError when the server refuses the abort', async () => {
    const key = uniqueKey('abort-refused');
    abortSupported = false;
    try {
      await assert.rejects(store.put(key, streamedBody(12 * MiB, 'refused').stream, { maxBytes: 7 * MiB }), BlobTooLargeError);
    } finally {
      abortSupported = true;
    }
    assert.equal(await store.exists(key), false);
    // The refused abort leaves s3rver's upload directory behind; clear it for the leftover checks.
    await rm(uploadsDir, { recursive: true, force: true });
  });

  it('releases the source and reports the error when the upload itself fails', async () => {
    const { port } = server.httpServer.address() as AddressInfo;
    const misconfigured = new S3BlobStore({
      endpoint: `http://127.0.0.1:${port}`,
      bucket: 'no-such-bucket',
      region: 'us-east-1',
      accessKeyId: 'S3RVER',
      secretAccessKey: 'S3RVER',
      forcePathStyle: true,
    });
    try {
      const totalBytes = 32 * MiB;
      const body = streamedBody(totalBytes, 'no-bucket');
      await assert.rejects(misconfigured.put(uniqueKey('x'), body.stream, { maxBytes: 64 * MiB }), {
        name: 'NoSuchBucket',
      });
      assert.equal(body.stream.destroyed, true, 'the source must be released');
      assert.ok(body.producedBytes() < totalBytes, `read ${body.producedBytes()} of ${totalBytes} bytes`);
      // A missing bucket is a configuration error, not a missing blob.
      await assert.rejects(misconfigured.get(uniqueKey('x')), (error: unknown) => {
        assert.ok(!(error instanceof BlobNotFoundError));
        assert.equal((error as Error).name, 'NoSuchBucket');
        return true;
      });
    } finally {
      await misconfigured.close();
    }
  });

  it('serves the bytes from a presigned URL with the requested name and type', async () => {
    const key = uniqueKey('download.wav');
    const content = randomBytes(256 * 1024);
    await store.put(key, bodyOf(content), { maxBytes: MiB });
    const filename = 'Réunion "notes" (1).wav';

    const url = await store.signedUrl(key, { expiresInSeconds: 300, filename, contentType: 'audio/wav' });
    const response = await fetch(url);

    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'audio/wav');
    assert.equal(response.headers.get('content-disposition'), attachmentContentDisposition(filename));
    assert.deepEqual(Buffer.from(await response.arrayBuffer()), content);
  });

  it('serves the bytes from a presigned URL without overrides', async () => {
    const key = uniqueKey('plain');
    await store.put(key, bodyOf('plain bytes'), { maxBytes: 100, contentType: 'text/plain' });
    const response = await fetch(await store.signedUrl(key, { expiresInSeconds: 60 }));
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-disposition'), null);
    assert.equal(await response.text(), 'plain bytes');
  });

  it('is what createBlobStore builds for s3 storage, path-style when an endpoint is given', async () => {
    const { port } = server.httpServer.address() as AddressInfo;
    const s3 = { endpoint: `http://localhost:${port}`, bucket, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
    const built = createBlobStore({ storage: 's3', dataDir: '/unused', baseUrl: 'https://unused.test', signingKey: randomBytes(32), s3 });
    try {
      assert.ok(built instanceof S3BlobStore);
      const key = uniqueKey('via-factory');
      await built.put(key, bodyOf('factory'), { maxBytes: 100 });
      assert.equal((await readAll(await store.get(key))).toString(), 'factory');
      // Virtual-hosted style would put the bucket in the host name, which does not resolve here.
      assert.equal(new URL(await built.signedUrl(key, { expiresInSeconds: 60 })).pathname, `/${bucket}/${key}`);
    } finally {
      await built.close();
    }
  });

  it('refuses half-given credentials and s3 storage without s3 settings', () => {
    assert.throws(() => new S3BlobStore({ bucket, region: 'us-east-1', accessKeyId: 'only-id' }), /together/);
    assert.throws(
      () => createBlobStore({ storage: 's3', dataDir: '/unused', baseUrl: 'https://unused.test', signingKey: randomBytes(32) }),
      /needs s3 settings/,
    );
  });

  it('presigns for exactly the requested lifetime', async () => {
    const key = uniqueKey('short-lived');
    for (const expiresInSeconds of [1, 900]) {
      const url = new URL(await store.signedUrl(key, { expiresInSeconds }));
      assert.equal(url.searchParams.get('X-Amz-Expires'), String(expiresInSeconds));
    }
  });
});

describe('attachmentContentDisposition', () => {
  it('gives an ASCII fallback and the exact name per RFC 5987', () => {
    assert.equal(
      attachmentContentDisposition(`Réunion "notes" (1)'s*.wav`),
      `attachment; filename="R_union _notes_ (1)'s*.wav"; filename*=UTF-8''R%C3%A9union%20%22notes%22%20%281%29%27s%2A.wav`,
    );
  });
});
