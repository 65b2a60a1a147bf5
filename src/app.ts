import Fastify, { LogController, type FastifyBaseLogger } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { App } from './platform/http/app-type.ts';
import type { AppContext, HarkModule } from './platform/context.ts';
import type { Migration } from './platform/db/migrate.ts';
import { installErrorHandling } from './platform/http/error-handler.ts';
import { installRequestContext, requestIdFor } from './platform/http/request-context.ts';
import { installOpenApi } from './platform/http/openapi.ts';
import { healthRoutes } from './platform/http/health-routes.ts';
import { blobRoutes } from './platform/storage/blob-routes.ts';
import { VERSION } from './version.ts';

/** The HTTP API over an already-started context; tests call this too. */
export async function buildApp(ctx: AppContext, migrations: Migration[], modules: readonly HarkModule[]): Promise<App> {
  const app = Fastify({
    loggerInstance: ctx.logger as FastifyBaseLogger,
    // request-context.ts writes one line per request instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: false,
    genReqId: requestIdFor,
    bodyLimit: ctx.config.bodyLimitBytes,
    return503OnClosing: true,
    ajv: {
      // allErrors: a 400 lists every invalid field, not just the first.
      customOptions: { allErrors: true, coerceTypes: 'array', removeAdditional: true, useDefaults: true },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  installErrorHandling(app);
  installRequestContext(app);
  await installOpenApi(app, { baseUrl: ctx.config.baseUrl, version: VERSION });

  healthRoutes(app, ctx, migrations);
  blobRoutes(app, ctx);
  for (const module of modules) await module.routes?.(app, ctx);

  await app.ready();
  return app;
}
