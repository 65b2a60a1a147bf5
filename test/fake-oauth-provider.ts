import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose';

/**
 * A local stand-in for the two social sign-in providers, speaking their wire
 * formats on one port:
 *
 * - Google (OpenID Connect): `/.well-known/openid-configuration`, `/authorize`,
 *   `/token` (an RS256 ID token signed with the key served at `/jwks`),
 *   `/userinfo`.
 * - GitHub (OAuth 2.0 + REST): `/login/oauth/authorize`,
 *   `/login/oauth/access_token` (JSON with `Accept: application/json`, form
 *   otherwise; errors as HTTP 200 with `error`, as GitHub does), `/user`,
 *   `/user/emails`.
 *
 * Like a real provider it checks the client credentials, the registered
 * redirect_uri (and that the token request repeats it), and the PKCE
 * code_verifier against the code_challenge; codes work once. The authorize
 * endpoints approve at once as `googleUser` / `githubUser`, or refuse with
 * `error=access_denied` when `deny` is set.
 */

export interface FakeGoogleUser {
  sub: string;
  email: string;
  email_verified: boolean;
  name?: string;
  /** Leave email claims out of the ID token, so the client must ask /userinfo. */
  emailOnlyInUserinfo?: boolean;
}

export interface FakeGitHubUser {
  id: number;
  login: string;
  name?: string;
  emails: Array<{ email: string; primary: boolean; verified: boolean }>;
}

interface Client {
  clientId: string;
  clientSecret: string;
}

interface IssuedCode {
  provider: 'google' | 'github';
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  nonce?: string;
  scope: string;
  user: FakeGoogleUser | FakeGitHubUser;
  expiresAt: number;
}

export interface FakeOAuthProvider {
  readonly url: string;
  readonly google: Client;
  readonly github: Client;
  /** Who the next approvals sign in as. */
  googleUser: FakeGoogleUser;
  githubUser: FakeGitHubUser;
  /** Refuse the next authorizations with error=access_denied. */
  deny: boolean;
  /** Sign ID tokens with a key that /jwks does not publish. */
  signWithUnknownKey: boolean;
  /** Paths requested, in order (for asserting caching). */
  readonly requests: string[];
  /** Env overrides for startTestRuntime: both providers pointed here. */
  env(): Record<string, string>;
  close(): Promise<void>;
}

export async function startFakeOAuthProvider(options: { redirectUris: string[] }): Promise<FakeOAuthProvider> {
  const registered = new Set(options.redirectUris);
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  const rogue = await generateKeyPair('RS256');
  const jwk: JWK = { ...(await exportJWK(publicKey)), kid: 'fake-key-1', alg: 'RS256', use: 'sig' };
  const codes = new Map<string, IssuedCode>();
  const accessTokens = new Map<string, IssuedCode>();
  let url = '';

  const fake: FakeOAuthProvider = {
    get url() {
      return url;
    },
    google: { clientId: 'google-client-id', clientSecret: 'google-client-secret' },
    github: { clientId: 'github-client-id', clientSecret: 'github-client-secret' },
    googleUser: { sub: '100000000000000000001', email: 'person@gmail.test', email_verified: true, name: 'Google Person' },
    githubUser: { id: 1001, login: 'octoperson', name: 'GitHub Person', emails: [{ email: 'octo@github.test', primary: true, verified: true }] },
    deny: false,
    signWithUnknownKey: false,
    requests: [],
    env() {
      return {
        OAUTH_GOOGLE_CLIENT_ID: fake.google.clientId,
        OAUTH_GOOGLE_CLIENT_SECRET: fake.google.clientSecret,
        OAUTH_GOOGLE_ISSUER_URL: url,
        OAUTH_GITHUB_CLIENT_ID: fake.github.clientId,
        OAUTH_GITHUB_CLIENT_SECRET: fake.github.clientSecret,
        OAUTH_GITHUB_URL: url,
        OAUTH_GITHUB_API_URL: url,
      };
    },
    close: () => new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))),
  };

  function send(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
    res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers });
    res.end(JSON.stringify(body));
  }

  function redirect(res: http.ServerResponse, to: string) {
    res.writeHead(302, { location: to });
    res.end();
  }

  function authorize(provider: 'google' | 'github', query: URLSearchParams, res: http.ServerResponse) {
    const client = fake[provider];
    const redirectUri = query.get('redirect_uri') ?? '';
    // Errors before the redirect_uri is trusted are shown to the user, never redirected.
    if (query.get('client_id') !== client.clientId) return send(res, 400, { error: 'invalid_client', error_description: 'unknown client_id' });
    if (!registered.has(redirectUri)) return send(res, 400, { error: 'redirect_uri_mismatch', error_description: `${redirectUri} is not registered` });
    const back = new URL(redirectUri);
    const state = query.get('state');
    if (state) back.searchParams.set('state', state);
    const fail = (error: string, description: string) => {
      back.searchParams.set('error', error);
      back.searchParams.set('error_description', description);
      redirect(res, back.toString());
    };
    if (query.get('response_type') !== 'code') return fail('unsupported_response_type', 'only code is supported');
    if (query.get('code_challenge_method') !== 'S256' || !query.get('code_challenge')) return fail('invalid_request', 'PKCE with S256 is required');
    const scope = query.get('scope') ?? '';
    if (provider === 'google' && !scope.split(' ').includes('openid')) return fail('invalid_scope', 'openid scope is required');
    if (fake.deny) return fail('access_denied', 'The user denied the request');
    const code = crypto.randomBytes(16).toString('hex');
    codes.set(code, {
      provider,
      clientId: client.clientId,
      redirectUri,
      codeChallenge: query.get('code_challenge')!,
      nonce: query.get('nonce') ?? undefined,
      scope,
      user: provider === 'google' ? { ...fake.googleUser } : structuredClone(fake.githubUser),
      expiresAt: Date.now() + 60_000,
    });
    back.searchParams.set('code', code);
    if (provider === 'google') back.searchParams.set('scope', scope); // Google echoes extra parameters
    redirect(res, back.toString());
  }

  /** Client credentials from HTTP Basic (form-encoded, RFC 6749 §2.3.1) or the body. */
  function clientCredentials(req: http.IncomingMessage, body: URLSearchParams): { id?: string; secret?: string } {
    const header = req.headers.authorization;
    if (header?.startsWith('Basic ')) {
      const [id, secret] = Buffer.from(header.slice(6), 'base64').toString('utf8').split(':');
      const decode = (v: string | undefined) => (v === undefined ? undefined : decodeURIComponent(v.replace(/\+/g, ' ')));
      return { id: decode(id), secret: decode(secret) };
    }
    return { id: body.get('client_id') ?? undefined, secret: body.get('client_secret') ?? undefined };
  }

  /** Checks a token request; returns the redeemed code or an OAuth error. */
  function redeem(provider: 'google' | 'github', req: http.IncomingMessage, body: URLSearchParams): IssuedCode | { error: string; error_description: string; status: number } {
    const client = fake[provider];
    const credentials = clientCredentials(req, body);
    if (credentials.id !== client.clientId || credentials.secret !== client.clientSecret) {
      return { status: 401, error: provider === 'github' ? 'incorrect_client_credentials' : 'invalid_client', error_description: 'client authentication failed' };
    }
    if (body.get('grant_type') !== 'authorization_code' && provider === 'google') return { status: 400, error: 'unsupported_grant_type', error_description: 'expected authorization_code' };
    const code = body.get('code') ?? '';
    const issued = codes.get(code);
    // A code is spent by any attempt to redeem it, right or wrong.
    codes.delete(code);
    const badCode = provider === 'github' ? 'bad_verification_code' : 'invalid_grant';
    if (!issued || issued.provider !== provider || issued.expiresAt < Date.now()) return { status: 400, error: badCode, error_description: 'The code passed is incorrect or expired.' };
    if (body.get('redirect_uri') !== issued.redirectUri) return { status: 400, error: provider === 'github' ? 'redirect_uri_mismatch' : 'invalid_grant', error_description: 'redirect_uri does not match the authorization request' };
    const verifier = body.get('code_verifier') ?? '';
    const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
    if (!verifier || challenge !== issued.codeChallenge) return { status: 400, error: badCode, error_description: 'code_verifier does not match the code_challenge' };
    return issued;
  }

  async function googleToken(req: http.IncomingMessage, body: URLSearchParams, res: http.ServerResponse) {
    const result = redeem('google', req, body);
    if ('error' in result) return send(res, result.status, { error: result.error, error_description: result.error_description });
    const user = result.user as FakeGoogleUser;
    const accessToken = `ya29.${crypto.randomBytes(16).toString('hex')}`;
    accessTokens.set(accessToken, result);
    const claims: Record<string, unknown> = { azp: result.clientId, name: user.name };
    if (!user.emailOnlyInUserinfo) Object.assign(claims, { email: user.email, email_verified: user.email_verified });
    if (result.nonce) claims.nonce = result.nonce;
    const idToken = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', kid: jwk.kid!, typ: 'JWT' })
      .setIssuer(url)
      .setAudience(result.clientId)
      .setSubject(user.sub)
      .setIssuedAt()
      .setExpirationTime('1h')
      .sign(fake.signWithUnknownKey ? rogue.privateKey : privateKey);
    send(res, 200, { access_token: accessToken, token_type: 'Bearer', expires_in: 3599, scope: result.scope, id_token: idToken });
  }

  function githubToken(req: http.IncomingMessage, body: URLSearchParams, res: http.ServerResponse) {
    const result = redeem('github', req, body);
    const wantsJson = req.headers.accept?.includes('application/json');
    const reply = (payload: Record<string, string>) =>
      wantsJson ? send(res, 200, payload) : (res.writeHead(200, { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' }), res.end(new URLSearchParams(payload).toString()));
    // GitHub answers token errors with 200 and an error member.
    if ('error' in result) return reply({ error: result.error, error_description: result.error_description, error_uri: 'https://docs.github.com/apps/oauth' });
    const accessToken = `gho_${crypto.randomBytes(18).toString('hex')}`;
    accessTokens.set(accessToken, result);
    reply({ access_token: accessToken, token_type: 'bearer', scope: result.scope.split(' ').join(',') });
  }

  function bearer(req: http.IncomingMessage, provider: 'google' | 'github'): IssuedCode | undefined {
    const match = /^(?:Bearer|token) (\S+)$/i.exec(req.headers.authorization ?? '');
    const issued = match ? accessTokens.get(match[1]!) : undefined;
    return issued?.provider === provider ? issued : undefined;
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const requestUrl = new URL(req.url ?? '/', url);
    fake.requests.push(requestUrl.pathname);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
    const route = `${req.method} ${requestUrl.pathname}`;

    switch (route) {
      case 'GET /.well-known/openid-configuration':
        return send(res, 200, {
          issuer: url,
          authorization_endpoint: `${url}/authorize`,
          token_endpoint: `${url}/token`,
          userinfo_endpoint: `${url}/userinfo`,
          jwks_uri: `${url}/jwks`,
          response_types_supported: ['code'],
          subject_types_supported: ['public'],
          id_token_signing_alg_values_supported: ['RS256'],
          scopes_supported: ['openid', 'email', 'profile'],
          token_endpoint_auth_methods_supported: ['client_secret_post', 'client_secret_basic'],
          code_challenge_methods_supported: ['plain', 'S256'],
          claims_supported: ['sub', 'email', 'email_verified', 'name', 'iss', 'aud', 'iat', 'exp', 'nonce'],
        });
      case 'GET /jwks':
        return send(res, 200, { keys: [jwk] });
      case 'GET /authorize':
        return authorize('google', requestUrl.searchParams, res);
      case 'POST /token':
        return googleToken(req, body, res);
      case 'GET /userinfo': {
        const issued = bearer(req, 'google');
        if (!issued) return send(res, 401, { error: 'invalid_token' }, { 'www-authenticate': 'Bearer error="invalid_token"' });
        const user = issued.user as FakeGoogleUser;
        return send(res, 200, { sub: user.sub, email: user.email, email_verified: user.email_verified, name: user.name });
      }
      case 'GET /login/oauth/authorize':
        return authorize('github', requestUrl.searchParams, res);
      case 'POST /login/oauth/access_token':
        return githubToken(req, body, res);
      case 'GET /user':
      case 'GET /user/emails': {
        // GitHub's API refuses requests without a User-Agent.
        if (!req.headers['user-agent']) return send(res, 403, { message: 'Request forbidden by administrative rules. Please make sure your request has a User-Agent header' });
        const issued = bearer(req, 'github');
        if (!issued) return send(res, 401, { message: 'Requires authentication', documentation_url: 'https://docs.github.com/rest' });
        const user = issued.user as FakeGitHubUser;
        if (requestUrl.pathname === '/user') return send(res, 200, { login: user.login, id: user.id, name: user.name ?? null, email: null, avatar_url: `${url}/avatars/${user.id}` });
        if (!issued.scope.split(' ').includes('user:email')) return send(res, 404, { message: 'Not Found' });
        return send(res, 200, user.emails.map((e) => ({ ...e, visibility: e.primary ? 'private' : null })));
      }
      default:
        return send(res, 404, { error: 'not_found', path: requestUrl.pathname });
    }
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error: unknown) => send(res, 500, { error: 'server_error', error_description: String(error) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return fake;
}
