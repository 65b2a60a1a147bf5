/**
 * Requests for an operation: its parts (path, query, body) as values, and
 * those parts on the wire, JSON or multipart as the operation documents.
 */
import type { Operation, JsonSchema } from './operations.ts';
import { fillPath, queryString } from './operations.ts';
import { exampleOf } from './schema-values.ts';
import { VALID_BODIES } from './resources.ts';
import { jsonRequest, multipartRequest, type FormFile } from './world.ts';
import type { WireRequest } from './transport.ts';

export interface RequestParts {
  path: Record<string, string>;
  query: Record<string, unknown>;
  /** A JSON value, or for multipart operations the form's fields. */
  body?: unknown;
}

function bodyProperties(op: Operation): Record<string, JsonSchema> {
  return op.body?.schema.properties ?? {};
}

/**
 * A request a well-behaved client would send: required fields with simple
 * valid values, the registry's additions, and `values` in the parameters and
 * body fields of those names (references to resources and workspaces).
 */
export function validParts(op: Operation, values: Record<string, string | undefined> = {}): RequestParts {
  const path = Object.fromEntries(op.pathParams.map((p) => [p.name, values[p.name] ?? String(exampleOf(p.schema))]));
  const query: Record<string, unknown> = {};
  for (const p of op.queryParams) {
    if (p.name in values) query[p.name] = values[p.name];
    else if (p.required) query[p.name] = exampleOf(p.schema);
  }
  if (!op.body) return { path, query };
  const body: Record<string, unknown> = { ...(exampleOf(op.body.schema) as Record<string, unknown> | null), ...VALID_BODIES[op.key] };
  for (const name of Object.keys(bodyProperties(op))) if (name in values) body[name] = values[name];
  return { path, query, body };
}

/** True when the body is sent as multipart/form-data. */
export function isMultipart(op: Operation): boolean {
  return op.body?.contentType === 'multipart/form-data';
}

/** Multipart fields documented as binary become file parts. */
function formParts(op: Operation, body: Record<string, unknown>): Record<string, string | FormFile> {
  const properties = bodyProperties(op);
  return Object.fromEntries(
    Object.entries(body)
      .filter(([, value]) => value !== undefined)
      .map(([name, value]) => {
        const text = typeof value === 'string' ? value : JSON.stringify(value);
        return [name, properties[name]?.format === 'binary' ? { filename: 'gate.txt', contentType: 'text/plain', content: text } : text];
      }),
  );
}

export function toWire(op: Operation, parts: RequestParts, headers: Record<string, string>): WireRequest {
  const url = fillPath(op, parts.path) + queryString(parts.query);
  if (parts.body === undefined) return { method: op.method, url, headers };
  if (isMultipart(op)) return multipartRequest(op.method, url, headers, formParts(op, (parts.body ?? {}) as Record<string, unknown>));
  return jsonRequest(op.method, url, headers, parts.body);
}
