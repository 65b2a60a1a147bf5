import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { multipartErrors, multipartParts, registerMultipart } from '../../platform/http/multipart.ts';
import { FILE_MESSAGES, MAX_FILE_BYTES, MAX_NAME_LENGTH, URL_TTL_SECONDS, filesService } from './service.ts';

/**
 * §4.6, §5 rule 9: signed-in people only (the session cookie, or the same
 * token as a Bearer header); §7: error bodies are `{error: message}`.
 */
const CONFIG = { auth: ['session', 'jwt'], errorShape: 'error-only' } as const;
const tags = ['files'];

const ErrorOnly = Type.Object({ error: Type.String() }, { title: 'FileError', description: '§7 workspace-file error: `{error}` only' });
const errors = (...statuses: number[]) => Object.fromEntries(statuses.map((status) => [status, ErrorOnly]));

const WorkspaceFile = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String({ description: 'display name' }),
    size: Type.Integer({ description: 'bytes' }),
    file_type: Type.String({ description: 'MIME type, as sent with the file part; application/octet-stream when missing or malformed' }),
    created_at: Type.String({ format: 'date-time' }),
    account_id: Type.String({ format: 'uuid' }),
  },
  { title: 'WorkspaceFile', description: '§2.6 workspace file' },
);

/**
 * Documents the form for OpenAPI only. The multipart parser leaves the body
 * empty (parts are read as a stream by the handler), hence `null` passes and
 * `required` (which only applies to objects) never fires: a missing field gets
 * the §7 message from the service instead of a schema error.
 */
const UploadBody = {
  content: {
    'multipart/form-data': {
      schema: {
        type: ['object', 'null'],
        required: ['file', 'accountId'],
        properties: {
          file: { type: 'string', format: 'binary', description: `the file, at most ${MAX_FILE_BYTES} bytes (25 MiB)` },
          accountId: { type: 'string', format: 'uuid', description: 'the workspace to store it in' },
          displayName: { type: 'string', maxLength: MAX_NAME_LENGTH, description: 'defaults to the file name' },
        },
      },
    },
  },
};

/** Strings rather than uuid formats: a missing value must answer the §7 message, not a schema error. */
const FileQuery = Type.Object({
  fileId: Type.Optional(Type.String({ maxLength: 100, description: 'the file id (required)' })),
  accountId: Type.Optional(Type.String({ maxLength: 100, description: 'the workspace the file belongs to (required)' })),
});

/**
 * The parser limits sit just past the service's own: a file of exactly
 * MAX_FILE_BYTES + 1 bytes still reaches the blob store, whose limit cuts it
 * off with the §7 message; busboy's truncation only ever drops bytes beyond
 * that, so it never decides on its own.
 */
const MULTIPART_LIMITS = {
  fileSize: MAX_FILE_BYTES + 1,
  files: 1,
  fields: 10,
  // Enough for a UUID or a 255-character name in any script (4 bytes a character).
  fieldSize: 4 * MAX_NAME_LENGTH + 64,
  parts: 12,
};

/** @fastify/multipart errors as our client errors. */
const multipartError = multipartErrors({
  tooLarge: () => new AppError('bad_request', FILE_MESSAGES.tooLarge),
  tooManyFields: 'Too many form fields; send file, accountId and optionally displayName',
});

export async function fileRoutes(app: App, ctx: AppContext): Promise<void> {
  const files = filesService(ctx);

  // An encapsulated scope: the multipart parser, its limits and the draining of refused uploads apply to these routes only.
  await app.register(async (plugin) => {
    await registerMultipart(plugin, MULTIPART_LIMITS);
    const scope = plugin.withTypeProvider<TypeBoxTypeProvider>();

    scope.post(
      '/api/files',
      {
        config: CONFIG,
        schema: {
          tags,
          summary: 'Upload a workspace file',
          description:
            'multipart/form-data with `file` (required), `accountId` (required) and `displayName` (optional, at most 255 characters; defaults to the file name), in any order. ' +
            `At most 25 MB, meaning 25 MiB (${MAX_FILE_BYTES} bytes); larger files answer 400 \`${FILE_MESSAGES.tooLarge}\` and nothing is kept. ` +
            `Missing file or accountId: 400 \`${FILE_MESSAGES.uploadFieldsMissing}\`. Caller not a member of the workspace: 403 \`${FILE_MESSAGES.unauthorized}\`. ` +
            'Any member may upload. A body that is not multipart answers 415.',
          body: UploadBody,
          response: { 200: Type.Object({ data: WorkspaceFile }), ...errors(400, 401, 403, 415) },
        },
      },
      async (request) => {
        if (!request.isMultipart()) {
          throw new AppError('unsupported_media_type', 'Send the file as multipart/form-data with the fields file and accountId');
        }
        return { data: await files.upload(actorOf(request), multipartParts(request, multipartError)) };
      },
    );

    scope.get(
      '/api/files',
      {
        config: CONFIG,
        schema: {
          tags,
          summary: 'Get a download URL for a workspace file',
          description:
            `A signed URL, valid ${URL_TTL_SECONDS / 60} minutes, that downloads the file under its original name. ` +
            `Missing fileId or accountId: 400 \`${FILE_MESSAGES.queryFieldsMissing}\`; caller not a member: 403 \`${FILE_MESSAGES.unauthorized}\`; ` +
            `unknown file or a file of another workspace: 404 \`${FILE_MESSAGES.notFound}\`.`,
          querystring: FileQuery,
          response: { 200: Type.Object({ url: Type.String() }), ...errors(400, 401, 403, 404) },
        },
      },
      async (request) => files.downloadUrl(actorOf(request), request.query),
    );

    scope.delete(
      '/api/files',
      {
        config: CONFIG,
        schema: {
          tags,
          summary: 'Delete a workspace file',
          description:
            'Removes the stored object and the record permanently; signed URLs handed out before stop working. Any member may delete. Errors as for GET /api/files.',
          querystring: FileQuery,
          response: { 200: Type.Object({ success: Type.Literal(true) }), ...errors(400, 401, 403, 404) },
        },
      },
      async (request) => {
        await files.remove(actorOf(request), request.query);
        return { success: true as const };
      },
    );
  });
}
