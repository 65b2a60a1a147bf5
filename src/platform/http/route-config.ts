/**
 * What every route declares besides its schema. Issue-level modules fill in
 * `auth` and `scope`; the auth plugin enforces them and the OpenAPI document
 * shows them, so the declaration is the single source of truth.
 */
export type CredentialKind = 'session' | 'jwt' | 'apiKey' | 'serviceSecret';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Credentials the route accepts; 'none' for public routes. */
    auth?: readonly CredentialKind[] | 'none';
    /** API-key scope the route needs (§5 rule 6). */
    scope?: string;
    /** `error-only`: error bodies are `{error: message}` (workspace files, §4.6). */
    errorShape?: 'envelope' | 'error-only';
  }
}

/** OpenAPI security scheme names for each credential kind (§5). */
export const SECURITY_SCHEMES = {
  session: { type: 'apiKey', in: 'cookie', name: 'sb-access-token', description: 'Web-app session cookie' },
  jwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'Access token from sign-in (desktop and session-token callers)' },
  apiKey: { type: 'http', scheme: 'bearer', bearerFormat: 'svc_live_… / svc_test_… API key', description: 'Workspace API key, server-to-server only' },
  serviceSecret: { type: 'apiKey', in: 'header', name: 'X-Service-Secret', description: 'Hex SHA-256 HMAC of the exact raw body' },
} as const satisfies Record<CredentialKind, object>;
