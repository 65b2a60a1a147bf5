/**
 * Hark as `npm start` runs it, plus pairs of identical read routes that differ
 * only in their credential: `/bench/open` (none) and `/bench/keyed` (an API
 * key with kb:read) answer a constant; `/bench/open-read` and
 * `/bench/keyed-read` read one workspace row by its slug (one indexed SELECT). Production has no such routes, and no domain route accepts
 * API keys yet, so the auth benchmark starts this entry instead of
 * src/main.ts. Same config, database, migrations and hooks as the real server.
 */
import type { FastifyRequest } from 'fastify';
import { loadConfig } from '../../src/config.ts';
import type { HarkModule } from '../../src/platform/context.ts';
import { MODULES } from '../../src/modules/index.ts';
import { createLogger, startRuntime } from '../../src/runtime.ts';

/** What both routes answer: small, like a metadata read. */
const BODY = { ok: true, items: [] as string[] };

const probe: HarkModule = {
  name: 'bench-auth-probe',
  routes(app, ctx) {
    app.get('/bench/open', { config: { auth: 'none' } }, async () => BODY);
    app.get('/bench/keyed', { config: { auth: ['apiKey'], scope: 'kb:read' } }, async () => BODY);
    const read = async (request: FastifyRequest<{ Querystring: { slug?: string } }>) => ({
      account: (await ctx.db.kysely.selectFrom('accounts').select(['id', 'slug', 'name']).where('slug', '=', request.query.slug ?? '').executeTakeFirst()) ?? null,
    });
    app.get('/bench/open-read', { config: { auth: 'none' } }, read);
    app.get('/bench/keyed-read', { config: { auth: ['apiKey'], scope: 'kb:read' } }, read);
  },
};

const config = loadConfig();
const logger = createLogger(config);
const runtime = await startRuntime(config, { logger, modules: [...MODULES, probe] });
if (!runtime.app) throw new Error('the auth probe server needs the serve role');
await runtime.app.listen({ port: config.port, host: config.host });

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    runtime.close().then(
      () => logger.flush(() => process.exit(0)),
      () => logger.flush(() => process.exit(1)),
    );
  });
}
