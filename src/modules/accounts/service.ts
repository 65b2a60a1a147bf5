import { sql } from 'kysely';
import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import { AppError } from '../../platform/http/errors.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { randomToken, sha256Hex } from '../../platform/crypto/tokens.ts';
import type { Role } from './tables.ts';
import { isUuid } from '../../platform/ids.ts';

/** Any of the spec's three names for a workspace (ARCHITECTURE "Conventions"). */
export interface AccountRef {
  accountId?: string;
  accountSlug?: string;
  teamId?: string;
}

export interface Account {
  id: string;
  slug: string;
  name: string;
}

export interface Access {
  account: Account;
  /** The caller's role; API keys act with the rights of a member of their own workspace. */
  role: Role | 'apiKey';
}

const ROLE_RANK: Record<Role, number> = { member: 1, admin: 2, owner: 3 };
const INVITATION_SECONDS = 7 * 24 * 3600;

export function slugify(name: string): string {
  const base = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return base || 'workspace';
}

export class AccountsService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  async findAccount(ref: AccountRef): Promise<Account | undefined> {
    const id = ref.accountId ?? ref.teamId;
    if (id !== undefined) {
      if (!isUuid(id)) return undefined;
      return this.db.kysely.selectFrom('accounts').select(['id', 'slug', 'name']).where('id', '=', id).executeTakeFirst();
    }
    if (ref.accountSlug !== undefined) {
      return this.db.kysely.selectFrom('accounts').select(['id', 'slug', 'name']).where('slug', '=', ref.accountSlug).executeTakeFirst();
    }
    return undefined;
  }

  /**
   * The workspace the actor may act in, with its role. Another workspace is
   * "not found", never its data: a non-member cannot tell it exists. An API
   * key reaches only its own workspace; without a reference it means that one.
   */
  async access(actor: Actor, ref: AccountRef, minimum: Role = 'member'): Promise<Access> {
    const given = ref.accountId ?? ref.teamId ?? ref.accountSlug;
    if (actor.kind === 'apiKey') {
      const account = given === undefined ? await this.findAccount({ accountId: actor.accountId }) : await this.findAccount(ref);
      if (!account || account.id !== actor.accountId) throw new AppError('not_found', 'Workspace not found');
      if (minimum !== 'member') throw new AppError('forbidden', 'API keys cannot do this; sign in as a workspace owner or admin');
      return { account, role: 'apiKey' };
    }
    if (actor.kind !== 'user') throw new AppError('unauthorized', 'A signed-in user or API key is required');
    if (given === undefined) throw new AppError('validation_failed', 'A workspace is required', [{ field: 'accountSlug', message: 'is required' }]);
    const account = await this.findAccount(ref);
    const membership = account
      ? await this.db.kysely
          .selectFrom('memberships')
          .select(['role'])
          .where('account_id', '=', account.id)
          .where('user_id', '=', actor.userId)
          .executeTakeFirst()
      : undefined;
    const row = account && membership ? { ...account, role: membership.role } : undefined;
    if (!row) throw new AppError('not_found', 'Workspace not found');
    if (ROLE_RANK[row.role] < ROLE_RANK[minimum]) {
      throw new AppError('forbidden', `This needs the ${minimum} role or higher in this workspace; you are ${row.role === 'admin' ? 'an' : 'a'} ${row.role}`);
    }
    return { account: { id: row.id, slug: row.slug, name: row.name }, role: row.role };
  }

  async listForUser(userId: string) {
    const rows = await this.db.kysely
      .selectFrom('accounts as a')
      .innerJoin('memberships as m', 'm.account_id', 'a.id')
      .select(['a.id', 'a.slug', 'a.name', 'm.role', 'a.created_at'])
      .where('m.user_id', '=', userId)
      .orderBy('a.name')
      .execute();
    return rows.map((r) => ({ id: r.id, slug: r.slug, name: r.name, role: r.role, created_at: r.created_at.toISOString() }));
  }

  /** Creates a workspace with `userId` as owner, with a unique slug derived from the name. */
  async createAccount(trx: Tx, userId: string, name: string): Promise<Account> {
    const base = slugify(name);
    for (let attempt = 0; attempt < 20; attempt++) {
      const slug = attempt === 0 ? base : `${base}-${randomToken(4).toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 5) || attempt}`;
      const account = await trx
        .insertInto('accounts')
        .values({ slug, name, created_by: userId })
        .onConflict((oc) => oc.column('slug').doNothing())
        .returning(['id', 'slug', 'name'])
        .executeTakeFirst();
      if (account) {
        await trx.insertInto('memberships').values({ account_id: account.id, user_id: userId, role: 'owner' }).execute();
        return account;
      }
    }
    throw new Error('could not find a free workspace slug');
  }

  /**
   * POST /api/onboarding/start: one workspace per clientToken, also when the
   * same request arrives many times at once (the token's row is the lock).
   */
  async onboardingStart(actor: Actor, input: { companyName: string; clientToken: string; accountSlug?: string }): Promise<{ accountId: string; slug: string }> {
    if (actor.kind !== 'user') throw new AppError('unauthorized', 'Sign in to start onboarding');
    if (input.accountSlug !== undefined) {
      const { account } = await this.access(actor, { accountSlug: input.accountSlug }).catch((error: unknown) => {
        if (error instanceof AppError && error.code === 'not_found') throw new AppError('forbidden', 'You are not a member of this workspace');
        throw error;
      });
      return { accountId: account.id, slug: account.slug };
    }
    const existing = await this.onboardingFor(input.clientToken, actor.userId);
    if (existing) return existing;
    return this.db.transaction(async (trx) => {
      // Concurrent requests with one clientToken take turns here; the later
      // ones then find the workspace the first one created. Lowercased: the
      // column is a uuid, so one token in two letter cases is one key.
      await sql`select pg_advisory_xact_lock(hashtext(lower(${input.clientToken})))`.execute(trx);
      const again = await this.onboardingFor(input.clientToken, actor.userId, trx);
      if (again) return again;
      const account = await this.createAccount(trx, actor.userId, input.companyName);
      await trx.insertInto('onboarding_starts').values({ client_token: input.clientToken, user_id: actor.userId, account_id: account.id }).execute();
      return { accountId: account.id, slug: account.slug };
    });
  }

  private async onboardingFor(clientToken: string, userId: string, trx?: Tx) {
    const row = await (trx ?? this.db.kysely)
      .selectFrom('onboarding_starts as o')
      .innerJoin('accounts as a', 'a.id', 'o.account_id')
      .select(['o.user_id', 'a.id', 'a.slug'])
      .where('o.client_token', '=', clientToken)
      .executeTakeFirst();
    if (!row) return undefined;
    if (row.user_id !== userId) throw new AppError('conflict', 'This clientToken was already used by another user; generate a new one');
    return { accountId: row.id, slug: row.slug };
  }

  async listMembers(actor: Actor, ref: AccountRef) {
    const { account } = await this.access(actor, ref);
    const rows = await this.db.kysely
      .selectFrom('memberships as m')
      .innerJoin('users as u', 'u.id', 'm.user_id')
      .select(['u.id as user_id', 'u.email', 'm.role', 'm.created_at'])
      .where('m.account_id', '=', account.id)
      .orderBy('m.created_at')
      .execute();
    return rows.map((r) => ({ user_id: r.user_id, email: r.email, role: r.role, joined_at: r.created_at.toISOString() }));
  }

  /** Owners and admins invite; only owners can invite owners. The link is emailed. */
  async invite(actor: Actor, ref: AccountRef, input: { email: string; role: Role }) {
    const access = await this.access(actor, ref, 'admin');
    if (input.role === 'owner' && access.role !== 'owner') throw new AppError('forbidden', 'Only owners can invite owners');
    const token = randomToken(32);
    const expiresAt = new Date(Date.now() + INVITATION_SECONDS * 1000);
    const invitation = await this.db.transaction(async (trx) => {
      const row = await trx
        .insertInto('one_time_tokens')
        .values({
          purpose: 'invitation',
          email: input.email,
          user_id: null,
          token_hash: sha256Hex(token),
          code_hash: null,
          payload: JSON.stringify({ accountId: access.account.id, role: input.role, invitedBy: actor.userId }),
          expires_at: expiresAt,
          used_at: null,
        })
        .returning(['id'])
        .executeTakeFirstOrThrow();
      await this.ctx.mailer.send(trx, {
        to: input.email,
        kind: 'invitation',
        subject: `You are invited to ${access.account.name} on Hark`,
        text: `You have been invited to join ${access.account.name} as ${input.role}.\n\nAccept: ${this.ctx.config.appUrl}/invitations/accept?token=${encodeURIComponent(token)}\n\nOr send this token to POST /api/invitations/accept while signed in: ${token}\n\nThe invitation expires in 7 days.`,
      });
      return row;
    });
    return { id: invitation.id, email: input.email, role: input.role, expires_at: expiresAt.toISOString() };
  }

  /** The signed-in user joins with the invited role; the invitation must be for their email. */
  async acceptInvitation(actor: Actor, token: string) {
    if (actor.kind !== 'user') throw new AppError('unauthorized', 'Sign in to accept an invitation');
    return this.db.transaction(async (trx) => {
      const user = await trx.selectFrom('users').select(['email']).where('id', '=', actor.userId).executeTakeFirstOrThrow();
      const invitation = await trx
        .selectFrom('one_time_tokens')
        .select(['id', 'email', 'payload'])
        .where('token_hash', '=', sha256Hex(token))
        .where('purpose', '=', 'invitation')
        .where('used_at', 'is', null)
        .where('expires_at', '>', new Date())
        .forUpdate()
        .executeTakeFirst();
      if (!invitation) throw new AppError('not_found', 'Invitation not found, expired or already used');
      if (invitation.email.toLowerCase() !== user.email.toLowerCase()) throw new AppError('forbidden', 'This invitation was sent to another email address');
      const { accountId, role: invited } = invitation.payload as { accountId: string; role: Role };
      await trx
        .insertInto('memberships')
        .values({ account_id: accountId, user_id: actor.userId, role: invited })
        .onConflict((oc) => oc.columns(['account_id', 'user_id']).doNothing())
        .execute();
      // An existing member keeps their role; answer with the role actually held.
      const { role } = await trx
        .selectFrom('memberships')
        .select(['role'])
        .where('account_id', '=', accountId)
        .where('user_id', '=', actor.userId)
        .executeTakeFirstOrThrow();
      await trx.updateTable('one_time_tokens').set({ used_at: new Date() }).where('id', '=', invitation.id).execute();
      const account = await trx.selectFrom('accounts').select(['id', 'slug', 'name']).where('id', '=', accountId).executeTakeFirstOrThrow();
      return { account, role };
    });
  }

  /**
   * Owners change anyone's role; admins change members and admins but never
   * touch owners. A workspace always keeps at least one owner.
   */
  async changeRole(actor: Actor, ref: AccountRef, userId: string, role: Role) {
    const access = await this.access(actor, ref, 'admin');
    return this.db.transaction(async (trx) => {
      const target = await this.lockedMember(trx, access.account.id, userId);
      if ((target.role === 'owner' || role === 'owner') && access.role !== 'owner') throw new AppError('forbidden', 'Only owners can grant or change the owner role');
      if (target.role === 'owner' && role !== 'owner') await this.assertAnotherOwner(trx, access.account.id, userId);
      await trx.updateTable('memberships').set({ role }).where('account_id', '=', access.account.id).where('user_id', '=', userId).execute();
      return { user_id: userId, role };
    });
  }

  /** Admins remove members and admins, owners anyone; members may leave. Never the last owner. */
  async removeMember(actor: Actor, ref: AccountRef, userId: string) {
    const leaving = actor.kind === 'user' && actor.userId === userId;
    const access = await this.access(actor, ref, leaving ? 'member' : 'admin');
    await this.db.transaction(async (trx) => {
      const target = await this.lockedMember(trx, access.account.id, userId);
      if (target.role === 'owner' && access.role !== 'owner') throw new AppError('forbidden', 'Only owners can remove an owner');
      if (target.role === 'owner') await this.assertAnotherOwner(trx, access.account.id, userId);
      await trx.deleteFrom('memberships').where('account_id', '=', access.account.id).where('user_id', '=', userId).execute();
    });
  }

  private async lockedMember(trx: Tx, accountId: string, userId: string) {
    if (!isUuid(userId)) throw new AppError('not_found', 'Member not found');
    // Lock every owner row too, so two concurrent demotions cannot both pass the last-owner check.
    const rows = await trx
      .selectFrom('memberships')
      .select(['user_id', 'role'])
      .where('account_id', '=', accountId)
      .where((eb) => eb.or([eb('user_id', '=', userId), eb('role', '=', 'owner')]))
      .forUpdate()
      .execute();
    const target = rows.find((r) => r.user_id === userId);
    if (!target) throw new AppError('not_found', 'Member not found');
    return target;
  }

  private async assertAnotherOwner(trx: Tx, accountId: string, userId: string) {
    const others = await trx
      .selectFrom('memberships')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('account_id', '=', accountId)
      .where('role', '=', 'owner')
      .where('user_id', '!=', userId)
      .executeTakeFirstOrThrow();
    if (Number(others.n) === 0) throw new AppError('conflict', 'A workspace needs at least one owner; make someone else owner first');
  }
}

export const accountsService = perContext((ctx) => new AccountsService(ctx));
