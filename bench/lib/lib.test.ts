// The benchmark helpers that do not need a server. Not part of `npm test`
// (which looks in src/ and test/): run with
// `node --import tsx --test bench/lib/lib.test.ts`.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Cleanup } from './cleanup.ts';
import { cpuSeconds } from './cpu.ts';
import { loggedReadyMs } from './hark.ts';
import { percentile } from './load.ts';
import { fmtRatio, renderTable } from './markdown.ts';
import { redact } from './postgres.ts';
import { rssMiB } from './rss.ts';
import { freePort, statusOf } from './server.ts';
import { median } from './stats.ts';

test('median of odd and even counts, unsorted input', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.throws(() => median([]));
});

test('nearest-rank percentile', () => {
  const sorted = Float64Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  assert.equal(percentile(sorted, 50), 5);
  assert.equal(percentile(sorted, 99), 10);
  assert.equal(percentile(sorted, 0), 1);
  assert.ok(Number.isNaN(percentile(new Float64Array(0), 50)));
});

test('markdown table escapes pipes and rejects ragged rows', () => {
  const table = { title: 'T', columns: ['a', 'b'], rows: [['x|y', fmtRatio(0.5)]], notes: ['n'] };
  assert.equal(renderTable(table), '#### T\n\n| a | b |\n| --- | --- |\n| x\\|y | 0.50× |\n\n- n');
  assert.throws(() => renderTable({ title: 'T', columns: ['a'], rows: [['1', '2']] }), /2 cells for 1 columns/);
});

test('RSS of this process is plausible', () => {
  const mib = rssMiB(process.pid);
  assert.ok(mib > 1 && mib < 100_000, `${mib} MiB`);
});

test('CPU time of this process grows with work', () => {
  const before = cpuSeconds(process.pid);
  assert.ok(before > 0);
  let spin = 0;
  for (let i = 0; i < 5e7; i++) spin += i % 7;
  assert.ok(spin > 0);
  assert.ok(cpuSeconds(process.pid) >= before);
});

test('cleanup runs newest first and keeps going after a failing step', async () => {
  const order: string[] = [];
  const cleanup = new Cleanup();
  cleanup.defer(() => void order.push('first'));
  cleanup.defer(() => {
    throw new Error('deliberate');
  });
  cleanup.defer(async () => void order.push('last'));
  const stderrWrite = process.stderr.write;
  process.stderr.write = () => true;
  try {
    await cleanup.run();
  } finally {
    process.stderr.write = stderrWrite;
  }
  assert.deepEqual(order, ['last', 'first']);
});

test('the ready time is read from a Hark log', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hark-bench-test-'));
  try {
    const file = path.join(dir, 'server.log');
    fs.writeFileSync(file, 'not json "Hark API ready"\n{"level":30,"ms":1234,"msg":"Hark API ready"}\n');
    assert.equal(loggedReadyMs(file), 1234);
    fs.writeFileSync(file, '{"level":40,"msg":"something else"}\n');
    assert.equal(loggedReadyMs(file), undefined);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a free port has nothing answering on it', async () => {
  const port = await freePort();
  assert.ok(port > 0);
  assert.equal(await statusOf(`http://127.0.0.1:${port}/`, 1000), undefined);
});

test('passwords are kept out of printed connection strings', () => {
  assert.equal(redact('postgres://u:secret@h:5432/db'), 'postgres://u:***@h:5432/db');
  assert.equal(redact('postgres://postgres@127.0.0.1:5432/postgres'), 'postgres://postgres@127.0.0.1:5432/postgres');
});
