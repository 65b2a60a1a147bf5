const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether `value` has the shape of a UUID. Ids from paths, queries and bodies
 * are checked before they reach a uuid column, where PostgreSQL would reject
 * anything else with an error instead of simply finding nothing.
 */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}
