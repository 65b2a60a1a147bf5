import Fastify, { LogController, type FastifyBaseLogger } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { App } from './platform/http/app-type.ts';
import type { AppContext, HarkModule } from './platform/context.ts';
import type { Migration } from './platform/db/migrate.ts';
import { clientErrorHandler, frameworkErrors, installErrorHandling } from './platform/http/error-handler.ts';
import { installRequestContext, requestIdFor } from './platform/http/request-context.ts';
import { installOpenApi } from './platform/http/openapi.ts';
import { healthRoutes } from './platform/http/health-routes.ts';
import { blobRoutes } from './platform/storage/blob-routes.ts';
import { VERSION } from './version.ts';
import cookie from '@fastify/cookie';
import { installAuth } from './platform/http/auth.ts';
import { identityService } from './modules/identity/service.ts';
import { apiKeyAuthenticator } from './modules/api-keys/authenticate.ts';

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
    frameworkErrors,
    clientErrorHandler,
    ajv: {
      // allErrors: a 400 lists every invalid field, not just the first.
      customOptions: { allErrors: true, coerceTypes: 'array', removeAdditional: true, useDefaults: true },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  installErrorHandling(app);
  installRequestContext(app);
  await app.register(cookie);
  await installOpenApi(app, { baseUrl: ctx.config.baseUrl, version: VERSION });
  installAuth(app, {
    accessToken: (token) => identityService(ctx).verifyAccessToken(token),
    apiKey: (key, reply) => apiKeyAuthenticator(ctx).authenticate(key, reply),
  });

  healthRoutes(app, ctx, migrations);
  blobRoutes(app, ctx);
  for (const module of modules) await module.routes?.(app, ctx);

  await app.ready();
  return app;
}
