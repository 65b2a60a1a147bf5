/**
 * Schema fuzzing of every operation of the OpenAPI document, shared by the
 * `npm test` gate (fixed seed, small budget) and `npm run fuzz` (random seed,
 * long). Each case is a request a careless or hostile client could send:
 * valid values, missing and extra fields, wrong types, boundary lengths and
 * numbers, huge strings, control and unicode characters, malformed JSON,
 * wrong content types, random ids. The oracle: an answer within the time
 * limit, never 5xx, and every 4xx in the operation's error shape.
 */
import crypto from 'node:crypto';
import fc from 'fast-check';
import type { CredentialKind } from '../../src/platform/http/route-config.ts';
import { fillPath, queryString, type JsonSchema, type Operation } from './operations.ts';
import { isMultipart, toWire, validParts, type RequestParts } from './requests.ts';
import { ACCOUNT_REFERENCES, makeResources, referencesOf } from './resources.ts';
import { errorBodyProblem } from './envelope.ts';
import { HangError, toCurl, type Transport, type WireRequest, type WireResponse } from './transport.ts';
import { anyValue, boundaryValues, hugeString, longUrlString, NASTY_STRINGS, typesOf, validArbitrary, wrongTypeArbitrary } from './schema-values.ts';
import { credentialHeaders, jsonRequest, type GateWorld } from './world.ts';

/** One generated request, credentials left out: they are added when it is sent (tokens are refreshed on long runs). */
export interface FuzzCase {
  /** What kind of abuse this is, for people reading a failure. */
  mutation: string;
  kind?: CredentialKind;
  request: WireRequest;
}

export interface FuzzFailure {
  op: Operation;
  mutation: string;
  problem: string;
  /** The request as sent, credentials included. */
  request: WireRequest;
  response?: WireResponse;
}

export interface FuzzStats {
  operations: number;
  requests: number;
  byClass: Record<string, number>;
}

/** Where a value sits in a request: a path or query parameter, or a body field (nested one level). */
interface Slot {
  where: 'path' | 'query' | 'body';
  path: string[];
  schema: JsonSchema;
}

function slotsOf(op: Operation): Slot[] {
  const slots: Slot[] = [
    ...op.pathParams.map((p) => ({ where: 'path' as const, path: [p.name], schema: p.schema })),
    ...op.queryParams.map((p) => ({ where: 'query' as const, path: [p.name], schema: p.schema })),
  ];
  for (const [name, schema] of Object.entries(op.body?.schema.properties ?? {})) {
    slots.push({ where: 'body', path: [name], schema });
    for (const [inner, innerSchema] of Object.entries(schema.properties ?? {})) slots.push({ where: 'body', path: [name, inner], schema: innerSchema });
  }
  return slots;
}

function asObject(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? { ...(value as Record<string, unknown>) } : {};
}

/** `parts` with the slot set to `value` (`undefined` removes it). */
function setSlot(parts: RequestParts, slot: Slot, value: unknown): RequestParts {
  const next: RequestParts = { path: { ...parts.path }, query: { ...parts.query }, body: parts.body };
  const [first, second] = slot.path as [string, string | undefined];
  if (slot.where === 'path') next.path[first] = value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
  else if (slot.where === 'query') next.query[first] = value;
  else {
    const body = asObject(parts.body);
    if (second === undefined) body[first] = value;
    else body[first] = { ...asObject(body[first]), [second]: value };
    next.body = body;
  }
  return next;
}

/** The schema, with `real` offered as well: real ids reach the code behind the 404. */
function orReal(schema: JsonSchema, real: string | undefined): JsonSchema {
  return real === undefined ? schema : { anyOf: [{ const: real }, { const: real }, schema] };
}

/** Requests that are valid by the schema, using workspace A's real resources and references most of the time. */
function validPartsArbitrary(op: Operation, real: Record<string, string>): fc.Arbitrary<RequestParts> {
  const params = (list: Operation['pathParams']) =>
    fc.record(Object.fromEntries(list.map((p) => [p.name, validArbitrary(orReal(p.schema, real[p.name]))])), {
      requiredKeys: list.filter((p) => p.required).map((p) => p.name),
    });
  const bodySchema = op.body && {
    ...op.body.schema,
    properties: Object.fromEntries(Object.entries(op.body.schema.properties ?? {}).map(([name, schema]) => [name, orReal(schema, real[name])])),
  };
  return fc.record({
    path: params(op.pathParams).map((values) => Object.fromEntries(Object.entries(values).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)]))),
    query: params(op.queryParams),
    body: bodySchema ? validArbitrary(bodySchema) : fc.constant(undefined),
  });
}

const WRONG_CONTENT_TYPES: Array<string | null> = [
  null,
  '',
  'text/plain',
  'text/html; charset=iso-8859-1',
  'application/x-www-form-urlencoded',
  'application/xml',
  'application/octet-stream',
  'multipart/form-data',
  'multipart/form-data; boundary=nothing-matches',
  'application/json; charset=utf-16',
  'application/JSON',
  'application/json, text/plain',
  'application/vnd.api+json',
  '*/*',
  'application/json; boundary=x; charset=utf-8; charset=latin1',
];

const MALFORMED_BODIES = [
  '',
  ' ',
  '{',
  '}',
  '{"a":',
  '{"a" 1}',
  "{'a': 1}",
  '[1,2',
  'nul',
  'tru',
  '{"a":1}garbage',
  '{"a":1,}',
  '\ufeff{}',
  'NaN',
  '{"__proto__": {"polluted": true}}',
  '{"constructor": {"prototype": {"polluted": true}}}',
  '\u0000',
  '{"a":"\\ud800"}',
  '{"a":"\\u0000"}',
  '{"a":1e99999}',
  '{"a":-0}',
  '"just a string"',
  '[]',
  'null',
  '42',
  'true',
];

/** Bodies that are valid JSON but pathological in shape. */
const DEEP_BODIES: fc.Arbitrary<string> = fc.constantFrom(
  '['.repeat(5_000) + ']'.repeat(5_000),
  '{"a":'.repeat(2_000) + '1' + '}'.repeat(2_000),
  JSON.stringify(Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, i]))),
  JSON.stringify(Array.from({ length: 50_000 }, (_, i) => i)),
);

const RAW_PATH_SEGMENTS = ['%', '%zz', '%E0%A4%A', '%00', '%2e%2e', '..', '.', '%2F', '%252F', ';', 'a;b=c', '%C0%AE', '%ff%fe', '~'];

/** A body that is not what the content type says (or not there at all). */
function rawCase(op: Operation, parts: RequestParts, mutation: string, contentType: string | null, body: string | Buffer | undefined): FuzzCase['request'] {
  const request = toWire(op, { ...parts, body: undefined }, {});
  const headers: Record<string, string> = contentType === null ? {} : { 'content-type': contentType };
  return { ...request, headers, body };
}

/** Every kind of abuse that applies to `op`, as one arbitrary of cases. */
export function caseArbitrary(op: Operation, real: Record<string, string>): fc.Arbitrary<FuzzCase> {
  const kinds = op.auth === 'none' ? [undefined] : op.auth.filter((k) => k !== 'serviceSecret');
  const kind = fc.constantFrom(...(kinds.length ? kinds : [undefined]));
  const base = validPartsArbitrary(op, real);
  const slots = slotsOf(op);
  const wire = (mutation: string) => (input: { kind: CredentialKind | undefined; parts: RequestParts }) => ({
    mutation,
    kind: input.kind,
    request: toWire(op, input.parts, {}),
  });
  const bodyless = !op.body && op.method === 'GET';
  const withBody = (mutation: string, body: fc.Arbitrary<{ contentType: string | null; body: string | Buffer | undefined }>) =>
    fc.record({ kind, parts: base, raw: body }).map(({ kind, parts, raw }) => ({ mutation, kind, request: rawCase(op, parts, mutation, raw.contentType, raw.body) }));
  const onSlot = (mutation: string, usable: (slot: Slot) => boolean, value: (slot: Slot) => fc.Arbitrary<unknown>) => {
    const eligible = slots.filter(usable);
    if (eligible.length === 0) return [];
    return [
      fc
        .record({ kind, parts: base, slot: fc.constantFrom(...eligible) })
        .chain(({ kind, parts, slot }) =>
          value(slot).map((v) => ({ kind, parts: setSlot(parts, slot, v), label: `${mutation} at ${slot.where} ${slot.path.join('.')}` })),
        )
        .map(({ kind, parts, label }) => wire(label)({ kind, parts })),
    ];
  };

  const cases: Array<fc.Arbitrary<FuzzCase>> = [
    fc.record({ kind, parts: base }).map(wire('schema-valid values')),
    fc.record({ kind, parts: fc.constant(validParts(op, real)) }).map(wire('the simplest valid request')),
    ...onSlot('missing field', (s) => s.where !== 'path', () => fc.constant(undefined)),
    ...onSlot('wrong type', () => true, (s) => wrongTypeArbitrary(s.schema)),
    ...onSlot('boundary value', (s) => boundaryValues(s.schema).length > 0, (s) => fc.constantFrom(...boundaryValues(s.schema))),
    ...onSlot('huge string', () => true, (s) => (s.where === 'body' ? hugeString : longUrlString)),
    ...onSlot('hostile string', (s) => typesOf(s.schema).includes('string') || s.where !== 'body', () =>
      fc.oneof(fc.constantFrom(...NASTY_STRINGS), fc.string({ unit: 'binary', maxLength: 60 }), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 })),
    ),
    ...onSlot('any value', () => true, () => anyValue),
    ...onSlot('random id', (s) => s.where === 'path' || /(^id$|Id$|_id$)/.test(s.path.at(-1)!), () =>
      fc.oneof(fc.uuid(), fc.constantFrom(...NASTY_STRINGS), fc.string({ minLength: 1, maxLength: 200 })),
    ),
    fc
      .record({ kind, parts: base, extra: fc.dictionary(fc.string({ minLength: 1, maxLength: 20 }), anyValue, { minKeys: 1, maxKeys: 6 }) })
      .map(({ kind, parts, extra }) => {
        const query = { ...parts.query, ...Object.fromEntries(Object.entries(extra).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)])) };
        const body = op.body ? { ...asObject(parts.body), ...extra } : parts.body;
        return wire('extra fields')({ kind, parts: { ...parts, query, body } });
      }),
    fc
      .record({ kind, parts: base, slot: fc.constantFrom(...(slots.filter((s) => s.where === 'query').concat({ where: 'query', path: ['unexpected'], schema: {} }))), values: fc.array(fc.string({ maxLength: 10 }), { minLength: 2, maxLength: 4 }) })
      .map(({ kind, parts, slot, values }) => wire(`repeated query parameter ${slot.path[0]}`)({ kind, parts: setSlot(parts, slot, values) })),
  ];

  if (op.pathParams.length > 0) {
    cases.push(
      fc.record({ kind, parts: base, name: fc.constantFrom(...op.pathParams.map((p) => p.name)), raw: fc.constantFrom(...RAW_PATH_SEGMENTS) }).map(({ kind, parts, name, raw }) => {
        const request = toWire(op, parts, {});
        const url = fillPath(op, { ...parts.path, [name]: raw }, new Set([name])) + queryString(parts.query);
        return { mutation: `raw path segment ${JSON.stringify(raw)} in ${name}`, kind, request: { ...request, url } };
      }),
    );
  }
  if (!bodyless) {
    const json = (value: unknown) => (value === undefined ? '' : JSON.stringify(value));
    cases.push(
      withBody('malformed JSON', fc.constantFrom(...MALFORMED_BODIES).map((body) => ({ contentType: 'application/json', body }))),
      withBody(
        'truncated JSON',
        fc.record({ parts: base, cut: fc.nat() }).map(({ parts, cut }) => {
          const text = json(parts.body) || '{"a":1}';
          return { contentType: 'application/json', body: text.slice(0, cut % Math.max(text.length, 1)) };
        }),
      ),
      withBody('pathological JSON', DEEP_BODIES.map((body) => ({ contentType: 'application/json', body }))),
      withBody(
        'wrong content type',
        fc.record({ parts: base, contentType: fc.constantFrom(...WRONG_CONTENT_TYPES) }).map(({ parts, contentType }) => ({ contentType, body: json(parts.body ?? {}) })),
      ),
      withBody('random bytes', fc.record({ contentType: fc.constantFrom(...WRONG_CONTENT_TYPES, 'application/json'), bytes: fc.uint8Array({ maxLength: 300 }) }).map(({ contentType, bytes }) => ({ contentType, body: Buffer.from(bytes) }))),
    );
  }
  if (isMultipart(op)) {
    const boundary = 'gate-boundary';
    const type = `multipart/form-data; boundary=${boundary}`;
    const broken = [
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nno closing boundary`,
      `--${boundary}\r\n\r\nno headers\r\n--${boundary}--\r\n`,
      `--${boundary}\r\nContent-Disposition: form-data\r\n\r\nno name\r\n--${boundary}--\r\n`,
      `--${boundary}--\r\n`,
      `--wrong\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nx\r\n--wrong--\r\n`,
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="../../etc/passwd"\r\nContent-Type: text/plain\r\n\r\nx\r\n--${boundary}--\r\n`,
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="\u0000\u202e.txt"\r\nContent-Type: \u0000\r\n\r\nx\r\n--${boundary}--\r\n`,
      Array.from({ length: 30 }, (_, i) => `--${boundary}\r\nContent-Disposition: form-data; name="f${i}"\r\n\r\n${i}\r\n`).join('') + `--${boundary}--\r\n`,
      Array.from({ length: 3 }, () => `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nx\r\n`).join('') + `--${boundary}--\r\n`,
    ];
    cases.push(withBody('malformed multipart', fc.constantFrom(...broken).map((body) => ({ contentType: type, body }))));
  }
  return fc.oneof(...cases);
}

/**
 * Values every slot of every operation gets once, before the random cases:
 * the ones a random pass reaches too rarely for how much they break
 * (a NUL, which PostgreSQL cannot store, in text or in a jsonb key).
 */
const SWEEP_VALUES: unknown[] = ['a\u0000b', { 'key\u0000': 'value\u0000' }, 1e308];

export function sweepCases(op: Operation, real: Record<string, string>): FuzzCase[] {
  const kind = op.auth === 'none' ? undefined : op.auth.find((k) => k !== 'serviceSecret');
  return slotsOf(op).flatMap((slot) =>
    SWEEP_VALUES.map((value) => ({
      mutation: `sweep ${JSON.stringify(value)} at ${slot.where} ${slot.path.join('.')}`,
      kind,
      request: toWire(op, setSlot(validParts(op, real), slot, value), {}),
    })),
  );
}

/** Why the answer to `request` breaks the oracle, or undefined when it is fine. */
export async function judge(send: Transport, op: Operation, request: WireRequest): Promise<{ problem?: string; response?: WireResponse }> {
  let response: WireResponse;
  try {
    response = await send(request);
  } catch (error) {
    return { problem: error instanceof HangError ? `hang: ${error.message}` : `no answer: ${(error as Error).message}` };
  }
  if (response.status >= 500) return { problem: `answered ${response.status}`, response };
  if (response.status >= 400) {
    const problem = errorBodyProblem(op, response);
    if (problem) return { problem: `${response.status} outside the error shape: ${problem}`, response };
  }
  return { response };
}

/** A's references: the workspace under each of its names, and fresh resources for every resource parameter. */
async function realValues(world: GateWorld, op: Operation): Promise<Record<string, string>> {
  const values: Record<string, string> = Object.fromEntries(Object.entries(ACCOUNT_REFERENCES).map(([name, of]) => [name, of(world.a)]));
  if (op.auth === 'none' || referencesOf(op).every((ref) => ref.kind === 'account')) return values;
  return { ...values, ...(await makeResources(world, world.a, op)) };
}

/** Stable per operation, so adding a route does not change the cases of the others. */
export function operationSeed(baseSeed: number, op: Operation): number {
  return (baseSeed ^ crypto.createHash('sha256').update(op.key).digest().readInt32LE(0)) | 0;
}

/**
 * Public routes last: fuzzing sign-in from one address trips its rate limit,
 * and the resources of later operations are made with sign-ins.
 */
export function fuzzOrder(operations: Operation[]): Operation[] {
  return [...operations].sort((x, y) => Number(x.auth === 'none') - Number(y.auth === 'none'));
}

export interface FuzzOptions {
  seed: number;
  runsPerOperation: number;
  /** Called between operations (long runs refresh access tokens here). */
  beforeOperation?: (op: Operation) => Promise<void>;
  /** Distinct failures kept per operation (the first of each mutation and problem). */
  onFailure?: (failure: FuzzFailure) => void;
}

/** Fuzzes one operation; returns its distinct failures. */
export async function fuzzOperation(world: GateWorld, op: Operation, options: FuzzOptions, stats: FuzzStats): Promise<FuzzFailure[]> {
  const real = await realValues(world, op);
  const failures = new Map<string, FuzzFailure>();
  const run = async (fuzzCase: FuzzCase) => {
    const request = { ...fuzzCase.request, headers: { ...fuzzCase.request.headers, ...(fuzzCase.kind ? credentialHeaders(fuzzCase.kind, world.a) : {}) } };
    const { problem, response } = await judge(world.send, op, request);
    stats.requests++;
    const statusClass = response ? `${Math.floor(response.status / 100)}xx` : 'none';
    stats.byClass[statusClass] = (stats.byClass[statusClass] ?? 0) + 1;
    if (problem) {
      const id = `${fuzzCase.mutation.replace(/ at .*/, '')}|${problem.slice(0, 40)}`;
      if (!failures.has(id)) {
        const failure = { op, mutation: fuzzCase.mutation, problem, request, response };
        failures.set(id, failure);
        options.onFailure?.(failure);
      }
    }
  };
  for (const fuzzCase of sweepCases(op, real)) await run(fuzzCase);
  // Every case is checked and every failure kept, rather than stopping at the first.
  const property = fc.asyncProperty(caseArbitrary(op, real), async (fuzzCase) => {
    await run(fuzzCase);
    return true;
  });
  await fc.check(property, { seed: operationSeed(options.seed, op), numRuns: options.runsPerOperation });
  stats.operations++;
  return [...failures.values()];
}

/** After the abuse, the server must still answer its health check and a normal authenticated request. */
export async function healthProblems(world: GateWorld): Promise<string[]> {
  const problems: string[] = [];
  const checks: Array<[string, WireRequest]> = [
    ['GET /api/health', jsonRequest('GET', '/api/health', {})],
    ["GET /api/assistants with A's API key", jsonRequest('GET', '/api/assistants', credentialHeaders('apiKey', world.a))],
    ["GET /api/accounts with A's access token", jsonRequest('GET', '/api/accounts', credentialHeaders('jwt', world.a))],
    ["GET /api/credits with A's session cookie", jsonRequest('GET', `/api/credits?accountId=${world.a.workspace.id}`, credentialHeaders('session', world.a))],
  ];
  for (const [label, request] of checks) {
    try {
      const res = await world.send(request);
      if (res.status !== 200) problems.push(`${label}: ${res.status} ${res.body.slice(0, 200)}`);
    } catch (error) {
      problems.push(`${label}: ${(error as Error).message}`);
    }
  }
  return problems;
}

/** A failure for people: what was sent and why it fails, and the request as a curl command against `baseUrl`. */
export function describeFailure(failure: FuzzFailure, baseUrl: string, curl = toCurl(baseUrl, failure.request)): string {
  return [
    `${failure.op.key} — ${failure.mutation}: ${failure.problem}`,
    failure.response ? `  answer: ${failure.response.status} ${failure.response.body.slice(0, 300)}` : '',
    `  ${curl}`,
  ]
    .filter(Boolean)
    .join('\n');
}
