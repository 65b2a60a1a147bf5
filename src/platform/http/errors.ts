/**
 * The one table from error code to HTTP status. Every error response carries
 * one of these codes in `error`; clients branch on it, people read `message`.
 */
export const ERROR_STATUS = {
  validation_failed: 400,
  invalid_json: 400,
  bad_request: 400,
  unauthorized: 401,
  mfa_required: 401,
  insufficient_credits: 402,
  forbidden: 403,
  not_found: 404,
  request_timeout: 408,
  conflict: 409,
  gone: 410,
  payload_too_large: 413,
  uri_too_long: 414,
  unsupported_media_type: 415,
  rate_limited: 429,
  headers_too_large: 431,
  internal_error: 500,
  not_configured: 500,
  bad_gateway: 502,
  service_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface FieldError {
  field: string;
  message: string;
}

/**
 * An error meant for the client. `message` is shown to people; anything
 * internal (SQL, upstream bodies) goes in `cause` and only reaches the log.
 */
export class AppError extends Error {
  readonly status: number;
  /** Extra response headers, such as Retry-After on 429. */
  readonly headers?: Record<string, string>;

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: FieldError[],
    options?: { cause?: unknown; headers?: Record<string, string> },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AppError';
    this.status = ERROR_STATUS[code];
    this.headers = options?.headers;
  }
}

export const notFound = (message = 'Resource not found') => new AppError('not_found', message);
export const forbidden = (message = 'Forbidden') => new AppError('forbidden', message);
export const unauthorized = (message = 'Authentication required') => new AppError('unauthorized', message);
export const badRequest = (message: string, details?: FieldError[]) =>
  new AppError(details ? 'validation_failed' : 'bad_request', message, details);
