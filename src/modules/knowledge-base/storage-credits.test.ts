import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, call, createKey, createWorkspace, signUp, uniqueEmail, uploadKbFile, type TestKey, type TestWorkspace } from '../../../test/fixtures.ts';
import { creditsService } from '../credits/service.ts';
import { blocksNeeded, FREE_STORAGE_BYTES, storageCharge, STORAGE_BLOCK_BYTES } from './storage-credits.ts';

const MiB = 1024 * 1024;

describe('knowledge-base storage credits: the rule', () => {
  test('50 MiB free, then one block per started 50 MiB', () => {
    assert.equal(FREE_STORAGE_BYTES, 50 * MiB);
    assert.equal(STORAGE_BLOCK_BYTES, 50 * MiB);
    const cases: Array<[number, number]> = [
      [0, 0],
      [50 * MiB, 0],
      [50 * MiB + 1, 1],
      [100 * MiB, 1],
      [100 * MiB + 1, 2],
      [1024 * MiB, 20],
      [1024 * MiB + 1, 20],
      [1050 * MiB + 1, 21],
    ];
    for (const [bytes, blocks] of cases) assert.equal(blocksNeeded(bytes), blocks, `${bytes} bytes`);
  });

  test('an upload pays only for blocks beyond the paid high-water mark; lower totals never refund', () => {
    assert.deepEqual(storageCharge(40 * MiB, 0), { credits: 0, paidBlocks: 0 });
    assert.deepEqual(storageCharge(120 * MiB, 0), { credits: 2, paidBlocks: 2 }, 'one upload can cross several blocks');
    assert.deepEqual(storageCharge(130 * MiB, 2), { credits: 0, paidBlocks: 2 }, 'room already paid for');
    assert.deepEqual(storageCharge(150 * MiB + 1, 2), { credits: 1, paidBlocks: 3 });
    assert.deepEqual(storageCharge(10 * MiB, 3), { credits: 0, paidBlocks: 3 }, 'after deletes the mark stays');
  });
});

/**
 * The rule through the API with real bytes: one upload of exactly 50 MiB
 * fills the free allowance, so the next byte stored needs a block. Tiny
 * files then exercise the charge, the 402, the paid room and the
 * no-refund-on-delete rule without uploading 50 MiB again; crossing into
 * later blocks is the same arithmetic, covered above. No worker runs
 * (ROLES=serve): storage is charged at upload, processing plays no part.
 */
describe('knowledge-base storage credits over HTTP', () => {
  let rt: TestRuntime;
  let ws: TestWorkspace;
  let key: TestKey;

  before(async () => {
    rt = await startTestRuntime({ ROLES: 'serve' });
    const owner = await signUp(rt, uniqueEmail('kb-credits'));
    ws = await createWorkspace(rt, owner, 'Storage Co');
    key = await createKey(rt, owner, ws);
  });
  after(async () => {
    await rt?.destroy();
  });

  const balance = async () => (await creditsService(rt).balance(ws.id)).credits;
  const upload = (bytes: Buffer | string, filename: string) => uploadKbFile(rt, key.fullKey, { bytes, filename });
  const tiny = (label: string) => `tiny file ${label} ${crypto.randomUUID()}\n`;
  const blobCount = () => {
    const root = path.join(rt.config.dataDir, 'blobs');
    return fs.existsSync(root) ? (fs.readdirSync(root, { recursive: true, withFileTypes: true }) as fs.Dirent[]).filter((e) => e.isFile()).length : 0;
  };
  const kbLedger = () => rt.db.kysely.selectFrom('credit_ledger').select(['amount', 'reference', 'metadata']).where('account_id', '=', ws.id).where('reason', '=', 'kb_storage').execute();

  test('exactly 50 MiB is free; the next byte needs a credit: 402 with nothing kept, then charged once credits exist', async () => {
    const big = await upload(Buffer.alloc(FREE_STORAGE_BYTES, 'free allowance text. '), 'fifty.txt');
    assert.equal(big.statusCode, 200, big.body);
    assert.equal(big.json().credits_charged, 0);
    assert.equal(big.json().file.size_bytes, FREE_STORAGE_BYTES);

    const rowsBefore = await rt.db.kysely.selectFrom('kb_files').select('id').where('account_id', '=', ws.id).execute();
    const blobsBefore = blobCount();
    const refused = await upload(tiny('one'), 'one.txt');
    assert.equal(refused.statusCode, 402, refused.body);
    assert.equal(refused.json().error, 'insufficient_credits');
    assert.equal(refused.json().code, 402);
    assert.match(refused.json().message, /needs 1 more storage credit \(the first 50 MiB are free, then 1 credit per started 50 MiB\)/);
    assert.equal((await rt.db.kysely.selectFrom('kb_files').select('id').where('account_id', '=', ws.id).execute()).length, rowsBefore.length, 'no row');
    assert.equal(blobCount(), blobsBefore, 'no blob');
    assert.equal((await kbLedger()).length, 0);
    const jobs = await rt.db.pool.query<{ n: number }>(`select count(*)::int as n from pgboss.job where name = 'kb.process-file'`);
    assert.equal(jobs.rows[0]!.n, 1, 'no processing job for the refused upload');

    await rt.db.transaction((trx) => creditsService(rt).post(trx, { accountId: ws.id, amount: 1, reason: 'grant' }));
    const one = await upload(tiny('one'), 'one.txt');
    assert.equal(one.statusCode, 200, one.body);
    assert.equal(one.json().credits_charged, 1);
    assert.equal(await balance(), 0);
    const [entry] = await kbLedger();
    assert.equal(Number(entry!.amount), -1);
    assert.equal(entry!.reference, `kb_file:${one.json().file.id}`);
  });

  test('room already paid for is free; deleting refunds nothing and the paid room is reused', async () => {
    const two = await upload(tiny('two'), 'two.txt');
    assert.equal(two.statusCode, 200, two.body);
    assert.equal(two.json().credits_charged, 0, 'still inside the paid block');

    // A duplicate costs nothing either, whatever the balance.
    const again = await upload(Buffer.alloc(FREE_STORAGE_BYTES, 'free allowance text. '), 'fifty-again.txt');
    assert.equal(again.json().deduplicated, true);
    assert.equal(again.json().credits_charged, undefined);

    await call(rt, { method: 'DELETE', url: `/api/kb/files/${two.json().file.id}`, headers: bearer(key.fullKey) });
    assert.equal(await balance(), 0, 'no refund');
    const three = await upload(tiny('three'), 'three.txt');
    assert.equal(three.statusCode, 200, three.body);
    assert.equal(three.json().credits_charged, 0);
    assert.equal((await kbLedger()).length, 1, 'one storage charge in all');
  });
});
