import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { startTestRuntime, eventually, type TestRuntime } from '../../../test/helpers.ts';
import { bearer, call, createKey, createWorkspace, kbFileReaches, signUp, uniqueEmail, uploadKbFile, type TestKey } from '../../../test/fixtures.ts';
import { makeDocx, makePdf } from '../../../test/kb-documents.ts';
import { embedderFor, type Embedder } from '../../providers/embeddings/index.ts';
import { createKnowledgeBaseModule } from './index.ts';
import { PROCESS_FILE_JOB } from './pipeline/process.ts';

/**
 * The processing pipeline as durable jobs, end to end through the HTTP API
 * with the real local embedder. The embedder is wrapped so a test can make
 * one call fail (a worker dying mid-file) or wait (to reprocess under a
 * running job); the wrapper only acts on documents carrying the test's marker.
 */
const MAX_TEXT_CHARS = 40_000;

type Hook = (texts: string[]) => Promise<void> | void;
const hooks: { beforeEmbed?: Hook } = {};
const embedded: string[][] = [];

function observedEmbedder(ctx: Parameters<typeof embedderFor>[0]): Embedder {
  const inner = embedderFor(ctx);
  return {
    model: inner.model,
    async embed(texts) {
      await hooks.beforeEmbed?.(texts);
      embedded.push(texts);
      return inner.embed(texts);
    },
    embedQuery: (text) => inner.embedQuery(text),
  };
}

/** Numbered paragraphs, each carrying `marker`, long enough for several chunks. */
function longDocument(marker: string, paragraphs: number): string {
  return Array.from(
    { length: paragraphs },
    (_, i) =>
      `Section ${i + 1} about ${marker}. The ${marker} procedure number ${i + 1} describes how the warehouse team checks inventory, ` +
      `labels pallets, records temperatures and reports damaged goods before the afternoon shipment leaves the dock. `.repeat(3),
  ).join('\n\n');
}

describe('knowledge-base processing', () => {
  let rt: TestRuntime;
  let key: TestKey;
  let assistantId: string;

  before(async () => {
    rt = await startTestRuntime(
      { KB_MAX_TEXT_CHARS: String(MAX_TEXT_CHARS) },
      { replace: [createKnowledgeBaseModule({ retryDelaySeconds: 0, embedBatchSize: 3, embedder: observedEmbedder })] },
    );
    const owner = await signUp(rt, uniqueEmail('kb-pipeline'));
    const ws = await createWorkspace(rt, owner, 'Pipeline Co');
    key = await createKey(rt, owner, ws);
    assistantId = (await call(rt, { method: 'POST', url: '/api/assistants', headers: bearer(key.fullKey), payload: { name: 'Helper' } })).json().assistant.id;
    // Every status a file takes, in order: written by the database itself, so no transition can be missed between polls.
    await rt.db.pool.query(`
      create table test_kb_status_log (seq bigserial primary key, file_id uuid not null, status text not null);
      create function test_kb_log_status() returns trigger language plpgsql as $$
      begin
        if tg_op = 'INSERT' or new.status is distinct from old.status or new.generation <> old.generation then
          insert into test_kb_status_log (file_id, status) values (new.id, new.status);
        end if;
        return new;
      end $$;
      create trigger test_kb_status_log after insert or update on kb_files for each row execute function test_kb_log_status();
    `);
  });
  after(async () => {
    hooks.beforeEmbed = undefined;
    await rt?.destroy();
  });

  async function statuses(fileId: string): Promise<string[]> {
    const { rows } = await sql<{ status: string }>`select status from test_kb_status_log where file_id = ${fileId} order by seq`.execute(rt.db.kysely);
    return rows.map((r) => r.status);
  }

  async function chunkIndexes(fileId: string): Promise<number[]> {
    const rows = await rt.db.kysely.selectFrom('kb_chunks').select('chunk_index').where('file_id', '=', fileId).orderBy('chunk_index').execute();
    return rows.map((r) => r.chunk_index);
  }

  async function upload(bytes: Buffer | string, filename: string): Promise<string> {
    const res = await uploadKbFile(rt, key.fullKey, { bytes, filename });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().file.status, 'pending');
    return res.json().file.id as string;
  }

  async function attach(fileId: string) {
    await call(rt, { method: 'POST', url: `/api/assistants/${assistantId}/knowledge-base`, headers: bearer(key.fullKey), payload: { file_id: fileId } });
  }

  function search(query: string, extra: Record<string, unknown> = {}) {
    return call(rt, { method: 'POST', url: '/api/kb/search', headers: bearer(key.fullKey), payload: { assistant_id: assistantId, query, ...extra } });
  }

  test('a text file goes pending → parsing → embedding → indexing → ready, with char_count and chunk_count', async () => {
    const text = longDocument('heron', 6);
    const id = await upload(text, 'heron.txt');
    const file = await kbFileReaches(rt, key.fullKey, id);
    assert.equal(file.status, 'ready', String(file.status_error));
    assert.deepEqual(await statuses(id), ['pending', 'parsing', 'embedding', 'indexing', 'ready']);
    assert.equal(file.mime_type, 'text/plain');
    assert.equal(file.status_error, null);
    assert.ok(Number(file.char_count) >= text.trim().length - 10 && Number(file.char_count) <= text.length, `char_count ${file.char_count}`);
    assert.ok(Number(file.chunk_count) >= 2, `several chunks, got ${file.chunk_count}`);
    assert.deepEqual(await chunkIndexes(id), [...Array(Number(file.chunk_count)).keys()]);
    const row = await rt.db.kysely.selectFrom('kb_files').select(['embedding_model', 'generation']).where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(row.embedding_model, observedEmbedder(rt).model);
    assert.equal(row.generation, 0);
  });

  test('a file without text goes to failed with status_error; reprocess runs it again from pending', async () => {
    const id = await upload('   \n\n   \n', 'blank.txt');
    const file = await kbFileReaches(rt, key.fullKey, id);
    assert.equal(file.status, 'failed');
    assert.match(String(file.status_error), /no text/i);
    assert.equal(file.chunk_count, null);
    assert.deepEqual(await statuses(id), ['pending', 'parsing', 'failed']);
    await call(rt, { method: 'POST', url: `/api/kb/files/${id}/reprocess`, headers: bearer(key.fullKey) });
    assert.equal((await kbFileReaches(rt, key.fullKey, id)).status, 'failed');
    assert.deepEqual(await statuses(id), ['pending', 'parsing', 'failed', 'pending', 'parsing', 'failed']);
  });

  test(`extracted text over KB_MAX_TEXT_CHARS fails with a clear status_error`, async () => {
    const id = await upload('lorem ipsum dolor sit amet '.repeat(Math.ceil(MAX_TEXT_CHARS / 20)), 'too-long.txt');
    const file = await kbFileReaches(rt, key.fullKey, id);
    assert.equal(file.status, 'failed');
    assert.match(String(file.status_error), new RegExp(`more than the limit of ${MAX_TEXT_CHARS} \\(KB_MAX_TEXT_CHARS\\)`));
    assert.equal(file.chunk_count, null);
    assert.equal((await chunkIndexes(id)).length, 0);
  });

  test("a two-page PDF: the second page's sentence is found with page_number 2", async () => {
    const pdf = await makePdf([
      'Welcome to the Perch owner handbook. This page covers unpacking the device and charging the battery for the first time.',
      'Warranty claims must be filed within ninety days of delivery by emailing the support desk with the order number.',
    ]);
    const id = await upload(pdf, 'handbook.pdf');
    const file = await kbFileReaches(rt, key.fullKey, id);
    assert.equal(file.status, 'ready', String(file.status_error));
    assert.equal(file.mime_type, 'application/pdf');
    await attach(id);
    for (const mode of ['hybrid', 'semantic', 'keyword']) {
      const { hits } = (await search('How long do I have to file a warranty claim?', { mode, top_k: 1 })).json();
      const top = hits[0];
      assert.ok(top, `${mode}: a hit`);
      assert.equal(top.rank, 1);
      assert.equal(top.file_id, id);
      assert.equal(top.filename, 'handbook.pdf');
      assert.equal(top.page_number, 2, `${mode}: ${JSON.stringify(top)}`);
      assert.match(top.content, /ninety days/);
      assert.equal(top.adjacent, false);
      assert.equal(top.match_type, mode === 'keyword' ? 'keyword' : 'semantic');
      assert.equal(typeof top.similarity, 'number');
      assert.ok(top.similarity > 0.2 && top.similarity <= 1, `${mode}: similarity ${top.similarity}`);
    }
  });

  test('a DOCX is processed and searchable', async () => {
    const docx = await makeDocx([
      { heading: 'Returns policy' },
      'Customers may return unopened kettles within thirty days for a full refund.',
      { heading: 'Shipping' },
      'Orders above fifty euros ship free of charge to every country in the European Union.',
    ]);
    const id = await upload(docx, 'policies.docx');
    const file = await kbFileReaches(rt, key.fullKey, id);
    assert.equal(file.status, 'ready', String(file.status_error));
    assert.equal(file.mime_type, 'application/vnd.openxmlformats-officedocument.wordprocessingml.document');
    await attach(id);
    const { hits } = (await search('free shipping in the EU', { top_k: 3 })).json();
    const hit = hits.find((h: { file_id: string }) => h.file_id === id);
    assert.ok(hit, JSON.stringify(hits));
    assert.match(hit.content, /ship free of charge/);
    assert.equal(hit.page_number, null);
  });

  test('a run that dies mid-embedding is finished by the retry, keeping stored chunks and never storing a position twice', async () => {
    let batches = 0;
    let crashed = false;
    hooks.beforeEmbed = (texts) => {
      if (!texts.every((t) => t.includes('osprey'))) return;
      batches++;
      if (batches === 3 && !crashed) {
        crashed = true;
        throw new Error('worker died mid-file (simulated)');
      }
    };
    try {
      const id = await upload(longDocument('osprey', 24), 'osprey.txt');
      const embeddingSeen = eventually('some chunks stored while the file is embedding', async () => {
        const row = await rt.db.kysely.selectFrom('kb_files').select(['status']).where('id', '=', id).executeTakeFirstOrThrow();
        return crashed && row.status === 'embedding';
      });
      const file = await kbFileReaches(rt, key.fullKey, id);
      await embeddingSeen;
      assert.equal(file.status, 'ready', String(file.status_error));
      const count = Number(file.chunk_count);
      assert.ok(count >= 7, `enough chunks for several batches of 3, got ${count}`);
      assert.deepEqual(await chunkIndexes(id), [...Array(count).keys()], 'every position once');
      // The two batches stored before the crash were not embedded again.
      const texts = embedded.filter((batch) => batch.every((t) => t.includes('osprey'))).flat();
      assert.equal(texts.length, count, 'each chunk embedded exactly once across both attempts');
      assert.deepEqual(await statuses(id), ['pending', 'parsing', 'embedding', 'indexing', 'ready'], 'the retry moves on from where it was, never back');
      // The queue marks the job completed just after the handler that made the file ready returns.
      const jobs = async () =>
        (await rt.db.pool.query<{ retry_count: number; state: string }>(`select retry_count, state from pgboss.job where name = $1 and data->>'fileId' = $2`, [PROCESS_FILE_JOB, id])).rows;
      await eventually('the job to be completed', async () => (await jobs()).every((job) => job.state !== 'active'));
      assert.deepEqual((await jobs()).map((r) => [r.retry_count, r.state]), [[1, 'completed']]);
    } finally {
      hooks.beforeEmbed = undefined;
    }
  });

  test('reprocess clears the chunks and re-embeds; a run of the old generation writes nothing more', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let waiting = false;
    hooks.beforeEmbed = async (texts) => {
      if (!texts.every((t) => t.includes('kestrel')) || waiting) return;
      waiting = true;
      await gate;
    };
    try {
      const id = await upload(longDocument('kestrel', 8), 'kestrel.txt');
      await eventually('the first run to be embedding', async () => waiting);
      const reprocess = await call(rt, { method: 'POST', url: `/api/kb/files/${id}/reprocess`, headers: bearer(key.fullKey) });
      assert.deepEqual(reprocess.json(), { success: true });
      const pending = (await call(rt, { method: 'GET', url: `/api/kb/files/${id}`, headers: bearer(key.fullKey) })).json().file;
      assert.equal(pending.status, 'pending');
      assert.equal(pending.char_count, null);
      assert.equal(pending.chunk_count, null);
      assert.deepEqual(await chunkIndexes(id), []);
      // The old run resumes now; its batch must not land, and the new run finishes the file.
      release();
      const file = await kbFileReaches(rt, key.fullKey, id);
      assert.equal(file.status, 'ready', String(file.status_error));
      assert.deepEqual(await chunkIndexes(id), [...Array(Number(file.chunk_count)).keys()]);
      const row = await rt.db.kysely.selectFrom('kb_files').select(['generation']).where('id', '=', id).executeTakeFirstOrThrow();
      assert.equal(row.generation, 1);
      const log = await statuses(id);
      assert.deepEqual(log.slice(log.lastIndexOf('pending')), ['pending', 'parsing', 'embedding', 'indexing', 'ready']);
      // Reprocessing a ready file embeds it all again (e.g. after a change of embedding model).
      const before = embedded.length;
      await call(rt, { method: 'POST', url: `/api/kb/files/${id}/reprocess`, headers: bearer(key.fullKey) });
      assert.equal((await kbFileReaches(rt, key.fullKey, id)).status, 'ready');
      const reembedded = embedded.slice(before).filter((batch) => batch.every((t) => t.includes('kestrel'))).flat();
      assert.equal(reembedded.length, Number(file.chunk_count));
    } finally {
      hooks.beforeEmbed = undefined;
    }
  });
});
