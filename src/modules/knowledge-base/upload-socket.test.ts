import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { createKey, createWorkspace, signUp, uniqueEmail, type TestKey, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import { FILE_MESSAGES, MAX_FILE_BYTES } from '../files/service.ts';

/**
 * Uploads refused part-way, over a real socket: the 400 must reach the
 * client every time, not a connection reset (src/platform/http/multipart.ts).
 */
const LIMIT = 1024 * 1024;
const MiB = 1024 * 1024;

describe('refused uploads over a real socket', () => {
  let rt: TestRuntime;
  let owner: TestUser;
  let ws: TestWorkspace;
  let key: TestKey;
  let origin: string;

  before(async () => {
    rt = await startTestRuntime({ KB_MAX_FILE_BYTES: String(LIMIT), ROLES: 'serve' });
    owner = await signUp(rt, uniqueEmail('kb-socket'));
    ws = await createWorkspace(rt, owner, 'Socket Co');
    key = await createKey(rt, owner, ws);
    origin = await rt.app!.listen({ port: 0, host: '127.0.0.1' });
  });
  after(async () => {
    await rt?.destroy();
  });

  function blobFiles(): string[] {
    const root = path.join(rt.config.dataDir, 'blobs');
    if (!fs.existsSync(root)) return [];
    return (fs.readdirSync(root, { recursive: true, withFileTypes: true }) as fs.Dirent[]).filter((e) => e.isFile()).map((e) => e.name);
  }

  function textForm(bytes: number, field = 'file'): FormData {
    const form = new FormData();
    form.append(field, new Blob([Buffer.alloc(bytes, 'all work and no play. ')]), 'big.txt');
    return form;
  }

  test('fetch (keep-alive): twenty times the limit answers the 400 body on every attempt, leaving nothing', async () => {
    for (let attempt = 0; attempt < 5; attempt++) {
      const res = await fetch(`${origin}/api/kb/files`, { method: 'POST', headers: { authorization: `Bearer ${key.fullKey}` }, body: textForm(20 * LIMIT) });
      assert.equal(res.status, 400, `attempt ${attempt}`);
      const body = (await res.json()) as { error: string; message: string; code: number };
      assert.equal(body.error, 'bad_request');
      assert.equal(body.code, 400);
      assert.match(body.message, new RegExp(`limit is ${LIMIT} bytes`));
    }
    const rows = await rt.db.kysely.selectFrom('kb_files').select('id').where('account_id', '=', ws.id).execute();
    assert.equal(rows.length, 0);
    assert.deepEqual(blobFiles(), [], 'no blob and no temporary file');
  });

  /**
   * Many clients (Python's requests, curl without 100-continue, simple
   * scripts) send the whole body before they read the answer. This one does
   * exactly that over a raw socket: the answer waits in the kernel until the
   * last byte is written, so a server that stops reading (the client blocks)
   * or closes with bytes unread (a reset discards the answer) fails it.
   */
  async function postThenRead(url: string, headers: Record<string, string>, form: FormData): Promise<{ status: number; body: string }> {
    const request = new Request(url, { method: 'POST', body: form });
    const body = Buffer.from(await request.arrayBuffer());
    const { hostname, port, pathname } = new URL(url);
    const head =
      `POST ${pathname} HTTP/1.1\r\nhost: ${hostname}:${port}\r\ncontent-type: ${request.headers.get('content-type')}\r\ncontent-length: ${body.length}\r\n` +
      Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('') +
      '\r\n';
    return new Promise((resolve, reject) => {
      const socket = net.connect(Number(port), hostname);
      socket.setTimeout(20_000, () => socket.destroy(new Error('no answer within 20 s: the server stopped reading the body')));
      socket.pause();
      const received: Buffer[] = [];
      socket.on('error', reject);
      socket.on('data', (chunk: Buffer) => received.push(chunk));
      socket.on('end', () => {
        const text = Buffer.concat(received).toString('utf8');
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
        resolve({ status, body: text.slice(text.indexOf('\r\n\r\n') + 4) });
      });
      void (async () => {
        socket.write(head);
        for (let at = 0; at < body.length; at += 64 * 1024) {
          if (!socket.write(body.subarray(at, at + 64 * 1024))) await new Promise((drained) => socket.once('drain', drained));
        }
        // Only now read; `connection: close` makes the server end the connection after its answer.
        socket.resume();
      })().catch(reject);
    });
  }

  test('a client that reads only after sending everything gets the 400 body every time (keep-alive and Connection: close)', async () => {
    for (let attempt = 0; attempt < 4; attempt++) {
      const res = await postThenRead(`${origin}/api/kb/files`, { authorization: `Bearer ${key.fullKey}`, connection: 'close' }, textForm(20 * LIMIT));
      assert.equal(res.status, 400, `attempt ${attempt}: ${res.body}`);
      assert.match(JSON.parse(res.body).message, /too large/);
    }
    // A type refused at its first bytes is answered the same way, on a keep-alive connection too.
    const binary = new FormData();
    binary.append('file', new Blob([Buffer.alloc(10 * LIMIT, 0)]), 'zeros.bin');
    const refused = await postThenRead(`${origin}/api/kb/files`, { authorization: `Bearer ${key.fullKey}`, connection: 'close' }, binary);
    assert.equal(refused.status, 400, refused.body);
    assert.match(JSON.parse(refused.body).message, /Unsupported file type/);
    assert.deepEqual(blobFiles(), []);
  });

  test('workspace files (/api/files) share the behaviour', async () => {
    const form = new FormData();
    form.append('accountId', ws.id);
    form.append('file', new Blob([Buffer.alloc(MAX_FILE_BYTES + 8 * MiB, 1)]), 'huge.bin');
    const res = await postThenRead(`${origin}/api/files`, { cookie: `sb-access-token=${owner.accessToken}`, connection: 'close' }, form);
    assert.equal(res.status, 400, res.body);
    assert.deepEqual(JSON.parse(res.body), { error: FILE_MESSAGES.tooLarge });
  });
});
