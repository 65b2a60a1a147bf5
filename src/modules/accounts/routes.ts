import { Type } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { errorResponses } from '../../platform/http/schemas.ts';
import { accountsService } from './service.ts';

const RoleSchema = Type.Union([Type.Literal('owner'), Type.Literal('admin'), Type.Literal('member')]);
const SlugParams = Type.Object({ accountSlug: Type.String({ minLength: 1, maxLength: 100 }) });
const MemberParams = Type.Object({ accountSlug: Type.String({ minLength: 1, maxLength: 100 }), userId: Type.String({ format: 'uuid' }) });
const Member = Type.Object({ user_id: Type.String(), email: Type.String(), role: RoleSchema, joined_at: Type.String() });
const USER = ['session', 'jwt'] as const;

export function accountRoutes(app: App, ctx: AppContext): void {
  const accounts = accountsService(ctx);
  const tags = ['workspaces'];

  app.post(
    '/api/onboarding/start',
    {
      config: { auth: ['session'] },
      schema: {
        tags: ['onboarding'],
        summary: 'Create (or adopt) the workspace being onboarded',
        description:
          'Without accountSlug a workspace is created with the caller as owner, exactly once per clientToken: repeating the request (also concurrently) returns the same workspace. With accountSlug the caller must be a member of that workspace (403 otherwise).',
        body: Type.Object({
          companyName: Type.String({ minLength: 1, maxLength: 100 }),
          website: Type.Optional(Type.String({ maxLength: 500 })),
          assistantName: Type.Optional(Type.String({ maxLength: 100 })),
          purpose: Type.Optional(Type.String({ maxLength: 2000 })),
          clientToken: Type.String({ format: 'uuid' }),
          accountSlug: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
        }),
        response: { 200: Type.Object({ accountId: Type.String({ format: 'uuid' }), slug: Type.String() }), ...errorResponses(400, 401, 403, 409) },
      },
    },
    async (request) => accounts.onboardingStart(actorOf(request), request.body),
  );

  app.get(
    '/api/accounts',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: "The caller's workspaces",
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            accounts: Type.Array(Type.Object({ id: Type.String(), slug: Type.String(), name: Type.String(), role: RoleSchema, created_at: Type.String() })),
          }),
          ...errorResponses(401),
        },
      },
    },
    async (request) => {
      const actor = actorOf(request);
      return { success: true as const, accounts: actor.kind === 'user' ? await accounts.listForUser(actor.userId) : [] };
    },
  );

  app.get(
    '/api/accounts/:accountSlug/members',
    {
      config: { auth: USER },
      schema: { tags, summary: 'Members of a workspace (any member)', params: SlugParams, response: { 200: Type.Object({ success: Type.Literal(true), members: Type.Array(Member) }), ...errorResponses(401, 404) } },
    },
    async (request) => ({ success: true as const, members: await accounts.listMembers(actorOf(request), { accountSlug: request.params.accountSlug }) }),
  );

  app.post(
    '/api/accounts/:accountSlug/invitations',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: 'Invite someone by email (owner or admin)',
        description: 'Emails a link valid 7 days. Only owners can invite owners. The invitee accepts with POST /api/invitations/accept while signed in with that email.',
        params: SlugParams,
        body: Type.Object({ email: Type.String({ format: 'email', maxLength: 254 }), role: RoleSchema }),
        response: {
          200: Type.Object({ success: Type.Literal(true), invitation: Type.Object({ id: Type.String(), email: Type.String(), role: RoleSchema, expires_at: Type.String() }) }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => ({ success: true as const, invitation: await accounts.invite(actorOf(request), { accountSlug: request.params.accountSlug }, request.body) }),
  );

  app.post(
    '/api/invitations/accept',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: 'Accept an invitation',
        body: Type.Object({ token: Type.String({ minLength: 10, maxLength: 256 }) }),
        response: {
          200: Type.Object({ success: Type.Literal(true), account: Type.Object({ id: Type.String(), slug: Type.String(), name: Type.String() }), role: RoleSchema }),
          ...errorResponses(400, 401, 403, 404),
        },
      },
    },
    async (request) => ({ success: true as const, ...(await accounts.acceptInvitation(actorOf(request), request.body.token)) }),
  );

  app.patch(
    '/api/accounts/:accountSlug/members/:userId',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: "Change a member's role",
        description: 'Owners change any role; admins change members and admins. The last owner cannot be demoted (409).',
        params: MemberParams,
        body: Type.Object({ role: RoleSchema }),
        response: { 200: Type.Object({ success: Type.Literal(true), member: Type.Object({ user_id: Type.String(), role: RoleSchema }) }), ...errorResponses(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ({
      success: true as const,
      member: await accounts.changeRole(actorOf(request), { accountSlug: request.params.accountSlug }, request.params.userId, request.body.role),
    }),
  );

  app.delete(
    '/api/accounts/:accountSlug/members/:userId',
    {
      config: { auth: USER },
      schema: {
        tags,
        summary: 'Remove a member (or leave)',
        description: 'Owners remove anyone, admins remove members and admins, anyone may remove themselves. The last owner cannot be removed (409).',
        params: MemberParams,
        response: { 200: Type.Object({ success: Type.Literal(true) }), ...errorResponses(401, 403, 404, 409) },
      },
    },
    async (request) => {
      await accounts.removeMember(actorOf(request), { accountSlug: request.params.accountSlug }, request.params.userId);
      return { success: true as const };
    },
  );
}
