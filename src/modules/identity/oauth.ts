import type { Kysely } from 'kysely';
import * as oauth from 'oauth4webapi';
import type { OAuthConfig } from '../../config.ts';
import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import type { Tables } from '../../platform/db/tables.ts';
import { AppError } from '../../platform/http/errors.ts';
import { randomToken, safeEqual, sha256Hex } from '../../platform/crypto/tokens.ts';
import { identityService, type ClientInfo, type TokenPair } from './service.ts';
import { proveEmailOwnership } from './magic-link.ts';
import * as store from './store.ts';

/**
 * Social sign-in (spec §5 rule 1): Google over OpenID Connect, GitHub over
 * OAuth 2.0 and its user API. Both use the authorization-code flow with PKCE
 * (S256); the state is random, stored hashed with the code verifier, single
 * use and valid 10 minutes, and bound to the browser that started the flow by
 * a cookie, so a link carrying someone else's code cannot sign a victim into
 * the attacker's account (login CSRF).
 */
export const OAUTH_PROVIDERS = ['google', 'github'] as const;
export type OAuthProviderName = (typeof OAUTH_PROVIDERS)[number];

export const OAUTH = {
  stateSeconds: 10 * 60,
  /** Sign-in starts allowed per client address and window: each one stores a state row. */
  startsPerClient: 60,
  startWindowSeconds: 15 * 60,
  /** Each call to a provider gives up after this long (then 502). */
  requestTimeoutMs: 10_000,
} as const;

/** The cookie that binds a pending sign-in to the browser that started it. */
export const OAUTH_STATE_COOKIE = 'hark-oauth-state';

/** What a provider tells us about the person, once verified. */
export interface ProviderProfile {
  subject: string;
  /** An address the provider says the person has verified. */
  email: string;
  name?: string;
  avatarUrl?: string;
}

interface Provider {
  readonly label: string;
  authorizationUrl(request: { redirectUri: string; state: string; codeChallenge: string; nonce: string }): Promise<URL>;
  /** Validates the callback, redeems the code and returns the verified profile; provider errors are thrown as-is. */
  profile(callback: URLSearchParams, request: { redirectUri: string; state: string; codeVerifier: string; nonce: string }): Promise<ProviderProfile>;
}

/** Plain http is only ever allowed when an operator points a provider at a non-TLS address (local test doubles). */
function requestOptions(url: string) {
  return {
    signal: () => AbortSignal.timeout(OAUTH.requestTimeoutMs),
    ...(url.startsWith('http:') ? { [oauth.allowInsecureRequests]: true } : {}),
  };
}

class GoogleProvider implements Provider {
  readonly label = 'Google';
  private readonly client: oauth.Client;
  private readonly auth: oauth.ClientAuth;
  private metadata?: Promise<oauth.AuthorizationServer>;
  /** The provider's signing keys, fetched on first use and refreshed by oauth4webapi when a new key id appears. */
  private readonly jwks: oauth.JWKSCacheInput = {};

  constructor(private readonly config: NonNullable<OAuthConfig['google']>) {
    this.client = { client_id: config.clientId };
    this.auth = oauth.ClientSecretBasic(config.clientSecret);
  }

  /** OIDC discovery, fetched at first use and kept; a failed fetch is retried next time. */
  private server(): Promise<oauth.AuthorizationServer> {
    if (!this.metadata) {
      const issuer = new URL(this.config.issuerUrl);
      this.metadata = oauth
        .discoveryRequest(issuer, { algorithm: 'oidc', ...requestOptions(this.config.issuerUrl) })
        .then((response) => oauth.processDiscoveryResponse(issuer, response))
        .catch((error: unknown) => {
          this.metadata = undefined;
          // Whatever went wrong is between this server and the provider, not the client's doing.
          const mapped = providerError(this.label, error);
          throw mapped instanceof AppError && mapped.status >= 500
            ? mapped
            : new AppError('bad_gateway', `Could not load the OpenID configuration of ${this.config.issuerUrl}; check OAUTH_GOOGLE_ISSUER_URL`, undefined, { cause: error });
        });
    }
    return this.metadata;
  }

  async authorizationUrl(request: { redirectUri: string; state: string; codeChallenge: string; nonce: string }): Promise<URL> {
    const as = await this.server();
    if (!as.authorization_endpoint) throw new AppError('bad_gateway', 'Google sign-in metadata has no authorization endpoint');
    const url = new URL(as.authorization_endpoint);
    url.search = new URLSearchParams({
      client_id: this.client.client_id,
      response_type: 'code',
      redirect_uri: request.redirectUri,
      scope: 'openid email profile',
      state: request.state,
      nonce: request.nonce,
      code_challenge: request.codeChallenge,
      code_challenge_method: 'S256',
    }).toString();
    return url;
  }

  async profile(callback: URLSearchParams, request: { redirectUri: string; state: string; codeVerifier: string; nonce: string }): Promise<ProviderProfile> {
    const as = await this.server();
    const options = requestOptions(this.config.issuerUrl);
    const params = oauth.validateAuthResponse(as, this.client, callback, request.state);
    const response = await oauth.authorizationCodeGrantRequest(as, this.client, this.auth, params, request.redirectUri, request.codeVerifier, options);
    // Checks iss, aud, azp, exp, iat and our nonce.
    const tokens = await oauth.processAuthorizationCodeResponse(as, this.client, response, { expectedNonce: request.nonce, requireIdToken: true });
    // TLS already authenticates the token endpoint; the signature check also
    // covers operators who point the issuer at a plain-http address.
    await oauth.validateApplicationLevelSignature(as, response, { ...options, [oauth.jwksCache]: this.jwks });
    let claims: Record<string, unknown> = { ...oauth.getValidatedIdTokenClaims(tokens)! };
    if (typeof claims.email !== 'string' || typeof claims.email_verified !== 'boolean') {
      // An ID token may leave profile claims to the userinfo endpoint.
      const info = await oauth.userInfoRequest(as, this.client, tokens.access_token, options);
      claims = { ...claims, ...(await oauth.processUserInfoResponse(as, this.client, String(claims.sub), info)) };
    }
    if (typeof claims.email !== 'string' || claims.email_verified !== true) {
      throw new AppError('bad_request', 'Google did not confirm a verified email address for this account');
    }
    return {
      subject: String(claims.sub),
      email: claims.email,
      name: typeof claims.name === 'string' ? claims.name : undefined,
      avatarUrl: typeof claims.picture === 'string' ? claims.picture : undefined,
    };
  }
}

interface GitHubEmail {
  email: string;
  primary: boolean;
  verified: boolean;
}

class GitHubProvider implements Provider {
  readonly label = 'GitHub';
  private readonly client: oauth.Client;
  private readonly auth: oauth.ClientAuth;
  private readonly as: oauth.AuthorizationServer;

  constructor(private readonly config: NonNullable<OAuthConfig['github']>) {
    this.client = { client_id: config.clientId };
    this.auth = oauth.ClientSecretPost(config.clientSecret);
    // GitHub publishes no metadata document; its endpoints are fixed.
    this.as = {
      issuer: config.url,
      authorization_endpoint: `${config.url}/login/oauth/authorize`,
      token_endpoint: `${config.url}/login/oauth/access_token`,
    };
  }

  async authorizationUrl(request: { redirectUri: string; state: string; codeChallenge: string }): Promise<URL> {
    const url = new URL(this.as.authorization_endpoint!);
    url.search = new URLSearchParams({
      client_id: this.client.client_id,
      response_type: 'code',
      redirect_uri: request.redirectUri,
      scope: 'read:user user:email',
      state: request.state,
      code_challenge: request.codeChallenge,
      code_challenge_method: 'S256',
      allow_signup: 'true',
    }).toString();
    return url;
  }

  async profile(callback: URLSearchParams, request: { redirectUri: string; state: string; codeVerifier: string }): Promise<ProviderProfile> {
    const options = requestOptions(this.config.url);
    const params = oauth.validateAuthResponse(this.as, this.client, callback, request.state);
    const response = await oauth.authorizationCodeGrantRequest(this.as, this.client, this.auth, params, request.redirectUri, request.codeVerifier, {
      ...options,
      [oauth.customFetch]: githubTokenFetch,
    });
    const tokens = await oauth.processAuthorizationCodeResponse(this.as, this.client, response);
    const user = await this.api<{ id: number; login: string; name?: string | null; avatar_url?: string }>('/user', tokens.access_token);
    const emails = await this.api<GitHubEmail[]>('/user/emails', tokens.access_token);
    const primary = Array.isArray(emails) ? emails.find((e) => e.primary) : undefined;
    if (!primary?.verified) throw new AppError('bad_request', 'Your GitHub account has no verified primary email address; verify it on GitHub and try again');
    return { subject: String(user.id), email: primary.email, name: user.name ?? user.login, avatarUrl: user.avatar_url };
  }

  private async api<T>(path: string, accessToken: string): Promise<T> {
    const response = await fetch(`${this.config.apiUrl}${path}`, {
      headers: {
        accept: 'application/vnd.github+json',
        authorization: `Bearer ${accessToken}`,
        'user-agent': 'Hark',
        'x-github-api-version': '2022-11-28',
      },
      signal: AbortSignal.timeout(OAUTH.requestTimeoutMs),
    });
    if (!response.ok) {
      await response.body?.cancel();
      throw new AppError('bad_request', `GitHub refused to share your profile (${path} answered ${response.status}); allow the read:user and user:email permissions`);
    }
    return (await response.json()) as T;
  }
}

/**
 * GitHub reports token errors with HTTP 200 and an `error` member; give them
 * the standard 400 so oauth4webapi reports the provider's error code.
 */
async function githubTokenFetch(url: string, init: RequestInit): Promise<Response> {
  const response = await fetch(url, init);
  if (response.status !== 200 || !response.headers.get('content-type')?.includes('application/json')) return response;
  const body = (await response.json()) as Record<string, unknown>;
  return new Response(JSON.stringify(body), { status: typeof body.error === 'string' ? 400 : 200, headers: { 'content-type': 'application/json' } });
}

/** The nonce is derived from the stored verifier, so it needs no column and is as unguessable; the verifier itself never leaves the server before the token request. */
function nonceFor(codeVerifier: string): string {
  return sha256Hex(`hark-oidc-nonce:${codeVerifier}`);
}

export interface OAuthStart {
  /** The provider's consent page. */
  url: string;
  /** For the browser-binding cookie. */
  state: string;
}

export type OAuthFinish = { kind: 'signed_in'; pair: TokenPair; redirectTo: string } | { kind: 'mfa_required'; redirectTo: string };

export class OAuthService {
  private readonly providers = new Map<string, Provider>();

  constructor(private readonly ctx: AppContext) {
    const { google, github } = ctx.config.oauth;
    if (google) this.providers.set('google', new GoogleProvider(google));
    if (github) this.providers.set('github', new GitHubProvider(github));
  }

  private provider(name: string): Provider {
    const provider = this.providers.get(name);
    if (!provider) throw new AppError('not_found', `Sign-in with "${name}" is not available: provider not configured`);
    return provider;
  }

  private redirectUri(name: string): string {
    return `${this.ctx.config.baseUrl}/api/auth/oauth/${name}/callback`;
  }

  /**
   * Where to send the browser after sign-in: a path of the app or a full URL
   * under APP_URL; anything else is refused, so the endpoint cannot be used
   * as an open redirect.
   */
  private safeRedirect(redirectTo: string | undefined): string {
    const appUrl = new URL(this.ctx.config.appUrl);
    if (redirectTo === undefined || redirectTo === '') return appUrl.toString();
    const invalid = () => new AppError('bad_request', `redirect_to must be a path of the app or a URL under ${this.ctx.config.appUrl}`, [{ field: 'redirect_to', message: 'is not on APP_URL' }]);
    // Control characters and backslashes are normalised differently by
    // browsers and URL parsers; refusing them closes that class of tricks.
    if ([...redirectTo].some((c) => c <= '\u001f' || c === '\u007f' || c === '\\')) throw invalid();
    let target: URL;
    try {
      target = redirectTo.startsWith('/') && !redirectTo.startsWith('//') ? new URL(appUrl.pathname.replace(/\/$/, '') + redirectTo, appUrl) : new URL(redirectTo);
    } catch {
      throw invalid();
    }
    const basePath = appUrl.pathname.endsWith('/') ? appUrl.pathname : `${appUrl.pathname}/`;
    if (target.origin !== appUrl.origin || !(target.pathname === appUrl.pathname || target.pathname.startsWith(basePath))) throw invalid();
    if (target.username || target.password) throw invalid();
    return target.toString();
  }

  async start(name: string, redirectTo: string | undefined, client: ClientInfo): Promise<OAuthStart> {
    const provider = this.provider(name);
    const target = this.safeRedirect(redirectTo);
    const decision = await this.ctx.rateLimits.consume('oauth-start', client.ip ?? 'unknown', OAUTH.startsPerClient, OAUTH.startWindowSeconds);
    if (!decision.allowed) {
      throw new AppError('rate_limited', 'Too many sign-in attempts; try again later', undefined, { headers: { 'retry-after': String(decision.retryAfter) } });
    }
    const state = randomToken(32);
    const codeVerifier = oauth.generateRandomCodeVerifier();
    const url = await this.callProvider(provider, async () =>
      provider.authorizationUrl({
        redirectUri: this.redirectUri(name),
        state,
        codeChallenge: await oauth.calculatePKCECodeChallenge(codeVerifier),
        nonce: nonceFor(codeVerifier),
      }),
    );
    await queries.insertState(this.ctx.db.kysely, {
      stateHash: sha256Hex(state),
      provider: name,
      codeVerifier,
      redirectTo: target,
      expiresAt: new Date(Date.now() + OAUTH.stateSeconds * 1000),
    });
    return { url: url.toString(), state };
  }

  /**
   * Completes a sign-in from the provider's redirect. The state row is
   * deleted before anything else, so a callback URL works at most once even
   * when the exchange then fails.
   */
  async finish(name: string, callback: URLSearchParams, boundState: string | undefined, client: ClientInfo): Promise<OAuthFinish> {
    const provider = this.provider(name);
    const state = callback.get('state');
    if (!state || !boundState || !safeEqual(state, boundState)) {
      throw new AppError('bad_request', 'invalid OAuth state: start the sign-in again from this browser');
    }
    const pending = await queries.takeState(this.ctx.db.kysely, sha256Hex(state), name);
    if (!pending || pending.expires_at <= new Date()) throw new AppError('bad_request', 'invalid OAuth state: it is unknown, expired or already used; start the sign-in again');

    const profile = await this.callProvider(provider, async () =>
      provider.profile(callback, {
        redirectUri: this.redirectUri(name),
        state,
        codeVerifier: pending.code_verifier,
        nonce: nonceFor(pending.code_verifier),
      }),
    );

    const redirectTo = pending.redirect_to ?? this.safeRedirect(undefined);
    return this.ctx.db.transaction(async (trx): Promise<OAuthFinish> => {
      const user = await this.findOrCreateUser(trx, name, profile);
      if (user.mfa_enabled_at) {
        // A TOTP step-up after a provider sign-in is not offered yet: the
        // person is told to use a method that takes the code.
        const url = new URL(this.ctx.config.appUrl);
        url.searchParams.set('mfa_required', '1');
        return { kind: 'mfa_required', redirectTo: url.toString() };
      }
      const pair = await identityService(this.ctx).startSession(trx, user, `oauth:${name}`, client);
      return { kind: 'signed_in', pair, redirectTo };
    });
  }

  /**
   * The provider's account decides the user: an identity already linked,
   * else the user with the same (provider-verified) email, which is linked,
   * else a new user without a password.
   */
  private async findOrCreateUser(trx: Tx, provider: string, profile: ProviderProfile) {
    const linked = await queries.linkedUser(trx, provider, profile.subject);
    if (linked) {
      await queries.updateIdentityEmail(trx, provider, profile.subject, profile.email);
      const user = await store.findUserById(trx, linked.user_id);
      if (user) return user;
    }
    let user = await store.findUserByEmail(trx, profile.email);
    if (user) {
      await proveEmailOwnership(trx, user);
    } else {
      const metadata: Record<string, unknown> = {};
      if (profile.name) metadata.name = profile.name;
      if (profile.avatarUrl) metadata.avatar_url = profile.avatarUrl;
      // undefined when a concurrent sign-in created the same address first.
      user = (await store.insertUser(trx, { email: profile.email, passwordHash: null, confirmed: true, metadata })) ?? (await store.findUserByEmail(trx, profile.email));
      if (!user) throw new Error('user vanished while signing in');
    }
    await queries.insertIdentity(trx, { provider, subject: profile.subject, userId: user.id, email: profile.email });
    return (await store.findUserById(trx, user.id)) ?? user;
  }

  /** Provider failures are the client's sign-in failing (400), or the provider being unreachable (502); never a 500. */
  private async callProvider<T>(provider: Provider, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      const mapped = providerError(provider.label, error);
      // Only the message: provider responses can carry tokens.
      if (mapped instanceof AppError) this.ctx.logger.warn({ provider: provider.label, reason: mapped.message }, 'OAuth sign-in failed');
      throw mapped;
    }
  }
}

function providerError(label: string, error: unknown): unknown {
  if (error instanceof AppError) return error;
  if (error instanceof oauth.AuthorizationResponseError) {
    const detail = error.error_description ? `: ${error.error_description}` : '';
    const message = error.error === 'access_denied' ? `${label} sign-in was cancelled or refused (access_denied${detail})` : `${label} sign-in failed (${error.error}${detail})`;
    return new AppError('bad_request', message, undefined, { cause: error });
  }
  if (error instanceof oauth.ResponseBodyError) {
    const detail = error.error_description ? `: ${error.error_description}` : '';
    return new AppError('bad_request', `${label} rejected the sign-in (${error.error}${detail}); start the sign-in again`, undefined, { cause: error });
  }
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError' || error.message === 'fetch failed')) {
    return new AppError('bad_gateway', `Could not reach ${label} to complete the sign-in; try again later`, undefined, { cause: error });
  }
  if (error instanceof oauth.OperationProcessingError || error instanceof oauth.WWWAuthenticateChallengeError) {
    return new AppError('bad_request', `${label} sign-in response could not be verified (${error.message})`, undefined, { cause: error });
  }
  return error;
}

/** SQL of this file: pending states and linked provider identities. */
const queries = {
  insertState(db: Kysely<Tables>, row: { stateHash: string; provider: string; codeVerifier: string; redirectTo: string; expiresAt: Date }) {
    return db
      .insertInto('oauth_states')
      .values({ state_hash: row.stateHash, provider: row.provider, code_verifier: row.codeVerifier, redirect_to: row.redirectTo, expires_at: row.expiresAt })
      .execute();
  },

  /** Deleting is the check: of two concurrent callbacks with one state, only one gets the row. */
  takeState(db: Kysely<Tables>, stateHash: string, provider: string) {
    return db
      .deleteFrom('oauth_states')
      .where('state_hash', '=', stateHash)
      .where('provider', '=', provider)
      .returning(['code_verifier', 'redirect_to', 'expires_at'])
      .executeTakeFirst();
  },

  linkedUser(trx: Tx, provider: string, subject: string) {
    return trx.selectFrom('oauth_identities').select(['user_id']).where('provider', '=', provider).where('subject', '=', subject).executeTakeFirst();
  },

  updateIdentityEmail(trx: Tx, provider: string, subject: string, email: string) {
    return trx.updateTable('oauth_identities').set({ email }).where('provider', '=', provider).where('subject', '=', subject).execute();
  },

  insertIdentity(trx: Tx, row: { provider: string; subject: string; userId: string; email: string }) {
    return trx
      .insertInto('oauth_identities')
      .values({ provider: row.provider, subject: row.subject, user_id: row.userId, email: row.email })
      .onConflict((oc) => oc.columns(['provider', 'subject']).doNothing())
      .execute();
  },
};

export const oauthService = perContext((ctx) => new OAuthService(ctx));
