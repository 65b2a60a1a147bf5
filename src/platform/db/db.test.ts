import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { sql } from 'kysely';
import { scratchDatabase, tempDir, testConfig } from '../../../test/helpers.ts';
import { startRuntime } from '../../runtime.ts';
import { compareVersions, DatabaseSetupError, openDatabase, PREPARED, redact, type Database, type DatabaseTarget } from './database.ts';
import { migrate, MigrationError, migrationsApplied, readMigrations, type Migration } from './migrate.ts';

// Everything here runs on the engine the suite runs on: in-memory (or on-disk)
// PGlite by default, a scratch PostgreSQL database when DATABASE_URL is set.
const onPostgres = Boolean(process.env.DATABASE_URL);
const TIMEOUT = { timeout: 60_000 };

// Two PGlite instances on one directory leave a handle that keeps the process
// alive even after both are closed; if the in-use guard ever lets one through,
// end this file's process once its tests have reported, instead of hanging.
let intruderOpened = false;
after(() => {
  if (intruderOpened) setTimeout(() => process.exit(1), 1000).unref();
});

interface MigrationRow {
  version: string;
  name: string;
  checksum: string;
  applied_at: Date;
}

async function migrationRows(db: Database, versions?: readonly string[]): Promise<MigrationRow[]> {
  const { rows } = await sql<MigrationRow>`select version, name, checksum, applied_at from schema_migrations order by version`.execute(db.kysely);
  return versions ? rows.filter((r) => versions.includes(r.version)) : rows;
}

async function tableExists(db: Database, table: string): Promise<boolean> {
  const { rows } = await sql<{ found: string | null }>`select to_regclass(${`public.${table}`})::text as found`.execute(db.kysely);
  return rows[0]?.found != null;
}

/** Writes `files` (name -> SQL) into a fresh directory and returns it. */
async function migrationDir(files: Record<string, string>): Promise<{ dir: string; remove(): void }> {
  const scratch = tempDir('hark-migrations-');
  for (const [name, text] of Object.entries(files)) await fs.writeFile(path.join(scratch.dir, name), text);
  return scratch;
}

describe('migrations on a database that restarts', () => {
  let target: DatabaseTarget;
  let cleanup: () => Promise<void>;
  let migrations: Migration[];

  before(async () => {
    migrations = await readMigrations();
    if (onPostgres) {
      const scratch = await scratchDatabase();
      target = scratch.target;
      cleanup = () => scratch.drop();
    } else {
      const data = tempDir('hark-pglite-');
      target = { kind: 'pglite', dir: path.join(data.dir, 'pglite') };
      cleanup = async () => data.remove();
    }
  });
  after(async () => cleanup());

  test('are applied once, recorded with their checksums, and not again after a restart', TIMEOUT, async () => {
    assert.ok(migrations.length > 0, 'the repository has migrations');
    const expected = migrations.map((m) => ({ version: m.version, name: m.name, checksum: m.checksum }));

    if (target.kind === 'pglite') {
      const dir = target.dir!;
      const lockFile = path.join(dir, 'hark.lock');
      await fs.mkdir(dir, { recursive: true });
      // Another live process holds the directory: refused before anything is opened.
      await fs.writeFile(lockFile, String(process.ppid));
      await assert.rejects(openDatabase(target), (error: unknown) => {
        assert.ok(error instanceof DatabaseSetupError, `expected DatabaseSetupError, got ${String(error)}`);
        assert.match(error.message, new RegExp(`in use by process ${process.ppid}`));
        return true;
      });
      // A lock left by an earlier run that had our pid (a restarted container is pid 1 again) is stale: taken over below.
      await fs.writeFile(lockFile, String(process.pid));
    }

    const first = await openDatabase(target);
    let recorded: MigrationRow[];
    try {
      const { applied } = await migrate(first.pool, migrations);
      assert.deepEqual(applied, migrations.map((m) => m.name));
      recorded = await migrationRows(first);
      assert.deepEqual(
        recorded.map(({ version, name, checksum }) => ({ version, name, checksum })),
        expected,
      );
      assert.equal(await migrationsApplied(first.pool, migrations), true);
    } finally {
      await first.close();
    }

    const second = await openDatabase(target);
    try {
      const { applied } = await migrate(second.pool, migrations);
      assert.deepEqual(applied, []);
      // Same rows, same timestamps: nothing was re-recorded.
      assert.deepEqual(await migrationRows(second), recorded);

      if (target.kind === 'pglite') {
        // PGlite files belong to one open database at a time, even within one process.
        const refusal = await openDatabase(target).then(
          async (intruder) => {
            await intruder.close();
            intruderOpened = true;
            return undefined;
          },
          (error: unknown) => error,
        );
        assert.ok(refusal instanceof DatabaseSetupError, `expected DatabaseSetupError, got ${String(refusal)}`);
        assert.match(refusal.message, /in use/);
        // The refused attempt left the open database working.
        assert.deepEqual(await migrationRows(second), recorded);
      }
    } finally {
      await second.close();
    }

    if (target.kind === 'pglite') {
      // Closing releases the data directory for the next start.
      const third = await openDatabase(target);
      try {
        assert.deepEqual((await migrate(third.pool, migrations)).applied, []);
      } finally {
        await third.close();
      }
    }
  });
});

describe('migrations and transactions on a scratch database', () => {
  let db: Database;
  let target: DatabaseTarget;
  let drop: () => Promise<void>;
  const dirs: Array<{ remove(): void }> = [];

  before(async () => {
    const scratch = await scratchDatabase();
    target = scratch.target;
    drop = scratch.drop;
    db = await openDatabase(target);
  });
  after(async () => {
    await db?.close();
    await drop?.();
    for (const dir of dirs) dir.remove();
  });

  test('a migration changed after it was applied stops start-up', TIMEOUT, async () => {
    const scratch = await migrationDir({
      '9001_changed_probe.sql': 'create table changed_probe (id int);',
      '9002_untouched_probe.sql': 'create table untouched_probe (id int);',
    });
    dirs.push(scratch);
    const original = await readMigrations(scratch.dir);
    assert.deepEqual((await migrate(db.pool, original)).applied, ['9001_changed_probe.sql', '9002_untouched_probe.sql']);
    const before = await migrationRows(db, ['9001', '9002']);

    await fs.writeFile(path.join(scratch.dir, '9001_changed_probe.sql'), 'create table changed_probe (id int, extra text);');
    const edited = await readMigrations(scratch.dir);
    assert.notEqual(edited[0]!.checksum, original[0]!.checksum);

    await assert.rejects(migrate(db.pool, edited), (error: unknown) => {
      assert.ok(error instanceof MigrationError, `expected MigrationError, got ${String(error)}`);
      assert.match(error.message, /9001_changed_probe\.sql/);
      return true;
    });
    assert.deepEqual(await migrationRows(db, ['9001', '9002']), before);
    // The unchanged list still passes: the lock was released after the refusal.
    assert.deepEqual((await migrate(db.pool, original)).applied, []);
  });

  test('a failing migration is rolled back, not recorded, and stops the ones after it', TIMEOUT, async () => {
    const scratch = await migrationDir({
      '9101_good_probe.sql': 'create table good_probe (id int);',
      '9102_broken_probe.sql': 'create table broken_probe (id int);\ninsert into broken_probe values (1);\nselect * from no_such_table_anywhere;',
      '9103_later_probe.sql': 'create table later_probe (id int);',
    });
    dirs.push(scratch);
    const migrations = await readMigrations(scratch.dir);

    await assert.rejects(migrate(db.pool, migrations), (error: unknown) => {
      assert.ok(error instanceof MigrationError, `expected MigrationError, got ${String(error)}`);
      assert.match(error.message, /9102_broken_probe\.sql/);
      assert.match(error.message, /no_such_table_anywhere/);
      return true;
    });

    assert.deepEqual(
      (await migrationRows(db, ['9101', '9102', '9103'])).map((r) => r.name),
      ['9101_good_probe.sql'],
    );
    assert.equal(await tableExists(db, 'good_probe'), true);
    assert.equal(await tableExists(db, 'broken_probe'), false, 'the failed migration left its table behind');
    assert.equal(await tableExists(db, 'later_probe'), false);
    assert.equal(await migrationsApplied(db.pool, migrations), false);

    // Once fixed, the remaining migrations apply.
    await fs.writeFile(path.join(scratch.dir, '9102_broken_probe.sql'), 'create table broken_probe (id int);');
    assert.deepEqual((await migrate(db.pool, await readMigrations(scratch.dir))).applied, ['9102_broken_probe.sql', '9103_later_probe.sql']);
    assert.equal(await tableExists(db, 'later_probe'), true);
  });

  test('two concurrent start-ups apply each migration exactly once', TIMEOUT, async () => {
    // The real migrations plus a few more, on a database that has none of them yet.
    const scratch = await migrationDir({
      '8001_concurrent_a.sql': 'create table concurrent_a (id int primary key);\ninsert into concurrent_a select g from generate_series(1, 2000) g;',
      '8002_concurrent_b.sql': 'create table concurrent_b (id int primary key references concurrent_a);',
      '8003_concurrent_c.sql': 'alter table concurrent_b add column note text;',
    });
    dirs.push(scratch);
    const migrations = [...(await readMigrations()), ...(await readMigrations(scratch.dir))];
    const versions = migrations.map((m) => m.version);

    // On PostgreSQL: two processes' worth of connections. On PGlite (one
    // process by design) the two start-ups share the embedded database.
    const other = onPostgres ? await openDatabase(target) : db;
    try {
      const results = await Promise.all([migrate(db.pool, migrations), migrate(other.pool, migrations)]);
      const applied = results.flatMap((r) => r.applied);
      assert.equal(applied.length, migrations.length, `applied: ${JSON.stringify(results)}`);
      assert.deepEqual([...applied].sort(), migrations.map((m) => m.name).sort());
      const recorded = await migrationRows(db, versions);
      assert.deepEqual(
        recorded.map((r) => r.name),
        migrations.map((m) => m.name),
      );
      assert.equal(await migrationsApplied(other.pool, migrations), true);
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from concurrent_a`.execute(db.kysely);
      assert.equal(rows[0]!.n, 2000);
    } finally {
      if (other !== db) await other.close();
    }
  });

  test('a transaction that throws is rolled back; one that resolves is committed', TIMEOUT, async () => {
    await sql`create table tx_probe (id int primary key)`.execute(db.kysely);

    await assert.rejects(
      db.transaction(async (trx) => {
        await sql`insert into tx_probe values (1)`.execute(trx);
        const { rows } = await sql<{ n: number }>`select count(*)::int as n from tx_probe`.execute(trx);
        assert.equal(rows[0]!.n, 1, 'the insert is visible inside its transaction');
        throw new Error('abandon this transaction');
      }),
      /abandon this transaction/,
    );
    const afterRollback = await sql<{ id: number }>`select id from tx_probe`.execute(db.kysely);
    assert.deepEqual(afterRollback.rows, []);

    const result = await db.transaction(async (trx) => {
      await sql`insert into tx_probe values (2)`.execute(trx);
      return 'kept';
    });
    assert.equal(result, 'kept');
    const afterCommit = await sql<{ id: number }>`select id from tx_probe`.execute(db.kysely);
    assert.deepEqual(afterCommit.rows, [{ id: 2 }]);
  });

  test('a PREPARED statement binds its parameters on every run; on PostgreSQL it is prepared once per connection', TIMEOUT, async () => {
    const runs = [1, 2, 3, 4, 5, 6, 7, 8];
    const prepared = await db.kysely.connection().execute(async (connection) => {
      // Past the fifth run PostgreSQL may switch to a generic plan: the answers must still follow the parameters.
      for (const n of runs) {
        const { rows } = await sql<{ n: number; doubled: number }>`${PREPARED}select ${n}::int as n, ${n}::int * 2 as doubled`.execute(connection);
        assert.deepEqual(rows, [{ n, doubled: n * 2 }]);
      }
      await sql`select 'unmarked'::text as plain`.execute(connection);
      if (!onPostgres) return undefined;
      const { rows } = await sql<{ statement: string }>`select statement from pg_prepared_statements where from_sql = false`.execute(connection);
      return rows.map((row) => row.statement);
    });
    if (onPostgres) {
      assert.equal(prepared?.filter((statement) => statement.includes('as doubled')).length, 1, 'one prepared statement for the eight runs');
      assert.equal(prepared?.some((statement) => statement.includes("'unmarked'")), false, 'unmarked statements are not kept');
    }
    // The pool's own users (migrations, the readiness check) share these connections and must find them unchanged.
    assert.deepEqual((await db.pool.query<{ one: number }>('select 1 as one')).rows, [{ one: 1 }]);
  });

  if (!onPostgres) {
    test('PGlite: using the pool instead of the transaction handle fails at once instead of deadlocking', TIMEOUT, async () => {
      await sql`create table reentry_probe (id int)`.execute(db.kysely);
      await assert.rejects(
        db.transaction(async (trx) => {
          await sql`insert into reentry_probe values (1)`.execute(trx);
          await db.kysely.selectFrom('schema_migrations').selectAll().execute();
        }),
        /deadlock avoided/,
      );
      // Same mistake through a nested transaction.
      await assert.rejects(
        db.transaction(async () => db.transaction(async () => 'unreachable')),
        /deadlock avoided/,
      );
      // The failed transaction was rolled back and released the connection.
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from reentry_probe`.execute(db.kysely);
      assert.equal(rows[0]!.n, 0);
      // Concurrent, independent transactions still take turns without tripping the guard.
      const results = await Promise.all(
        [1, 2, 3].map((id) =>
          db.transaction(async (trx) => {
            await sql`insert into reentry_probe values (${id})`.execute(trx);
            return id;
          }),
        ),
      );
      assert.deepEqual(results, [1, 2, 3]);
      const count = await sql<{ n: number }>`select count(*)::int as n from reentry_probe`.execute(db.kysely);
      assert.equal(count.rows[0]!.n, 3);
    });
  }
});

if (onPostgres) {
  test('PostgreSQL: two processes starting at once on an empty database both come up', TIMEOUT, async () => {
    const scratch = await scratchDatabase();
    const dataDirs = [tempDir(), tempDir()];
    const settled = await Promise.allSettled(
      dataDirs.map((data) => startRuntime(testConfig({}, data.dir), { database: scratch.target, logger: pino({ level: 'silent' }) })),
    );
    try {
      for (const outcome of settled) {
        assert.equal(outcome.status, 'fulfilled', outcome.status === 'rejected' ? String(outcome.reason) : '');
      }
      const runtimes = settled.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
      for (const runtime of runtimes) {
        assert.equal(await migrationsApplied(runtime.db.pool, runtime.migrations), true);
        assert.equal(runtime.jobs.isWorking, true);
      }
      const [first] = runtimes;
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from schema_migrations`.execute(first!.db.kysely);
      assert.equal(rows[0]!.n, first!.migrations.length);
    } finally {
      for (const outcome of settled) if (outcome.status === 'fulfilled') await outcome.value.close();
      await scratch.drop();
      for (const data of dataDirs) data.remove();
    }
  });
}

describe('helpers', () => {
  test('compareVersions compares numerically, part by part', () => {
    assert.equal(compareVersions('0.5.0', '0.5.0'), 0);
    assert.equal(compareVersions('0.5', '0.5.0'), 0);
    assert.ok(compareVersions('0.8.0', '0.5.0') > 0);
    assert.ok(compareVersions('0.4.9', '0.5.0') < 0);
    assert.ok(compareVersions('0.10.0', '0.9.9') > 0, '0.10 is newer than 0.9 (not a string comparison)');
    assert.ok(compareVersions('1.0.0', '0.99.99') > 0);
    assert.ok(compareVersions('0.5.0', '0.5.1') < 0);
  });

  test('redact keeps host, port and database and drops credentials', () => {
    const shown = redact('postgres://u:secret@h:5432/db');
    assert.equal(shown, 'h:5432/db');
    assert.doesNotMatch(shown, /secret/);
    assert.doesNotMatch(redact('postgres://admin:p%40ss%3Aword@db.example.com/hark?sslmode=require'), /p%40ss|p@ss|admin|sslmode/);
    assert.equal(redact('not a url with secret'), '(unparseable URL)');
  });
});
