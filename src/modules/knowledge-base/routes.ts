import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type, type Static } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { multipartErrors, multipartParts, registerMultipart } from '../../platform/http/multipart.ts';
import { errorResponses, Nullable, StringEnum } from '../../platform/http/schemas.ts';
import type { PipelineOptions } from './pipeline/process.ts';
import { DEFAULT_TOP_K, KnowledgeBaseSearch, MAX_QUERY_CHARS, MAX_TOP_K, RRF_K, SEARCH_MODES, type SearchTiming } from './search.ts';
import { DEFAULT_PAGE_SIZE, DOWNLOAD_URL_TTL_SECONDS, KB_MESSAGES, MAX_FILENAME_LENGTH, MAX_PAGE_SIZE, knowledgeBaseService } from './service.ts';
import { STORAGE_RULE_DESCRIPTION } from './storage-credits.ts';
import { KB_FILE_STATUSES } from './tables.ts';

/** §4.5, §5 rule 9: API keys and sessions (cookie or Bearer access token), with the kb scopes for keys. */
const ANY = ['apiKey', 'session', 'jwt'] as const;
const READ = { auth: ANY, scope: 'kb:read' };
const WRITE = { auth: ANY, scope: 'kb:write' };
const tags = ['knowledge-base'];


const AccountSlug = Type.String({
  minLength: 1,
  maxLength: 100,
  description: "the workspace (account) slug. Users: required. API keys: optional (the key's own workspace); when given it must be that workspace.",
});
const ItemAccountSlug = Type.String({ minLength: 1, maxLength: 100, description: "optional; when given it must be the file's (or assistant's) workspace (404 otherwise)" });
const FileParams = Type.Object({ fileId: Type.String({ minLength: 1, maxLength: 100, description: 'file id (UUID)' }) });
const AssistantParams = Type.Object({ assistantId: Type.String({ minLength: 1, maxLength: 100, description: 'assistant id (UUID)' }) });
const ItemQuery = Type.Object({ accountSlug: Type.Optional(ItemAccountSlug) });
const Success = Type.Object({ success: Type.Literal(true) });

const KbFile = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    filename: Type.String({ description: 'original name' }),
    mime_type: Type.String({
      description:
        'detected from the content (and the name, for Markdown), not from what the client sent: application/pdf, application/vnd.openxmlformats-officedocument.wordprocessingml.document, text/plain or text/markdown',
    }),
    size_bytes: Type.Integer(),
    status: StringEnum(KB_FILE_STATUSES, 'pending → parsing → embedding → indexing → ready; any processing state → failed. Only ready files produce search hits.'),
    status_error: Nullable(Type.String(), 'why processing failed; null unless failed'),
    char_count: Nullable(Type.Integer(), 'characters of extracted text; null until extraction completes'),
    chunk_count: Nullable(Type.Integer(), 'null until chunking completes'),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
    attachment_count: Type.Optional(Type.Integer({ description: 'assistants the file is attached to; only when listing with include=attachment_count' })),
  },
  { $id: 'KbFile', title: 'KnowledgeBaseFile', description: '§2.5 knowledge-base file' },
);
const KbFileRef = Type.Unsafe<Static<typeof KbFile>>(Type.Ref('KbFile'));

const SearchHit = Type.Object(
  {
    rank: Type.Integer({ minimum: 1, description: 'one-based position in `hits`: primary hits first, then adjacent chunks' }),
    file_id: Type.String({ format: 'uuid' }),
    filename: Type.String(),
    chunk_index: Type.Integer({ minimum: 0, description: 'zero-based position of the chunk in its file' }),
    page_number: Nullable(Type.Integer(), 'PDF page (one-based); null for other types'),
    content: Type.String(),
    similarity: Type.Number({ description: 'cosine similarity of the chunk to the query (-1..1), for every hit, keyword-only and adjacent ones included' }),
    match_type: StringEnum(['semantic', 'keyword'] as const, "semantic: the vector search ranked it (alone or with full-text); keyword: only the full-text search did. Adjacent chunks carry their primary's value."),
    adjacent: Type.Boolean({ description: 'true for a chunk right before or after a primary hit, added as context' }),
  },
  { title: 'KnowledgeBaseSearchHit' },
);

/** Documents the form for OpenAPI only: parts are read as a stream by the handler, so a missing file gets the service's message. */
const UploadBody = {
  content: {
    'multipart/form-data': {
      schema: {
        type: ['object', 'null'],
        required: ['file'],
        properties: { file: { type: 'string', format: 'binary', description: 'a PDF, DOCX, TXT or MD document' } },
      },
    },
  },
};

/** A Server-Timing header value (W3C Server Timing), durations in ms: `search;dur=21.4, embedding;dur=12.9`. */
function serverTiming(timing: SearchTiming): string {
  const metrics = [`search;dur=${timing.totalMs.toFixed(1)}`];
  if (timing.embeddingMs !== undefined) metrics.push(`embedding;dur=${timing.embeddingMs.toFixed(1)}`);
  return metrics.join(', ');
}

/** Besides the file, a form may carry a few fields we ignore (clients add their own); one file only. */
function multipartLimits(maxFileBytes: number) {
  return {
    // One byte past the service's own limit, so the blob store's limit decides and answers the message.
    fileSize: maxFileBytes + 1,
    files: 1,
    fields: 10,
    fieldSize: 4096,
    parts: 12,
  };
}

/** @fastify/multipart errors as our client errors. */
function multipartError(maxFileBytes: number) {
  return multipartErrors({
    tooLarge: () => new AppError('bad_request', KB_MESSAGES.tooLarge(maxFileBytes), [{ field: 'file', message: `must be at most ${maxFileBytes} bytes` }]),
    tooManyFields: 'Too many form fields; send the document in the field "file"',
  });
}

export async function knowledgeBaseRoutes(app: App, ctx: AppContext, options: PipelineOptions): Promise<void> {
  const kb = knowledgeBaseService(ctx);
  const search = new KnowledgeBaseSearch(ctx, options.embedder);
  const maxFileBytes = ctx.config.kb.maxFileBytes;
  const uploadError = multipartError(maxFileBytes);
  app.addSchema(KbFile);

  // An encapsulated scope: the multipart parser, its limits and the draining of refused uploads apply to the upload only.
  await app.register(async (plugin) => {
    await registerMultipart(plugin, multipartLimits(maxFileBytes));
    plugin.withTypeProvider<TypeBoxTypeProvider>().post(
      '/api/kb/files',
      {
        config: WRITE,
        schema: {
          tags,
          summary: 'Upload a document to the workspace library',
          description:
            `multipart/form-data with one \`file\` (PDF, DOCX, TXT or MD, at most ${maxFileBytes} bytes; §8: 1 GiB, lowered by KB_MAX_FILE_BYTES). ` +
            'The type is detected from the content: other types are 400. A larger file is 400 and nothing is kept. ' +
            'New content: `{success, credits_charged, file}` with status pending, and processing starts in the background (poll GET /api/kb/files/{fileId}). ' +
            'Content identical to a file already in the library (same SHA-256): `{success, file: {id, status}, deduplicated: true, message}` with the existing file, nothing stored and nothing charged, also for concurrent uploads. ' +
            STORAGE_RULE_DESCRIPTION +
            ` File names longer than ${MAX_FILENAME_LENGTH} characters are 400. Users name the workspace with \`?accountSlug=\`; API keys upload to their own.`,
          querystring: Type.Object({ accountSlug: Type.Optional(AccountSlug) }),
          body: UploadBody,
          response: {
            200: Type.Union([
              Type.Object({ success: Type.Literal(true), credits_charged: Type.Integer({ minimum: 0 }), file: KbFileRef }, { title: 'KnowledgeBaseUpload' }),
              Type.Object(
                {
                  success: Type.Literal(true),
                  file: Type.Object({ id: Type.String({ format: 'uuid' }), status: StringEnum(KB_FILE_STATUSES) }),
                  deduplicated: Type.Literal(true),
                  message: Type.String(),
                },
                { title: 'KnowledgeBaseDuplicateUpload' },
              ),
            ]),
            ...errorResponses(400, 401, 402, 403, 404, 415),
          },
        },
      },
      async (request) => {
        if (!request.isMultipart()) throw new AppError('unsupported_media_type', KB_MESSAGES.fileMissing);
        return kb.upload(actorOf(request), request.query, multipartParts(request, uploadError));
      },
    );
  });

  app.get(
    '/api/kb/files',
    {
      config: READ,
      schema: {
        tags,
        summary: "List the workspace's library",
        description:
          'Newest first. `include=attachment_count` adds to each file the number of assistants it is attached to. ' +
          "Page with `limit` and `cursor` (the previous answer's `next_cursor`, null on the last page).",
        querystring: Type.Object({
          accountSlug: Type.Optional(AccountSlug),
          include: Type.Optional(StringEnum(['attachment_count'] as const)),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE })),
          cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'opaque: the `next_cursor` of the previous page' })),
        }),
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            files: Type.Array(KbFileRef),
            next_cursor: Nullable(Type.String(), 'pass as `cursor` for the next page; null on the last page'),
          }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => ({ success: true as const, ...(await kb.list(actorOf(request), request.query)) }),
  );

  app.get(
    '/api/kb/files/:fileId',
    {
      config: READ,
      schema: {
        tags,
        summary: 'Get a library file and its processing status',
        description: "Unknown files and other workspaces' files are 404 alike.",
        params: FileParams,
        querystring: ItemQuery,
        response: { 200: Type.Object({ success: Type.Literal(true), file: KbFileRef }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => ({ success: true as const, file: await kb.get(actorOf(request), request.params.fileId, request.query.accountSlug) }),
  );

  app.delete(
    '/api/kb/files/:fileId',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Delete a library file for good',
        description:
          'Hard delete: the record, its chunks and embeddings, the stored object and every assistant attachment. Storage credits are not refunded (the paid room stays paid). A processing run of the file stops.',
        params: FileParams,
        querystring: ItemQuery,
        response: { 200: Success, ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => {
      await kb.remove(actorOf(request), request.params.fileId, request.query.accountSlug);
      return { success: true as const };
    },
  );

  app.get(
    '/api/kb/files/:fileId/download',
    {
      config: READ,
      schema: {
        tags,
        summary: 'Get a download URL for the original file',
        description: `\`{url, filename}\` (no \`success\` field): a signed URL valid ${DOWNLOAD_URL_TTL_SECONDS / 60} minutes that serves the original bytes with the original file name (Content-Disposition: attachment).`,
        params: FileParams,
        querystring: ItemQuery,
        response: { 200: Type.Object({ url: Type.String(), filename: Type.String() }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => kb.downloadUrl(actorOf(request), request.params.fileId, request.query.accountSlug),
  );

  app.post(
    '/api/kb/files/:fileId/reprocess',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Process a file again from the start',
        description:
          'From any state: back to pending with char_count, chunk_count and status_error cleared and the chunks removed, and processing enqueued again. Chunks are re-embedded with the current embedding model (use this after changing EMBEDDINGS_PROVIDER). A run still going for the file writes nothing more.',
        params: FileParams,
        querystring: ItemQuery,
        response: { 200: Success, ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => {
      await kb.reprocess(actorOf(request), request.params.fileId, request.query.accountSlug);
      return { success: true as const };
    },
  );

  app.post(
    '/api/kb/search',
    {
      config: READ,
      schema: {
        tags,
        summary: "Search an assistant's knowledge base",
        description:
          'Covers the `ready` files attached to the assistant (which must be in the caller\'s workspace: 404 otherwise). ' +
          `\`mode\` (extension): \`hybrid\` (default) fuses a vector search (cosine, HNSW) and a full-text search (chunks holding the query's rarest words first, widened to commoner ones when too few match, all ranked by ts_rank against every query word) by reciprocal rank fusion (k = ${RRF_K}); \`semantic\` uses the vector search only, \`keyword\` the full-text search only. ` +
          '`hits` holds the `top_k` best chunks (`adjacent: false`), then the chunks right before and after each of them that are not hits themselves (`adjacent: true`), in the order of their primaries. ' +
          'With no hits the answer also carries `reason`: `no_files_attached`, `no_ready_files`, or `no_matches` (ready files, but nothing matched: possible in keyword mode). ' +
          'The `Server-Timing` header says where the time went: `search` (the whole search, in ms) and `embedding` (how long the query took to embed; it runs while the assistant and its files are looked up and the full-text side searches, so it is part of `search`).',
        body: Type.Object({
          assistant_id: Type.String({ minLength: 1, maxLength: 100, description: 'the assistant whose attached files are searched' }),
          query: Type.String({ minLength: 1, maxLength: MAX_QUERY_CHARS, description: `1 to ${MAX_QUERY_CHARS} characters, not blank` }),
          top_k: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_TOP_K, default: DEFAULT_TOP_K, description: `primary hits, 1 to ${MAX_TOP_K} (default ${DEFAULT_TOP_K})` })),
          mode: Type.Optional(StringEnum(SEARCH_MODES, 'hybrid (default), semantic or keyword')),
          accountSlug: Type.Optional(ItemAccountSlug),
        }),
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            hits: Type.Array(SearchHit),
            reason: Type.Optional(StringEnum(['no_files_attached', 'no_ready_files', 'no_matches'] as const, 'only when hits is empty')),
          }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const { timing, ...result } = await search.search(actorOf(request), request.body);
      reply.header('server-timing', serverTiming(timing));
      return { success: true as const, ...result };
    },
  );

  app.get(
    '/api/assistants/:assistantId/knowledge-base',
    {
      config: READ,
      schema: {
        tags,
        summary: 'Files attached to an assistant',
        description: 'In the order they were attached, whatever their status.',
        params: AssistantParams,
        querystring: ItemQuery,
        response: { 200: Type.Object({ success: Type.Literal(true), files: Type.Array(KbFileRef) }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => ({ success: true as const, files: await kb.assistantFiles(actorOf(request), request.params.assistantId, request.query.accountSlug) }),
  );

  app.post(
    '/api/assistants/:assistantId/knowledge-base',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Attach a library file to an assistant',
        description:
          "The file must be in the assistant's workspace (404 otherwise); any status may be attached, only ready files are searched. Attaching again answers `{success: true, idempotent: true}`.",
        params: AssistantParams,
        body: Type.Object({ file_id: Type.String({ minLength: 1, maxLength: 100, description: 'a file of the workspace library' }), accountSlug: Type.Optional(ItemAccountSlug) }),
        response: { 200: Type.Object({ success: Type.Literal(true), idempotent: Type.Optional(Type.Literal(true)) }), ...errorResponses(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { idempotent } = await kb.attach(actorOf(request), request.params.assistantId, request.body);
      return idempotent ? { success: true as const, idempotent: true as const } : { success: true as const };
    },
  );

  app.delete(
    '/api/assistants/:assistantId/knowledge-base/:fileId',
    {
      config: WRITE,
      schema: {
        tags,
        summary: 'Detach a file from an assistant',
        description:
          'Detaches only: the file stays in the library. A file of the workspace that is not attached answers `{success: true, idempotent: true}`; an unknown file is 404.',
        params: Type.Object({ ...AssistantParams.properties, ...FileParams.properties }),
        querystring: ItemQuery,
        response: { 200: Type.Object({ success: Type.Literal(true), idempotent: Type.Optional(Type.Literal(true)) }), ...errorResponses(401, 403, 404) },
      },
    },
    async (request) => {
      const { idempotent } = await kb.detach(actorOf(request), request.params.assistantId, request.params.fileId, request.query.accountSlug);
      return idempotent ? { success: true as const, idempotent: true as const } : { success: true as const };
    },
  );
}
