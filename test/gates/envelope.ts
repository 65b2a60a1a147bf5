/**
 * What every error answer must look like (§7): `{error, message, code,
 * details?, requestId?}` with `code` equal to the status, or `{error}` alone
 * on operations marked `x-hark-error-shape: error-only` (workspace files).
 */
import type { Operation } from './operations.ts';
import type { WireResponse } from './transport.ts';
import { parseJson } from './world.ts';

const ENVELOPE_FIELDS = new Set(['error', 'message', 'code', 'details', 'requestId']);

/** Why `res` is not a well-formed error answer of `op`, or undefined when it is. */
export function errorBodyProblem(op: Pick<Operation, 'errorShape'>, res: WireResponse): string | undefined {
  if (!/^application\/json\b/.test(res.contentType)) return `content-type is "${res.contentType}", not application/json`;
  const body = parseJson(res);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'body is not a JSON object';
  const fields = body as Record<string, unknown>;
  // Answered by the HTTP parser before any route is known, so always in the envelope.
  const beforeRouting = res.status === 408 || res.status === 431;
  if (op.errorShape === 'error-only' && !beforeRouting) {
    const keys = Object.keys(fields);
    if (keys.length !== 1 || typeof fields.error !== 'string' || !fields.error) return 'expected exactly {error: "<message>"} (x-hark-error-shape: error-only)';
    return undefined;
  }
  const extra = Object.keys(fields).filter((key) => !ENVELOPE_FIELDS.has(key));
  if (extra.length) return `fields outside the envelope: ${extra.join(', ')}`;
  if (typeof fields.error !== 'string' || !/^[a-z][a-z_]*$/.test(fields.error)) return '`error` is not a stable snake_case code';
  if (typeof fields.message !== 'string' || !fields.message) return '`message` is missing or empty';
  if (fields.code !== res.status) return `\`code\` is ${JSON.stringify(fields.code)}, not the status ${res.status}`;
  if (fields.details !== undefined) {
    const ok = Array.isArray(fields.details) && fields.details.every((d) => typeof d?.field === 'string' && typeof d?.message === 'string');
    if (!ok) return '`details` is not a list of {field, message}';
  }
  if (res.status >= 500 && typeof fields.requestId !== 'string') return '5xx without requestId';
  return undefined;
}
