import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { LightMyRequestResponse } from 'fastify';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import {
  bearer,
  call,
  createKey,
  createWorkspace,
  kbFileReaches,
  sessionCookie,
  signUp,
  uniqueEmail,
  uploadKbFile,
  type TestKey,
  type TestUser,
  type TestWorkspace,
} from '../../../test/fixtures.ts';
import { makeZip } from '../../../test/kb-documents.ts';

/**
 * The library, attachments, search limits, tenancy and scopes over HTTP,
 * with uploads limited to LIMIT bytes (KB_MAX_FILE_BYTES).
 */
const LIMIT = 256 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const FILE_FIELDS = ['char_count', 'chunk_count', 'created_at', 'filename', 'id', 'mime_type', 'size_bytes', 'status', 'status_error', 'updated_at'];

describe('knowledge-base library and attachments', () => {
  let rt: TestRuntime;
  let owner: TestUser;
  let ws: TestWorkspace;
  let key: TestKey;
  let assistantId: string;
  let other: { user: TestUser; ws: TestWorkspace; key: TestKey; assistantId: string };

  before(async () => {
    // Files past 100,000 characters fail at once instead of queueing minutes of embedding (the exact-limit upload below).
    rt = await startTestRuntime({ KB_MAX_FILE_BYTES: String(LIMIT), KB_MAX_TEXT_CHARS: '100000' });
    owner = await signUp(rt, uniqueEmail('kb-owner'));
    ws = await createWorkspace(rt, owner, 'Library Co');
    key = await createKey(rt, owner, ws);
    assistantId = await newAssistant(key.fullKey);
    const otherUser = await signUp(rt, uniqueEmail('kb-other'));
    const otherWs = await createWorkspace(rt, otherUser, 'Other Co');
    const otherKey = await createKey(rt, otherUser, otherWs);
    other = { user: otherUser, ws: otherWs, key: otherKey, assistantId: await newAssistant(otherKey.fullKey) };
  });
  after(async () => {
    await rt?.destroy();
  });

  async function newAssistant(token: string): Promise<string> {
    return (await call(rt, { method: 'POST', url: '/api/assistants', headers: bearer(token), payload: { name: 'KB assistant' } })).json().assistant.id;
  }

  function blobFiles(): string[] {
    const root = path.join(rt.config.dataDir, 'blobs');
    if (!fs.existsSync(root)) return [];
    return (fs.readdirSync(root, { recursive: true, withFileTypes: true }) as fs.Dirent[])
      .filter((entry) => entry.isFile())
      .map((entry) => path.relative(root, path.join(entry.parentPath ?? entry.path, entry.name)));
  }

  async function fileRows(accountId: string) {
    return rt.db.kysely.selectFrom('kb_files').select(['id', 'blob_key', 'sha256']).where('account_id', '=', accountId).execute();
  }

  function inject(method: 'GET' | 'POST' | 'DELETE', url: string, token: string, payload?: object): Promise<LightMyRequestResponse> {
    return rt.app!.inject({ method, url, headers: bearer(token), ...(payload ? { payload } : {}) });
  }

  function assertError(res: LightMyRequestResponse, status: number, error: string, message?: RegExp) {
    assert.equal(res.statusCode, status, res.body);
    const body = res.json();
    assert.equal(body.error, error);
    assert.equal(body.code, status);
    if (message) assert.match(body.message, message);
  }

  async function uploadText(text: string, filename = 'notes.txt', token = key.fullKey) {
    const res = await uploadKbFile(rt, token, { bytes: text, filename });
    assert.equal(res.statusCode, 200, res.body);
    return res.json();
  }

  test('upload answers §4.5 {success, credits_charged, file} with the §2.5 fields; users name the workspace', async () => {
    const body = await uploadText(`# Opening hours\n\nWe open at nine ${crypto.randomUUID()}.\n`, 'hours.md');
    assert.deepEqual(Object.keys(body).sort(), ['credits_charged', 'file', 'success']);
    assert.equal(body.success, true);
    assert.equal(body.credits_charged, 0);
    assert.deepEqual(Object.keys(body.file).sort(), FILE_FIELDS);
    assert.match(body.file.id, UUID);
    assert.equal(body.file.filename, 'hours.md');
    assert.equal(body.file.mime_type, 'text/markdown');
    assert.equal(body.file.status, 'pending');
    assert.equal(body.file.status_error, null);
    assert.equal(body.file.char_count, null);
    assert.equal(body.file.chunk_count, null);
    // A signed-in user names the workspace; without it the request is refused before the body is stored.
    const before = blobFiles().length;
    const missing = await uploadKbFile(rt, owner.accessToken, { bytes: 'user upload', filename: 'u.txt' });
    assertError(missing, 400, 'validation_failed');
    assert.equal(blobFiles().length, before);
    const byUser = await uploadKbFile(rt, owner.accessToken, { bytes: `user upload ${crypto.randomUUID()}`, filename: 'u.txt' }, ws.slug);
    assert.equal(byUser.statusCode, 200, byUser.body);
    const outsider = await uploadKbFile(rt, other.user.accessToken, { bytes: 'intruder', filename: 'i.txt' }, ws.slug);
    assertError(outsider, 404, 'not_found');
    const cookie = await rt.app!.inject({ method: 'GET', url: `/api/kb/files?accountSlug=${ws.slug}`, ...sessionCookie(owner.accessToken) });
    assert.equal(cookie.statusCode, 200, cookie.body);
  });

  test('unsupported types are 400 by content, whatever the name, leaving no row and no blob', async () => {
    const rowsBefore = (await fileRows(ws.id)).length;
    const blobsBefore = blobFiles().length;
    const cases: Array<[Buffer, string]> = [
      [Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]), 'image.png'],
      [Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]), 'renamed.pdf'],
      [makeZip({ 'xl/workbook.xml': '<workbook/>' }), 'sheet.docx'],
      [crypto.randomBytes(LIMIT - 10), 'random.txt'],
    ];
    for (const [bytes, filename] of cases) {
      const res = await uploadKbFile(rt, key.fullKey, { bytes, filename });
      assertError(res, 400, 'bad_request', /Unsupported file type: upload a PDF, DOCX, TXT or MD/);
      assert.deepEqual(res.json().details, [{ field: 'file', message: 'must be a PDF, DOCX, TXT or MD document' }]);
    }
    assert.equal((await fileRows(ws.id)).length, rowsBefore);
    assert.equal(blobFiles().length, blobsBefore, 'no blob and no temporary file');
  });

  test('over KB_MAX_FILE_BYTES is 400 with nothing left behind; exactly the limit is stored', async () => {
    const rowsBefore = (await fileRows(ws.id)).length;
    const blobsBefore = blobFiles().length;
    for (const size of [LIMIT + 1, 4 * LIMIT]) {
      const res = await uploadKbFile(rt, key.fullKey, { bytes: Buffer.alloc(size, 'a'), filename: 'big.txt' });
      assertError(res, 400, 'bad_request', new RegExp(`File is too large: the knowledge-base limit is ${LIMIT} bytes`));
    }
    assert.equal((await fileRows(ws.id)).length, rowsBefore);
    assert.equal(blobFiles().length, blobsBefore);
    const exact = await uploadKbFile(rt, key.fullKey, { bytes: Buffer.alloc(LIMIT, 'b'), filename: 'exact.txt' });
    assert.equal(exact.statusCode, 200, exact.body);
    assert.equal(exact.json().file.size_bytes, LIMIT);
    assert.equal(blobFiles().length, blobsBefore + 1);
  });

  test('no file part, or a JSON body, is a clear 4xx', async () => {
    const form = new FormData();
    form.append('other', 'value');
    const empty = await rt.app!.inject({ method: 'POST', url: '/api/kb/files', headers: bearer(key.fullKey), payload: form });
    assertError(empty, 400, 'bad_request', /field named "file"/);
    const json = await inject('POST', '/api/kb/files', key.fullKey, { file: 'x' });
    assertError(json, 415, 'unsupported_media_type');
  });

  test('ten identical uploads at once make one file; the others answer deduplicated, uncharged, with no extra blob', async () => {
    const content = `Duplicate content ${crypto.randomUUID()}\n`.repeat(50);
    const blobsBefore = blobFiles().length;
    const results = await Promise.all(Array.from({ length: 10 }, () => uploadKbFile(rt, key.fullKey, { bytes: content, filename: 'same.txt' })));
    for (const res of results) assert.equal(res.statusCode, 200, res.body);
    const bodies = results.map((res) => res.json());
    const created = bodies.filter((b) => !b.deduplicated);
    const duplicates = bodies.filter((b) => b.deduplicated);
    assert.equal(created.length, 1);
    assert.equal(duplicates.length, 9);
    for (const dup of duplicates) {
      assert.deepEqual(Object.keys(dup).sort(), ['deduplicated', 'file', 'message', 'success']);
      assert.deepEqual(Object.keys(dup.file).sort(), ['id', 'status']);
      assert.equal(dup.file.id, created[0].file.id);
      assert.match(dup.message, /identical file is already in this library/);
    }
    const sha = crypto.createHash('sha256').update(content).digest('hex');
    assert.equal((await fileRows(ws.id)).filter((r) => r.sha256 === sha).length, 1);
    assert.equal(blobFiles().length, blobsBefore + 1, "the losers' blobs were deleted");
    // Another workspace may hold the same content: libraries are separate.
    const elsewhere = await uploadKbFile(rt, other.key.fullKey, { bytes: content, filename: 'same.txt' });
    assert.equal(elsewhere.json().deduplicated, undefined);
    assert.notEqual(elsewhere.json().file.id, created[0].file.id);
  });

  test('list: newest first, include=attachment_count, cursor pages', async () => {
    const scratch = await createWorkspace(rt, owner, 'Paging Co');
    const scratchKey = await createKey(rt, owner, scratch);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await uploadText(`page file ${i} ${crypto.randomUUID()}`, `f${i}.txt`, scratchKey.fullKey)).file.id);
    const assistant = await newAssistant(scratchKey.fullKey);
    await call(rt, { method: 'POST', url: `/api/assistants/${assistant}/knowledge-base`, headers: bearer(scratchKey.fullKey), payload: { file_id: ids[4] } });

    const plain = (await call(rt, { method: 'GET', url: '/api/kb/files', headers: bearer(scratchKey.fullKey) })).json();
    assert.deepEqual(plain.files.map((f: { id: string }) => f.id), [...ids].reverse());
    assert.equal(plain.next_cursor, null);
    assert.equal(plain.files[0].attachment_count, undefined);

    const counts = async () =>
      (await call(rt, { method: 'GET', url: '/api/kb/files?include=attachment_count', headers: bearer(scratchKey.fullKey) })).json().files.map((f: { attachment_count: number }) => f.attachment_count);
    assert.deepEqual(await counts(), [1, 0, 0, 0, 0]);
    // A deleted assistant no longer uses the file (assistants are deleted softly; their attachment rows stay).
    const deleted = await newAssistant(scratchKey.fullKey);
    await call(rt, { method: 'POST', url: `/api/assistants/${deleted}/knowledge-base`, headers: bearer(scratchKey.fullKey), payload: { file_id: ids[4] } });
    assert.deepEqual(await counts(), [2, 0, 0, 0, 0]);
    await call(rt, { method: 'DELETE', url: `/api/assistants/${deleted}`, headers: bearer(scratchKey.fullKey) });
    assert.deepEqual(await counts(), [1, 0, 0, 0, 0]);

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const url: string = `/api/kb/files?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const page = (await call(rt, { method: 'GET', url, headers: bearer(scratchKey.fullKey) })).json();
      assert.ok(page.files.length <= 2);
      seen.push(...page.files.map((f: { id: string }) => f.id));
      cursor = page.next_cursor;
    } while (cursor);
    assert.deepEqual(seen, [...ids].reverse());
    // A cursor survives the deletion of the file it points after.
    const first = (await call(rt, { method: 'GET', url: '/api/kb/files?limit=2', headers: bearer(scratchKey.fullKey) })).json();
    await call(rt, { method: 'DELETE', url: `/api/kb/files/${first.files[1].id}`, headers: bearer(scratchKey.fullKey) });
    const next = (await call(rt, { method: 'GET', url: `/api/kb/files?limit=2&cursor=${encodeURIComponent(first.next_cursor)}`, headers: bearer(scratchKey.fullKey) })).json();
    assert.deepEqual(next.files.map((f: { id: string }) => f.id), [ids[2], ids[1]]);

    assertError(await inject('GET', '/api/kb/files?cursor=bm9wZQ', scratchKey.fullKey), 400, 'validation_failed');
    assertError(await inject('GET', '/api/kb/files?limit=0', scratchKey.fullKey), 400, 'validation_failed');
    assertError(await inject('GET', '/api/kb/files?include=everything', scratchKey.fullKey), 400, 'validation_failed');
  });

  test('get and download: the signed URL serves the original bytes and name for 5 minutes', async () => {
    const text = `Download me ${crypto.randomUUID()}`;
    const { file } = await uploadText(text, 'report final.txt');
    const got = (await call(rt, { method: 'GET', url: `/api/kb/files/${file.id}`, headers: bearer(key.fullKey) })).json();
    assert.deepEqual(Object.keys(got).sort(), ['file', 'success']);
    assert.equal(got.file.id, file.id);
    const link = (await call(rt, { method: 'GET', url: `/api/kb/files/${file.id}/download`, headers: bearer(key.fullKey) })).json();
    assert.deepEqual(Object.keys(link).sort(), ['filename', 'url'], 'no success field');
    assert.equal(link.filename, 'report final.txt');
    const url = new URL(link.url);
    const ttl = Number(url.searchParams.get('expires')) - Date.now() / 1000;
    assert.ok(ttl > 290 && ttl <= 301, `valid about 5 minutes, got ${ttl}s`);
    const bytes = await rt.app!.inject({ method: 'GET', url: `${url.pathname}${url.search}` });
    assert.equal(bytes.statusCode, 200);
    assert.equal(bytes.body, text);
    assert.match(String(bytes.headers['content-disposition']), /attachment; filename="report final\.txt"/);
  });

  test('attach is idempotent, lists in order, detach only detaches; files and assistants of other workspaces are 404', async () => {
    const a = (await uploadText(`attach a ${crypto.randomUUID()}`, 'a.txt')).file.id;
    const b = (await uploadText(`attach b ${crypto.randomUUID()}`, 'b.txt')).file.id;
    const base = `/api/assistants/${assistantId}/knowledge-base`;
    assert.deepEqual((await call(rt, { method: 'POST', url: base, headers: bearer(key.fullKey), payload: { file_id: a } })).json(), { success: true });
    assert.deepEqual((await call(rt, { method: 'POST', url: base, headers: bearer(key.fullKey), payload: { file_id: a } })).json(), { success: true, idempotent: true });
    await call(rt, { method: 'POST', url: base, headers: bearer(owner.accessToken), payload: { file_id: b } });
    const listed = (await call(rt, { method: 'GET', url: base, headers: bearer(key.fullKey) })).json();
    assert.deepEqual(Object.keys(listed).sort(), ['files', 'success']);
    assert.deepEqual(listed.files.map((f: { id: string }) => f.id).filter((id: string) => id === a || id === b), [a, b]);

    const theirs = (await uploadText(`their file ${crypto.randomUUID()}`, 't.txt', other.key.fullKey)).file.id;
    assertError(await inject('POST', base, key.fullKey, { file_id: theirs }), 404, 'not_found', /Knowledge-base file not found/);
    assertError(await inject('POST', base, key.fullKey, { file_id: 'nope' }), 404, 'not_found');
    assertError(await inject('POST', `/api/assistants/${other.assistantId}/knowledge-base`, key.fullKey, { file_id: a }), 404, 'not_found', /Assistant not found/);
    assertError(await inject('GET', `/api/assistants/${other.assistantId}/knowledge-base`, key.fullKey), 404, 'not_found');
    assertError(await inject('POST', base, key.fullKey, {}), 400, 'validation_failed');

    assert.deepEqual((await call(rt, { method: 'DELETE', url: `${base}/${a}`, headers: bearer(key.fullKey) })).json(), { success: true });
    assert.deepEqual((await call(rt, { method: 'DELETE', url: `${base}/${a}`, headers: bearer(key.fullKey) })).json(), { success: true, idempotent: true });
    assertError(await inject('DELETE', `${base}/${theirs}`, key.fullKey), 404, 'not_found');
    assert.equal((await call(rt, { method: 'GET', url: `/api/kb/files/${a}`, headers: bearer(key.fullKey) })).json().file.id, a, 'still in the library');
  });

  test('delete removes the row, chunks, attachments and blob; no refund; then 404', async () => {
    const { file } = await uploadText(`Delete me. The lighthouse keeper logs the weather every hour. ${crypto.randomUUID()}`, 'delete-me.txt');
    const ready = await kbFileReaches(rt, key.fullKey, file.id);
    assert.equal(ready.status, 'ready', String(ready.status_error));
    await call(rt, { method: 'POST', url: `/api/assistants/${assistantId}/knowledge-base`, headers: bearer(key.fullKey), payload: { file_id: file.id } });
    const row = await rt.db.kysely.selectFrom('kb_files').select(['blob_key']).where('id', '=', file.id).executeTakeFirstOrThrow();
    assert.ok(blobFiles().includes(row.blob_key));
    const chunks = () => rt.db.kysely.selectFrom('kb_chunks').select('id').where('file_id', '=', file.id).execute();
    assert.ok((await chunks()).length > 0);
    const link = (await call(rt, { method: 'GET', url: `/api/kb/files/${file.id}/download`, headers: bearer(key.fullKey) })).json().url as string;

    assert.deepEqual((await call(rt, { method: 'DELETE', url: `/api/kb/files/${file.id}`, headers: bearer(key.fullKey) })).json(), { success: true });
    assert.equal((await chunks()).length, 0);
    assert.ok(!blobFiles().includes(row.blob_key), 'the blob is gone');
    const attachments = await rt.db.kysely.selectFrom('kb_attachments').select('file_id').where('file_id', '=', file.id).execute();
    assert.equal(attachments.length, 0);
    const stale = new URL(link);
    assert.equal((await rt.app!.inject({ method: 'GET', url: `${stale.pathname}${stale.search}` })).statusCode, 404);
    for (const [method, url] of [
      ['GET', `/api/kb/files/${file.id}`],
      ['DELETE', `/api/kb/files/${file.id}`],
      ['GET', `/api/kb/files/${file.id}/download`],
      ['POST', `/api/kb/files/${file.id}/reprocess`],
    ] as const) {
      assertError(await inject(method, url, key.fullKey), 404, 'not_found');
    }
  });

  test("another workspace's key gets 404 on every file route, and the file is untouched", async () => {
    const { file } = await uploadText(`Private ${crypto.randomUUID()}`, 'private.txt');
    const routes = [
      ['GET', `/api/kb/files/${file.id}`],
      ['GET', `/api/kb/files/${file.id}/download`],
      ['POST', `/api/kb/files/${file.id}/reprocess`],
      ['DELETE', `/api/kb/files/${file.id}`],
      ['GET', `/api/kb/files/${file.id}?accountSlug=${ws.slug}`],
      ['DELETE', `/api/assistants/${assistantId}/knowledge-base/${file.id}`],
      ['GET', `/api/assistants/${assistantId}/knowledge-base`],
    ] as const;
    for (const [method, url] of routes) {
      for (const token of [other.key.fullKey, other.user.accessToken]) {
        const res = await inject(method, url, token);
        assertError(res, 404, 'not_found');
        assert.ok(!res.body.includes('private.txt'), 'none of its data');
      }
    }
    assertError(await inject('POST', `/api/assistants/${other.assistantId}/knowledge-base`, other.key.fullKey, { file_id: file.id }), 404, 'not_found');
    assertError(await inject('POST', '/api/kb/search', other.key.fullKey, { assistant_id: assistantId, query: 'private' }), 404, 'not_found');
    const list = (await call(rt, { method: 'GET', url: '/api/kb/files', headers: bearer(other.key.fullKey) })).json();
    assert.ok(!list.files.some((f: { id: string }) => f.id === file.id));
    assertError(await inject('GET', `/api/kb/files?accountSlug=${ws.slug}`, other.key.fullKey), 404, 'not_found');
    assert.equal((await call(rt, { method: 'GET', url: `/api/kb/files/${file.id}`, headers: bearer(key.fullKey) })).json().file.id, file.id);
  });

  test('scopes: kb:read reads and searches, kb:write changes; others are 403', async () => {
    const { file } = await uploadText(`Scoped ${crypto.randomUUID()}`, 'scoped.txt');
    const reader = (await createKey(rt, owner, ws, { permissions: { scopes: ['kb:read'] } })).fullKey;
    const writer = (await createKey(rt, owner, ws, { permissions: { scopes: ['kb:write'] } })).fullKey;
    const wildcard = (await createKey(rt, owner, ws, { permissions: { scopes: ['kb:*'] } })).fullKey;
    const unrelated = (await createKey(rt, owner, ws, { permissions: { scopes: ['assistants:read'] } })).fullKey;
    const reads = [
      ['GET', '/api/kb/files'],
      ['GET', `/api/kb/files/${file.id}`],
      ['GET', `/api/kb/files/${file.id}/download`],
      ['GET', `/api/assistants/${assistantId}/knowledge-base`],
      ['POST', '/api/kb/search', { assistant_id: assistantId, query: 'scoped' }],
    ] as const;
    const writes = [
      ['POST', `/api/kb/files/${file.id}/reprocess`],
      ['POST', `/api/assistants/${assistantId}/knowledge-base`, { file_id: file.id }],
      ['DELETE', `/api/assistants/${assistantId}/knowledge-base/${file.id}`],
    ] as const;
    for (const [method, url, payload] of reads) {
      assert.equal((await inject(method, url, reader, payload)).statusCode, 200, `${method} ${url} with kb:read`);
      assertError(await inject(method, url, writer, payload), 403, 'forbidden', /lacks the scope kb:read/);
      assertError(await inject(method, url, unrelated, payload), 403, 'forbidden');
      assert.equal((await inject(method, url, wildcard, payload)).statusCode, 200);
    }
    for (const [method, url, payload] of writes) {
      assertError(await inject(method, url, reader, payload), 403, 'forbidden', /lacks the scope kb:write/);
      assert.equal((await inject(method, url, writer, payload)).statusCode, 200, `${method} ${url} with kb:write`);
    }
    assertError(await uploadKbFile(rt, reader, { bytes: 'read only', filename: 'r.txt' }), 403, 'forbidden', /kb:write/);
    assertError(await inject('DELETE', `/api/kb/files/${file.id}`, reader), 403, 'forbidden');
    assert.equal((await uploadKbFile(rt, writer, { bytes: `writer ${crypto.randomUUID()}`, filename: 'w.txt' })).statusCode, 200);
    assert.equal((await inject('DELETE', `/api/kb/files/${file.id}`, writer)).statusCode, 200);
    assertError(await rt.app!.inject({ method: 'GET', url: '/api/kb/files' }), 401, 'unauthorized');
  });

  test('search: §8 limits are 400 with field details; reasons no_files_attached, no_ready_files, no_matches', async () => {
    const search = (payload: object, token = key.fullKey) => inject('POST', '/api/kb/search', token, payload);
    const invalid: Array<[object, string]> = [
      [{ assistant_id: assistantId, query: '' }, 'query'],
      [{ assistant_id: assistantId, query: 'x'.repeat(2001) }, 'query'],
      [{ assistant_id: assistantId, query: '   ' }, 'query'],
      [{ assistant_id: assistantId }, 'query'],
      [{ query: 'hello' }, 'assistant_id'],
      [{ assistant_id: assistantId, query: 'hello', top_k: 0 }, 'top_k'],
      [{ assistant_id: assistantId, query: 'hello', top_k: 21 }, 'top_k'],
      [{ assistant_id: assistantId, query: 'hello', top_k: 2.5 }, 'top_k'],
      [{ assistant_id: assistantId, query: 'hello', mode: 'fuzzy' }, 'mode'],
    ];
    for (const [payload, field] of invalid) {
      const res = await search(payload);
      assertError(res, 400, 'validation_failed');
      assert.ok(res.json().details.some((d: { field: string }) => d.field === field), `${JSON.stringify(payload)}: ${res.body}`);
    }
    assert.equal((await search({ assistant_id: assistantId, query: 'x'.repeat(2000), top_k: 20 })).statusCode, 200);
    assertError(await search({ assistant_id: crypto.randomUUID(), query: 'hello' }), 404, 'not_found');

    const fresh = await newAssistant(key.fullKey);
    const unattached = await search({ assistant_id: fresh, query: 'anything' });
    assert.deepEqual(unattached.json(), { success: true, hits: [], reason: 'no_files_attached' });
    // The embedding metric is there only if the query was embedded before the search ended, which is a race here.
    assert.match(String(unattached.headers['server-timing']), /^search;dur=\d+\.\d(, embedding;dur=\d+\.\d)?$/);

    const blank = (await uploadText(' \n \n ', `blank-${crypto.randomUUID()}.txt`)).file.id;
    assert.equal((await kbFileReaches(rt, key.fullKey, blank)).status, 'failed');
    await call(rt, { method: 'POST', url: `/api/assistants/${fresh}/knowledge-base`, headers: bearer(key.fullKey), payload: { file_id: blank } });
    assert.deepEqual((await search({ assistant_id: fresh, query: 'anything' })).json(), { success: true, hits: [], reason: 'no_ready_files' });

    const text = `The lighthouse keeper records the wind speed at dawn. ${crypto.randomUUID()}`;
    const ready = (await uploadText(text, 'keeper.txt')).file.id;
    assert.equal((await kbFileReaches(rt, key.fullKey, ready)).status, 'ready');
    await call(rt, { method: 'POST', url: `/api/assistants/${fresh}/knowledge-base`, headers: bearer(key.fullKey), payload: { file_id: ready } });
    assert.deepEqual((await search({ assistant_id: fresh, query: 'photosynthesis chlorophyll', mode: 'keyword' })).json(), { success: true, hits: [], reason: 'no_matches' });
    const foundResponse = await search({ assistant_id: fresh, query: 'wind speed', mode: 'keyword' });
    const timing = /^search;dur=(\d+\.\d), embedding;dur=(\d+\.\d)$/.exec(String(foundResponse.headers['server-timing']));
    assert.ok(timing, `Server-Timing: ${foundResponse.headers['server-timing']}`);
    assert.ok(Number(timing[2]) > 0 && Number(timing[2]) <= Number(timing[1]), 'the embedding is part of the search');
    const found = foundResponse.json();
    assert.equal(found.reason, undefined);
    assert.deepEqual(Object.keys(found.hits[0]).sort(), ['adjacent', 'chunk_index', 'content', 'file_id', 'filename', 'match_type', 'page_number', 'rank', 'similarity']);
    assert.equal(found.hits[0].match_type, 'keyword');
    assert.equal(found.hits[0].file_id, ready, 'only ready files produce hits');
  });
});
