import http from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, ERROR_STATUS, type ErrorCode, type FieldError } from './errors.ts';

interface ValidationIssue {
  instancePath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

/** Fastify's own client errors, mapped to our codes and plain messages. */
const FASTIFY_ERRORS: Record<string, { code: ErrorCode; message: string }> = {
  FST_ERR_CTP_INVALID_JSON_BODY: { code: 'invalid_json', message: 'Request body is not valid JSON' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'invalid_json', message: 'Request body is empty but Content-Type is application/json' },
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'payload_too_large', message: 'Request body is larger than this endpoint accepts' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'unsupported_media_type', message: 'Unsupported Content-Type for this endpoint' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'bad_request', message: 'Content-Length does not match the body' },
  FST_ERR_CTP_INVALID_TYPE: { code: 'unsupported_media_type', message: 'Content-Type header is invalid' },
  // The router's own errors, raised before a route is chosen (see frameworkErrors).
  FST_ERR_BAD_URL: { code: 'bad_request', message: 'The URL path has a malformed percent-escape or is not valid UTF-8' },
  FST_ERR_MAX_PARAM_LENGTH: { code: 'uri_too_long', message: 'A path segment of the URL is too long' },
};

/**
 * PostgreSQL cannot store U+0000 in text or jsonb (SQLSTATE 22021 for text,
 * 22P05 for jsonb), and only a client can put one in a value: a JSON
 * `\u0000`, a `%00` in the URL or a multipart field. It is that client's bad
 * input, whatever field it came in.
 */
const UNSTORABLE_TEXT = new Set(['22021', '22P05']);

function statusCode(code: ErrorCode): number {
  return ERROR_STATUS[code];
}

function fieldName(context: string | undefined, issue: ValidationIssue): string {
  const path = (issue.instancePath ?? '')
    .split('/')
    .filter(Boolean)
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'));
  const missing = issue.params?.missingProperty ?? issue.params?.additionalProperty;
  if (typeof missing === 'string') path.push(missing);
  const field = path.reduce((acc, segment) => (/^\d+$/.test(segment) ? `${acc}[${segment}]` : acc ? `${acc}.${segment}` : segment), '');
  return field || (context ?? 'body');
}

function validationDetails(error: FastifyError): FieldError[] {
  const issues = (error.validation ?? []) as ValidationIssue[];
  const seen = new Set<string>();
  const details: FieldError[] = [];
  for (const issue of issues) {
    const field = fieldName(error.validationContext, issue);
    const message =
      issue.keyword === 'required'
        ? 'is required'
        : issue.keyword === 'enum' && Array.isArray(issue.params?.allowedValues)
          ? `must be one of ${(issue.params.allowedValues as unknown[]).join(', ')}`
          : (issue.message ?? 'is invalid');
    const key = `${field}\u0000${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    details.push({ field, message });
  }
  return details;
}

export interface ErrorBody {
  error: string;
  message: string;
  code: number;
  details?: FieldError[];
  requestId?: string;
}

/** Turns anything thrown into the §7 envelope. The one place statuses are chosen for errors. */
export function toErrorBody(error: unknown, requestId: string): { status: number; body: ErrorBody; headers?: Record<string, string>; unexpected: boolean } {
  if (error instanceof AppError) {
    const body: ErrorBody = { error: error.code, message: error.message, code: error.status };
    if (error.details?.length) body.details = error.details;
    if (error.status >= 500) body.requestId = requestId;
    return { status: error.status, body, headers: error.headers, unexpected: error.status >= 500 };
  }
  const fastifyError = error as FastifyError;
  if (fastifyError?.validation) {
    const where = fastifyError.validationContext ?? 'request';
    const details = validationDetails(fastifyError);
    return {
      status: 400,
      body: { error: 'validation_failed', message: `Invalid ${where}: ${details.map((d) => `${d.field} ${d.message}`).join('; ')}`, code: 400, details },
      unexpected: false,
    };
  }
  if (UNSTORABLE_TEXT.has(String(fastifyError?.code))) {
    return { status: 400, body: { error: 'bad_request', message: 'Text values must not contain the NUL character (U+0000)', code: 400 }, unexpected: false };
  }
  const known = fastifyError?.code ? FASTIFY_ERRORS[fastifyError.code] : undefined;
  if (known) {
    return { status: statusCode(known.code), body: { error: known.code, message: known.message, code: statusCode(known.code) }, unexpected: false };
  }
  const status = fastifyError?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    // Another client error raised by Fastify or a plugin (e.g. a malformed
    // multipart body). Its message is written for clients.
    const code = (Object.entries(ERROR_STATUS).find(([, s]) => s === status)?.[0] ?? 'bad_request') as ErrorCode;
    return { status, body: { error: code, message: fastifyError.message, code: status }, unexpected: false };
  }
  return {
    status: 500,
    body: { error: 'internal_error', message: 'Something went wrong on our side; the request id identifies it in our logs', code: 500, requestId },
    unexpected: true,
  };
}

/** Routes whose spec gives `{error}`-only bodies (workspace files, §4.6) set `config.errorShape = 'error-only'`. */
function render(request: FastifyRequest, reply: FastifyReply, error: unknown): FastifyReply {
  const { status, body, headers, unexpected } = toErrorBody(error, request.id);
  if (unexpected) request.log.error({ err: error }, 'request failed');
  if (headers) reply.headers(headers);
  reply.code(status);
  if (request.routeOptions.config?.errorShape === 'error-only') {
    return reply.type('application/json').send(JSON.stringify({ error: body.message }));
  }
  return reply.type('application/json').send(JSON.stringify(body));
}

/**
 * Fastify's `frameworkErrors` option: the router's errors (a malformed
 * percent-escape, a path segment over `maxParamLength`) happen before any
 * route is chosen, so without this Fastify writes its own body, outside the
 * §7 envelope. No route means no route config: always the envelope.
 */
export function frameworkErrors(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const { status, body } = toErrorBody(error, request.id);
  void reply.code(status).type('application/json').send(JSON.stringify(body));
}

/**
 * Fastify's `clientErrorHandler` option: requests Node's HTTP parser rejects
 * (headers or URL over its size limit, a malformed request line, a request
 * that took too long to arrive) never become a request object, so the answer
 * is written on the socket directly, as Fastify's default does, but in the
 * §7 envelope.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket): void {
  // A reset connection has no one left to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [code, message]: [ErrorCode, string] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? ['request_timeout', 'The request took too long to arrive']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? ['headers_too_large', 'The request headers (the URL included) are larger than the server accepts']
        : ['bad_request', 'The request is not valid HTTP'];
  const status = statusCode(code);
  const body = JSON.stringify({ error: code, message, code: status });
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy(error);
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error, request, reply) => render(request, reply, error));
  app.setNotFoundHandler((request, reply) =>
    render(request, reply, new AppError('not_found', `Route ${request.method} ${request.url.split('?')[0]} not found`)),
  );
}
