import type { App } from './app-type.ts';
import { Type } from 'typebox';
import { sql } from 'kysely';
import type { AppContext } from '../context.ts';
import { migrationsApplied, type Migration } from '../db/migrate.ts';

const Check = Type.Object({ ok: Type.Boolean(), detail: Type.Optional(Type.String()) });
const Readiness = Type.Object({
  ready: Type.Boolean(),
  checks: Type.Object({ database: Check, migrations: Check, worker: Check }),
});

export function healthRoutes(app: App, ctx: AppContext, migrations: Migration[]): void {
  app.get(
    '/api/health',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['platform'],
        summary: 'Liveness: the process is up',
        response: { 200: Type.Object({ status: Type.Literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/api/ready',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['platform'],
        summary: 'Readiness: database reachable, migrations applied, worker running (work role)',
        description: 'Answers 200 when every check passes, else 503 with the same body naming the failing check.',
        response: { 200: Readiness, 503: Readiness },
      },
    },
    async (_request, reply) => {
      const database = await check(async () => {
        await sql`select 1`.execute(ctx.db.kysely);
      });
      const migrationsCheck = database.ok
        ? await check(async () => {
            if (!(await migrationsApplied(ctx.db.pool, migrations))) throw new Error('pending migrations');
          })
        : { ok: false, detail: 'database unreachable' };
      const worker = !ctx.config.roles.has('work')
        ? { ok: true, detail: 'work role not in this process' }
        : ctx.jobs.isWorking
          ? { ok: true }
          : { ok: false, detail: 'worker not running' };
      const ready = database.ok && migrationsCheck.ok && worker.ok;
      return reply.code(ready ? 200 : 503).send({ ready, checks: { database, migrations: migrationsCheck, worker } });
    },
  );
}

async function check(probe: () => Promise<void>): Promise<{ ok: boolean; detail?: string }> {
  try {
    await probe();
    return { ok: true };
  } catch (error) {
    return { ok: false, detail: (error as Error).message };
  }
}
