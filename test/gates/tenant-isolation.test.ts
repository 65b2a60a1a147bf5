/**
 * Tenant-isolation matrix: for every route that names a resource or a
 * workspace, workspace B's credentials (each kind the route accepts) pointed
 * at workspace A's resources get 404 or 403, with none of A's values in the
 * answer; A's own credential then makes the very same request succeed, which
 * proves the request was valid and B's attempt changed nothing it could not.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readOperations, type Operation } from './operations.ts';
import { ACCOUNT_REFERENCES, makeResources, referencesOf, unknownReferences, type Reference } from './resources.ts';
import { toWire, validParts } from './requests.ts';
import { errorBodyProblem } from './envelope.ts';
import { credentialHeaders, startGateWorld, type GateWorld, type Tenant } from './world.ts';
import type { CredentialKind } from '../../src/platform/http/route-config.ts';
import type { WireRequest, WireResponse } from './transport.ts';

/** Credentials a user or a workspace holds; X-Service-Secret signatures belong to no tenant. */
function tenantKinds(op: Operation): CredentialKind[] {
  return op.auth === 'none' ? [] : op.auth.filter((kind) => kind !== 'serviceSecret');
}

function isRequired(op: Operation, ref: Reference): boolean {
  if (ref.in === 'path') return true;
  if (ref.in === 'query') return op.queryParams.some((p) => p.name === ref.name && p.required);
  return op.body?.schema.required?.includes(ref.name) ?? false;
}

interface Variant {
  label: string;
  values: Record<string, string>;
  /** Statuses that refuse the attempt. */
  refusals: number[];
}

const REFUSALS = [403, 404];

/**
 * The ways B can point at A's data: each workspace reference set to A's
 * (alone, as `teamId` wins over `accountSlug`); A's resources under B's own
 * workspace reference; and A's resources with no workspace named.
 */
function variants(op: Operation, world: GateWorld, resources: Record<string, string>): Variant[] {
  const accountRefs = referencesOf(op).filter((ref) => ref.kind === 'account');
  const hasResources = Object.keys(resources).length > 0;
  const workspace = (tenant: Tenant, only: Reference) =>
    Object.fromEntries(accountRefs.filter((ref) => ref === only || isRequired(op, ref)).map((ref) => [ref.name, ACCOUNT_REFERENCES[ref.name]!(tenant)]));
  const list: Variant[] = [];
  if (accountRefs.length === 0) list.push({ label: "A's resources", values: resources, refusals: REFUSALS });
  for (const ref of accountRefs) {
    list.push({ label: `A's ${ref.name} (${ref.in})`, values: { ...resources, ...workspace(world.a, ref) }, refusals: REFUSALS });
    if (hasResources) list.push({ label: `A's resources with B's ${ref.name} (${ref.in})`, values: { ...resources, ...workspace(world.b, ref) }, refusals: REFUSALS });
  }
  if (hasResources && accountRefs.length > 0 && accountRefs.every((ref) => !isRequired(op, ref))) {
    // Some routes need the workspace though their schema cannot say so (§4.6 files answer their own 400 message); that refuses too.
    list.push({ label: "A's resources, no workspace named", values: resources, refusals: [400, ...REFUSALS] });
  }
  return list;
}

/** A's values that appear in `res` (what B sent is not a leak when echoed back, but nothing else may appear). */
function leakedValues(tenant: Tenant, request: WireRequest, res: WireResponse): string[] {
  const sent = `${request.url}\n${request.body?.toString() ?? ''}`;
  const decodedSent = decodeURIComponent(sent.replace(/\+/g, ' '));
  return [...tenant.values].filter((value) => res.body.includes(value) && !sent.includes(value) && !decodedSent.includes(value));
}

describe('tenant isolation', () => {
  let world: GateWorld;
  let operations: Operation[];

  before(async () => {
    world = await startGateWorld();
    operations = (await readOperations(world.rt.app!)).filter((op) => tenantKinds(op).length > 0);
  });
  after(async () => {
    await world?.close();
  });

  test('every route that names a resource or a workspace has a factory for it', () => {
    const unknown = operations.flatMap((op) => unknownReferences(op).map((ref) => `${op.key}: ${ref}`));
    assert.deepEqual(unknown, [], 'add these parameters to test/gates/resources.ts so the matrix can create them in workspace A');
  });

  test("workspace B's credentials cannot reach workspace A's resources", async (t) => {
    const covered = operations.filter((op) => referencesOf(op).length > 0 && unknownReferences(op).length === 0);
    let requests = 0;
    for (const op of covered) {
      await t.test(op.key, async () => {
        const resources = await makeResources(world, world.a, op);
        const tries = variants(op, world, resources);
        for (const variant of tries) {
          for (const kind of tenantKinds(op)) {
            const request = toWire(op, validParts(op, variant.values), credentialHeaders(kind, world.b));
            const res = await world.send(request);
            requests++;
            const what = `${op.key}, ${variant.label}, B's ${kind}: ${res.status} ${res.body.slice(0, 300)}`;
            assert.ok(variant.refusals.includes(res.status), `expected ${variant.refusals.join(' or ')}: ${what}`);
            assert.equal(errorBodyProblem(op, res), undefined, what);
            assert.deepEqual(leakedValues(world.a, request, res), [], `A's values in B's answer: ${what}`);
          }
        }
        // A's own credential, same request: it must work, so B's refusal was about tenancy, not a bad request.
        const control = toWire(op, validParts(op, tries[0]!.values), credentialHeaders(tenantKinds(op)[0]!, world.a));
        const res = await world.send(control);
        assert.ok(res.status >= 200 && res.status < 300, `A's own request was refused, so the matrix proves nothing for ${op.key}: ${res.status} ${res.body.slice(0, 300)}`);
      });
    }
    t.diagnostic(`tenant isolation: ${covered.length} operations, ${requests} requests with B's credentials`);
    console.log(`tenant isolation: ${covered.length} operations with resource or workspace references, ${requests} requests with B's credentials`);
  });

  test("lists answered to workspace B hold none of workspace A's data", async (t) => {
    const lists = operations.filter((op) => op.method === 'GET' && referencesOf(op).length === 0);
    for (const op of lists) {
      for (const kind of tenantKinds(op)) {
        const request = toWire(op, validParts(op), credentialHeaders(kind, world.b));
        const res = await world.send(request);
        assert.ok(res.status < 500, `${op.key} as B (${kind}): ${res.status} ${res.body.slice(0, 300)}`);
        assert.deepEqual(leakedValues(world.a, request, res), [], `${op.key} as B (${kind}) shows A's data: ${res.body.slice(0, 300)}`);
      }
    }
    t.diagnostic(`list leak check: ${lists.length} operations`);
  });
});
