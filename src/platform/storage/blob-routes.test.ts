import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import path from 'node:path';
import { Readable } from 'node:stream';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { deriveKey } from '../crypto/secrets.ts';
import { LocalBlobStore } from './local-blob-store.ts';

describe('signed download route for local blobs', () => {
  let rt: TestRuntime;
  const bytes = crypto.randomBytes(300_000);
  const key = 'accounts/a1/files/report one.pdf';

  before(async () => {
    rt = await startTestRuntime();
    await rt.blobs.put(key, Readable.from([bytes]), { maxBytes: 1_000_000 });
  });
  after(async () => {
    await rt?.destroy();
  });

  function pathOf(url: string): string {
    const parsed = new URL(url);
    return parsed.pathname + parsed.search;
  }

  test('a signed URL serves the original bytes with the given name and type', async () => {
    const url = await rt.blobs.signedUrl(key, { expiresInSeconds: 300, filename: 'Rapport été.pdf', contentType: 'application/pdf' });
    assert.ok(url.startsWith(rt.config.baseUrl + '/api/blobs/'));
    const res = await rt.app!.inject({ method: 'GET', url: pathOf(url) });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'application/pdf');
    assert.match(String(res.headers['content-disposition']), /filename\*=UTF-8''Rapport%20%C3%A9t%C3%A9\.pdf/);
    assert.ok(res.rawPayload.equals(bytes));
  });

  test('an altered URL is refused', async () => {
    const url = new URL(await rt.blobs.signedUrl(key, { expiresInSeconds: 300, filename: 'a.pdf' }));
    url.searchParams.set('filename', 'b.exe');
    const res = await rt.app!.inject({ method: 'GET', url: url.pathname + url.search });
    assert.equal(res.statusCode, 403);
    assert.equal(res.json().error, 'forbidden');
    assert.match(res.json().message, /not valid/);
  });

  test('a URL signed for one key does not open another', async () => {
    const url = new URL(await rt.blobs.signedUrl(key, { expiresInSeconds: 300 }));
    const other = url.pathname.replace('report%20one.pdf', 'secret.pdf');
    const res = await rt.app!.inject({ method: 'GET', url: other + url.search });
    assert.equal(res.statusCode, 403);
  });

  test('an expired URL is refused', async () => {
    // Signed by the same key an hour ago with a five-minute lifetime.
    const pastSigner = new LocalBlobStore({
      root: path.join(rt.config.dataDir, 'blobs'),
      baseUrl: rt.config.baseUrl,
      signingKey: deriveKey(rt.secrets.secretsKey, 'blob-urls'),
      now: () => Date.now() - 3600_000,
    });
    const res = await rt.app!.inject({ method: 'GET', url: pathOf(await pastSigner.signedUrl(key, { expiresInSeconds: 300 })) });
    assert.equal(res.statusCode, 403);
    assert.match(res.json().message, /expired/);
  });

  test('a validly signed URL for a deleted blob is 404', async () => {
    await rt.blobs.put('tmp/gone.txt', Readable.from([Buffer.from('x')]), { maxBytes: 10 });
    const url = await rt.blobs.signedUrl('tmp/gone.txt', { expiresInSeconds: 300 });
    await rt.blobs.delete('tmp/gone.txt');
    const res = await rt.app!.inject({ method: 'GET', url: pathOf(url) });
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().error, 'not_found');
  });

  test('missing signature parameters are a 400 naming them', async () => {
    const res = await rt.app!.inject({ method: 'GET', url: '/api/blobs/accounts/a1/files/x' });
    assert.equal(res.statusCode, 400);
    const fields = res.json().details.map((d: { field: string }) => d.field).sort();
    assert.deepEqual(fields, ['expires', 'sig']);
  });
});
