import { Type } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { errorResponses } from '../../platform/http/schemas.ts';
import { clientInfo, setSessionCookie, TokenPairSchema } from './routes.ts';
import { MAGIC_LINK, magicLinkService } from './magic-link.ts';
import { OAUTH, OAUTH_STATE_COOKIE, oauthService } from './oauth.ts';

const Email = Type.String({ format: 'email', maxLength: 254 });
const MfaCode = Type.String({ maxLength: 16, description: 'current 6-digit TOTP code; required when the user has two-factor authentication on' });
const Provider = Type.Object({ provider: Type.String({ maxLength: 32, description: 'google or github', examples: ['google', 'github'] }) });
/** A 302 without a body; the OpenAPI document shows its Location header. */
const Redirect = (description: string) => Type.Null({ description, headers: { Location: Type.String({ format: 'uri' }) } });

/** Routes of the passwordless sign-in methods: emailed link or code, and Google / GitHub. */
export function signInRoutes(app: App, ctx: AppContext): void {
  const tags = ['identity'];
  const magic = magicLinkService(ctx);
  const social = oauthService(ctx);
  const minutes = (seconds: number) => seconds / 60;

  app.post(
    '/api/auth/magic-link',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Email a sign-in link and code',
        description:
          `Emails a one-time link (\`APP_URL/auth/magic?token=…\`) and a 6-digit code, both valid ${minutes(MAGIC_LINK.ttlSeconds)} minutes and once; ` +
          'a new request replaces the previous link and code. Only existing users can sign in this way: for an unknown address nothing is created or sent, ' +
          'and the answer is the same 200 either way. At most ' +
          `${MAGIC_LINK.sendsPerEmail} requests per address and ${MAGIC_LINK.sendsPerClient} per client address every ${minutes(MAGIC_LINK.sendWindowSeconds)} minutes, ` +
          'counted for every address alike (429 with Retry-After).',
        body: Type.Object({ email: Email }),
        response: { 200: Type.Object({ success: Type.Literal(true) }), ...errorResponses(400, 429) },
      },
    },
    async (request) => {
      await magic.send(request.body.email, clientInfo(request));
      return { success: true as const };
    },
  );

  app.post(
    '/api/auth/magic-link/verify',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Sign in with an emailed link or code',
        description:
          'Send either `token` (from the link) or `email` and `code`. Returns a token pair and sets the `sb-access-token` cookie, like password sign-in; ' +
          'the session method is `magic_link`, and the email counts as confirmed. A code dies after ' +
          `${MAGIC_LINK.maxCodeAttempts} wrong attempts (the link keeps working). Invalid, used, replaced or expired links and codes answer 401. ` +
          'With two-factor authentication on, send `mfa_code` too; without it the answer is 401 `mfa_required` and the link or code stays usable. ' +
          'Failed attempts are limited per client address (429 with Retry-After).',
        body: Type.Object({
          token: Type.Optional(Type.String({ minLength: 10, maxLength: 256, description: 'the `token` parameter of the emailed link' })),
          email: Type.Optional(Email),
          code: Type.Optional(Type.String({ pattern: '^[0-9]{6}$', description: 'the emailed 6-digit code, with `email`' })),
          mfa_code: Type.Optional(MfaCode),
        }),
        response: { 200: TokenPairSchema, ...errorResponses(400, 401, 429) },
      },
    },
    async (request, reply) => {
      const pair = await magic.verify(request.body, clientInfo(request));
      setSessionCookie(ctx, reply, pair);
      return pair;
    },
  );

  app.get(
    '/api/auth/oauth/:provider/authorize',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Start signing in with Google or GitHub',
        description:
          "Redirects (302) to the provider's consent page, with a single-use `state` (valid " +
          `${minutes(OAUTH.stateSeconds)} minutes) and a PKCE S256 challenge; scopes \`openid email profile\` (google) or \`read:user user:email\` (github). ` +
          `Sets the \`${OAUTH_STATE_COOKIE}\` cookie that ties the sign-in to this browser; open this URL in the browser, not from a script. ` +
          'The provider sends the browser back to `BASE_URL/api/auth/oauth/{provider}/callback` (register that URL with the provider). ' +
          '`redirect_to` (an app path such as `/dashboard`, or a URL under APP_URL) is where the browser lands afterwards; other addresses are refused (400). ' +
          'A provider without OAUTH_<PROVIDER>_CLIENT_ID and _CLIENT_SECRET answers 404.',
        params: Provider,
        querystring: Type.Object({ redirect_to: Type.Optional(Type.String({ maxLength: 2000, description: 'app path or URL under APP_URL; default APP_URL' })) }),
        response: { 302: Redirect("to the provider's consent page (Location header)"), ...errorResponses(400, 404, 429, 502) },
      },
    },
    async (request, reply) => {
      const started = await social.start(request.params.provider, request.query.redirect_to, clientInfo(request));
      reply.setCookie(OAUTH_STATE_COOKIE, started.state, {
        httpOnly: true,
        // Lax: the provider's redirect back is a top-level GET navigation, which carries it.
        sameSite: 'lax',
        secure: ctx.config.baseUrl.startsWith('https:'),
        path: '/api/auth/oauth',
        maxAge: OAUTH.stateSeconds,
      });
      return reply.redirect(started.url, 302);
    },
  );

  app.get(
    '/api/auth/oauth/:provider/callback',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Finish signing in with Google or GitHub',
        description:
          'The provider redirects the browser here. Checks the state (unknown, expired, used, or started in another browser: 400 `invalid OAuth state`), ' +
          'redeems the code with the PKCE verifier and reads the verified email (Google: the validated ID token; GitHub: the verified primary address). ' +
          'The user is the one already linked to this provider account, else the user with that email (now linked), else a new user without a password. ' +
          'Then sets the `sb-access-token` cookie and redirects (302) to `redirect_to` or APP_URL; the session method is `oauth:<provider>`. ' +
          'For a user with two-factor authentication on, sign-in is not completed: no cookie is set and the browser goes to `APP_URL/?mfa_required=1` ' +
          '(sign in with a method that takes the TOTP code). A refusal at the provider (`error=access_denied`) or a rejected code is 400; an unreachable provider 502.',
        params: Provider,
        querystring: Type.Object({
          code: Type.Optional(Type.String({ maxLength: 2048 })),
          state: Type.Optional(Type.String({ maxLength: 256 })),
          error: Type.Optional(Type.String({ maxLength: 256, description: 'set by the provider when sign-in was refused' })),
          error_description: Type.Optional(Type.String({ maxLength: 2048 })),
        }),
        response: { 302: Redirect('to redirect_to or APP_URL (Location header)'), ...errorResponses(400, 404, 502) },
      },
    },
    async (request, reply) => {
      const bound = request.cookies[OAUTH_STATE_COOKIE];
      reply.clearCookie(OAUTH_STATE_COOKIE, { path: '/api/auth/oauth' });
      // The library validates the parameters exactly as the provider sent them.
      const callback = new URL(request.url, 'http://callback.invalid').searchParams;
      const result = await social.finish(request.params.provider, callback, bound, clientInfo(request));
      if (result.kind === 'signed_in') setSessionCookie(ctx, reply, result.pair);
      return reply.redirect(result.redirectTo, 302);
    },
  );
}
