/**
 * The world the gates run in: a full test runtime with every upstream
 * configured (a local OpenAI-compatible fake behind LLM_BASE_URL, a webhook
 * receiver), and two workspaces, A and B, each with an owner and an API key,
 * made through the public API. With everything configured, no route has a
 * reason to answer 5xx, so the fuzz gate treats every 5xx as a defect.
 */
import crypto from 'node:crypto';
import { SignJWT, decodeJwt } from 'jose';
import { startTestRuntime, type TestRuntime } from '../helpers.ts';
import { createKey, createWorkspace, signUp, type TestKey, type TestUser, type TestWorkspace } from '../fixtures.ts';
import { FakeLlmUpstream } from '../fake-llm-upstream.ts';
import { startFakeWebhookReceiver, type FakeWebhookReceiver } from '../fake-webhook-receiver.ts';
import { SESSION_COOKIE } from '../../src/platform/http/auth.ts';
import type { CredentialKind } from '../../src/platform/http/route-config.ts';
import { MAX_RATE_LIMIT_PER_HOUR } from '../../src/modules/api-keys/service.ts';
import { httpTransport, injectTransport, type Transport, type WireRequest, type WireResponse } from './transport.ts';

export interface Tenant {
  label: string;
  user: TestUser & { sessionId: string };
  workspace: TestWorkspace & { name: string };
  /** Scopes `*`, and a rate limit the gates never reach. */
  key: TestKey;
  /** Values that identify this tenant's data: another tenant's answers must never contain them. */
  values: Set<string>;
}

export interface GateWorld {
  rt: TestRuntime;
  send: Transport;
  /** Where the app listens, when started with `listen` (requests then go over real connections). */
  baseUrl?: string;
  a: Tenant;
  b: Tenant;
  webhooks: FakeWebhookReceiver;
  /** Signs access tokens in this runtime (AUTH_JWT_SECRET), to forge expired ones. */
  jwtSecret: string;
  close(): Promise<void>;
}

/** A per-request limit far above any answer's time here: only a hang reaches it. */
export const REQUEST_TIMEOUT_MS = 15_000;

/** Credentials as headers, so the same request works in process and over a connection (curl). */
export function credentialHeaders(kind: CredentialKind, tenant: Pick<Tenant, 'user' | 'key'>): Record<string, string> {
  switch (kind) {
    case 'session':
      return { cookie: `${SESSION_COOKIE}=${tenant.user.accessToken}` };
    case 'jwt':
      return { authorization: `Bearer ${tenant.user.accessToken}` };
    case 'apiKey':
      return { authorization: `Bearer ${tenant.key.fullKey}` };
    case 'serviceSecret':
      // Well-formed but signed with nothing: routes that take HMACs reject it on their own.
      return { 'x-service-secret': crypto.randomBytes(32).toString('hex') };
  }
}

export function uniqueToken(): string {
  return crypto.randomBytes(4).toString('hex');
}

/** A JSON request (the body serialized as is, so non-objects can be sent too). */
export function jsonRequest(method: string, url: string, headers: Record<string, string>, body?: unknown): WireRequest {
  return body === undefined ? { method, url, headers } : { method, url, headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

export interface FormFile {
  filename: string;
  contentType: string;
  content: string | Buffer;
}

/** A multipart/form-data body: strings are fields, FormFiles are file parts. */
export function multipartRequest(method: string, url: string, headers: Record<string, string>, parts: Record<string, string | FormFile>): WireRequest {
  const boundary = `----hark-gate-${crypto.randomBytes(8).toString('hex')}`;
  const chunks: Buffer[] = [];
  for (const [name, part] of Object.entries(parts)) {
    chunks.push(Buffer.from(`--${boundary}\r\n`));
    if (typeof part === 'string') {
      chunks.push(Buffer.from(`Content-Disposition: form-data; name="${name}"\r\n\r\n${part}\r\n`));
    } else {
      chunks.push(Buffer.from(`Content-Disposition: form-data; name="${name}"; filename="${part.filename}"\r\nContent-Type: ${part.contentType}\r\n\r\n`));
      chunks.push(Buffer.from(part.content), Buffer.from('\r\n'));
    }
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { method, url, headers: { ...headers, 'content-type': `multipart/form-data; boundary=${boundary}` }, body: Buffer.concat(chunks) };
}

export function parseJson(res: WireResponse): unknown {
  try {
    return JSON.parse(res.body);
  } catch {
    return undefined;
  }
}

async function makeTenant(rt: TestRuntime, label: string): Promise<Tenant> {
  const token = uniqueToken();
  const user = await signUp(rt);
  const name = `${label} Works ${token}`;
  const workspace = await createWorkspace(rt, user, name);
  const key = await createKey(rt, user, workspace, { name: `${label} gate key ${token}`, permissions: { rate_limit_per_hour: MAX_RATE_LIMIT_PER_HOUR } });
  const sessionId = String(decodeJwt(user.accessToken).sid);
  return {
    label,
    user: { ...user, sessionId },
    workspace: { ...workspace, name },
    key,
    values: new Set([user.id, user.email, workspace.id, workspace.slug, name, key.id, key.key_prefix, key.fullKey, sessionId]),
  };
}

/** `listen`: serve on a free port of 127.0.0.1 and send over real connections (`npm run fuzz`, whose curl commands target it). */
export async function startGateWorld(options: { listen?: boolean } = {}): Promise<GateWorld> {
  const llm = await FakeLlmUpstream.start({ record: false });
  const webhooks = await startFakeWebhookReceiver();
  const jwtSecret = crypto.randomBytes(32).toString('hex');
  const rt = await startTestRuntime({ LLM_BASE_URL: llm.url, LLM_API_KEY: 'gate-test-key', AUTH_JWT_SECRET: jwtSecret });
  try {
    const a = await makeTenant(rt, 'Alpha');
    const b = await makeTenant(rt, 'Bravo');
    const baseUrl = options.listen ? await rt.app!.listen({ host: '127.0.0.1', port: 0 }) : undefined;
    return {
      rt,
      send: baseUrl ? httpTransport(baseUrl, REQUEST_TIMEOUT_MS) : injectTransport(rt.app!, REQUEST_TIMEOUT_MS),
      baseUrl,
      a,
      b,
      webhooks,
      jwtSecret,
      async close() {
        await rt.destroy();
        await webhooks.close();
        await llm.close();
      },
    };
  } catch (error) {
    await rt.destroy();
    await webhooks.close();
    await llm.close();
    throw error;
  }
}

/** An access token of `user`'s session, correctly signed, that expired a minute ago. */
export async function expiredAccessToken(world: GateWorld, user: Tenant['user']): Promise<string> {
  const claims = decodeJwt(user.accessToken);
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ sid: claims.sid })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(String(claims.sub))
    .setIssuer(String(claims.iss))
    .setAudience(claims.aud as string)
    .setIssuedAt(now - 1000)
    .setExpirationTime(now - 60)
    .sign(new TextEncoder().encode(world.jwtSecret));
}

/** A new token pair for `tenant`'s session through POST /api/auth/refresh (access tokens live 15 minutes; long runs outlast them). */
export async function refreshSession(world: GateWorld, tenant: Tenant): Promise<void> {
  const res = await world.send(jsonRequest('POST', '/api/auth/refresh', {}, { refresh_token: tenant.user.refreshToken }));
  const pair = parseJson(res) as { access_token?: string; refresh_token?: string } | undefined;
  if (res.status !== 200 || !pair?.access_token || !pair.refresh_token) throw new Error(`refreshing ${tenant.label}'s session answered ${res.status}: ${res.body}`);
  tenant.user.accessToken = pair.access_token;
  tenant.user.refreshToken = pair.refresh_token;
  tenant.values.add(pair.access_token).add(pair.refresh_token);
}
