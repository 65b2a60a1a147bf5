import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { eventually, tempDir } from './helpers.ts';
import { freePort, serverStorage, startServer } from './server-process-helpers.ts';

describe('the server process', () => {
  test('starts, logs one line per request without secrets, and stops cleanly on SIGTERM; a restart applies no migration', async () => {
    const storage = await serverStorage();
    try {
      const first = await storage.start();
      const res = await fetch(`${first.base}/api/health?token=sekrit`, { headers: { authorization: 'Bearer svc_live_topsecret', 'x-request-id': 'proc-1' } });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-request-id'), 'proc-1');
      await eventually('request logged', async () => first.logs().some((l) => l.includes('"reqId":"proc-1"')));
      const requestLines = first.logs().filter((l) => l.includes('"reqId":"proc-1"'));
      assert.equal(requestLines.length, 1, requestLines.join('\n'));
      const line = JSON.parse(requestLines[0]!);
      assert.equal(line.route, '/api/health');
      assert.equal(line.status, 200);
      assert.equal(line.method, 'GET');
      assert.equal(typeof line.ms, 'number');
      const all = first.logs().join('\n');
      assert.doesNotMatch(all, /sekrit|topsecret/);
      assert.ok(first.logs().some((l) => l.includes('migrations applied')));

      first.child.kill('SIGTERM');
      assert.equal(await first.exited, 0);
      assert.ok(first.logs().some((l) => l.includes('"msg":"stopped"')));

      const second = await storage.start();
      assert.ok(!second.logs().some((l) => l.includes('migrations applied')), 'nothing to apply on restart');
      second.child.kill('SIGINT');
      assert.equal(await second.exited, 0);
    } finally {
      await storage.remove();
    }
  });

  test('a second process on the same embedded data directory is refused with one line', async (t) => {
    if (process.env.DATABASE_URL) {
      t.diagnostic('PostgreSQL run: the embedded-database lock does not apply');
      return;
    }
    const data = tempDir();
    try {
      const first = await startServer({ DATA_DIR: data.dir, DATABASE_URL: '' });
      const port = await freePort();
      const second = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
        env: { ...process.env, DATA_DIR: data.dir, DATABASE_URL: '', PORT: String(port) },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      second.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      const code = await new Promise<number | null>((resolve) => second.on('exit', resolve));
      assert.equal(code, 1);
      assert.match(stderr, /hark: the embedded database in .* is in use by process \d+/);
      first.child.kill('SIGTERM');
      assert.equal(await first.exited, 0);
    } finally {
      data.remove();
    }
  });
});
