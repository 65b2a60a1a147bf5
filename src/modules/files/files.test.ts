import type { AddressInfo } from 'node:net';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { LightMyRequestResponse } from 'fastify';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { addMember, bearer, createKey, createWorkspace, sessionCookie, signUp, uniqueEmail, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import { FILE_MESSAGES, MAX_FILE_BYTES } from './service.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const MiB = 1024 * 1024;

describe('workspace files: /api/files', () => {
  let rt: TestRuntime;
  let owner: TestUser;
  let ws: TestWorkspace;
  let outsider: TestUser;
  let outsiderWs: TestWorkspace;
  before(async () => {
    rt = await startTestRuntime();
    owner = await signUp(rt, uniqueEmail('files-owner'));
    ws = await createWorkspace(rt, owner, 'Files Co');
    outsider = await signUp(rt, uniqueEmail('files-outsider'));
    outsiderWs = await createWorkspace(rt, outsider, 'Outsider Files');
  });
  after(async () => {
    await rt?.destroy();
  });

  type Part = [name: string, file: Blob, filename: string] | [name: string, value: string];

  /** A multipart body with the parts in exactly this order. */
  function form(...parts: Part[]): FormData {
    const body = new FormData();
    for (const part of parts) {
      if (part.length === 3) body.append(part[0], part[1], part[2]);
      else body.append(part[0], part[1]);
    }
    return body;
  }

  function upload(user: TestUser, body: FormData): Promise<LightMyRequestResponse> {
    return rt.app!.inject({ method: 'POST', url: '/api/files', ...sessionCookie(user.accessToken), payload: body });
  }

  function query(method: 'GET' | 'DELETE', user: TestUser, params: Record<string, string>) {
    return rt.app!.inject({ method, url: `/api/files?${new URLSearchParams(params)}`, ...sessionCookie(user.accessToken) });
  }

  /** Follows a signed URL: local storage serves it from this app under /api/blobs/. */
  function download(url: string) {
    const parsed = new URL(url);
    return rt.app!.inject({ method: 'GET', url: `${parsed.pathname}${parsed.search}` });
  }

  /** Every file under the local blob root, temporary uploads included. */
  function blobFiles(): string[] {
    const root = path.join(rt.config.dataDir, 'blobs');
    if (!fs.existsSync(root)) return [];
    return (fs.readdirSync(root, { recursive: true, withFileTypes: true }) as fs.Dirent[])
      .filter((entry) => entry.isFile())
      .map((entry) => path.join(entry.parentPath ?? entry.path, entry.name));
  }

  async function rowCount(accountId: string): Promise<number> {
    const rows = await rt.db.kysely.selectFrom('workspace_files').select(['id']).where('account_id', '=', accountId).execute();
    return rows.length;
  }

  function assertError(res: LightMyRequestResponse, status: number, message: string) {
    assert.equal(res.statusCode, status, res.body);
    assert.deepEqual(res.json(), { error: message });
  }

  test('uploads with fields first, answers §2.6 data, and the signed URL returns the same bytes and name', async () => {
    const bytes = crypto.randomBytes(200_000);
    const res = await upload(owner, form(['accountId', ws.id], ['displayName', 'Quarterly report'], ['file', new Blob([bytes], { type: 'application/pdf' }), 'report-q1.pdf']));
    assert.equal(res.statusCode, 200, res.body);
    const { data } = res.json();
    assert.deepEqual(Object.keys(data).sort(), ['account_id', 'created_at', 'file_type', 'id', 'name', 'size']);
    assert.match(data.id, UUID);
    assert.equal(data.name, 'Quarterly report');
    assert.equal(data.size, bytes.length);
    assert.equal(data.file_type, 'application/pdf');
    assert.equal(data.account_id, ws.id);
    assert.ok(!Number.isNaN(Date.parse(data.created_at)));

    const link = await query('GET', owner, { fileId: data.id, accountId: ws.id });
    assert.equal(link.statusCode, 200, link.body);
    assert.deepEqual(Object.keys(link.json()), ['url']);
    const url = new URL(link.json().url);
    const expires = Number(url.searchParams.get('expires'));
    const ttl = expires - Date.now() / 1000;
    assert.ok(ttl > 590 && ttl <= 601, `valid about 10 minutes, got ${ttl}s`);

    const got = await download(link.json().url);
    assert.equal(got.statusCode, 200, got.body);
    assert.ok(got.rawPayload.equals(bytes), 'identical bytes');
    assert.match(String(got.headers['content-disposition']), /filename="report-q1\.pdf"/, 'the original file name, not the display name');
    assert.equal(got.headers['content-type'], 'application/pdf');
  });

  test('accepts the fields after the file; the display name defaults to the file name', async () => {
    const bytes = Buffer.from('hello, workspace\n');
    const res = await upload(owner, form(['file', new Blob([bytes], { type: 'text/plain' }), 'notes.txt'], ['accountId', ws.id]));
    assert.equal(res.statusCode, 200, res.body);
    const { data } = res.json();
    assert.equal(data.name, 'notes.txt');
    assert.equal(data.file_type, 'text/plain');
    assert.equal(data.size, bytes.length);
    const got = await download((await query('GET', owner, { fileId: data.id, accountId: ws.id })).json().url);
    assert.equal(got.body, 'hello, workspace\n');

    // No type on the part: the generic MIME type.
    const untyped = await upload(owner, form(['file', new Blob([bytes]), 'data.bin'], ['displayName', '  '], ['accountId', ws.id]));
    assert.equal(untyped.statusCode, 200, untyped.body);
    assert.equal(untyped.json().data.file_type, 'application/octet-stream');
    assert.equal(untyped.json().data.name, 'data.bin', 'a blank displayName means the file name');
  });

  test('any member may upload; the Bearer session token works like the cookie', async () => {
    const member = await addMember(rt, ws, owner, 'member');
    const res = await rt.app!.inject({
      method: 'POST',
      url: '/api/files',
      headers: bearer(member.accessToken),
      payload: form(['accountId', ws.id], ['file', new Blob(['x']), 'x.txt']),
    });
    assert.equal(res.statusCode, 200, res.body);
    const link = await rt.app!.inject({ method: 'GET', url: `/api/files?fileId=${res.json().data.id}&accountId=${ws.id}`, headers: bearer(member.accessToken) });
    assert.equal(link.statusCode, 200, link.body);
  });

  test('25 MB means 25 MiB: exactly 26,214,400 bytes is stored', async () => {
    assert.equal(MAX_FILE_BYTES, 25 * MiB);
    const bytes = Buffer.alloc(MAX_FILE_BYTES, 7);
    const res = await upload(owner, form(['accountId', ws.id], ['file', new Blob([bytes]), 'exact.bin']));
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().data.size, MAX_FILE_BYTES);
    const row = await rt.db.kysely.selectFrom('workspace_files').select(['sha256']).where('id', '=', res.json().data.id).executeTakeFirstOrThrow();
    assert.equal(row.sha256, crypto.createHash('sha256').update(bytes).digest('hex'));
  });

  test('one byte more is 400 with the §7 message, leaving no row and no blob (fields before or after)', async () => {
    const scratch = await createWorkspace(rt, owner, 'Too Large');
    const before = blobFiles().length;
    const bytes = Buffer.alloc(MAX_FILE_BYTES + 1, 1);
    for (const body of [
      form(['accountId', scratch.id], ['file', new Blob([bytes]), 'big.bin']),
      form(['file', new Blob([bytes]), 'big.bin'], ['accountId', scratch.id]),
    ]) {
      assertError(await upload(owner, body), 400, FILE_MESSAGES.tooLarge);
    }
    // Far larger: the parser stops buffering at the limit, the answer is the same.
    assertError(await upload(owner, form(['accountId', scratch.id], ['file', new Blob([Buffer.alloc(MAX_FILE_BYTES + 3 * MiB)]), 'huge.bin'])), 400, FILE_MESSAGES.tooLarge);
    assert.equal(await rowCount(scratch.id), 0);
    assert.equal(blobFiles().length, before, 'nothing new under the blob root, temporary files included');
  });

  test('missing file or accountId is 400 `file and accountId are required`, and nothing is kept', async () => {
    const before = blobFiles().length;
    const rowsBefore = await rowCount(ws.id);
    const cases = [
      form(['file', new Blob(['orphan bytes']), 'a.txt']),
      form(['file', new Blob(['orphan bytes']), 'a.txt'], ['accountId', '']),
      form(['accountId', ws.id]),
      form(['accountId', ws.id], ['displayName', 'no file']),
      form(['accountId', ws.id], ['attachment', new Blob(['wrong field']), 'a.txt']),
      form(),
    ];
    for (const body of cases) assertError(await upload(owner, body), 400, FILE_MESSAGES.uploadFieldsMissing);
    // A browser form with no file chosen sends an empty part with an empty file name.
    const emptyChoice = new FormData();
    emptyChoice.append('accountId', ws.id);
    emptyChoice.append('file', new File([], ''));
    assertError(await upload(owner, emptyChoice), 400, FILE_MESSAGES.uploadFieldsMissing);
    assert.equal(blobFiles().length, before);
    assert.equal(await rowCount(ws.id), rowsBefore);
  });

  test("another workspace's member is 403 `Unauthorized` and their upload is not kept", async () => {
    const before = blobFiles().length;
    const rowsBefore = await rowCount(ws.id);
    for (const body of [
      form(['accountId', ws.id], ['file', new Blob(['intruder']), 'i.txt']),
      form(['file', new Blob(['intruder']), 'i.txt'], ['accountId', ws.id]),
      form(['file', new Blob(['intruder']), 'i.txt'], ['accountId', 'not-a-uuid']),
      form(['file', new Blob(['intruder']), 'i.txt'], ['accountId', '00000000-0000-4000-8000-000000000000']),
    ]) {
      assertError(await upload(outsider, body), 403, FILE_MESSAGES.unauthorized);
    }
    assert.equal(blobFiles().length, before);
    assert.equal(await rowCount(ws.id), rowsBefore);

    const mine = (await upload(owner, form(['accountId', ws.id], ['file', new Blob(['secret']), 's.txt']))).json().data;
    assertError(await query('GET', outsider, { fileId: mine.id, accountId: ws.id }), 403, FILE_MESSAGES.unauthorized);
    assertError(await query('DELETE', outsider, { fileId: mine.id, accountId: ws.id }), 403, FILE_MESSAGES.unauthorized);
    assert.equal((await query('GET', owner, { fileId: mine.id, accountId: ws.id })).statusCode, 200, 'still there');
  });

  test('unknown file ids and files of another workspace are 404 `File not found`', async () => {
    const theirs = (await upload(outsider, form(['accountId', outsiderWs.id], ['file', new Blob(['theirs']), 't.txt']))).json().data;
    for (const fileId of [crypto.randomUUID(), 'not-a-uuid', theirs.id]) {
      assertError(await query('GET', owner, { fileId, accountId: ws.id }), 404, FILE_MESSAGES.notFound);
      assertError(await query('DELETE', owner, { fileId, accountId: ws.id }), 404, FILE_MESSAGES.notFound);
    }
    // A member of both workspaces still reaches a file only through its own workspace.
    await addMember(rt, outsiderWs, outsider, 'member', owner);
    assertError(await query('GET', owner, { fileId: theirs.id, accountId: ws.id }), 404, FILE_MESSAGES.notFound);
    assert.equal((await query('GET', owner, { fileId: theirs.id, accountId: outsiderWs.id })).statusCode, 200);
  });

  test('missing query parameters are 400 `fileId and accountId are required`', async () => {
    for (const method of ['GET', 'DELETE'] as const) {
      for (const params of [{}, { fileId: crypto.randomUUID() }, { accountId: ws.id }, { fileId: '', accountId: ws.id }] as Array<Record<string, string>>) {
        assertError(await query(method, owner, params), 400, FILE_MESSAGES.queryFieldsMissing);
      }
    }
  });

  test('delete removes the row and the blob for good; the old signed URL stops working', async () => {
    const before = blobFiles().length;
    const data = (await upload(owner, form(['accountId', ws.id], ['file', new Blob(['short-lived']), 'tmp.txt']))).json().data;
    assert.equal(blobFiles().length, before + 1);
    const url = (await query('GET', owner, { fileId: data.id, accountId: ws.id })).json().url;
    assert.equal((await download(url)).statusCode, 200);

    const res = await query('DELETE', owner, { fileId: data.id, accountId: ws.id });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { success: true });
    assert.equal((await download(url)).statusCode, 404);
    assert.equal(blobFiles().length, before);
    assert.equal(await rt.db.kysely.selectFrom('workspace_files').select(['id']).where('id', '=', data.id).executeTakeFirst(), undefined);
    assertError(await query('GET', owner, { fileId: data.id, accountId: ws.id }), 404, FILE_MESSAGES.notFound);
    assertError(await query('DELETE', owner, { fileId: data.id, accountId: ws.id }), 404, FILE_MESSAGES.notFound);
  });

  test('refuses other credentials and bodies in the {error} shape', async () => {
    const noAuth = await rt.app!.inject({ method: 'GET', url: `/api/files?fileId=${crypto.randomUUID()}&accountId=${ws.id}` });
    assert.equal(noAuth.statusCode, 401);
    assert.deepEqual(Object.keys(noAuth.json()), ['error']);

    // §5 rule 9: files accept sessions only, not API keys.
    const key = await createKey(rt, owner, ws);
    const byKey = await rt.app!.inject({ method: 'POST', url: '/api/files', headers: bearer(key.fullKey), payload: form(['accountId', ws.id], ['file', new Blob(['k']), 'k.txt']) });
    assert.equal(byKey.statusCode, 401);
    assert.deepEqual(Object.keys(byKey.json()), ['error']);

    const json = await rt.app!.inject({ method: 'POST', url: '/api/files', ...sessionCookie(owner.accessToken), payload: { accountId: ws.id } });
    assert.equal(json.statusCode, 415);
    assert.deepEqual(Object.keys(json.json()), ['error']);
    const other = await rt.app!.inject({
      method: 'POST',
      url: '/api/files',
      ...sessionCookie(owner.accessToken),
      headers: { 'content-type': 'application/octet-stream' },
      payload: Buffer.from('raw'),
    });
    assert.equal(other.statusCode, 415);
    assert.deepEqual(Object.keys(other.json()), ['error']);
  });

  test('malformed multipart bodies and extra files are 400 in the {error} shape, leaving nothing', async () => {
    const before = blobFiles().length;
    const broken = await rt.app!.inject({
      method: 'POST',
      url: '/api/files',
      ...sessionCookie(owner.accessToken),
      headers: { 'content-type': 'multipart/form-data' },
      payload: 'no boundary here',
    });
    assert.equal(broken.statusCode, 400, broken.body);
    assert.deepEqual(Object.keys(broken.json()), ['error']);

    const twoFiles = await upload(owner, form(['accountId', ws.id], ['file', new Blob(['one']), '1.txt'], ['file', new Blob(['two']), '2.txt']));
    assert.equal(twoFiles.statusCode, 400, twoFiles.body);
    assert.deepEqual(Object.keys(twoFiles.json()), ['error']);

    const longName = await upload(owner, form(['accountId', ws.id], ['displayName', 'n'.repeat(256)], ['file', new Blob(['x']), 'x.txt']));
    assertError(longName, 400, 'displayName must be at most 255 characters');
    assert.equal(blobFiles().length, before);
  });

  test('over a real connection, an oversized upload gets its 400 answer', async () => {
    const address = await rt.app!.listen({ host: '127.0.0.1', port: 0 });
    const res = await fetch(`${address}/api/files`, {
      method: 'POST',
      headers: { cookie: `sb-access-token=${owner.accessToken}` },
      // One byte over: the limit trips at the end of the body, so the server's early
      // answer never races the client's upload (a socket closed with unread bytes
      // is reset, and the reset can swallow the answer).
      body: form(['accountId', ws.id], ['file', new Blob([Buffer.alloc(MAX_FILE_BYTES + 1)]), 'big.bin']),
    });
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), { error: FILE_MESSAGES.tooLarge });

    const ok = await fetch(`${address}/api/files`, {
      method: 'POST',
      headers: { cookie: `sb-access-token=${owner.accessToken}` },
      body: form(['file', new Blob(['over the wire']), 'wire.txt'], ['accountId', ws.id]),
    });
    assert.equal(ok.status, 200);
    const { data } = (await ok.json()) as { data: { id: string } };
    const link = (await (await fetch(`${address}/api/files?fileId=${data.id}&accountId=${ws.id}`, { headers: { cookie: `sb-access-token=${owner.accessToken}` } })).json()) as {
      url: string;
    };
    const parsed = new URL(link.url);
    const got = await fetch(`${address}${parsed.pathname}${parsed.search}`);
    assert.equal(await got.text(), 'over the wire');
  });

  // Found by the fuzz gate (test/gates): the parser's error reached the route through the file's stream, as a 500.
  test('over a real connection, a body that ends inside the file part is 400 in the {error} shape, leaving nothing', async () => {
    const address = `http://127.0.0.1:${(rt.app!.server.address() as AddressInfo | null)?.port ?? new URL(await rt.app!.listen({ host: '127.0.0.1', port: 0 })).port}`;
    const before = await rt.db.kysely.selectFrom('workspace_files').select(({ fn }) => fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    for (const fieldsFirst of [true, false]) {
      const accountPart = `--cut\r\nContent-Disposition: form-data; name="accountId"\r\n\r\n${ws.id}\r\n`;
      const filePart = '--cut\r\nContent-Disposition: form-data; name="file"; filename="cut.txt"\r\nContent-Type: text/plain\r\n\r\nthe body stops here';
      const res = await fetch(`${address}/api/files`, {
        method: 'POST',
        headers: { cookie: `sb-access-token=${owner.accessToken}`, 'content-type': 'multipart/form-data; boundary=cut' },
        body: fieldsFirst ? accountPart + filePart : filePart,
      });
      assert.equal(res.status, 400, `fields first: ${fieldsFirst}`);
      const body = (await res.json()) as Record<string, unknown>;
      assert.deepEqual(Object.keys(body), ['error']);
    }
    const afterwards = await rt.db.kysely.selectFrom('workspace_files').select(({ fn }) => fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    assert.equal(afterwards.n, before.n);
  });
});
