import type { App } from '../http/app-type.ts';
import { Type } from 'typebox';
import type { AppContext } from '../context.ts';
import { AppError } from '../http/errors.ts';
import { errorResponses } from '../http/schemas.ts';
import { BlobNotFoundError, InvalidBlobKeyError } from './blob-store.ts';
import { LocalBlobStore } from './local-blob-store.ts';
import { attachmentContentDisposition } from './s3-blob-store.ts';

/**
 * Serves local blobs behind expiring HMAC-signed URLs (the local twin of S3
 * presigned URLs). With STORAGE=s3 the URLs point at the bucket and this
 * route answers 404.
 */
export function blobRoutes(app: App, ctx: AppContext): void {
  app.get(
    '/api/blobs/*',
    {
      config: { auth: 'none' },
      schema: {
        tags: ['platform'],
        summary: 'Download through a signed URL',
        description:
          'Target of the signed URLs the API hands out (knowledge-base downloads, workspace files) when blobs are stored locally. ' +
          'The query string is the credential; a URL past its expiry or altered in any way answers 403.',
        querystring: Type.Object({
          expires: Type.String(),
          sig: Type.String(),
          filename: Type.Optional(Type.String()),
          type: Type.Optional(Type.String()),
        }),
        response: errorResponses(403, 404),
      },
    },
    async (request, reply) => {
      const store = ctx.blobs;
      if (!(store instanceof LocalBlobStore)) throw new AppError('not_found', 'Blob not found');
      const key = (request.params as { '*': string })['*'];
      const verdict = store.verifySignedRequest(key, request.query as Record<string, string | undefined>);
      if (!verdict.ok) {
        throw new AppError('forbidden', verdict.reason === 'expired' ? 'This link has expired' : 'This link is not valid');
      }
      try {
        const body = await store.get(key);
        reply.type(verdict.contentType ?? 'application/octet-stream');
        reply.header('cache-control', 'private, no-store');
        reply.header('x-content-type-options', 'nosniff');
        if (verdict.filename) reply.header('content-disposition', attachmentContentDisposition(verdict.filename));
        return reply.send(body);
      } catch (error) {
        if (error instanceof BlobNotFoundError || error instanceof InvalidBlobKeyError) throw new AppError('not_found', 'Blob not found');
        throw error;
      }
    },
  );
}
