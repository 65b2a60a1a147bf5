import type { FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf, SESSION_COOKIE, type UserActor } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { errorResponses } from '../../platform/http/schemas.ts';
import { identityService, type ClientInfo, type TokenPair } from './service.ts';
import { mfaService } from './mfa.ts';
import { ACCESS_TOKEN_SECONDS } from './tokens.ts';

const Email = Type.String({ format: 'email', maxLength: 254 });
const Password = Type.String({ minLength: 1, maxLength: 1024 });
const UserRef = Type.Object({ id: Type.String(), email: Type.String() });
export const TokenPairSchema = Type.Object({
  access_token: Type.String({ description: 'JWT, valid expires_in seconds' }),
  refresh_token: Type.String({ description: 'opaque; single use, rotated on every refresh' }),
  expires_in: Type.Integer(),
  expires_at: Type.Integer({ description: 'Unix seconds' }),
  user: UserRef,
});
const RefreshBody = Type.Object({ refresh_token: Type.String({ minLength: 1, maxLength: 512 }) });
const Success = Type.Object({ success: Type.Literal(true) });
const MfaCode = Type.Object({ code: Type.String({ pattern: '^[0-9]{6}$', description: 'current 6-digit TOTP code' }) });

export function clientInfo(request: FastifyRequest): ClientInfo {
  return { userAgent: request.headers['user-agent'], ip: request.ip };
}

export function userActor(request: FastifyRequest): UserActor {
  const actor = actorOf(request);
  if (actor.kind !== 'user') throw new AppError('unauthorized', 'Sign in as a user');
  return actor;
}

/** The web app's cookie: the same access token, HttpOnly so page scripts never see it. */
export function setSessionCookie(ctx: AppContext, reply: FastifyReply, pair: Pick<TokenPair, 'access_token'>): void {
  reply.setCookie(SESSION_COOKIE, pair.access_token, {
    httpOnly: true,
    sameSite: 'lax',
    secure: ctx.config.baseUrl.startsWith('https:'),
    path: '/',
    maxAge: ACCESS_TOKEN_SECONDS,
  });
}

export function identityRoutes(app: App, ctx: AppContext): void {
  const identity = identityService(ctx);
  const tags = ['identity'];

  app.post(
    '/api/auth/sign-up',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Create a user',
        description:
          'With AUTH_EMAIL_CONFIRM=true the answer is `needs_email_confirm: true` and a confirmation link is emailed (confirm with POST /api/auth/confirm); the answer is the same whether or not the email already has an account. Otherwise the user is signed in at once.',
        body: Type.Object({ email: Email, password: Password }),
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            data: Type.Object({
              needs_email_confirm: Type.Boolean(),
              access_token: Type.Optional(Type.String()),
              refresh_token: Type.Optional(Type.String()),
              expires_in: Type.Optional(Type.Integer()),
              expires_at: Type.Optional(Type.Integer()),
              token_type: Type.Optional(Type.String()),
              user: Type.Object({ id: Type.String(), email: Type.String(), user_metadata: Type.Record(Type.String(), Type.Unknown()) }),
            }),
          }),
          ...errorResponses(400, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const data = await identity.signUp(request.body, clientInfo(request));
      if (!data.needs_email_confirm) setSessionCookie(ctx, reply, data);
      return { success: true as const, data };
    },
  );

  app.post(
    '/api/auth/sign-in',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Sign in with email and password',
        description:
          'Returns a token pair and sets the `sb-access-token` cookie. With two-factor authentication on, send `mfa_code`; without it the answer is 401 `mfa_required`. Failed attempts are limited per email and per client address (429 with Retry-After).',
        body: Type.Object({ email: Email, password: Password, mfa_code: Type.Optional(Type.String({ maxLength: 16 })) }),
        response: { 200: TokenPairSchema, ...errorResponses(400, 401, 403, 429) },
      },
    },
    async (request, reply) => {
      const pair = await identity.signIn(request.body, clientInfo(request));
      setSessionCookie(ctx, reply, pair);
      return pair;
    },
  );

  app.post(
    '/api/auth/refresh',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Exchange a refresh token for a new pair',
        description: 'Each refresh token works once. Using one again revokes its whole session (reuse detection).',
        body: RefreshBody,
        response: { 200: TokenPairSchema, ...errorResponses(400, 401) },
      },
    },
    async (request, reply) => {
      const pair = await identity.refresh(request.body.refresh_token);
      setSessionCookie(ctx, reply, pair);
      return pair;
    },
  );

  app.post(
    '/api/auth/sign-out',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Revoke the session of a refresh token',
        description: 'Every access and refresh token of that session stops working at once. Unknown tokens are accepted (already signed out).',
        body: RefreshBody,
        response: { 200: Success, ...errorResponses(400) },
      },
    },
    async (request, reply) => {
      await identity.signOut(request.body.refresh_token);
      reply.clearCookie(SESSION_COOKIE, { path: '/' });
      return { success: true as const };
    },
  );

  app.post(
    '/api/auth/confirm',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Confirm an email address',
        description: 'Takes the token from the confirmation email (valid 24 hours, once) and signs the user in.',
        body: Type.Object({ token: Type.String({ minLength: 10, maxLength: 256 }) }),
        response: { 200: TokenPairSchema, ...errorResponses(400) },
      },
    },
    async (request, reply) => {
      const pair = await identity.confirmEmail(request.body.token, clientInfo(request));
      setSessionCookie(ctx, reply, pair);
      return pair;
    },
  );

  const Session = Type.Object({
    id: Type.String(),
    method: Type.String({ description: 'how the session signed in: password, magic_link, oauth:<provider>, email_confirm' }),
    user_agent: Type.Union([Type.String(), Type.Null()]),
    ip: Type.Union([Type.String(), Type.Null()]),
    created_at: Type.String(),
    last_used_at: Type.String({ description: 'last refresh' }),
    expires_at: Type.String(),
    current: Type.Boolean({ description: 'the session of this request' }),
  });

  app.get(
    '/api/desktop-app/sessions',
    {
      config: { auth: ['jwt', 'session'] },
      schema: { tags, summary: "The caller's active sessions", response: { 200: Type.Object({ success: Type.Literal(true), sessions: Type.Array(Session) }), ...errorResponses(401) } },
    },
    async (request) => {
      const actor = userActor(request);
      return { success: true as const, sessions: await identity.listSessions(actor.userId, actor.sessionId) };
    },
  );

  app.delete(
    '/api/desktop-app/sessions/:sessionId',
    {
      config: { auth: ['jwt', 'session'] },
      schema: {
        tags,
        summary: 'Revoke one of your sessions',
        params: Type.Object({ sessionId: Type.String({ format: 'uuid' }) }),
        response: { 200: Success, ...errorResponses(401, 404) },
      },
    },
    async (request) => {
      await identity.revokeOwnSession(userActor(request).userId, request.params.sessionId);
      return { success: true as const };
    },
  );

  const mfa = mfaService(ctx);
  app.post(
    '/api/auth/mfa/enroll',
    {
      config: { auth: ['jwt', 'session'] },
      schema: {
        tags,
        summary: 'Start TOTP two-factor enrollment',
        description: 'Returns a new secret and its otpauth:// URI for an authenticator app. MFA turns on after POST /api/auth/mfa/verify with a current code.',
        response: { 200: Type.Object({ success: Type.Literal(true), secret: Type.String(), otpauth_url: Type.String() }), ...errorResponses(401, 409) },
      },
    },
    async (request) => ({ success: true as const, ...(await mfa.enroll(userActor(request).userId)) }),
  );

  app.post(
    '/api/auth/mfa/verify',
    {
      config: { auth: ['jwt', 'session'] },
      schema: { tags, summary: 'Turn two-factor authentication on with a current code', body: MfaCode, response: { 200: Success, ...errorResponses(400, 401) } },
    },
    async (request) => {
      await mfa.verify(userActor(request).userId, request.body.code);
      return { success: true as const };
    },
  );

  app.post(
    '/api/auth/mfa/disable',
    {
      config: { auth: ['jwt', 'session'] },
      schema: { tags, summary: 'Turn two-factor authentication off (needs a current code)', body: MfaCode, response: { 200: Success, ...errorResponses(400, 401) } },
    },
    async (request) => {
      await mfa.disable(userActor(request).userId, request.body.code);
      return { success: true as const };
    },
  );
}
