import type { FastifyReply, FastifyRequest } from 'fastify';
import type {} from '@fastify/cookie';
import type { App } from './app-type.ts';
import { AppError } from './errors.ts';
import type { CredentialKind } from './route-config.ts';

/** Who is calling, whatever credential they used (ARCHITECTURE "One request, end to end"). */
export type Actor =
  | {
      kind: 'user';
      credential: 'session' | 'jwt';
      userId: string;
      sessionId: string;
      /** Users reach workspaces through memberships, checked by each service. */
      accountId?: undefined;
      scopes: readonly ['*'];
    }
  | {
      kind: 'apiKey';
      credential: 'apiKey';
      apiKeyId: string;
      /** The workspace the key belongs to: the only one it can reach. */
      accountId: string;
      userId?: undefined;
      scopes: readonly string[];
    }
  | {
      /** HMAC-signed requests: the route verifies the signature against its resource's secret. */
      kind: 'signature';
      credential: 'serviceSecret';
      signature: string;
      accountId?: undefined;
      userId?: undefined;
      scopes: readonly [];
    };

export type UserActor = Extract<Actor, { kind: 'user' }>;
export type ApiKeyActor = Extract<Actor, { kind: 'apiKey' }>;

/** How credentials are checked; the identity and api-keys modules provide these. */
export interface CredentialVerifier {
  /** An access token (JWT) from the cookie or a Bearer header; null when invalid, expired or revoked. */
  accessToken(token: string): Promise<{ userId: string; sessionId: string } | null>;
  /** A workspace API key; throws AppError for disabled/expired keys or an exceeded rate limit. */
  apiKey(key: string, reply: FastifyReply): Promise<{ apiKeyId: string; accountId: string; scopes: string[] } | null>;
}

export const SESSION_COOKIE = 'sb-access-token';
export const API_KEY_PATTERN = /^svc_(live|test)_/;

declare module 'fastify' {
  interface FastifyRequest {
    actor?: Actor;
  }
}

/** True when `granted` (possibly `*` or `prefix*`) covers `needed` (§5 rule 6). */
export function scopeAllows(granted: readonly string[], needed: string): boolean {
  return granted.some((scope) => scope === needed || (scope.endsWith('*') && needed.startsWith(scope.slice(0, -1))));
}

const NAMES: Record<CredentialKind, string> = {
  session: 'a session cookie',
  jwt: 'a Bearer access token',
  apiKey: 'an API key',
  serviceSecret: 'an X-Service-Secret signature',
};

interface Presented {
  kind: CredentialKind;
  value: string;
}

function presentedCredentials(request: FastifyRequest): Presented[] {
  const found: Presented[] = [];
  const header = request.headers.authorization;
  if (typeof header === 'string') {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (match) found.push({ kind: API_KEY_PATTERN.test(match[1]!) ? 'apiKey' : 'jwt', value: match[1]! });
  }
  const cookie = request.cookies?.[SESSION_COOKIE];
  if (cookie) found.push({ kind: 'session', value: cookie });
  const signature = request.headers['x-service-secret'];
  if (typeof signature === 'string' && signature) found.push({ kind: 'serviceSecret', value: signature });
  return found;
}

function describe(kinds: readonly CredentialKind[]): string {
  return kinds.map((k) => NAMES[k]).join(' or ');
}

/**
 * Resolves the one credential a route accepts into `request.actor`, before
 * the body is read: every route must declare `config.auth` (a route without
 * one fails at start-up), so no endpoint is public by accident.
 */
export function installAuth(app: App, verifier: CredentialVerifier): void {
  app.addHook('onRoute', (route) => {
    if (route.config?.auth === undefined && !route.url.startsWith('/api/docs')) {
      throw new Error(`route ${route.method} ${route.url} must declare config.auth`);
    }
  });

  app.addHook('onRequest', async (request, reply) => {
    const accepted = request.routeOptions.config?.auth;
    if (!accepted || accepted === 'none') return;
    const presented = presentedCredentials(request);
    const usable = presented.find((p) => accepted.includes(p.kind));
    if (!usable) {
      const refused = presented[0];
      throw new AppError(
        'unauthorized',
        refused ? `This endpoint does not accept ${NAMES[refused.kind]}; use ${describe(accepted)}` : `Authentication required: ${describe(accepted)}`,
      );
    }
    request.actor = await resolve(usable, verifier, reply);
    request.actorLabel = request.actor.kind === 'user' ? `user:${request.actor.userId}` : request.actor.kind === 'apiKey' ? `key:${request.actor.apiKeyId}` : 'signature';

    const scope = request.routeOptions.config?.scope;
    if (scope && request.actor.kind === 'apiKey' && !scopeAllows(request.actor.scopes, scope)) {
      throw new AppError('forbidden', `This API key lacks the scope ${scope}`);
    }
  });
}

async function resolve(credential: Presented, verifier: CredentialVerifier, reply: FastifyReply): Promise<Actor> {
  switch (credential.kind) {
    case 'session':
    case 'jwt': {
      const user = await verifier.accessToken(credential.value);
      if (!user) throw new AppError('unauthorized', 'Access token is invalid, expired or revoked');
      return { kind: 'user', credential: credential.kind, userId: user.userId, sessionId: user.sessionId, scopes: ['*'] };
    }
    case 'apiKey': {
      const key = await verifier.apiKey(credential.value, reply);
      if (!key) throw new AppError('unauthorized', 'API key is invalid or revoked');
      return { kind: 'apiKey', credential: 'apiKey', apiKeyId: key.apiKeyId, accountId: key.accountId, scopes: key.scopes };
    }
    case 'serviceSecret':
      if (!/^[0-9a-fA-F]{64}$/.test(credential.value)) throw new AppError('unauthorized', 'X-Service-Secret must be a hex SHA-256 HMAC');
      return { kind: 'signature', credential: 'serviceSecret', signature: credential.value.toLowerCase(), scopes: [] };
  }
}

/** The actor of a route that declared credentials (never undefined past the auth hook). */
export function actorOf(request: FastifyRequest): Actor {
  if (!request.actor) throw new Error('route reached without an actor: does it declare config.auth?');
  return request.actor;
}
