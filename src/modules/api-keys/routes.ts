import { Type, type Static } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { errorResponses, Nullable } from '../../platform/http/schemas.ts';
import { apiKeyCache } from './key-cache.ts';
import { apiKeysService, DEFAULT_RATE_LIMIT_PER_HOUR, KNOWN_SCOPES, MAX_EXPIRES_IN_DAYS, MAX_RATE_LIMIT_PER_HOUR } from './service.ts';

/** §4.2: a signed-in user's token only; the auth hook answers 401 to an API key here. */
const USER = ['jwt', 'session'] as const;
const tags = ['api-keys'];

const AccountSlug = Type.String({ minLength: 1, maxLength: 100, description: 'the workspace (account) slug' });
const Name = Type.String({ minLength: 1, maxLength: 100, description: 'short label' });
const Description = Type.String({ maxLength: 500 });
const Scopes = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
  maxItems: 50,
  description: `\`*\` (everything), one of ${KNOWN_SCOPES.join(', ')}, or a prefix ending in \`*\` that covers at least one of them (e.g. \`kb:*\`). At least one.`,
});
const RateLimit = Type.Integer({ minimum: 1, maximum: MAX_RATE_LIMIT_PER_HOUR, description: 'requests per hour for this key' });
const Environment = Type.Union([Type.Literal('live'), Type.Literal('test')]);
const KeyId = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: 'API key id (UUID)' }) });

const ApiKeyMetadata = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    description: Nullable(Type.String()),
    key_prefix: Type.String({ description: '`svc_live_` or `svc_test_` plus the 8 visible characters of the key' }),
    environment: Environment,
    permissions: Type.Object({ scopes: Type.Array(Type.String()), rate_limit_per_hour: Type.Integer() }),
    last_used_at: Nullable(Type.String({ format: 'date-time' }), 'last successful use, recorded at most once a minute'),
    expires_at: Nullable(Type.String({ format: 'date-time' }), 'the key stops working at this time; null: never expires'),
    is_active: Type.Boolean({ description: 'false: disabled (PATCH isActive) or revoked' }),
    revoked_at: Nullable(Type.String({ format: 'date-time' }), 'set when the key was revoked (DELETE); revoked keys never work again'),
    created_at: Type.String({ format: 'date-time' }),
    created_by: Nullable(Type.String({ format: 'uuid' }), 'user who created the key; null once that user is deleted'),
  },
  { $id: 'ApiKey', title: 'ApiKey', description: '§2.2 API key metadata; never the key or its hash' },
);
const ApiKeyRef = Type.Unsafe<Static<typeof ApiKeyMetadata>>(Type.Ref('ApiKey'));

const AuditEvent = Type.Object({
  id: Type.String({ format: 'uuid' }),
  api_key_id: Type.String({ format: 'uuid' }),
  key_prefix: Type.String(),
  event: Type.Union([Type.Literal('created'), Type.Literal('updated'), Type.Literal('disabled'), Type.Literal('enabled'), Type.Literal('revoked')]),
  actor_user_id: Nullable(Type.String({ format: 'uuid' }), 'who made the change; null once that user is deleted'),
  changes: Type.Record(Type.String(), Type.Unknown(), {
    description: 'created: the initial settings; other events: `{field: {from, to}}` for each changed field. Never the key or its hash.',
  }),
  created_at: Type.String({ format: 'date-time' }),
});

export function apiKeyRoutes(app: App, ctx: AppContext): void {
  const keys = apiKeysService(ctx);
  app.addSchema(ApiKeyMetadata);
  // The auth hook's cache may hold a LISTEN connection; it closes with the HTTP server.
  app.addHook('onClose', () => apiKeyCache(ctx).close());

  app.get(
    '/api/api-keys',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: "List a workspace's API keys (any member)",
        description:
          'Metadata only: the key itself is shown once, by POST. Newest first. Revoked keys are left out unless `includeRevoked=true`. A workspace the caller is not a member of is 404.',
        querystring: Type.Object({
          accountSlug: AccountSlug,
          includeRevoked: Type.Optional(Type.Boolean({ default: false, description: 'also list revoked keys (with revoked_at set)' })),
        }),
        response: { 200: Type.Object({ apiKeys: Type.Array(ApiKeyRef) }), ...errorResponses(400, 401, 404) },
      },
    },
    async (request) => ({ apiKeys: await keys.list(actorOf(request), request.query) }),
  );

  app.post(
    '/api/api-keys',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: 'Create an API key (owner or admin)',
        description:
          'Answers 200 with the key metadata and `fullKey`, the only time the key is ever shown: only its SHA-256 is stored. Format: `svc_live_` or `svc_test_`, 8 visible characters, 48 random characters (base62). ' +
          `Defaults: environment live, no expiry, scopes ["*"], ${DEFAULT_RATE_LIMIT_PER_HOUR} requests per hour. A member gets 403; a workspace the caller is not in, 404.`,
        body: Type.Object({
          accountSlug: AccountSlug,
          name: Name,
          description: Type.Optional(Description),
          environment: Type.Optional(Type.Union([Type.Literal('live'), Type.Literal('test')], { default: 'live' })),
          expiresInDays: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: MAX_EXPIRES_IN_DAYS, description: 'the key stops working this many days from now' })),
          permissions: Type.Optional(
            Type.Object({
              scopes: Type.Optional(Scopes),
              rate_limit_per_hour: Type.Optional(RateLimit),
            }),
          ),
        }),
        response: {
          200: Type.Object({
            apiKey: Type.Object(
              { ...ApiKeyMetadata.properties, fullKey: Type.String({ description: 'the key; shown only in this response, never again' }) },
              { title: 'NewApiKey' },
            ),
          }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => ({ apiKey: await keys.create(actorOf(request), request.body) }),
  );

  app.patch(
    '/api/api-keys/:id',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: 'Change an API key (owner or admin)',
        description:
          'Every field is optional but at least one is needed (400 otherwise). `isActive: false` disables the key at once, `true` re-enables it. `expiresAt` sets a new expiry (must be in the future) or removes it (null). ' +
          '`permissions` replaces the given parts (scopes and/or rate_limit_per_hour). The key value never changes. Unknown, revoked and other workspaces\' keys are 404; a member gets 403.',
        params: KeyId,
        body: Type.Object({
          name: Type.Optional(Name),
          description: Type.Optional(Nullable(Description, 'null clears it')),
          isActive: Type.Optional(Type.Boolean()),
          expiresAt: Type.Optional(Nullable(Type.String({ format: 'date-time' }), 'ISO 8601 date-time in the future; null removes the expiry')),
          permissions: Type.Optional(
            Type.Object({
              scopes: Type.Optional(Scopes),
              rate_limit_per_hour: Type.Optional(RateLimit),
            }),
          ),
        }),
        response: { 200: Type.Object({ apiKey: ApiKeyRef }), ...errorResponses(400, 401, 403, 404) },
      },
    },
    async (request) => ({ apiKey: await keys.update(actorOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/api-keys/:id',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: 'Revoke an API key (owner or admin)',
        description:
          'The key stops working immediately and for good. Its metadata stays (listed with `includeRevoked=true`) and so does its audit history. Revoking an already revoked key is 404, as for an unknown key.',
        params: KeyId,
        response: { 200: Type.Object({ success: Type.Literal(true) }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => {
      await keys.revoke(actorOf(request), request.params.id);
      return { success: true as const };
    },
  );

  app.get(
    '/api/api-keys/audit',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: "A workspace's API key audit log (owner or admin)",
        description:
          'Every create, change, disable, enable and revoke, newest first, with the user who did it. Page with `before`: pass the previous answer\'s `next_before` (null when there is nothing older). A member gets 403.',
        querystring: Type.Object({
          accountSlug: AccountSlug,
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
          before: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'an event id (next_before of the previous page)' })),
        }),
        response: {
          200: Type.Object({ events: Type.Array(AuditEvent), next_before: Nullable(Type.String({ format: 'uuid' }), 'pass as `before` for the next page; null on the last page') }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => keys.audit(actorOf(request), request.query),
  );
}
