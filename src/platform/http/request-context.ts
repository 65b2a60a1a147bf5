import crypto from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Keeps a caller's x-request-id when it is short and harmless to log; otherwise makes one. */
export function requestIdFor(request: IncomingMessage): string {
  const sent = request.headers['x-request-id'];
  return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) ? sent : crypto.randomUUID();
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Who is calling, once authentication resolved it; logged with the request. */
    actorLabel?: string;
  }
}

/**
 * One log line per request (method, route pattern, status, latency, request
 * id, actor) and the x-request-id response header. The raw URL is not logged:
 * query strings can carry signatures and tokens.
 */
export function installRequestContext(app: FastifyInstance): void {
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header('x-request-id', request.id);
    return payload;
  });
  app.addHook('onResponse', async (request: FastifyRequest, reply) => {
    request.log.info(
      {
        method: request.method,
        route: request.routeOptions.url ?? '(unmatched)',
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10,
        actor: request.actorLabel,
      },
      'request',
    );
  });
}
