import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import {
  addMember,
  bearer,
  createWorkspace,
  latestEmail,
  sessionCookie,
  signUp,
  tokenFromEmail,
  uniqueEmail,
  type Role,
  type TestUser,
  type TestWorkspace,
} from '../../../test/fixtures.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('workspaces: onboarding start, members and roles', () => {
  let rt: TestRuntime;
  before(async () => {
    rt = await startTestRuntime();
  });
  after(async () => {
    await rt?.destroy();
  });

  function start(user: TestUser, body: Record<string, unknown>) {
    return rt.app!.inject({ method: 'POST', url: '/api/onboarding/start', ...sessionCookie(user.accessToken), payload: body });
  }

  async function accountsCreatedBy(userId: string) {
    return rt.db.kysely.selectFrom('accounts').select(['id', 'slug', 'name']).where('created_by', '=', userId).execute();
  }

  async function rolesIn(accountId: string): Promise<Record<string, Role>> {
    const rows = await rt.db.kysely.selectFrom('memberships').select(['user_id', 'role']).where('account_id', '=', accountId).execute();
    return Object.fromEntries(rows.map((r) => [r.user_id, r.role]));
  }

  describe('POST /api/onboarding/start', () => {
    let user: TestUser;
    before(async () => {
      user = await signUp(rt, uniqueEmail('onboard'));
    });

    test('enforces the §8 limits with details naming the field', async () => {
      const cases: Array<[string, Record<string, unknown>]> = [
        ['companyName', { companyName: '' }],
        ['companyName', { companyName: 'x'.repeat(101) }],
        ['website', { website: 'w'.repeat(501) }],
        ['assistantName', { assistantName: 'a'.repeat(101) }],
        ['clientToken', { clientToken: 'not-a-uuid' }],
        ['clientToken', { clientToken: '12345678-1234-1234-1234-1234567890' }],
      ];
      for (const [field, override] of cases) {
        const res = await start(user, { companyName: 'Valid Co', clientToken: crypto.randomUUID(), ...override });
        assert.equal(res.statusCode, 400, `${JSON.stringify(override).slice(0, 60)}: ${res.body}`);
        const body = res.json();
        assert.equal(body.error, 'validation_failed');
        assert.equal(body.code, 400);
        assert.ok(
          body.details.some((d: { field: string }) => d.field === field),
          `expected a detail for ${field}: ${JSON.stringify(body.details)}`,
        );
      }
      for (const missing of ['companyName', 'clientToken']) {
        const body: Record<string, unknown> = { companyName: 'Valid Co', clientToken: crypto.randomUUID() };
        delete body[missing];
        const res = await start(user, body);
        assert.equal(res.statusCode, 400);
        assert.deepEqual(res.json().details, [{ field: missing, message: 'is required' }]);
      }
      assert.equal((await accountsCreatedBy(user.id)).length, 0, 'no workspace was created by a refused request');

      // The limits themselves are accepted.
      const atLimits = await start(user, {
        companyName: 'c'.repeat(100),
        website: 'https://' + 'w'.repeat(492),
        assistantName: 'a'.repeat(100),
        purpose: 'Answer the phone',
        clientToken: crypto.randomUUID(),
      });
      assert.equal(atLimits.statusCode, 200, atLimits.body);
      const one = await start(user, { companyName: 'Z', clientToken: crypto.randomUUID() });
      assert.equal(one.statusCode, 200, 'a one-character company name is allowed');
    });

    test('creates a workspace with the caller as owner', async () => {
      const owner = await signUp(rt, uniqueEmail('founder'));
      const res = await start(owner, { companyName: 'Ünïcode Bakery & Co', website: 'https://bakery.example', assistantName: 'Bea', clientToken: crypto.randomUUID() });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.deepEqual(Object.keys(body).sort(), ['accountId', 'slug']);
      assert.match(body.accountId, UUID);
      assert.match(body.slug, /^[a-z0-9][a-z0-9-]*$/);
      const created = await accountsCreatedBy(owner.id);
      assert.deepEqual(created, [{ id: body.accountId, slug: body.slug, name: 'Ünïcode Bakery & Co' }]);
      assert.deepEqual(await rolesIn(body.accountId), { [owner.id]: 'owner' });

      const list = await rt.app!.inject({ method: 'GET', url: '/api/accounts', headers: bearer(owner.accessToken) });
      assert.equal(list.statusCode, 200);
      const accounts = list.json().accounts;
      assert.equal(accounts.length, 1);
      assert.deepEqual({ ...accounts[0], created_at: undefined }, { id: body.accountId, slug: body.slug, name: 'Ünïcode Bakery & Co', role: 'owner', created_at: undefined });
    });

    test('two workspaces with the same name get different slugs', async () => {
      const a = await createWorkspace(rt, await signUp(rt), 'Same Name Ltd');
      const b = await createWorkspace(rt, await signUp(rt), 'Same Name Ltd');
      assert.notEqual(a.id, b.id);
      assert.notEqual(a.slug, b.slug);
    });

    test('repeating a clientToken returns the same workspace', async () => {
      const owner = await signUp(rt);
      const clientToken = crypto.randomUUID();
      const first = await start(owner, { companyName: 'Repeat Inc', clientToken });
      assert.equal(first.statusCode, 200, first.body);
      const second = await start(owner, { companyName: 'A Different Name', clientToken });
      assert.equal(second.statusCode, 200, second.body);
      assert.deepEqual(second.json(), first.json());
      const upper = await start(owner, { companyName: 'Repeat Inc', clientToken: clientToken.toUpperCase() });
      assert.equal(upper.statusCode, 200, upper.body);
      assert.deepEqual(upper.json(), first.json(), 'the UUID is the same in any letter case');
      assert.equal((await accountsCreatedBy(owner.id)).length, 1);
    });

    test('20 concurrent starts with one clientToken create exactly one workspace', async () => {
      const owner = await signUp(rt);
      const clientToken = crypto.randomUUID();
      const responses = await Promise.all(Array.from({ length: 20 }, () => start(owner, { companyName: 'Stampede LLC', clientToken })));
      for (const res of responses) assert.equal(res.statusCode, 200, res.body);
      const answers = new Set(responses.map((r) => r.body));
      assert.equal(answers.size, 1, `every request answers the same workspace: ${[...answers].join(' | ')}`);
      const created = await accountsCreatedBy(owner.id);
      assert.equal(created.length, 1, 'exactly one accounts row');
      assert.equal(created[0]!.id, responses[0]!.json().accountId);
      const memberships = await rt.db.kysely.selectFrom('memberships').select(['account_id']).where('user_id', '=', owner.id).execute();
      assert.equal(memberships.length, 1);
    });

    test('concurrent starts with one clientToken in different letter case create one workspace, without errors', async () => {
      const owner = await signUp(rt);
      const clientToken = crypto.randomUUID();
      const responses = await Promise.all(
        Array.from({ length: 20 }, (_, i) => start(owner, { companyName: 'Case Race', clientToken: i % 2 ? clientToken.toUpperCase() : clientToken })),
      );
      for (const res of responses) assert.equal(res.statusCode, 200, res.body);
      assert.equal(new Set(responses.map((r) => r.body)).size, 1);
      assert.equal((await accountsCreatedBy(owner.id)).length, 1);
    });

    test('a clientToken already used by another user is 409', async () => {
      const first = await signUp(rt);
      const second = await signUp(rt);
      const clientToken = crypto.randomUUID();
      assert.equal((await start(first, { companyName: 'First Co', clientToken })).statusCode, 200);
      const res = await start(second, { companyName: 'Second Co', clientToken });
      assert.equal(res.statusCode, 409, res.body);
      assert.equal(res.json().error, 'conflict');
      assert.ok(!res.body.includes('First Co'), "the other user's workspace is not revealed");
      assert.equal((await accountsCreatedBy(second.id)).length, 0);
    });

    test('accountSlug adopts a workspace the caller belongs to, and is 403 for any other', async () => {
      const owner = await signUp(rt);
      const workspace = await createWorkspace(rt, owner, 'Adoptable');
      const member = await addMember(rt, workspace, owner, 'member');
      const foreign = await createWorkspace(rt, await signUp(rt), 'Not Yours');

      for (const caller of [owner, member]) {
        const res = await start(caller, { companyName: 'Ignored', clientToken: crypto.randomUUID(), accountSlug: workspace.slug });
        assert.equal(res.statusCode, 200, res.body);
        assert.deepEqual(res.json(), { accountId: workspace.id, slug: workspace.slug });
      }
      assert.equal((await accountsCreatedBy(owner.id)).length, 1, 'no new workspace when adopting');
      assert.equal((await accountsCreatedBy(member.id)).length, 0);

      const res = await start(member, { companyName: 'Ignored', clientToken: crypto.randomUUID(), accountSlug: foreign.slug });
      assert.equal(res.statusCode, 403, res.body);
      assert.equal(res.json().error, 'forbidden');
      assert.ok(!res.body.includes(foreign.id));
      assert.equal((await rolesIn(foreign.id))[member.id], undefined, 'the caller did not join');
    });
  });

  describe('members and roles', () => {
    let owner: TestUser;
    let admin: TestUser;
    let member: TestUser;
    let outsider: TestUser;
    let workspace: TestWorkspace;
    let other: TestWorkspace;

    before(async () => {
      owner = await signUp(rt, uniqueEmail('owner'));
      workspace = await createWorkspace(rt, owner, 'Members Test');
      admin = await addMember(rt, workspace, owner, 'admin');
      member = await addMember(rt, workspace, owner, 'member');
      outsider = await signUp(rt, uniqueEmail('outsider'));
      other = await createWorkspace(rt, outsider, 'Outsider Workspace');
    });

    const listMembers = (user: TestUser, slug = workspace.slug) =>
      rt.app!.inject({ method: 'GET', url: `/api/accounts/${slug}/members`, headers: bearer(user.accessToken) });
    const inviteRes = (user: TestUser, email: string, role: Role, slug = workspace.slug) =>
      rt.app!.inject({ method: 'POST', url: `/api/accounts/${slug}/invitations`, headers: bearer(user.accessToken), payload: { email, role } });
    const accept = (user: TestUser, token: string) =>
      rt.app!.inject({ method: 'POST', url: '/api/invitations/accept', headers: bearer(user.accessToken), payload: { token } });
    const changeRole = (user: TestUser, target: string, role: Role, slug = workspace.slug) =>
      rt.app!.inject({ method: 'PATCH', url: `/api/accounts/${slug}/members/${target}`, headers: bearer(user.accessToken), payload: { role } });
    const remove = (user: TestUser, target: string, slug = workspace.slug) =>
      rt.app!.inject({ method: 'DELETE', url: `/api/accounts/${slug}/members/${target}`, headers: bearer(user.accessToken) });

    async function invitationToken(email: string): Promise<string> {
      const mail = await latestEmail(rt, email, 'invitation');
      assert.ok(mail, `an invitation email to ${email}`);
      return tokenFromEmail(mail.body_text);
    }

    test('any member lists the members with their roles (Bearer or cookie)', async () => {
      for (const caller of [owner, admin, member]) {
        const res = await listMembers(caller);
        assert.equal(res.statusCode, 200, res.body);
        const body = res.json();
        assert.equal(body.success, true);
        const byId = Object.fromEntries(body.members.map((m: { user_id: string }) => [m.user_id, m]));
        assert.deepEqual(Object.keys(byId).sort(), [owner.id, admin.id, member.id].sort());
        assert.equal(byId[owner.id].role, 'owner');
        assert.equal(byId[owner.id].email, owner.email);
        assert.equal(byId[admin.id].role, 'admin');
        assert.equal(byId[member.id].role, 'member');
        for (const m of body.members) assert.ok(!Number.isNaN(Date.parse(m.joined_at)));
      }
      const viaCookie = await rt.app!.inject({ method: 'GET', url: `/api/accounts/${workspace.slug}/members`, ...sessionCookie(member.accessToken) });
      assert.equal(viaCookie.statusCode, 200);
      assert.equal((await rt.app!.inject({ method: 'GET', url: `/api/accounts/${workspace.slug}/members` })).statusCode, 401);
    });

    test("another workspace's slug is 404 with no data, exactly like a slug that does not exist", async () => {
      const missing = `no-such-workspace-${crypto.randomBytes(4).toString('hex')}`;
      const attempts = [
        [() => listMembers(member, other.slug), () => listMembers(member, missing)],
        [() => inviteRes(owner, uniqueEmail(), 'member', other.slug), () => inviteRes(owner, uniqueEmail(), 'member', missing)],
        [() => changeRole(owner, outsider.id, 'member', other.slug), () => changeRole(owner, outsider.id, 'member', missing)],
        [() => remove(owner, outsider.id, other.slug), () => remove(owner, outsider.id, missing)],
      ] as const;
      for (const [foreign, absent] of attempts) {
        const a = await foreign();
        const b = await absent();
        assert.equal(a.statusCode, 404, a.body);
        assert.equal(b.statusCode, 404, b.body);
        assert.deepEqual(a.json(), b.json(), 'a non-member cannot tell a foreign workspace from a missing one');
        assert.deepEqual(Object.keys(a.json()).sort(), ['code', 'error', 'message']);
        assert.ok(!a.body.includes(outsider.email) && !a.body.includes('Outsider Workspace') && !a.body.includes(other.id));
      }
      assert.deepEqual(await rolesIn(other.id), { [outsider.id]: 'owner' }, 'nothing changed in the other workspace');
    });

    test('owners and admins invite; members cannot; only owners invite owners', async () => {
      const email = uniqueEmail('invitee');
      const res = await inviteRes(admin, email, 'member');
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.equal(body.success, true);
      assert.match(body.invitation.id, UUID);
      assert.equal(body.invitation.email, email);
      assert.equal(body.invitation.role, 'member');
      const days = (Date.parse(body.invitation.expires_at) - Date.now()) / 86_400_000;
      assert.ok(days > 6.9 && days <= 7, `expires in 7 days (${days})`);
      const token = await invitationToken(email);
      const stored = await rt.db.kysely.selectFrom('one_time_tokens').select(['token_hash']).where('id', '=', body.invitation.id).executeTakeFirstOrThrow();
      assert.notEqual(stored.token_hash, token, 'only a hash of the token is stored');

      const byMember = await inviteRes(member, uniqueEmail(), 'member');
      assert.equal(byMember.statusCode, 403, byMember.body);
      assert.equal(byMember.json().error, 'forbidden');
      const ownerByAdmin = await inviteRes(admin, uniqueEmail(), 'owner');
      assert.equal(ownerByAdmin.statusCode, 403, ownerByAdmin.body);
      assert.equal((await inviteRes(admin, uniqueEmail(), 'admin')).statusCode, 200, 'admins may invite admins');
      assert.equal((await inviteRes(owner, uniqueEmail(), 'owner')).statusCode, 200, 'owners may invite owners');

      const badEmail = await inviteRes(owner, 'not-an-email', 'member');
      assert.equal(badEmail.statusCode, 400);
      assert.equal(badEmail.json().details[0].field, 'email');
      const badRole = await rt.app!.inject({
        method: 'POST',
        url: `/api/accounts/${workspace.slug}/invitations`,
        headers: bearer(owner.accessToken),
        payload: { email: uniqueEmail(), role: 'superuser' },
      });
      assert.equal(badRole.statusCode, 400);
      assert.ok(badRole.json().details.some((d: { field: string }) => d.field === 'role'));
    });

    test('only the invited email accepts, once', async () => {
      const invitee = await signUp(rt, uniqueEmail('accepts'));
      const stranger = await signUp(rt, uniqueEmail('stranger'));
      assert.equal((await inviteRes(owner, invitee.email.toUpperCase(), 'admin')).statusCode, 200);
      const token = await invitationToken(invitee.email);

      const wrongUser = await accept(stranger, token);
      assert.equal(wrongUser.statusCode, 403, wrongUser.body);
      assert.equal(wrongUser.json().error, 'forbidden');
      assert.equal((await rolesIn(workspace.id))[stranger.id], undefined);

      const ok = await accept(invitee, token);
      assert.equal(ok.statusCode, 200, ok.body);
      assert.deepEqual(ok.json(), { success: true, account: { id: workspace.id, slug: workspace.slug, name: 'Members Test' }, role: 'admin' });
      assert.equal((await rolesIn(workspace.id))[invitee.id], 'admin');
      assert.equal((await listMembers(invitee)).statusCode, 200);

      const reused = await accept(invitee, token);
      assert.equal(reused.statusCode, 404, reused.body);
      assert.equal((await accept(invitee, crypto.randomBytes(32).toString('base64url'))).statusCode, 404);
      assert.equal((await rt.app!.inject({ method: 'POST', url: '/api/invitations/accept', payload: { token } })).statusCode, 401);

      // Two acceptances at once: exactly one wins.
      const racer = await signUp(rt, uniqueEmail('racer'));
      assert.equal((await inviteRes(owner, racer.email, 'member')).statusCode, 200);
      const raceToken = await invitationToken(racer.email);
      const results = (await Promise.all([accept(racer, raceToken), accept(racer, raceToken)])).map((r) => r.statusCode).sort();
      assert.deepEqual(results, [200, 404]);
    });

    test('an existing member who accepts another invitation keeps their role, and the answer says which', async () => {
      const ws = await createWorkspace(rt, owner, 'Reinvite Test');
      const existing = await addMember(rt, ws, owner, 'member');
      assert.equal((await inviteRes(owner, existing.email, 'admin', ws.slug)).statusCode, 200);
      const res = await accept(existing, await invitationToken(existing.email));
      assert.equal(res.statusCode, 200, res.body);
      const actual = (await rolesIn(ws.id))[existing.id];
      assert.equal(actual, 'member', 'accepting does not change an existing membership');
      assert.equal(res.json().role, actual, 'the answer reports the role actually held');
    });

    test('role changes: admins never touch owners; owners can; a workspace always keeps an owner', async () => {
      const ws = await createWorkspace(rt, owner, 'Roles Test');
      const a = await addMember(rt, ws, owner, 'admin');
      const m = await addMember(rt, ws, owner, 'member');

      const response = await changeRole(a, m.id, 'admin', ws.slug);
      assert.equal(response.statusCode, 200, response.body);
      assert.deepEqual(response.json(), { success: true, member: { user_id: m.id, role: 'admin' } });
      assert.equal((await changeRole(a, m.id, 'member', ws.slug)).statusCode, 200);

      const touchOwner = await changeRole(a, owner.id, 'member', ws.slug);
      assert.equal(touchOwner.statusCode, 403, touchOwner.body);
      assert.equal((await changeRole(a, m.id, 'owner', ws.slug)).statusCode, 403, 'admins cannot grant owner');
      assert.equal((await changeRole(a, a.id, 'owner', ws.slug)).statusCode, 403, 'nor take it');
      assert.equal((await changeRole(m, m.id, 'admin', ws.slug)).statusCode, 403, 'members change no roles');
      assert.equal((await changeRole(owner, crypto.randomUUID(), 'member', ws.slug)).statusCode, 404, 'not a member');
      assert.equal((await changeRole(owner, outsider.id, 'member', ws.slug)).statusCode, 404);

      const lastOwner = await changeRole(owner, owner.id, 'admin', ws.slug);
      assert.equal(lastOwner.statusCode, 409, lastOwner.body);
      assert.equal(lastOwner.json().error, 'conflict');
      assert.equal((await remove(owner, owner.id, ws.slug)).statusCode, 409, 'the last owner cannot leave either');
      assert.deepEqual(await rolesIn(ws.id), { [owner.id]: 'owner', [a.id]: 'admin', [m.id]: 'member' });

      assert.equal((await changeRole(owner, a.id, 'owner', ws.slug)).statusCode, 200, 'an owner grants owner');
      const demoted = await changeRole(a, owner.id, 'member', ws.slug);
      assert.equal(demoted.statusCode, 200, `with a second owner, demotion works: ${demoted.body}`);
      assert.deepEqual(await rolesIn(ws.id), { [owner.id]: 'member', [a.id]: 'owner', [m.id]: 'member' });
      assert.equal((await changeRole(a, a.id, 'admin', ws.slug)).statusCode, 409, 'the new last owner is protected too');

      const accounts = (await rt.app!.inject({ method: 'GET', url: '/api/accounts', headers: bearer(owner.accessToken) })).json().accounts;
      assert.equal(accounts.find((x: { id: string }) => x.id === ws.id).role, 'member', 'GET /api/accounts shows the new role');
    });

    test('two owners demoting each other at once: exactly one succeeds', async () => {
      const first = await signUp(rt);
      const ws = await createWorkspace(rt, first, 'Duel');
      const second = await addMember(rt, ws, first, 'owner');
      const results = await Promise.all([changeRole(first, second.id, 'admin', ws.slug), changeRole(second, first.id, 'admin', ws.slug)]);
      const statuses = results.map((r) => r.statusCode);
      const detail = results.map((r) => r.body).join(' | ');
      assert.equal(statuses.filter((s) => s === 200).length, 1, detail);
      // The loser is either already demoted (403) or would remove the last owner (409), depending on timing.
      assert.ok(statuses.some((s) => s === 403 || s === 409), detail);
      const owners = Object.values(await rolesIn(ws.id)).filter((r) => r === 'owner');
      assert.equal(owners.length, 1);
    });

    test('removing members, and leaving', async () => {
      const ws = await createWorkspace(rt, owner, 'Removal Test');
      const a = await addMember(rt, ws, owner, 'admin');
      const m1 = await addMember(rt, ws, owner, 'member');
      const m2 = await addMember(rt, ws, owner, 'member');
      const leaver = await addMember(rt, ws, owner, 'member');

      assert.equal((await remove(m1, m2.id, ws.slug)).statusCode, 403, 'members cannot remove others');
      assert.equal((await remove(a, owner.id, ws.slug)).statusCode, 403, 'admins cannot remove owners');
      assert.equal((await remove(a, crypto.randomUUID(), ws.slug)).statusCode, 404);

      const removed = await remove(a, m1.id, ws.slug);
      assert.equal(removed.statusCode, 200, removed.body);
      assert.deepEqual(removed.json(), { success: true });
      assert.equal((await listMembers(m1, ws.slug)).statusCode, 404, 'a removed member loses access');

      const left = await remove(leaver, leaver.id, ws.slug);
      assert.equal(left.statusCode, 200, left.body);
      assert.equal((await listMembers(leaver, ws.slug)).statusCode, 404);
      const leaverAccounts = (await rt.app!.inject({ method: 'GET', url: '/api/accounts', headers: bearer(leaver.accessToken) })).json().accounts;
      assert.ok(!leaverAccounts.some((x: { id: string }) => x.id === ws.id));

      assert.equal((await remove(owner, a.id, ws.slug)).statusCode, 200, 'owners remove admins');
      assert.deepEqual(await rolesIn(ws.id), { [owner.id]: 'owner', [m2.id]: 'member' });
    });

    test("GET /api/accounts lists the caller's workspaces with the caller's role", async () => {
      const user = await signUp(rt, uniqueEmail('multi'));
      const own = await createWorkspace(rt, user, 'Alpha Own');
      await addMember(rt, workspace, owner, 'member', user);
      await addMember(rt, other, outsider, 'admin', user);
      await createWorkspace(rt, await signUp(rt), 'Someone Else Entirely');

      const res = await rt.app!.inject({ method: 'GET', url: '/api/accounts', ...sessionCookie(user.accessToken) });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.equal(body.success, true);
      const roles = Object.fromEntries(body.accounts.map((a: { slug: string; role: Role }) => [a.slug, a.role]));
      assert.deepEqual(roles, { [own.slug]: 'owner', [workspace.slug]: 'member', [other.slug]: 'admin' });
      for (const a of body.accounts) {
        assert.deepEqual(Object.keys(a).sort(), ['created_at', 'id', 'name', 'role', 'slug']);
        assert.match(a.id, UUID);
      }
      const fresh = await signUp(rt);
      const none = await rt.app!.inject({ method: 'GET', url: '/api/accounts', headers: bearer(fresh.accessToken) });
      assert.deepEqual(none.json(), { success: true, accounts: [] });
      assert.equal((await rt.app!.inject({ method: 'GET', url: '/api/accounts' })).statusCode, 401);
    });
  });
});
