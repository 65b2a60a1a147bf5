import { Type, type Static, type TSchema } from 'typebox';

/** The §7 error envelope, referenced by every route's error responses. */
export const ErrorEnvelope = Type.Object(
  {
    error: Type.String({ description: 'stable machine-readable code, e.g. validation_failed, not_found' }),
    message: Type.String({ description: 'human-readable explanation' }),
    code: Type.Integer({ description: 'the HTTP status code' }),
    details: Type.Optional(
      Type.Array(Type.Object({ field: Type.String(), message: Type.String() }), {
        description: 'one entry per invalid field',
      }),
    ),
    requestId: Type.Optional(Type.String({ description: 'present on 500; quote it when reporting a problem' })),
  },
  { $id: 'ErrorEnvelope', title: 'Error' },
);

export const errorRef = Type.Unsafe<{ error: string; message: string; code: number }>(Type.Ref('ErrorEnvelope'));

/** Standard error responses for a route, keyed by status, to spread into `response`. */
export function errorResponses(...statuses: number[]): Record<number, TSchema> {
  return Object.fromEntries(statuses.map((status) => [status, errorRef]));
}

/** `{type: [T, 'null']}` rather than anyOf: with coerceTypes, ajv would turn null into "" through a string branch. */
export const Nullable = <T extends TSchema & { type: string }>(schema: T, description?: string) =>
  Type.Unsafe<Static<T> | null>({ ...schema, type: [schema.type, 'null'], ...(description ? { description } : {}) });

/** A plain string enum: validation errors then read "must be one of a, b". */
export const StringEnum = <const V extends readonly string[]>(values: V, description?: string) =>
  Type.Unsafe<V[number]>({ type: 'string', enum: [...values], ...(description ? { description } : {}) });
