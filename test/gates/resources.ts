/**
 * How to make a tenant's resources through the public API, and which
 * resource each route parameter names. The tenant-isolation matrix looks up
 * every path parameter, and every query or body field that names a resource
 * or a workspace, here; a route with a parameter this registry does not know
 * fails the suite by name, so a new route cannot skip the matrix.
 */
import assert from 'node:assert/strict';
import { decodeJwt } from 'jose';
import { addMember, signIn } from '../fixtures.ts';
import type { Operation } from './operations.ts';
import { credentialHeaders, jsonRequest, multipartRequest, parseJson, uniqueToken, type GateWorld, type Tenant } from './world.ts';
import type { WireRequest } from './transport.ts';

/** Sends and insists on a 2xx: resources are set up with requests that must work. */
async function created(world: GateWorld, request: WireRequest): Promise<Record<string, any>> { // eslint-disable-line @typescript-eslint/no-explicit-any -- JSON answers
  const res = await world.send(request);
  assert.ok(res.status >= 200 && res.status < 300, `setup ${request.method} ${request.url} answered ${res.status}: ${res.body}`);
  return parseJson(res) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- JSON answers
}

/** Remembers values of `tenant`'s data that no other tenant may ever see. */
function remember(tenant: Tenant, ...values: unknown[]): void {
  for (const value of values) if (typeof value === 'string' && value.length >= 6) tenant.values.add(value);
}

export async function createAssistant(world: GateWorld, tenant: Tenant): Promise<string> {
  const token = uniqueToken();
  const body = await created(
    world,
    jsonRequest('POST', '/api/assistants', credentialHeaders('apiKey', tenant), {
      name: `${tenant.label} assistant ${token}`,
      prompt: `${tenant.label} private prompt ${token}`,
      first_message: `${tenant.label} greeting ${token}`,
      webhook: { url: world.webhooks.url(`/hooks/${token}`) },
    }),
  );
  const assistant = body.assistant;
  remember(tenant, assistant.id, assistant.name, assistant.prompt, assistant.first_message, assistant.webhook.url, assistant.webhook.secret);
  return assistant.id;
}

/** A second key of the workspace (never the tenant's own, which the gates keep using). */
export async function createApiKey(world: GateWorld, tenant: Tenant, body: Record<string, unknown> = {}): Promise<{ id: string; fullKey: string }> {
  const res = await created(
    world,
    jsonRequest('POST', '/api/api-keys', credentialHeaders('jwt', tenant), { accountSlug: tenant.workspace.slug, name: `${tenant.label} key ${uniqueToken()}`, ...body }),
  );
  remember(tenant, res.apiKey.id, res.apiKey.name, res.apiKey.key_prefix, res.apiKey.fullKey);
  return { id: res.apiKey.id, fullKey: res.apiKey.fullKey };
}

export async function createMember(world: GateWorld, tenant: Tenant): Promise<string> {
  const member = await addMember(world.rt, tenant.workspace, tenant.user, 'member');
  remember(tenant, member.id, member.email);
  return member.id;
}

/** Another session of the tenant's owner (never the one the gates use). */
export async function createSession(world: GateWorld, tenant: Tenant): Promise<string> {
  const session = await signIn(world.rt, tenant.user);
  const sessionId = String(decodeJwt(session.accessToken).sid);
  remember(tenant, sessionId, session.accessToken, session.refreshToken);
  return sessionId;
}

export async function createPreset(world: GateWorld, tenant: Tenant): Promise<string> {
  const token = uniqueToken();
  const body = await created(
    world,
    jsonRequest('POST', '/api/prompt-presets', credentialHeaders('jwt', tenant), { title: `${tenant.label} preset ${token}`, prompt: `${tenant.label} preset prompt ${token}` }),
  );
  const preset = body.data.preset;
  remember(tenant, preset.id, preset.title, preset.prompt);
  return preset.id;
}

export async function createWorkspaceFile(world: GateWorld, tenant: Tenant): Promise<string> {
  const name = `${tenant.label}-notes-${uniqueToken()}.txt`;
  const body = await created(
    world,
    multipartRequest('POST', '/api/files', credentialHeaders('session', tenant), {
      accountId: tenant.workspace.id,
      file: { filename: name, contentType: 'text/plain', content: `${tenant.label} private notes\n` },
    }),
  );
  remember(tenant, body.data.id, body.data.name);
  return body.data.id;
}

export async function createKbFile(world: GateWorld, tenant: Tenant): Promise<string> {
  const name = `${tenant.label}-handbook-${uniqueToken()}.txt`;
  const body = await created(
    world,
    multipartRequest('POST', '/api/kb/files', credentialHeaders('apiKey', tenant), {
      file: { filename: name, contentType: 'text/plain', content: `${tenant.label} handbook: opening hours are nine to five.\n` },
    }),
  );
  remember(tenant, body.file.id, body.file.filename, body.file.name);
  return body.file.id;
}

export async function attachKbFile(world: GateWorld, tenant: Tenant, assistantId: string, fileId: string): Promise<void> {
  await created(world, jsonRequest('POST', `/api/assistants/${assistantId}/knowledge-base`, credentialHeaders('apiKey', tenant), { file_id: fileId }));
}

/** Parameters that name the workspace itself (ARCHITECTURE "Conventions": one workspace, three names). */
export const ACCOUNT_REFERENCES: Record<string, (tenant: Tenant) => string> = {
  accountSlug: (tenant) => tenant.workspace.slug,
  accountId: (tenant) => tenant.workspace.id,
  teamId: (tenant) => tenant.workspace.id,
};

type Make = (world: GateWorld, tenant: Tenant) => Promise<Record<string, string>>;

/** Resources a parameter of this name means on any route. */
const BY_NAME: Record<string, Make> = {
  assistantId: async (world, tenant) => ({ assistantId: await createAssistant(world, tenant) }),
  assistant_id: async (world, tenant) => ({ assistant_id: await createAssistant(world, tenant) }),
};

/** Resources a route's parameters mean, when the name alone does not say (`id`, `fileId`). */
const BY_ROUTE: Record<string, { params: string[]; make: Make }> = {
  '/api/api-keys/{id}': { params: ['id'], make: async (world, tenant) => ({ id: (await createApiKey(world, tenant)).id }) },
  '/api/prompt-presets/{id}': { params: ['id'], make: async (world, tenant) => ({ id: await createPreset(world, tenant) }) },
  '/api/desktop-app/sessions/{sessionId}': { params: ['sessionId'], make: async (world, tenant) => ({ sessionId: await createSession(world, tenant) }) },
  '/api/accounts/{accountSlug}/members/{userId}': { params: ['userId'], make: async (world, tenant) => ({ userId: await createMember(world, tenant) }) },
  '/api/files': { params: ['fileId'], make: async (world, tenant) => ({ fileId: await createWorkspaceFile(world, tenant) }) },
  '/api/kb/files/{fileId}': { params: ['fileId'], make: async (world, tenant) => ({ fileId: await createKbFile(world, tenant) }) },
  '/api/kb/files/{fileId}/download': { params: ['fileId'], make: async (world, tenant) => ({ fileId: await createKbFile(world, tenant) }) },
  '/api/kb/files/{fileId}/reprocess': { params: ['fileId'], make: async (world, tenant) => ({ fileId: await createKbFile(world, tenant) }) },
  '/api/assistants/{assistantId}/knowledge-base': {
    params: ['assistantId', 'file_id'],
    make: async (world, tenant) => ({ assistantId: await createAssistant(world, tenant), file_id: await createKbFile(world, tenant) }),
  },
  '/api/assistants/{assistantId}/knowledge-base/{fileId}': {
    params: ['assistantId', 'fileId'],
    make: async (world, tenant) => {
      const assistantId = await createAssistant(world, tenant);
      const fileId = await createKbFile(world, tenant);
      await attachKbFile(world, tenant, assistantId, fileId);
      return { assistantId, fileId };
    },
  },
};

/**
 * What a valid request needs beyond its schema's required fields (PATCH
 * routes refuse an empty change) or instead of the simplest example.
 */
export const VALID_BODIES: Record<string, Record<string, unknown>> = {
  'PATCH /api/assistants/{assistantId}': { name: 'Renamed by the gate' },
  'PATCH /api/api-keys/{id}': { name: 'renamed by the gate' },
  'PUT /api/prompt-presets/{id}': { title: 'renamed by the gate' },
  'PATCH /api/accounts/{accountSlug}/members/{userId}': { role: 'admin' },
  'POST /api/accounts/{accountSlug}/invitations': { role: 'member' },
  'POST /api/kb/search': { query: 'opening hours' },
  'POST /api/llm/chat': { model: 'llm-4o-mini', messages: [{ role: 'user', content: 'hello' }] },
};

export interface Reference {
  name: string;
  in: 'path' | 'query' | 'body';
  kind: 'account' | 'resource';
}

/** Field names that point at a stored resource or a workspace. */
const REFERENCE_NAME = /^(id|.+Id|.+_id|.*[sS]lug)$/;

/** Every parameter of `op` that names a resource or a workspace: all path parameters, and query or top-level body fields named like ids or slugs. */
export function referencesOf(op: Operation): Reference[] {
  const kind = (name: string) => (name in ACCOUNT_REFERENCES ? ('account' as const) : ('resource' as const));
  const references: Reference[] = op.pathParams.map((p) => ({ name: p.name, in: 'path', kind: kind(p.name) }));
  for (const p of op.queryParams) if (REFERENCE_NAME.test(p.name)) references.push({ name: p.name, in: 'query', kind: kind(p.name) });
  for (const name of Object.keys(op.body?.schema.properties ?? {})) if (REFERENCE_NAME.test(name)) references.push({ name, in: 'body', kind: kind(name) });
  return references;
}

/** The resource references of `op` the registry cannot make, as `name (in)`. */
export function unknownReferences(op: Operation): string[] {
  const route = BY_ROUTE[op.path];
  return referencesOf(op)
    .filter((ref) => ref.kind === 'resource' && !route?.params.includes(ref.name) && !BY_NAME[ref.name])
    .map((ref) => `${ref.name} (${ref.in})`);
}

/** Fresh resources of `tenant` for every resource reference of `op` (each call makes new ones: a DELETE may consume them). */
export async function makeResources(world: GateWorld, tenant: Tenant, op: Operation): Promise<Record<string, string>> {
  const values: Record<string, string> = {};
  const route = BY_ROUTE[op.path];
  const wanted = referencesOf(op).filter((ref) => ref.kind === 'resource');
  if (route && wanted.some((ref) => route.params.includes(ref.name))) Object.assign(values, await route.make(world, tenant));
  for (const ref of wanted) {
    if (values[ref.name] !== undefined) continue;
    const make = BY_NAME[ref.name];
    if (!make) throw new Error(`${op.key}: no factory for ${ref.name} (${ref.in}); add it to test/gates/resources.ts`);
    Object.assign(values, await make(world, tenant));
  }
  return values;
}
