import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { eventually, startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import pino from 'pino';
import { DEAD_LETTER_SUFFIX, JobQueue, defineJob } from './queue.ts';
import { SWEEP_JOB, sweepExpiredJob } from './sweeper.ts';

// The real queue (pg-boss on the application database, PGlite or PostgreSQL),
// worked by the runtime's own workers; only the job types are test probes.

const FLAKY = 'test.flaky';
const DOOMED = 'test.doomed';
const ORPHANED = 'test.orphaned';
const TRANSACTIONAL = 'test.transactional';
const RECLAIMED = 'test.reclaimed';
const TIMEOUT = { timeout: 60_000 };

interface Run {
  id: string;
  retryCount: number;
  marker: string;
}

const runs: Record<string, Run[]> = { [FLAKY]: [], [DOOMED]: [], [ORPHANED]: [], [TRANSACTIONAL]: [], [RECLAIMED]: [] };
const record = (name: string, payload: { marker: string }, job: { id: string; retryCount: number }) => {
  runs[name]!.push({ id: job.id, retryCount: job.retryCount, marker: payload.marker });
};
const runsOf = (name: string, id: string) => runs[name]!.filter((r) => r.id === id);

const testModule = {
  name: 'test',
  jobs: () => [
    defineJob<{ marker: string }>({
      name: FLAKY,
      retryLimit: 3,
      retryDelaySeconds: 1,
      retryBackoff: false,
      async handler(payload, job) {
        record(FLAKY, payload, job);
        if (runsOf(FLAKY, job.id).length === 1) throw new Error('first attempt fails');
      },
    }),
    defineJob<{ marker: string }>({
      name: DOOMED,
      retryLimit: 1,
      retryDelaySeconds: 1,
      retryBackoff: false,
      async handler(payload, job) {
        record(DOOMED, payload, job);
        throw new Error('always fails');
      },
    }),
    defineJob<{ marker: string }>({
      name: ORPHANED,
      retryLimit: 2,
      retryDelaySeconds: 1,
      retryBackoff: false,
      expireInSeconds: 1,
      async handler(payload, job) {
        record(ORPHANED, payload, job);
      },
    }),
    defineJob<{ marker: string }>({
      name: TRANSACTIONAL,
      retryDelaySeconds: 1,
      async handler(payload, job) {
        record(TRANSACTIONAL, payload, job);
      },
    }),
    // The default 15-minute expiry: within a test, only a reclaim brings a taken job back.
    defineJob<{ marker: string }>({
      name: RECLAIMED,
      retryDelaySeconds: 1,
      async handler(payload, job) {
        record(RECLAIMED, payload, job);
      },
    }),
  ],
  expiringRecords: [
    { table: 'sweep_probe', column: 'expires_at' },
    { table: 'sweep_probe_codes', column: 'valid_until' },
  ],
};

describe('job queue', () => {
  let runtime: TestRuntime;

  before(async () => {
    runtime = await startTestRuntime({}, { modules: [testModule] });
  });
  after(async () => {
    await runtime?.destroy();
  });

  const jobState = async (name: string, id: string) => (await runtime.jobs.engine.getJobById(name, id))?.state;

  test('a job that fails once is retried and completes', TIMEOUT, async () => {
    const marker = randomUUID();
    const id = await runtime.jobs.send(FLAKY, { marker });
    assert.ok(id);

    await eventually('the flaky job to complete', async () => (await jobState(FLAKY, id)) === 'completed');
    assert.deepEqual(runsOf(FLAKY, id), [
      { id, retryCount: 0, marker },
      { id, retryCount: 1, marker },
    ]);
    const job = await runtime.jobs.engine.getJobById(FLAKY, id);
    assert.equal(job?.retryCount, 1);
  });

  test('a job that keeps failing ends failed and is copied to its dead-letter queue', TIMEOUT, async () => {
    const marker = randomUUID();
    const id = await runtime.jobs.send(DOOMED, { marker });
    assert.ok(id);

    await eventually('the doomed job to fail for good', async () => (await jobState(DOOMED, id)) === 'failed');
    // The first attempt and retryLimit (1) retries, then no more.
    assert.deepEqual(
      runsOf(DOOMED, id).map((r) => r.retryCount),
      [0, 1],
    );

    const deadLetters = await eventually('the dead letter', async () => {
      const jobs = await runtime.jobs.engine.fetch<{ marker: string }>(DOOMED + DEAD_LETTER_SUFFIX);
      return jobs.length ? jobs : undefined;
    });
    assert.equal(deadLetters.length, 1);
    assert.deepEqual(deadLetters[0]!.data, { marker });
    assert.equal(runsOf(DOOMED, id).length, 2, 'a failed job is not run again');
  });

  test('a job whose worker died is expired by maintenance and run again', TIMEOUT, async () => {
    const marker = randomUUID();
    // Due in an hour, so no registered worker can take it before our "worker" does.
    const id = await runtime.jobs.send(ORPHANED, { marker }, { startAfterSeconds: 3600 });
    assert.ok(id);
    // A worker takes the job and dies: it never completes or fails it.
    const taken = await runtime.jobs.engine.fetch<{ marker: string }>(ORPHANED, { ignoreStartAfter: true });
    assert.deepEqual(
      taken.map((j) => j.id),
      [id],
    );
    assert.equal(await jobState(ORPHANED, id), 'active');
    assert.deepEqual(runsOf(ORPHANED, id), [], 'the handler did not run for the taken job');

    // Maintenance expires it after expireInSeconds (1 s), a retry is scheduled
    // retryDelaySeconds later, and the registered worker completes it.
    await eventually('the orphaned job to complete', async () => (await jobState(ORPHANED, id)) === 'completed');
    assert.deepEqual(runsOf(ORPHANED, id), [{ id, retryCount: 1, marker }]);
  });

  test('jobs left active by a process that ended are retried at once when reclaimed, not after their expiry', TIMEOUT, async () => {
    const marker = randomUUID();
    const id = await runtime.jobs.send(RECLAIMED, { marker }, { startAfterSeconds: 3600 });
    assert.ok(id);
    await runtime.jobs.engine.fetch(RECLAIMED, { ignoreStartAfter: true });
    assert.equal(await jobState(RECLAIMED, id), 'active');

    assert.ok((await runtime.jobs.reclaimOrphanedJobs()) >= 1, 'the taken job is among those reclaimed');
    await eventually('the reclaimed job to complete', async () => (await jobState(RECLAIMED, id)) === 'completed');
    assert.deepEqual(runsOf(RECLAIMED, id), [{ id, retryCount: 1, marker }], 'the dead attempt counts as one try');
  });

  test('a job sent in a transaction exists only if the transaction commits', TIMEOUT, async () => {
    const jobCount = async (id: string) => {
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from pgboss.job where name = ${TRANSACTIONAL} and id = ${id}::uuid`.execute(
        runtime.db.kysely,
      );
      return rows[0]!.n;
    };

    let rolledBackId: string | null = null;
    await assert.rejects(
      runtime.db.transaction(async (trx) => {
        rolledBackId = await runtime.jobs.send(TRANSACTIONAL, { marker: 'rolled-back' }, { trx });
        throw new Error('abandon the transaction');
      }),
      /abandon the transaction/,
    );
    assert.ok(rolledBackId, 'the job was inserted inside the transaction');
    assert.equal(await runtime.jobs.engine.getJobById(TRANSACTIONAL, rolledBackId), null);
    assert.equal(await jobCount(rolledBackId), 0);

    const committedId = await runtime.db.transaction(async (trx) => {
      const id = await runtime.jobs.send(TRANSACTIONAL, { marker: 'committed' }, { trx });
      assert.ok(id);
      // Not visible to other connections before the commit (PGlite has only the one this transaction holds).
      if (runtime.db.kind === 'postgres') assert.equal(await jobCount(id), 0);
      return id;
    });
    assert.ok(committedId);
    assert.equal(await jobCount(committedId), 1);

    await eventually('the committed job to run', async () => (await jobState(TRANSACTIONAL, committedId)) === 'completed');
    // Jobs run in creation order, so a surviving rolled-back job would have run first.
    assert.deepEqual(
      runs[TRANSACTIONAL]!.map((r) => r.marker),
      ['committed'],
    );
    assert.equal(await runtime.jobs.engine.getQueueSize(TRANSACTIONAL), 0);
  });

  test('each start writes the current policy onto existing queues; JOBS_EXPIRE_SECONDS caps the expiry', TIMEOUT, async () => {
    const name = `test.policy_${randomUUID().slice(0, 8)}`;
    const startWith = async (retryLimit: number, expireCapSeconds?: number) => {
      const queue = new JobQueue(runtime.db, pino({ level: 'silent' }), { maintenanceSeconds: 30, work: false, expireCapSeconds });
      queue.register([defineJob({ name, retryLimit, expireInSeconds: 900, handler: async () => {} })]);
      await queue.start();
      const policy = await queue.engine.getQueue(name);
      await queue.stop(0);
      return { retryLimit: policy?.retryLimit, expireInSeconds: policy?.expireInSeconds };
    };
    assert.deepEqual(await startWith(3, 20), { retryLimit: 3, expireInSeconds: 20 });
    assert.deepEqual(await startWith(5), { retryLimit: 5, expireInSeconds: 900 }, 'a changed policy reaches the queue that already exists');
  });

  test('sending an unknown job type fails', async () => {
    await assert.rejects(runtime.jobs.send('test.no-such-job', {}), /unknown job test\.no-such-job/);
  });

  test('the sweeper deletes expired rows of every declared table, in batches, and keeps the rest', TIMEOUT, async () => {
    const db = runtime.db.kysely;
    await sql`create table sweep_probe (id int primary key, expires_at timestamptz)`.execute(db);
    await sql`create table sweep_probe_codes (code text primary key, valid_until timestamptz not null)`.execute(db);
    // More expired rows than one batch (5000), so the sweeper must loop.
    await sql`insert into sweep_probe select g, now() - interval '1 hour' - g * interval '1 second' from generate_series(1, 12000) g`.execute(db);
    await sql`insert into sweep_probe values (20001, now() + interval '1 hour'), (20002, now() + interval '1 day'), (20003, null)`.execute(db);
    await sql`insert into sweep_probe_codes values ('old', now() - interval '1 minute'), ('fresh', now() + interval '10 minutes')`.execute(db);

    const id = await runtime.jobs.send(SWEEP_JOB, {});
    assert.ok(id);
    await eventually('the sweep to complete', async () => (await jobState(SWEEP_JOB, id)) === 'completed');

    const probes = await sql<{ id: number }>`select id from sweep_probe order by id`.execute(db);
    assert.deepEqual(
      probes.rows.map((r) => r.id),
      [20001, 20002, 20003],
    );
    const codes = await sql<{ code: string }>`select code from sweep_probe_codes order by code`.execute(db);
    assert.deepEqual(
      codes.rows.map((r) => r.code),
      ['fresh'],
    );
  });

  test('the sweeper refuses table or column names that are not plain identifiers', () => {
    assert.throws(() => sweepExpiredJob(runtime.db, [{ table: 'bad;drop', column: 'expires_at' }]), /invalid sweep target bad;drop/);
    assert.throws(() => sweepExpiredJob(runtime.db, [{ table: 'sweep_probe', column: 'expires_at; drop table x' }]), /invalid sweep target/);
    assert.throws(() => sweepExpiredJob(runtime.db, [{ table: 'public"."users', column: 'expires_at' }]), /invalid sweep target/);
    assert.equal(sweepExpiredJob(runtime.db, [{ table: 'sweep_probe', column: 'expires_at' }]).name, SWEEP_JOB);
  });
});
