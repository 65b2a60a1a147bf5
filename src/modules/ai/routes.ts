import { Type, type Static, type TSchema } from 'typebox';
import type { FastifyReply } from 'fastify';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf, type Actor } from '../../platform/http/auth.ts';
import { errorResponses } from '../../platform/http/schemas.ts';
import type { LlmProvider } from '../../providers/llm/index.ts';
import type { AccountRef } from '../accounts/service.ts';
import { CHAT_MODELS, CHAT_ROLES, ChatService, WITHHELD_OPTIONS, type ChatInput } from './chat.ts';
import { PRESET_PROMPT_MAX, PRESET_TITLE_MAX, presetsService } from './presets.ts';
import { LANGUAGE_MAX, PROMPT_MAX, PromptUtilitiesService } from './service.ts';

/** §4.4: prompt utilities take an API key, a Bearer session token or the session cookie. */
const UTILITY_AUTH = ['apiKey', 'session', 'jwt'] as const;
/** §4.4: chat completion and presets need a desktop JWT. */
const DESKTOP_AUTH = ['jwt'] as const;
/**
 * Conversations with images inline (base64) outgrow the default JSON limit;
 * the chat route takes this much (or BODY_LIMIT_BYTES when larger).
 */
const CHAT_BODY_LIMIT = 10 * 1024 * 1024;

const WorkspaceFields = {
  accountSlug: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'workspace slug; a signed-in caller must be a member (API keys: only their own workspace)' })),
  teamId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'workspace id, instead of accountSlug' })),
};
const WorkspaceQuery = Type.Object(WorkspaceFields);
const TextAnswer = Type.Object({ text: Type.String() });
const Prompt = (description: string) => Type.String({ minLength: 1, maxLength: PROMPT_MAX, description });

/** The workspace named in the body, else in the query string (teamId wins over accountSlug, as everywhere). */
function workspaceOf(body: { accountSlug?: string; teamId?: string }, query: { accountSlug?: string; teamId?: string }): AccountRef {
  const source = body.accountSlug !== undefined || body.teamId !== undefined ? body : query;
  return { accountSlug: source.accountSlug, teamId: source.teamId };
}

const PresetSchema = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    user_id: Type.String({ format: 'uuid', description: 'owner' }),
    uid: Type.String({ format: 'uuid', description: 'legacy alias of user_id' }),
    title: Type.String(),
    prompt: Type.String(),
    is_default: Type.Integer({ enum: [0, 1], description: '1: a provided preset, which cannot be changed or deleted' }),
    is_template: Type.Integer({ enum: [0, 1], description: '1: a shared template' }),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'PromptPreset', title: 'PromptPreset', description: '§2.3 prompt preset' },
);
const PresetRef = Type.Unsafe<Static<typeof PresetSchema>>(Type.Ref('PromptPreset'));
const PresetId = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: 'preset id (UUID)' }) });

const ChatMessageSchema = Type.Object(
  {
    role: Type.Enum(CHAT_ROLES),
    // Checked in chat.ts: a `type` union here would let the app's coerceTypes rewrite values, or warn under ajv's strict mode.
    content: Type.Unknown({ description: 'text, or an array of content parts (text, image_url, ...); null only beside tool_calls' }),
  },
  { additionalProperties: true, description: 'other message fields (name, tool_calls, tool_call_id, ...) are forwarded unchanged' },
);

const ChatBody = Type.Object(
  {
    model: Type.Enum(CHAT_MODELS, { description: 'allow-listed model; a `-proxied` name is sent upstream without that suffix' }),
    messages: Type.Array(ChatMessageSchema, { minItems: 1, maxItems: 2000 }),
    stream: Type.Optional(Type.Boolean({ default: false, description: 'true: answer as text/event-stream' })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
  },
  {
    additionalProperties: true,
    description:
      'Any other chat-completion option (max_tokens, top_p, stop, tools, response_format, seed, ...) is forwarded unchanged; the upstream decides whether it supports it (its 4xx answers come back as 400). ' +
      `Withheld, never forwarded: ${[...WITHHELD_OPTIONS].map(([option, why]) => `\`${option}\` (${why})`).join('; ')}.`,
  },
);

const ChatCompletionSchema = Type.Object(
  {
    id: Type.String(),
    object: Type.String({ description: 'normally chat.completion' }),
    created: Type.Integer({ description: 'Unix timestamp' }),
    model: Type.String(),
    choices: Type.Array(
      Type.Object({
        index: Type.Integer(),
        message: Type.Object({ role: Type.String(), content: Type.Union([Type.String(), Type.Null()]) }),
        finish_reason: Type.Union([Type.String(), Type.Null()]),
      }),
    ),
    usage: Type.Object({ prompt_tokens: Type.Integer(), completion_tokens: Type.Integer(), total_tokens: Type.Integer() }, { description: 'as reported by the upstream' }),
  },
  { title: 'ChatCompletion', description: '§2.4: the upstream JSON, passed on unchanged' },
);

/** Aborts when the client disconnects before the whole answer was written: the upstream request is then closed too. */
function abortOnDisconnect(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

export function aiRoutes(app: App, ctx: AppContext, llm: LlmProvider): void {
  const utilities = new PromptUtilitiesService(ctx, llm);
  const chat = new ChatService(llm);
  const presets = presetsService(ctx);
  app.addSchema(PresetSchema);
  // Idle keep-alive connections to the upstream would otherwise outlive the server.
  app.addHook('onClose', async () => llm.close());

  const utility = <Body extends TSchema>(
    path: string,
    summary: string,
    description: string,
    body: Body,
    run: (actor: Actor, ref: AccountRef, body: Static<Body>, signal: AbortSignal) => Promise<{ text: string }>,
  ) =>
    app.post(
      path,
      {
        config: { auth: UTILITY_AUTH },
        schema: {
          tags: ['ai'],
          summary,
          description: `${description} API keys act in their own workspace; a signed-in caller may name one with accountSlug or teamId (body or query), which they must be a member of (404 otherwise). 500 \`not_configured\` until LLM_BASE_URL is set; 500 when generation fails.`,
          querystring: WorkspaceQuery,
          body,
          response: { 200: TextAnswer, ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request, reply) => {
        const input = request.body as Static<Body> & { accountSlug?: string; teamId?: string };
        return run(actorOf(request), workspaceOf(input, request.query), input, abortOnDisconnect(reply));
      },
    );

  utility(
    '/api/improve-prompt',
    'Rewrite a prompt for clarity',
    'Rewrites the prompt to be clearer and better organised, keeping its content, in the language it is written in.',
    Type.Object({ prompt: Prompt('the prompt to improve'), ...WorkspaceFields }),
    (actor, ref, body, signal) => utilities.improve(actor, ref, body, signal),
  );
  utility(
    '/api/translate-prompt',
    'Translate a prompt',
    'Translates the prompt into targetLanguage (a language name such as "German" or a code such as "de"), keeping placeholders and formatting.',
    Type.Object({ prompt: Prompt('the prompt to translate'), targetLanguage: Type.String({ minLength: 1, maxLength: LANGUAGE_MAX }), ...WorkspaceFields }),
    (actor, ref, body, signal) => utilities.translate(actor, ref, body, signal),
  );
  utility(
    '/api/generate-opportunity-prompt',
    'Write opportunity-detection instructions for an assistant',
    "From an assistant's system prompt, writes the instructions a call analyser uses to spot business opportunities in that assistant's calls.",
    Type.Object({ systemPrompt: Prompt("the assistant's system prompt"), ...WorkspaceFields }),
    (actor, ref, body, signal) => utilities.opportunityPrompt(actor, ref, body, signal),
  );
  utility(
    '/api/generate-success-prompt',
    'Write call-success criteria for an assistant',
    "From an assistant's system prompt, writes the instructions a call evaluator uses to decide whether a call succeeded. accountSlug only selects the workspace checked; it does not change the text.",
    Type.Object({ systemPrompt: Prompt("the assistant's system prompt"), ...WorkspaceFields }),
    (actor, ref, body, signal) => utilities.successPrompt(actor, ref, body, signal),
  );

  app.post(
    '/api/llm/chat',
    {
      config: { auth: DESKTOP_AUTH },
      bodyLimit: Math.max(ctx.config.bodyLimitBytes, CHAT_BODY_LIMIT),
      schema: {
        tags: ['ai'],
        summary: 'Chat completion (proxied to the LLM upstream)',
        description:
          'Sends the conversation to the OpenAI-compatible upstream with this server\'s key (the caller\'s credentials never leave Hark) and answers with the upstream\'s bytes unchanged: §2.4 JSON, or with `stream: true` a `text/event-stream` of `data: <chunk JSON>` lines ending with `data: [DONE]` (added when the upstream omits it; an upstream that breaks off mid-stream ends with a `data: {"error": ...}` event and no [DONE]). ' +
          'A client that disconnects cancels the upstream request. Errors: 400 for a model outside the allow-list, invalid JSON, missing or empty messages, or a request the upstream rejects (its message, sanitised); 429 when the upstream rate-limits this server; ' +
          '500 `not_configured` until LLM_BASE_URL is set; 502 when the upstream cannot be reached, times out, fails (5xx) or refuses this server\'s key.',
        body: ChatBody,
        response: {
          200: {
            description: 'the completion (JSON) or its stream (SSE)',
            content: {
              'application/json': { schema: ChatCompletionSchema },
              'text/event-stream': { schema: Type.String({ description: '`data: <chunk JSON>\\n\\n` events, then `data: [DONE]\\n\\n`' }) },
            },
          },
          ...errorResponses(400, 401, 413, 429, 500, 502),
        },
      },
    },
    async (request, reply) => {
      const answer = await chat.complete(request.body as ChatInput, abortOnDisconnect(reply));
      reply.type(answer.contentType);
      // Proxies (nginx and the like) must neither cache nor buffer an event stream.
      if (answer.contentType.startsWith('text/event-stream')) reply.header('cache-control', 'no-cache, no-transform').header('x-accel-buffering', 'no');
      // The schema documents the bytes; a stream is sent as is, never serialised against it.
      return (reply as FastifyReply).send(answer.body);
    },
  );

  const presetTags = ['prompt-presets'];
  app.get(
    '/api/prompt-presets',
    {
      config: { auth: DESKTOP_AUTH },
      schema: {
        tags: presetTags,
        summary: "The caller's prompt presets",
        description: 'Defaults first (is_default 1), then by title, compared case-insensitively.',
        response: { 200: Type.Object({ success: Type.Literal(true), data: Type.Object({ presets: Type.Array(PresetRef) }) }), ...errorResponses(401) },
      },
    },
    async (request) => ({ success: true as const, data: { presets: await presets.list(actorOf(request)) } }),
  );

  // Declared before /{id}; find-my-way prefers the static segment anyway, and PUT or DELETE on it is a 404 like any unknown id.
  app.get(
    '/api/prompt-presets/templates',
    {
      config: { auth: DESKTOP_AUTH },
      schema: {
        tags: presetTags,
        summary: 'Shared preset templates',
        description: 'Always an empty list for now (§4.4).',
        response: { 200: Type.Object({ success: Type.Literal(true), data: Type.Object({ templates: Type.Array(PresetRef) }) }), ...errorResponses(401) },
      },
    },
    async () => ({ success: true as const, data: { templates: presets.templates() } }),
  );

  app.post(
    '/api/prompt-presets',
    {
      config: { auth: DESKTOP_AUTH },
      schema: {
        tags: presetTags,
        summary: 'Create a prompt preset',
        description: 'title and prompt are both required and must not be blank.',
        body: Type.Object({
          title: Type.String({ minLength: 1, maxLength: PRESET_TITLE_MAX }),
          prompt: Type.String({ minLength: 1, maxLength: PRESET_PROMPT_MAX }),
        }),
        response: { 200: Type.Object({ success: Type.Literal(true), data: Type.Object({ preset: PresetRef }) }), ...errorResponses(400, 401) },
      },
    },
    async (request) => ({ success: true as const, data: { preset: await presets.create(actorOf(request), request.body) } }),
  );

  app.put(
    '/api/prompt-presets/:id',
    {
      config: { auth: DESKTOP_AUTH },
      schema: {
        tags: presetTags,
        summary: 'Change a prompt preset',
        description:
          'Give title, prompt or both; at least one must be non-empty (400 otherwise). An empty string leaves its field as it is: it never clears it. Only your own presets that are neither defaults nor templates can be changed; any other id is 404.',
        params: PresetId,
        body: Type.Object({
          title: Type.Optional(Type.String({ maxLength: PRESET_TITLE_MAX })),
          prompt: Type.Optional(Type.String({ maxLength: PRESET_PROMPT_MAX })),
        }),
        response: { 200: Type.Object({ success: Type.Literal(true), data: Type.Object({ preset: PresetRef }) }), ...errorResponses(400, 401, 404) },
      },
    },
    async (request) => ({ success: true as const, data: { preset: await presets.update(actorOf(request), request.params.id, request.body) } }),
  );

  app.delete(
    '/api/prompt-presets/:id',
    {
      config: { auth: DESKTOP_AUTH },
      schema: {
        tags: presetTags,
        summary: 'Delete a prompt preset',
        description: 'Only your own presets that are neither defaults nor templates; any other id is 404. `changes` is the number of presets deleted (1).',
        params: PresetId,
        response: { 200: Type.Object({ success: Type.Literal(true), data: Type.Object({ changes: Type.Integer() }) }), ...errorResponses(401, 404) },
      },
    },
    async (request) => ({ success: true as const, data: await presets.remove(actorOf(request), request.params.id) }),
  );
}
