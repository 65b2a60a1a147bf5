/**
 * Users, workspaces, members and API keys made through the public API, the
 * way a client would, for any suite that needs a tenant to work in.
 */
import crypto from 'node:crypto';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import type { TestRuntime } from './helpers.ts';

export type Role = 'owner' | 'admin' | 'member';

/** Passes the sign-up password policy. */
export const TEST_PASSWORD = 'correct-horse-battery-staple';

export interface TestUser {
  id: string;
  email: string;
  accessToken: string;
  refreshToken: string;
}

export interface TestWorkspace {
  id: string;
  slug: string;
}

export interface TestKey {
  id: string;
  fullKey: string;
  key_prefix: string;
  [field: string]: unknown;
}

export function uniqueEmail(label = 'user'): string {
  return `${label}-${crypto.randomUUID().slice(0, 8)}@example.test`;
}

/** `authorization: Bearer <token>`: the JWT credential, or an API key. */
export function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

/** The web app's session cookie, to spread into inject options. */
export function sessionCookie(accessToken: string): Pick<InjectOptions, 'cookies'> {
  return { cookies: { 'sb-access-token': accessToken } };
}

/** `rt.app.inject` that fails with the response body when the status is not `expected`. */
export async function call(rt: TestRuntime, options: InjectOptions, expected = 200): Promise<LightMyRequestResponse> {
  const res = await rt.app!.inject(options);
  assert.equal(res.statusCode, expected, `${options.method ?? 'GET'} ${String(options.url)} answered ${res.statusCode}: ${res.body}`);
  return res;
}

/** A new confirmed, signed-in user (AUTH_EMAIL_CONFIRM must be false, the default). */
export async function signUp(rt: TestRuntime, email = uniqueEmail()): Promise<TestUser> {
  const res = await call(rt, { method: 'POST', url: '/api/auth/sign-up', payload: { email, password: TEST_PASSWORD } });
  const data = res.json().data as { access_token?: string; refresh_token?: string; user: { id: string } };
  assert.ok(data.access_token && data.refresh_token, 'sign-up returned no session: is AUTH_EMAIL_CONFIRM on?');
  return { id: data.user.id, email, accessToken: data.access_token, refreshToken: data.refresh_token };
}

/** Another session of an existing user (signed up with TEST_PASSWORD). */
export async function signIn(rt: TestRuntime, user: Pick<TestUser, 'email'>): Promise<TestUser> {
  const res = await call(rt, { method: 'POST', url: '/api/auth/sign-in', payload: { email: user.email, password: TEST_PASSWORD } });
  const pair = res.json() as { access_token: string; refresh_token: string; user: { id: string; email: string } };
  return { id: pair.user.id, email: user.email, accessToken: pair.access_token, refreshToken: pair.refresh_token };
}

/** The newest outbox email to `email` (any case), optionally of one kind. */
export async function latestEmail(rt: TestRuntime, email: string, kind?: string) {
  let query = rt.db.kysely
    .selectFrom('email_outbox')
    .selectAll()
    .where(sql<string>`lower(to_email)`, '=', email.toLowerCase());
  if (kind !== undefined) query = query.where('kind', '=', kind);
  return query.orderBy('created_at', 'desc').executeTakeFirst();
}

/** The `token=` of a link in an email body (confirmation, magic link, invitation). */
export function tokenFromEmail(text: string): string {
  const token = /token=([^\s&]+)/.exec(text)?.[1];
  assert.ok(token, `no token= in the email:\n${text}`);
  return decodeURIComponent(token);
}

/** A new workspace owned by `owner`, through onboarding (session cookie only, §4.8). */
export async function createWorkspace(rt: TestRuntime, owner: TestUser, companyName = 'Acme Test'): Promise<TestWorkspace> {
  const res = await call(rt, {
    method: 'POST',
    url: '/api/onboarding/start',
    ...sessionCookie(owner.accessToken),
    payload: { companyName, clientToken: crypto.randomUUID() },
  });
  const body = res.json() as { accountId: string; slug: string };
  return { id: body.accountId, slug: body.slug };
}

/**
 * Invites `user` (a new one unless given) into `workspace` with `role` and
 * accepts. The token only travels by email, so it is read from the outbox.
 */
export async function addMember(rt: TestRuntime, workspace: TestWorkspace, inviter: TestUser, role: Role, user?: TestUser): Promise<TestUser> {
  const member = user ?? (await signUp(rt, uniqueEmail(role)));
  await call(rt, { method: 'POST', url: `/api/accounts/${workspace.slug}/invitations`, headers: bearer(inviter.accessToken), payload: { email: member.email, role } });
  const mail = await latestEmail(rt, member.email, 'invitation');
  assert.ok(mail, 'no invitation email in the outbox');
  await call(rt, { method: 'POST', url: '/api/invitations/accept', headers: bearer(member.accessToken), payload: { token: tokenFromEmail(mail.body_text) } });
  return member;
}

/** A new API key of `workspace`, created by `by` (owner or admin) through POST /api/api-keys. */
export async function createKey(rt: TestRuntime, by: TestUser, workspace: TestWorkspace, body: Record<string, unknown> = {}): Promise<TestKey> {
  const res = await call(rt, { method: 'POST', url: '/api/api-keys', headers: bearer(by.accessToken), payload: { accountSlug: workspace.slug, name: 'test key', ...body } });
  return res.json().apiKey as TestKey;
}

/**
 * POST /api/kb/files with `bytes` as the one `file` part. `token` is an API
 * key or a user's access token (Bearer); users name the workspace with `accountSlug`.
 */
export async function uploadKbFile(
  rt: TestRuntime,
  token: string,
  file: { bytes: Buffer | string; filename: string },
  accountSlug?: string,
): Promise<LightMyRequestResponse> {
  const body = new FormData();
  body.append('file', new Blob([file.bytes]), file.filename);
  const query = accountSlug === undefined ? '' : `?accountSlug=${encodeURIComponent(accountSlug)}`;
  return rt.app!.inject({ method: 'POST', url: `/api/kb/files${query}`, headers: bearer(token), payload: body });
}

/** Polls a knowledge-base file until its status is one of `statuses`; returns the §2.5 file. */
export async function kbFileReaches(rt: TestRuntime, token: string, fileId: string, statuses: readonly string[] = ['ready', 'failed'], timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await rt.app!.inject({ method: 'GET', url: `/api/kb/files/${fileId}`, headers: bearer(token) });
    assert.equal(res.statusCode, 200, res.body);
    const file = res.json().file as { status: string; [field: string]: unknown };
    if (statuses.includes(file.status)) return file;
    if (Date.now() > deadline) throw new Error(`file ${fileId} is still ${file.status}, waited for ${statuses.join(' or ')}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
