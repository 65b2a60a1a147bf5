import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { SECURITY_SCHEMES } from './route-config.ts';
import { ErrorEnvelope } from './schemas.ts';

/** Operation vendor extensions: the API-key scope the route needs, and `error-only` for `{error}` error bodies. */
export const SCOPE_EXTENSION = 'x-hark-scope';
export const ERROR_SHAPE_EXTENSION = 'x-hark-error-shape';

/**
 * The OpenAPI 3.1 document is generated from the route schemas and each
 * route's declared credentials; nothing is written by hand twice. The
 * reference page serves its assets from node_modules, so it works offline.
 */
export async function installOpenApi(app: FastifyInstance, options: { baseUrl: string; version: string }): Promise<void> {
  app.addSchema(ErrorEnvelope);

  // Must run before routes are added: turns `config.auth` into the operation's
  // `security`, and the scope and error shape into vendor extensions, so the
  // document states every part of the declaration (the gate suites in
  // test/gates read it from there).
  app.addHook('onRoute', (route) => {
    const auth = route.config?.auth;
    if (!auth || route.schema?.hide) return;
    const security = auth === 'none' ? [] : auth.map((kind) => ({ [kind]: [] }));
    const scope = route.config?.scope;
    const errorOnly = route.config?.errorShape === 'error-only';
    route.schema = {
      ...route.schema,
      security,
      ...(scope ? { [SCOPE_EXTENSION]: scope } : {}),
      ...(errorOnly ? { [ERROR_SHAPE_EXTENSION]: 'error-only' } : {}),
    };
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Hark API',
        version: options.version,
        description:
          'Open, self-hostable voice-assistant platform. Errors use one envelope: `{error, message, code, details?, requestId?}`; `error` is a stable code, `details` lists invalid fields. ' +
          `Operations marked \`${ERROR_SHAPE_EXTENSION}: error-only\` answer errors as \`{error}\` only (workspace files). ` +
          `\`${SCOPE_EXTENSION}\` names the scope an API key needs for the operation (\`*\` and prefixes such as \`kb:*\` cover it).`,
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
      },
      servers: [{ url: options.baseUrl }],
      components: { securitySchemes: { ...SECURITY_SCHEMES } },
    },
    refResolver: {
      // Shared schemas keep their $id as the component name (ErrorEnvelope, ...).
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
  });
  await app.register(swaggerUi, {
    routePrefix: '/api/docs',
    // Same-origin only, and without upgrade-insecure-requests, which would
    // break the page on a plain-http self-hosted address.
    staticCSP:
      "default-src 'self'; base-uri 'self'; img-src 'self' data:; font-src 'self' data:; object-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'self'",
    uiConfig: { deepLinking: true, tryItOutEnabled: true },
  });
  app.get('/api/openapi.json', { schema: { hide: true }, config: { auth: 'none' } }, async () => app.swagger());
}
