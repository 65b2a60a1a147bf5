import type { FastifyRequest } from 'fastify';
import { Type, type Static, type TSchema } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { errorResponses } from '../../platform/http/schemas.ts';
import { publicCatalogue } from './catalogue.ts';
import { assistantsService, ASSISTANT_TYPES, DEFAULT_PAGE_SIZE, DEFAULT_TELEPHONY, MAX_FIRST_MESSAGE, MAX_PAGE_SIZE, MAX_PROMPT } from './service.ts';
import { DEFAULT_SUBSCRIBED_EVENTS, DEFAULT_WEBHOOK_OPTIONS, MAX_WEBHOOK_URL, WEBHOOK_EVENTS, WEBHOOK_RETRY_LIMIT, type WebhookOptions } from './webhooks.ts';

/** §5 rule 9: assistants accept API keys and sessions (cookie or Bearer access token). */
const ANY = ['apiKey', 'session', 'jwt'] as const;
/** The test delivery is for people at the dashboard (§4.3: session); API keys are refused. */
const USER = ['session', 'jwt'] as const;
const READ = { auth: ANY, scope: 'assistants:read' };
const WRITE = { auth: ANY, scope: 'assistants:write' };
const tags = ['assistants'];

/** `{type: [T, 'null']}` rather than anyOf: with coerceTypes, ajv would turn null into "" through a string branch. */
const Nullable = <T extends TSchema & { type: string }>(schema: T, description?: string) =>
  Type.Unsafe<Static<T> | null>({ ...schema, type: [schema.type, 'null'], ...(description ? { description } : {}) });
/** A plain string enum: validation errors then read "must be one of a, b". */
const StringEnum = <const V extends readonly string[]>(values: V, description?: string) =>
  Type.Unsafe<V[number]>({ type: 'string', enum: [...values], ...(description ? { description } : {}) });

const AccountSlug = Type.String({
  minLength: 1,
  maxLength: 100,
  description: 'the workspace (account) slug. Users: required to create and list. API keys: optional (the key\'s own workspace); when given it must be that workspace.',
});
const ItemAccountSlug = Type.String({ minLength: 1, maxLength: 100, description: 'optional; when given it must be the assistant\'s workspace (404 otherwise)' });
const Params = Type.Object({ assistantId: Type.String({ minLength: 1, maxLength: 100, description: 'assistant id (UUID)' }) });
const Limit = Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE });
const Cursor = Type.String({ minLength: 1, maxLength: 100, description: 'opaque: the `next_cursor` of the previous page' });
const NextCursor = Nullable(Type.String(), 'pass as `cursor` for the next page; null on the last page');
const Name = Type.String({ minLength: 1, maxLength: 100, pattern: '\\S', description: '1 to 100 characters, not blank' });
const Event = StringEnum(WEBHOOK_EVENTS);
const Id = Type.String({ minLength: 1, maxLength: 100 });

const fields = {
  type: Type.Optional(StringEnum(ASSISTANT_TYPES, 'inbound: answers calls to its number; outbound: places calls; web: talks in a browser or app. Default inbound.')),
  prompt: Type.Optional(Type.String({ maxLength: MAX_PROMPT, description: 'system prompt; default empty' })),
  first_message: Type.Optional(Type.String({ maxLength: MAX_FIRST_MESSAGE, description: 'what the assistant says first; default empty' })),
  voice: Type.Optional(
    Type.Object({ provider: Type.Optional(Id), voice_id: Type.Optional(Id) }, { description: 'a voice of the catalogue; parts left out keep their current (or default) value' }),
  ),
  model: Type.Optional(
    Type.Object({ provider: Type.Optional(Id), model: Type.Optional(Id) }, { description: 'a language model of the catalogue; provider and model are checked together, parts left out keep their current (or default) value' }),
  ),
  transcriptor_options: Type.Optional(
    Type.Object(
      { provider: Type.Optional(Id), model: Type.Optional(Id), language: Type.Optional(Type.String({ minLength: 1, maxLength: 20 })) },
      { description: 'speech-to-text settings from the catalogue, checked together; parts left out keep their current (or default) value' },
    ),
  ),
  telephony: Type.Optional(
    Type.Object(
      {
        outbound_enabled: Type.Optional(Type.Boolean({ description: `may place outbound calls; default ${DEFAULT_TELEPHONY.outbound_enabled}` })),
        max_call_seconds: Type.Optional(Type.Integer({ minimum: 30, maximum: 14_400, description: `a call is ended after this long; default ${DEFAULT_TELEPHONY.max_call_seconds}` })),
        record_calls: Type.Optional(Type.Boolean({ description: `keep call recordings; default ${DEFAULT_TELEPHONY.record_calls}` })),
        phone_number_id: Type.Optional(Nullable(Type.String({ format: 'uuid' }), 'the workspace phone number that reaches this assistant; null: none')),
      },
      { description: 'parts left out keep their current (or default) value' },
    ),
  ),
  webhook: Type.Optional(
    Type.Object(
      {
        url: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: MAX_WEBHOOK_URL }), 'http or https URL without credentials; null stops deliveries')),
        events: Type.Optional(
          Type.Array(Event, { uniqueItems: true, maxItems: WEBHOOK_EVENTS.length, description: `events to deliver; default ${DEFAULT_SUBSCRIBED_EVENTS.join(', ')}` }),
        ),
      },
      { description: 'where events are POSTed. The signing secret is generated by the server, never sent by clients.' },
    ),
  ),
};

const VoiceOut = Type.Object({ provider: Type.String(), voice_id: Type.String() });
const ModelOut = Type.Object({ provider: Type.String(), model: Type.String() });
const TranscriberOut = Type.Object({ provider: Type.String(), model: Type.String(), language: Type.String() });
const TelephonyOut = Type.Object({
  outbound_enabled: Type.Boolean(),
  max_call_seconds: Type.Integer(),
  record_calls: Type.Boolean(),
  phone_number_id: Nullable(Type.String({ format: 'uuid' })),
});
const WebhookOut = {
  url: Nullable(Type.String()),
  events: Type.Array(Type.String()),
  has_secret: Type.Boolean({ description: 'always true: every assistant has a signing secret, shown only on create and rotate' }),
};
const assistantProperties = {
  id: Type.String({ format: 'uuid' }),
  account_id: Type.String({ format: 'uuid' }),
  account_slug: Type.String(),
  name: Type.String(),
  type: StringEnum(ASSISTANT_TYPES),
  prompt: Type.String(),
  first_message: Type.String(),
  voice: VoiceOut,
  model: ModelOut,
  transcriptor_options: TranscriberOut,
  telephony: TelephonyOut,
  webhook: Type.Object(WebhookOut),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
};
const Assistant = Type.Object(assistantProperties, { $id: 'Assistant', title: 'Assistant', description: '§2.10 assistant; the webhook secret is never included' });
const AssistantRef = Type.Unsafe<Static<typeof Assistant>>(Type.Ref('Assistant'));
const NewAssistant = Type.Object(
  {
    ...assistantProperties,
    webhook: Type.Object({
      ...WebhookOut,
      secret: Type.String({ description: 'the webhook signing secret (`whsec_...`); shown only in this answer and by rotate-secret' }),
    }),
  },
  { title: 'NewAssistant' },
);

const Attempt = Type.Object({
  attempt: Type.Integer({ description: '1 for the first try' }),
  url: Type.String(),
  status_code: Nullable(Type.Integer(), 'null: no HTTP answer (timeout, connection error)'),
  latency_ms: Type.Integer(),
  error: Nullable(Type.String(), 'null on success'),
  created_at: Type.String({ format: 'date-time' }),
});
const Delivery = Type.Object({
  id: Type.String({ format: 'uuid', description: 'also the body\'s `id` and the X-Hark-Delivery header' }),
  event: Type.String(),
  status: StringEnum(['pending', 'succeeded', 'failed'] as const),
  test: Type.Boolean({ description: 'sent by POST .../webhooks/test (one attempt, never retried)' }),
  attempts: Type.Integer(),
  last_status_code: Nullable(Type.Integer()),
  last_error: Nullable(Type.String()),
  payload: Type.Record(Type.String(), Type.Unknown(), { description: 'the body sent' }),
  created_at: Type.String({ format: 'date-time' }),
  completed_at: Nullable(Type.String({ format: 'date-time' })),
  attempt_log: Type.Array(Attempt),
});

const ProviderList = Type.Array(Type.Object({ id: Type.String(), name: Type.String(), models: Type.Array(Type.String()) }));
const Catalogue = Type.Object({
  llm: ProviderList,
  voice: Type.Array(
    Type.Object({
      id: Type.String(),
      name: Type.String(),
      voices: Type.Array(Type.Object({ id: Type.String(), name: Type.String(), languages: Type.Array(Type.String()) })),
    }),
  ),
  transcriber: Type.Array(Type.Object({ id: Type.String(), name: Type.String(), models: Type.Array(Type.String()), languages: Type.Array(Type.String()) })),
  defaults: Type.Object({ model: ModelOut, voice: VoiceOut, transcriptor_options: TranscriberOut }),
});

/** For POSTs whose body is all optional: no body at all means `{}` rather than "body must be object". */
async function noBodyIsEmpty(request: FastifyRequest): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}

const WEBHOOK_FORMAT =
  'Deliveries POST JSON `{id, type, created_at, assistant_id, account_id, data}` with headers `X-Hark-Delivery` (delivery id), `X-Hark-Timestamp` (unix seconds), ' +
  '`X-Hark-Signature: v1=<hex HMAC-SHA256 of "<timestamp>.<raw body>", keyed with the whole whsec_ secret>` and `User-Agent: Hark-Webhooks/1`. ' +
  `A 2xx answer within ${DEFAULT_WEBHOOK_OPTIONS.timeoutMs / 1000} s is success; anything else is retried up to ${WEBHOOK_RETRY_LIMIT} times with exponential backoff, then the delivery is failed. ` +
  'Redirects are not followed. Private and loopback addresses are allowed (Hark is self-hosted and receivers often live next to it).';

export function assistantRoutes(app: App, ctx: AppContext, options: WebhookOptions): void {
  const assistants = assistantsService(ctx);
  app.addSchema(Assistant);

  app.get(
    '/api/assistants/catalogue',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Providers, models, voices and transcribers an assistant can use',
        description:
          'Public (no credential): it is the same for everyone and holds no workspace data. Create and PATCH accept exactly these combinations; `defaults` is what a new assistant gets for a setting it leaves out.',
        response: { 200: Type.Object({ success: Type.Literal(true), catalogue: Catalogue }) },
      },
    },
    async () => ({ success: true as const, catalogue: publicCatalogue() }),
  );

  app.post(
    '/api/assistants',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Create an assistant (any member; API key with assistants:write)',
        description:
          'Only `name` is required; every other setting defaults (see GET /api/assistants/catalogue). Nested objects may be partial and are laid over the defaults, then provider and model (voice, transcriber) are checked together: a mismatch is 400 with `details` naming the field, e.g. `model.model`. ' +
          'The answer includes `webhook.secret`, the signing secret of this assistant\'s webhook deliveries: shown here and by rotate-secret only. ' +
          WEBHOOK_FORMAT,
        body: Type.Object({ accountSlug: Type.Optional(AccountSlug), name: Name, ...fields }),
        response: { 200: Type.Object({ success: Type.Literal(true), assistant: NewAssistant }), ...errorResponses(400, 401, 403, 404) },
      },
    },
    async (request) => ({ success: true as const, assistant: await assistants.create(actorOf(request), request.body) }),
  );

  app.get(
    '/api/assistants',
    {
      config: READ,
      schema: {
        tags,
        summary: "List a workspace's assistants",
        description: 'Newest first; deleted assistants are left out. Page with `cursor` (the previous answer\'s `next_cursor`, null on the last page).',
        querystring: Type.Object({ accountSlug: Type.Optional(AccountSlug), limit: Type.Optional(Limit), cursor: Type.Optional(Cursor) }),
        response: {
          200: Type.Object({ success: Type.Literal(true), assistants: Type.Array(AssistantRef), next_cursor: NextCursor }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => ({ success: true as const, ...(await assistants.list(actorOf(request), request.query)) }),
  );

  app.get(
    '/api/assistants/:assistantId',
    {
      config: READ,
      schema: {
        tags,
        summary: 'Get an assistant',
        description: "Any member of the assistant's workspace, or an API key of it. Unknown, deleted and other workspaces' assistants are 404 alike.",
        params: Params,
        querystring: Type.Object({ accountSlug: Type.Optional(ItemAccountSlug) }),
        response: { 200: Type.Object({ success: Type.Literal(true), assistant: AssistantRef }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => ({ success: true as const, assistant: await assistants.get(actorOf(request), request.params.assistantId, request.query.accountSlug) }),
  );

  app.patch(
    '/api/assistants/:assistantId',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Change an assistant (§4.3)',
        description:
          'Partial update: give at least one field besides `accountSlug` (400 otherwise). Nested objects are merged into the stored ones, and provider and model are validated together with the stored value: `{"model": {"model": "llm-4.1"}}` is checked against the stored `model.provider`. ' +
          '`webhook.url: null` stops deliveries; `webhook.events` replaces the list. The signing secret is not changed here (see rotate-secret).',
        params: Params,
        body: Type.Object({ accountSlug: Type.Optional(ItemAccountSlug), name: Type.Optional(Name), ...fields }),
        response: { 200: Type.Object({ success: Type.Literal(true), assistant: AssistantRef }), ...errorResponses(400, 401, 403, 404) },
      },
    },
    async (request) => ({ success: true as const, assistant: await assistants.update(actorOf(request), request.params.assistantId, request.body) }),
  );

  app.delete(
    '/api/assistants/:assistantId',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Delete an assistant (any member; API key with assistants:write)',
        description:
          'Soft delete: from now on every endpoint answers 404 for it and its pending webhook deliveries stop; the row and its delivery history stay in the database. Deleting again is 404.',
        params: Params,
        querystring: Type.Object({ accountSlug: Type.Optional(ItemAccountSlug) }),
        response: { 200: Type.Object({ success: Type.Literal(true) }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => {
      await assistants.remove(actorOf(request), request.params.assistantId, request.query.accountSlug);
      return { success: true as const };
    },
  );

  app.post(
    '/api/assistants/:assistantId/webhooks/test',
    {
      config: { auth: USER },
      preValidation: noBodyIsEmpty,
      schema: {
        tags,
        summary: "Send a test delivery to the assistant's webhook now",
        description:
          `One signed delivery (type \`webhook.test\` unless \`event\` says otherwise; \`data\` is \`{test: true, message}\`), sent synchronously with a ${Math.round(options.timeoutMs / 1000)} s limit, recorded in the delivery list and never retried. ` +
          "The receiver's answer is reported, not raised: a refused connection, a timeout or a 500 is a 200 here with `ok: false`, `status_code` (null without an HTTP answer) and `error`. " +
          '400 when the assistant has no webhook URL. Signed-in users only (§4.3: session); API keys are refused. ' +
          WEBHOOK_FORMAT,
        params: Params,
        body: Type.Object({ accountSlug: Type.Optional(ItemAccountSlug), event: Type.Optional(Event) }, { description: 'optional: the request may have no body' }),
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            delivery: Type.Object({
              id: Type.String({ format: 'uuid' }),
              status_code: Nullable(Type.Integer(), 'null: no HTTP answer'),
              latency_ms: Type.Integer(),
              error: Nullable(Type.String(), 'why it was not ok; null when ok'),
              ok: Type.Boolean({ description: 'the receiver answered 2xx in time' }),
            }),
          }),
          ...errorResponses(400, 401, 404),
        },
      },
    },
    async (request) => ({
      success: true as const,
      delivery: await assistants.sendTest(actorOf(request), request.params.assistantId, request.body, options.timeoutMs),
    }),
  );

  app.post(
    '/api/assistants/:assistantId/webhooks/rotate-secret',
    {
      config: WRITE,
      preValidation: noBodyIsEmpty,
      schema: {
        tags,
        summary: "Replace the assistant's webhook signing secret",
        description:
          'The new secret signs every delivery from now on, retries of pending ones included; the old one stops at once, so update the receiver right after. The secret is shown only in this answer.',
        params: Params,
        body: Type.Object({ accountSlug: Type.Optional(ItemAccountSlug) }, { description: 'optional: the request may have no body' }),
        response: { 200: Type.Object({ success: Type.Literal(true), secret: Type.String() }), ...errorResponses(400, 401, 403, 404) },
      },
    },
    async (request) => ({ success: true as const, secret: await assistants.rotateSecret(actorOf(request), request.params.assistantId, request.body.accountSlug) }),
  );

  app.get(
    '/api/assistants/:assistantId/webhooks/deliveries',
    {
      config: READ,
      schema: {
        tags,
        summary: "The assistant's webhook deliveries, with every attempt",
        description: 'Newest first, test deliveries included. Page with `cursor` (the previous answer\'s `next_cursor`).',
        params: Params,
        querystring: Type.Object({ accountSlug: Type.Optional(ItemAccountSlug), limit: Type.Optional(Limit), cursor: Type.Optional(Cursor) }),
        response: {
          200: Type.Object({ success: Type.Literal(true), deliveries: Type.Array(Delivery), next_cursor: NextCursor }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => ({ success: true as const, ...(await assistants.deliveries(actorOf(request), request.params.assistantId, request.query)) }),
  );
}
