/**
 * Values for the schemas of the OpenAPI document: one plain valid example
 * (what a well-behaved client sends), generators of valid values, and the
 * edge values a careless or hostile client sends instead.
 */
import crypto from 'node:crypto';
import fc from 'fast-check';
import type { JsonSchema } from './operations.ts';

/** Lengths a generator uses at most, however long a field may be: the edge cases cover the limits. */
const TYPICAL_LENGTH = 40;

export function typesOf(schema: JsonSchema): string[] {
  if (Array.isArray(schema.type)) return schema.type;
  if (schema.type) return [schema.type];
  if (schema.properties) return ['object'];
  return [];
}

function lowerBound(schema: JsonSchema, integer: boolean): number {
  if (schema.minimum !== undefined) return schema.minimum;
  if (schema.exclusiveMinimum !== undefined) return integer ? Math.floor(schema.exclusiveMinimum) + 1 : schema.exclusiveMinimum + 1e-3;
  return 1;
}

function upperBound(schema: JsonSchema, integer: boolean): number | undefined {
  if (schema.maximum !== undefined) return schema.maximum;
  if (schema.exclusiveMaximum !== undefined) return integer ? Math.ceil(schema.exclusiveMaximum) - 1 : schema.exclusiveMaximum - 1e-3;
  return undefined;
}

function exampleString(schema: JsonSchema): string {
  switch (schema.format) {
    case 'uuid':
      return crypto.randomUUID();
    case 'email':
      return `gate-${crypto.randomBytes(4).toString('hex')}@example.test`;
    case 'date-time':
      // A day ahead: fields such as an expiry must lie in the future.
      return new Date(Date.now() + 86_400_000).toISOString();
    case 'binary':
      return 'gate file contents\n';
  }
  // Unique, so a value found in another tenant's answer can be traced to the request that made it.
  const text = `gate-${crypto.randomBytes(4).toString('hex')}`.padEnd(schema.minLength ?? 0, 'x');
  return schema.maxLength === undefined ? text : text.slice(0, schema.maxLength);
}

/** A valid value: required properties only, each its simplest valid value. */
export function exampleOf(schema: JsonSchema): unknown {
  if (schema.const !== undefined) return schema.const;
  if (schema.enum) return schema.enum[0];
  if (schema.default !== undefined) return schema.default;
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants?.length) return exampleOf(variants[0]!);
  const type = typesOf(schema).find((t) => t !== 'null') ?? 'string';
  switch (type) {
    case 'string':
      return exampleString(schema);
    case 'integer':
      return Math.max(lowerBound(schema, true), 0);
    case 'number':
      return lowerBound(schema, false);
    case 'boolean':
      return true;
    case 'array':
      return Array.from({ length: schema.minItems ?? 0 }, () => exampleOf(schema.items ?? {}));
    case 'object':
      return Object.fromEntries((schema.required ?? []).map((name) => [name, exampleOf(schema.properties?.[name] ?? {})]));
    default:
      return null;
  }
}

function stringArbitrary(schema: JsonSchema): fc.Arbitrary<string> {
  switch (schema.format) {
    case 'uuid':
      return fc.uuid();
    case 'email':
      return fc.emailAddress();
    case 'date-time':
      return fc.date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true }).map((d) => d.toISOString());
  }
  const minLength = schema.minLength ?? 0;
  const maxLength = Math.max(minLength, Math.min(schema.maxLength ?? TYPICAL_LENGTH, TYPICAL_LENGTH));
  if (schema.pattern) {
    // Generated from the pattern: filtering random text would almost never match one such as ^[0-9]{6}$.
    return fc.stringMatching(new RegExp(schema.pattern, 'u')).filter((s) => s.length >= minLength && s.length <= (schema.maxLength ?? Infinity));
  }
  return fc.string({ minLength, maxLength, unit: 'grapheme' });
}

/** Values the schema accepts (bounded in size). */
export function validArbitrary(schema: JsonSchema, depth = 0): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...schema.enum);
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants?.length) return fc.oneof(...variants.map((v) => validArbitrary(v, depth)));
  const types = typesOf(schema);
  if (types.length === 0) return fc.jsonValue({ maxDepth: 2 });
  return fc.oneof(
    ...types.map((type): fc.Arbitrary<unknown> => {
      switch (type) {
        case 'string':
          return stringArbitrary(schema);
        case 'integer':
          return fc.integer({ min: Math.max(lowerBound(schema, true), -1e9), max: upperBound(schema, true) ?? 1e9 });
        case 'number':
          return fc.double({ min: lowerBound(schema, false), max: upperBound(schema, false) ?? 1e9, noNaN: true, noDefaultInfinity: true });
        case 'boolean':
          return fc.boolean();
        case 'null':
          return fc.constant(null);
        case 'array':
          return fc.array(validArbitrary(schema.items ?? {}, depth + 1), {
            minLength: schema.minItems ?? 0,
            maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? 3, 3)),
          });
        case 'object': {
          const properties = schema.properties ?? {};
          if (depth > 3 || Object.keys(properties).length === 0) return fc.constant({});
          return fc.record(
            Object.fromEntries(Object.entries(properties).map(([name, property]) => [name, validArbitrary(property, depth + 1)])),
            { requiredKeys: (schema.required ?? []).filter((name) => name in properties) },
          );
        }
        default:
          return fc.constant(null);
      }
    }),
  );
}

/** Strings that break naive code: controls, NUL, lone surrogates, bidi overrides, combining marks, SQL and path syntax. */
export const NASTY_STRINGS = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\u0001\u0002\u0003\u001b[31m',
  '\r\n\r\nX-Injected: 1',
  '\ud800',
  '\udfff\ud800',
  '\u202eevil\u202c',
  'e\u0301\u0301\u0301\u0301',
  '😀👨‍👩‍👧‍👦🏳️‍🌈',
  '𝕳𝖆𝖗𝖐',
  '\ufeffbom',
  "' OR 1=1 --",
  "'); drop table accounts; --",
  '%00',
  '%',
  '../../../etc/passwd',
  '..',
  '{{7*7}}',
  '${jndi:ldap://x}',
  '<script>alert(1)</script>',
  'null',
  'undefined',
  'NaN',
  '-1',
  '0',
  '1e309',
  '00000000-0000-0000-0000-000000000000',
  'ffffffff-ffff-ffff-ffff-ffffffffffff',
  '__proto__',
  'constructor',
];

/** Numbers at and past the usual limits. */
export const NASTY_NUMBERS = [0, -1, 1, -0.5, 0.5, 2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 1e308, -1e308, 5e-324];

/** Values at and just past the schema's own bounds. */
export function boundaryValues(schema: JsonSchema): unknown[] {
  const values: unknown[] = [];
  const types = typesOf(schema);
  if (types.includes('string')) {
    for (const length of [schema.minLength, schema.maxLength]) {
      if (length === undefined) continue;
      for (const n of [length - 1, length, length + 1]) if (n >= 0) values.push('a'.repeat(n), '😀'.repeat(n));
    }
  }
  if (types.includes('integer') || types.includes('number')) {
    for (const bound of [schema.minimum, schema.maximum, schema.exclusiveMinimum, schema.exclusiveMaximum]) {
      if (bound === undefined) continue;
      values.push(bound - 1, bound, bound + 1, bound + 0.5, bound - 1e-9);
    }
  }
  if (types.includes('array')) {
    for (const count of [schema.minItems, schema.maxItems]) {
      if (count === undefined) continue;
      for (const n of [count - 1, count, count + 1]) if (n >= 0) values.push(Array.from({ length: n }, () => exampleOf(schema.items ?? {})));
    }
  }
  return values;
}

/** Anything at all, of any JSON type, including the nasty strings and numbers. */
export const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(...NASTY_STRINGS, ...NASTY_NUMBERS, null, true, false, [], {}, [null], { '': '' }),
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.jsonValue({ maxDepth: 3 }),
);

/** A value of the wrong JSON type for `schema` (a string for a number, an object for a string...). */
export function wrongTypeArbitrary(schema: JsonSchema): fc.Arbitrary<unknown> {
  const types = new Set(typesOf(schema));
  const candidates: unknown[] = [];
  if (!types.has('string')) candidates.push('not-a-number', '', '123abc');
  if (!types.has('number') && !types.has('integer')) candidates.push(42, -1, 3.5);
  if (!types.has('integer') && types.has('number')) candidates.push('1.5.5');
  if (types.has('integer')) candidates.push(1.5, '1.5');
  if (!types.has('boolean')) candidates.push(true, false);
  if (!types.has('null')) candidates.push(null);
  if (!types.has('array')) candidates.push([], ['x'], [1, 2]);
  if (!types.has('object')) candidates.push({}, { nested: { deeper: 1 } });
  return fc.constantFrom(...candidates);
}

const HUGE_UNITS = ['a', 'é', '😀', '\u0000', '%'];

/** Long strings: just past common limits, and far past any (the body limit decides those). */
export const hugeString: fc.Arbitrary<string> = fc
  .constantFrom(1_001, 2_001, 20_001, 100_000, 1_100_000)
  .chain((length) => fc.constantFrom(...HUGE_UNITS).map((unit) => unit.repeat(Math.ceil(length / unit.length))));

/** Long strings for the URL: past the path-segment limit and past Node's 16 KiB header limit, no further (the rest is the same answer). */
export const longUrlString: fc.Arbitrary<string> = fc
  .constantFrom(101, 1_001, 20_001)
  .chain((length) => fc.constantFrom(...HUGE_UNITS).map((unit) => unit.repeat(Math.ceil(length / unit.length))));
