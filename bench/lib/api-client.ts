/**
 * Hark's public API over real HTTP (fetch), for code that drives a server
 * process from outside: the load suite, the soak and the crash-restart tests.
 * Workspaces and keys are made the way a client makes them, so nothing here
 * reaches into the database.
 */
import crypto from 'node:crypto';

/** Passes the sign-up password policy. */
const PASSWORD = 'correct-horse-battery-staple';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    what: string,
  ) {
    super(`${what} answered ${status}: ${body.slice(0, 500)}`);
  }
}

export interface RequestOptions {
  /** A user's access token or an API key, sent as `Authorization: Bearer`. */
  token?: string;
  /** Sent as the session cookie instead (the routes that accept sessions only). */
  cookie?: string;
  /** JSON body. */
  json?: unknown;
  /** Multipart body (uploads); fetch sets the boundary. */
  form?: FormData;
  /** The status that counts as success; anything else throws ApiError. Default: any 2xx. */
  expect?: number;
}

export interface ApiClient {
  baseUrl: string;
  request<T = Record<string, unknown>>(method: string, path: string, options?: RequestOptions): Promise<T>;
}

export function apiClient(baseUrl: string): ApiClient {
  return {
    baseUrl,
    async request<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
      const headers: Record<string, string> = {};
      if (options.token) headers.authorization = `Bearer ${options.token}`;
      if (options.cookie) headers.cookie = `sb-access-token=${options.cookie}`;
      let body: string | FormData | undefined;
      if (options.json !== undefined) {
        headers['content-type'] = 'application/json';
        body = JSON.stringify(options.json);
      } else if (options.form) {
        body = options.form;
      }
      const response = await fetch(`${baseUrl}${path}`, { method, headers, body });
      const text = await response.text();
      const ok = options.expect === undefined ? response.ok : response.status === options.expect;
      if (!ok) throw new ApiError(response.status, text, `${method} ${path}`);
      return (text ? JSON.parse(text) : {}) as T;
    },
  };
}

/** A signed-in owner and the workspace they created through onboarding. */
export interface Tenant {
  accessToken: string;
  accountId: string;
  slug: string;
}

export async function newTenant(api: ApiClient, label = 'tenant'): Promise<Tenant> {
  const email = `${label}-${crypto.randomUUID().slice(0, 8)}@example.test`;
  const signedUp = await api.request<{ data: { access_token: string } }>('POST', '/api/auth/sign-up', { json: { email, password: PASSWORD } });
  const accessToken = signedUp.data.access_token;
  // Onboarding accepts the session cookie only (§4.8).
  const workspace = await api.request<{ accountId: string; slug: string }>('POST', '/api/onboarding/start', {
    cookie: accessToken,
    json: { companyName: `${label} workspace`, clientToken: crypto.randomUUID() },
  });
  return { accessToken, accountId: workspace.accountId, slug: workspace.slug };
}

/** A new API key of the tenant's workspace; returns the full key. */
export async function createApiKey(api: ApiClient, tenant: Tenant, permissions: { scopes: string[]; rate_limit_per_hour: number }): Promise<string> {
  const created = await api.request<{ apiKey: { fullKey: string } }>('POST', '/api/api-keys', {
    token: tenant.accessToken,
    json: { accountSlug: tenant.slug, name: 'bench', permissions },
  });
  return created.apiKey.fullKey;
}
