/**
 * The route table as the gates see it: every operation of the live OpenAPI
 * document, with the credentials (`security`), API-key scope (`x-hark-scope`)
 * and error shape (`x-hark-error-shape`) its route declares, checked against
 * Fastify's own route table so a route missing from the document is caught.
 */
import type { FastifyInstance } from 'fastify';
import { ERROR_SHAPE_EXTENSION, SCOPE_EXTENSION } from '../../src/platform/http/openapi.ts';
import type { CredentialKind } from '../../src/platform/http/route-config.ts';

/** A JSON Schema as the OpenAPI document gives it (3.1: plain JSON Schema), `$ref`s resolved. */
export interface JsonSchema {
  type?: string | string[];
  format?: string;
  enum?: unknown[];
  const?: unknown;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minItems?: number;
  maxItems?: number;
  uniqueItems?: boolean;
  items?: JsonSchema;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  default?: unknown;
  $ref?: string;
}

export interface Parameter {
  name: string;
  in: 'path' | 'query';
  required: boolean;
  schema: JsonSchema;
}

export interface Operation {
  method: string;
  /** The OpenAPI path template, e.g. `/api/assistants/{assistantId}`. */
  path: string;
  /** `METHOD path`, how the gates name an operation. */
  key: string;
  /** Credentials the route accepts; 'none' for public routes. */
  auth: CredentialKind[] | 'none';
  scope?: string;
  errorShape: 'envelope' | 'error-only';
  pathParams: Parameter[];
  queryParams: Parameter[];
  body?: { contentType: string; schema: JsonSchema };
  /** Statuses the document lists. */
  responses: string[];
}

export const CREDENTIAL_KINDS: readonly CredentialKind[] = ['session', 'jwt', 'apiKey', 'serviceSecret'];
const METHODS = ['get', 'put', 'post', 'delete', 'patch'];

type Doc = { paths: Record<string, Record<string, RawOperation>>; components?: { schemas?: Record<string, JsonSchema> } };
interface RawOperation {
  security?: Array<Record<string, unknown>>;
  parameters?: Array<{ name: string; in: string; required?: boolean; schema: JsonSchema }>;
  requestBody?: { content: Record<string, { schema: JsonSchema }> };
  responses?: Record<string, unknown>;
  [extension: string]: unknown;
}

/** Inlines `#/components/schemas/X` references (the document has no recursive schemas). */
function resolve(schema: JsonSchema, doc: Doc): JsonSchema {
  if (schema.$ref) {
    const name = schema.$ref.replace('#/components/schemas/', '');
    const target = doc.components?.schemas?.[name];
    if (!target) throw new Error(`unresolved $ref ${schema.$ref}`);
    return resolve(target, doc);
  }
  const out: JsonSchema = { ...schema };
  if (schema.items) out.items = resolve(schema.items, doc);
  if (schema.properties) out.properties = Object.fromEntries(Object.entries(schema.properties).map(([k, v]) => [k, resolve(v, doc)]));
  if (schema.anyOf) out.anyOf = schema.anyOf.map((s) => resolve(s, doc));
  if (schema.oneOf) out.oneOf = schema.oneOf.map((s) => resolve(s, doc));
  if (schema.additionalProperties && typeof schema.additionalProperties === 'object') out.additionalProperties = resolve(schema.additionalProperties, doc);
  return out;
}

export function operationsOf(doc: Doc): Operation[] {
  const operations: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) {
      const raw = item[method];
      if (!raw) continue;
      const security = raw.security ?? [];
      const auth = security.length === 0 ? ('none' as const) : security.map((requirement) => Object.keys(requirement)[0] as CredentialKind);
      const params = (raw.parameters ?? []).map((p) => ({ name: p.name, in: p.in as 'path' | 'query', required: p.required === true, schema: resolve(p.schema ?? {}, doc) }));
      const [contentType, media] = Object.entries(raw.requestBody?.content ?? {})[0] ?? [];
      const scope = raw[SCOPE_EXTENSION];
      operations.push({
        method: method.toUpperCase(),
        path,
        key: `${method.toUpperCase()} ${path}`,
        auth,
        scope: typeof scope === 'string' ? scope : undefined,
        errorShape: raw[ERROR_SHAPE_EXTENSION] === 'error-only' ? 'error-only' : 'envelope',
        pathParams: params.filter((p) => p.in === 'path'),
        queryParams: params.filter((p) => p.in === 'query'),
        body: contentType && media ? { contentType, schema: resolve(media.schema ?? {}, doc) } : undefined,
        responses: Object.keys(raw.responses ?? {}),
      });
    }
  }
  return operations;
}

/** GET /api/openapi.json of the running app, as operations. */
export async function readOperations(app: FastifyInstance): Promise<Operation[]> {
  const res = await app.inject({ method: 'GET', url: '/api/openapi.json' });
  if (res.statusCode !== 200) throw new Error(`GET /api/openapi.json answered ${res.statusCode}`);
  return operationsOf(res.json() as Doc);
}

/**
 * Every route Fastify serves, as `METHOD /path/{param}`, read from
 * `printRoutes()`: its tree prints each node's part of the path, so a route's
 * path is the concatenation of the parts above it. HEAD routes are Fastify's
 * automatic twins of GET routes and are left out.
 */
export function routeTable(app: FastifyInstance): string[] {
  const routes: string[] = [];
  const parts: string[] = [];
  for (const line of app.printRoutes().split('\n')) {
    const branch = line.search(/[├└]── /);
    if (branch < 0) continue;
    const depth = branch / 4;
    const match = /^(.*?)(?: \(([A-Z, ]+)\))?$/.exec(line.slice(branch + 4))!;
    parts.length = depth;
    parts.push(match[1]!);
    const methods = match[2]?.split(', ') ?? [];
    const path = parts.join('').replace(/:(\w+)/g, '{$1}').replace(/\*$/, '{*}');
    for (const method of methods) if (method !== 'HEAD') routes.push(`${method} ${path}`);
  }
  return routes;
}

/** The interactive reference page and the document itself are the documentation, not operations of the API. */
const DOCUMENTATION_ROUTES = /^GET \/api\/(docs(\/.*)?|openapi\.json)$/;

/** Routes Fastify serves that the OpenAPI document does not describe. */
export function undocumentedRoutes(app: FastifyInstance, operations: Operation[]): string[] {
  const documented = new Set(operations.map((op) => op.key));
  return routeTable(app).filter((route) => !documented.has(route) && !DOCUMENTATION_ROUTES.test(route));
}

/** Percent-encodes any string, lone surrogates included (as UTF-8 of U+FFFD, where encodeURIComponent throws). */
function encodeSegment(value: string): string {
  return encodeURIComponent(value.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd'));
}

/** The concrete path of `op` with `values` in its parameters (percent-encoded; `rawParams` are inserted as they are). */
export function fillPath(op: Pick<Operation, 'path'>, values: Record<string, string>, rawParams: ReadonlySet<string> = new Set()): string {
  return op.path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`no value for path parameter ${name} of ${op.path}`);
    if (rawParams.has(name)) return value;
    return name === '*' ? value.split('/').map(encodeSegment).join('/') : encodeSegment(value);
  });
}

/** `?a=1&b=2` (arrays repeat the name), or '' when there is nothing to send. */
export function queryString(query: Record<string, unknown>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) search.append(name, typeof item === 'string' ? item : JSON.stringify(item));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}
