import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import { addMember, bearer, createKey, createWorkspace, sessionCookie, signUp, uniqueEmail, type TestKey, type TestUser, type TestWorkspace } from '../../../test/fixtures.ts';
import { AppError } from '../../platform/http/errors.ts';
import { creditsService, type PostInput, type PostResult } from './service.ts';
import * as store from './store.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('credits: ledger, derived balance and GET /api/credits', () => {
  let rt: TestRuntime;
  let owner: TestUser;
  before(async () => {
    rt = await startTestRuntime();
    owner = await signUp(rt, uniqueEmail('credits-owner'));
  });
  after(async () => {
    await rt?.destroy();
  });

  /** One posting in its own transaction, as a feature would do it. */
  function post(accountId: string, input: Omit<PostInput, 'accountId'>): Promise<PostResult> {
    return rt.db.transaction((trx) => creditsService(rt).post(trx, { accountId, ...input }));
  }

  async function rejection(promise: Promise<unknown>): Promise<AppError> {
    try {
      await promise;
    } catch (error) {
      assert.ok(error instanceof AppError, `expected an AppError, got ${String(error)}`);
      return error;
    }
    assert.fail('expected the posting to be refused');
  }

  async function ledgerRows(accountId: string) {
    return rt.db.kysely.selectFrom('credit_ledger').selectAll().where('account_id', '=', accountId).orderBy('created_at').execute();
  }

  describe('the ledger service', () => {
    test('the balance record is derived from a mix of postings, and stays equal to the ledger sum', async () => {
      const ws = await createWorkspace(rt, owner, 'Mixed Postings');
      const postings: Array<Omit<PostInput, 'accountId'>> = [
        { amount: 100, reason: 'purchase', reference: 'evt_purchase' },
        { amount: 10, reason: 'grant' },
        { amount: -12.5, reason: 'call', reference: 'call:1' },
        { amount: '-2', reason: 'kb_storage', reference: 'kb_file:1' },
        { amount: 2.5, reason: 'refund', reference: 'call:1' },
        { amount: -20, reason: 'reversal', reference: 'evt_refund' },
        { amount: '-0.25', reason: 'adjustment', metadata: { note: 'rounding correction' }, createdBy: owner.id },
        { amount: 50, reason: 'subscription', reference: 'inv_1' },
        { amount: 5, reason: 'auto_reload', reference: 'pi_1' },
        { amount: -1, reason: 'phone_number', reference: 'number:1:2025-01' },
      ];
      let last: PostResult | undefined;
      for (const posting of postings) last = await post(ws.id, posting);

      const balance = await creditsService(rt).balance(ws.id);
      // credits: every amount; purchased: purchase + subscription + auto_reload − reversal;
      // used: call + kb_storage + phone_number − refund.
      assert.deepEqual(
        { credits: balance.credits, total_purchased: balance.total_purchased, total_used: balance.total_used },
        { credits: 131.75, total_purchased: 135, total_used: 13 },
      );
      assert.equal(balance.credits, balance.total_purchased - balance.total_used + 10 - 0.25, 'credits = purchased − used + grants + adjustments');
      assert.equal(Number(await store.ledgerSum(rt.db.kysely, ws.id)), balance.credits);
      assert.equal(last?.balance_after, 131.75);

      const rows = await ledgerRows(ws.id);
      assert.equal(rows.length, postings.length);
      let running = 0;
      for (const row of rows) {
        running = Math.round((running + Number(row.amount)) * 1e6) / 1e6;
        assert.equal(Number(row.balance_after), running, 'each row records the balance right after it');
      }
      const adjustment = rows.find((r) => r.reason === 'adjustment')!;
      assert.deepEqual(adjustment.metadata, { note: 'rounding correction' });
      assert.equal(adjustment.created_by, owner.id);
      assert.equal(rows.find((r) => r.reason === 'grant')!.created_by, null, 'system postings have no user');
    });

    test('posting the same reference twice is a no-op that returns the first entry', async () => {
      const ws = await createWorkspace(rt, owner, 'Idempotent');
      const first = await post(ws.id, { amount: 100, reason: 'purchase', reference: 'evt_123', metadata: { attempt: 1 } });
      assert.equal(first.duplicate, false);
      assert.match(first.id, UUID);
      // A webhook retry, even one that (wrongly) carries another amount, changes nothing.
      const again = await post(ws.id, { amount: 999, reason: 'purchase', reference: 'evt_123', metadata: { attempt: 2 } });
      assert.equal(again.duplicate, true);
      assert.equal(again.id, first.id);
      assert.equal(again.amount, 100);
      assert.deepEqual(again.metadata, { attempt: 1 });
      assert.equal((await creditsService(rt).balance(ws.id)).credits, 100);
      assert.equal((await ledgerRows(ws.id)).length, 1);

      // The key is (workspace, reason, reference): the same id under another reason is another event.
      const reversal = await post(ws.id, { amount: -100, reason: 'reversal', reference: 'evt_123' });
      assert.equal(reversal.duplicate, false);
      // And postings without a reference are never deduplicated.
      await post(ws.id, { amount: 1, reason: 'grant' });
      await post(ws.id, { amount: 1, reason: 'grant' });
      const balance = await creditsService(rt).balance(ws.id);
      assert.equal(balance.credits, 2);
      assert.equal(balance.total_purchased, 0);
      assert.equal((await ledgerRows(ws.id)).length, 4);
    });

    test('a repeated reference is a no-op also when the postings race', async () => {
      const ws = await createWorkspace(rt, owner, 'Racing Webhooks');
      const results = await Promise.all(Array.from({ length: 8 }, () => post(ws.id, { amount: 40, reason: 'purchase', reference: 'evt_race' })));
      assert.equal(results.filter((r) => !r.duplicate).length, 1, 'exactly one posting is new');
      assert.equal(new Set(results.map((r) => r.id)).size, 1, 'every caller gets the same entry');
      assert.equal((await creditsService(rt).balance(ws.id)).credits, 40);
      assert.equal((await ledgerRows(ws.id)).length, 1);
    });

    test('a debit below zero is 402 insufficient_credits and changes nothing, unless allowNegative', async () => {
      const ws = await createWorkspace(rt, owner, 'Overdraft');
      await post(ws.id, { amount: 10, reason: 'grant' });
      const refused = await rejection(post(ws.id, { amount: '-10.000001', reason: 'call', reference: 'call:big' }));
      assert.equal(refused.code, 'insufficient_credits');
      assert.equal(refused.status, 402);
      assert.equal((await creditsService(rt).balance(ws.id)).credits, 10);
      assert.equal((await ledgerRows(ws.id)).length, 1);

      // Exactly down to zero is allowed.
      await post(ws.id, { amount: -10, reason: 'call', reference: 'call:exact' });
      assert.equal((await creditsService(rt).balance(ws.id)).credits, 0);
      // Usage that already happened may overdraw when the caller says so...
      const overdrawn = await post(ws.id, { amount: -5, reason: 'call', reference: 'call:long', allowNegative: true });
      assert.equal(overdrawn.balance_after, -5);
      // ...after which ordinary debits are refused until credits come in.
      assert.equal((await rejection(post(ws.id, { amount: -1, reason: 'kb_storage' }))).status, 402);
      await post(ws.id, { amount: 6, reason: 'purchase', reference: 'evt_topup' });
      await post(ws.id, { amount: -1, reason: 'kb_storage' });
      const balance = await creditsService(rt).balance(ws.id);
      assert.deepEqual([balance.credits, balance.total_used], [0, 16]);
    });

    test('a refused debit rolls back the work of its transaction too', async () => {
      const ws = await createWorkspace(rt, owner, 'Rollback');
      await post(ws.id, { amount: 5, reason: 'grant' });
      await assert.rejects(
        rt.db.transaction(async (trx) => {
          await creditsService(rt).post(trx, { accountId: ws.id, amount: -3, reason: 'call', reference: 'call:a' });
          await creditsService(rt).post(trx, { accountId: ws.id, amount: -3, reason: 'call', reference: 'call:b' });
        }),
        (error: unknown) => error instanceof AppError && error.status === 402,
      );
      assert.equal((await creditsService(rt).balance(ws.id)).credits, 5);
      assert.equal((await ledgerRows(ws.id)).length, 1);
    });

    test('concurrent debits never overspend: 10 debits of 3 against 20 let exactly 6 through', async () => {
      const ws = await createWorkspace(rt, owner, 'Concurrent Debits');
      await post(ws.id, { amount: 20, reason: 'purchase', reference: 'evt_20' });
      const outcomes = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) => post(ws.id, { amount: -3, reason: 'call', reference: `call:${i}` })),
      );
      const succeeded = outcomes.filter((o) => o.status === 'fulfilled');
      const refused = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected');
      assert.equal(succeeded.length, 6);
      assert.equal(refused.length, 4);
      for (const r of refused) assert.ok(r.reason instanceof AppError && r.reason.code === 'insufficient_credits', String(r.reason));
      const balance = await creditsService(rt).balance(ws.id);
      assert.deepEqual([balance.credits, balance.total_used], [2, 18]);
      assert.equal(Number(await store.ledgerSum(rt.db.kysely, ws.id)), 2);
      const afters = (await ledgerRows(ws.id)).map((r) => Number(r.balance_after));
      assert.deepEqual(afters, [20, 17, 14, 11, 8, 5, 2], 'each debit saw the balance the previous one left');
    });

    test('refuses malformed postings with validation_failed', async () => {
      const ws = await createWorkspace(rt, owner, 'Validation');
      const cases: Array<[Omit<PostInput, 'accountId'>, string]> = [
        [{ amount: 0, reason: 'grant' }, 'amount'],
        [{ amount: '0.0000001', reason: 'grant' }, 'amount'],
        [{ amount: '1e3', reason: 'grant' }, 'amount'],
        [{ amount: Number.NaN, reason: 'grant' }, 'amount'],
        [{ amount: 1e15, reason: 'grant' }, 'amount'],
        [{ amount: -1, reason: 'purchase' }, 'amount'],
        [{ amount: 1, reason: 'call' }, 'amount'],
        [{ amount: 1, reason: 'bonus' as PostInput['reason'] }, 'reason'],
        [{ amount: 1, reason: 'grant', reference: '' }, 'reference'],
        [{ amount: 1, reason: 'grant', reference: 'r'.repeat(501) }, 'reference'],
      ];
      for (const [input, field] of cases) {
        const error = await rejection(post(ws.id, input));
        assert.equal(error.code, 'validation_failed', JSON.stringify(input));
        assert.equal(error.details?.[0]?.field, field, JSON.stringify(input));
      }
      assert.equal((await rejection(post('00000000-0000-4000-8000-000000000000', { amount: 1, reason: 'grant' }))).code, 'not_found');
      assert.equal((await ledgerRows(ws.id)).length, 0);
    });

    test('amounts are exact decimals: float noise is rounded away, strings are taken as written', async () => {
      const ws = await createWorkspace(rt, owner, 'Decimals');
      await post(ws.id, { amount: 0.1 + 0.2, reason: 'grant' });
      await post(ws.id, { amount: '0.000001', reason: 'grant' });
      const rows = await ledgerRows(ws.id);
      assert.deepEqual(
        rows.map((r) => Number(r.amount)),
        [0.3, 0.000001],
      );
      assert.equal((await creditsService(rt).balance(ws.id)).credits, 0.300001);
    });

    test('auto-reload settings live on the balance record', async () => {
      const ws = await createWorkspace(rt, owner, 'Auto Reload');
      const record = await rt.db.transaction((trx) => creditsService(rt).setAutoReload(trx, ws.id, { enabled: true, threshold: 25, amountMinor: 1999 }));
      assert.equal(record.auto_reload_enabled, true);
      assert.equal(record.auto_reload_threshold, 25);
      assert.equal(record.auto_reload_amount_usd, 19.99);
      await post(ws.id, { amount: 3, reason: 'grant' });
      const balance = await creditsService(rt).balance(ws.id);
      assert.equal(balance.auto_reload_amount_usd, 19.99, 'postings keep the settings');
      assert.equal(balance.credits, 3);
    });
  });

  describe('GET /api/credits', () => {
    let ws: TestWorkspace;
    let other: TestWorkspace;
    let key: TestKey;
    let otherOwner: TestUser;
    before(async () => {
      ws = await createWorkspace(rt, owner, 'Credits Http');
      key = await createKey(rt, owner, ws);
      otherOwner = await signUp(rt, uniqueEmail('credits-other'));
      other = await createWorkspace(rt, otherOwner, 'Other Credits');
      await post(other.id, { amount: 777, reason: 'purchase', reference: 'evt_other' });
    });

    const get = (query: string, headers: Record<string, unknown>) => rt.app!.inject({ method: 'GET', url: `/api/credits${query}`, ...headers });

    test('a workspace without postings answers its all-zero record, with JSON numbers', async () => {
      const res = await get('', { headers: bearer(key.fullKey) });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      assert.equal(body.success, true);
      assert.match(body.credits.id, UUID);
      assert.deepEqual(
        { ...body.credits, id: undefined },
        {
          id: undefined,
          account_id: ws.id,
          credits: 0,
          total_purchased: 0,
          total_used: 0,
          auto_reload_enabled: false,
          auto_reload_threshold: 0,
          auto_reload_amount_usd: 0,
        },
      );
      // The record keeps its id once created.
      assert.equal((await get('', { headers: bearer(key.fullKey) })).json().credits.id, body.credits.id);
    });

    test('an API key reads its own workspace, with or without accountId', async () => {
      await post(ws.id, { amount: 42.5, reason: 'purchase', reference: 'evt_http' });
      await post(ws.id, { amount: -2.5, reason: 'call', reference: 'call:http' });
      for (const query of ['', `?accountId=${ws.id}`]) {
        const res = await get(query, { headers: bearer(key.fullKey) });
        assert.equal(res.statusCode, 200, res.body);
        const { credits } = res.json();
        assert.equal(credits.account_id, ws.id);
        assert.equal(credits.credits, 40);
        assert.equal(credits.total_purchased, 42.5);
        assert.equal(credits.total_used, 2.5);
        for (const field of ['credits', 'total_purchased', 'total_used', 'auto_reload_threshold', 'auto_reload_amount_usd']) {
          assert.equal(typeof credits[field], 'number', field);
        }
      }
    });

    test("an API key gets 404 and no data for another workspace's accountId", async () => {
      const res = await get(`?accountId=${other.id}`, { headers: bearer(key.fullKey) });
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().error, 'not_found');
      assert.equal(res.json().credits, undefined);
      assert.doesNotMatch(res.body, /777/);
    });

    test('a member reads by session cookie or Bearer token; without accountId when they have one workspace', async () => {
      const member = await addMember(rt, ws, owner, 'member');
      for (const credential of [sessionCookie(member.accessToken), { headers: bearer(member.accessToken) }]) {
        const res = await get(`?accountId=${ws.id}`, credential);
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.json().credits.account_id, ws.id);
      }
      const implicit = await get('', { headers: bearer(member.accessToken) });
      assert.equal(implicit.statusCode, 200, implicit.body);
      assert.equal(implicit.json().credits.account_id, ws.id);
    });

    test('a user in several workspaces must name one: 400 naming accountId', async () => {
      // owner has created many workspaces in this suite.
      const res = await get('', { headers: bearer(owner.accessToken) });
      assert.equal(res.statusCode, 400);
      const body = res.json();
      assert.equal(body.error, 'validation_failed');
      assert.deepEqual(body.details, [{ field: 'accountId', message: 'is required' }]);
      const none = await signUp(rt, uniqueEmail('no-workspace'));
      assert.equal((await get('', { headers: bearer(none.accessToken) })).statusCode, 400);
    });

    test("a user gets 404 and no data for a workspace they are not a member of", async () => {
      const res = await get(`?accountId=${other.id}`, { headers: bearer(owner.accessToken) });
      assert.equal(res.statusCode, 404);
      assert.equal(res.json().credits, undefined);
      assert.doesNotMatch(res.body, /777/);
      const unknown = await get('?accountId=00000000-0000-4000-8000-000000000000', { headers: bearer(owner.accessToken) });
      assert.equal(unknown.statusCode, 404);
    });

    test('a malformed accountId is 400 and no credential is 401', async () => {
      const bad = await get('?accountId=nope', { headers: bearer(key.fullKey) });
      assert.equal(bad.statusCode, 400);
      assert.equal(bad.json().details[0].field, 'accountId');
      assert.equal((await get('', {})).statusCode, 401);
    });
  });

  describe('GET /api/credits/ledger', () => {
    let ws: TestWorkspace;
    let key: TestKey;
    before(async () => {
      ws = await createWorkspace(rt, owner, 'Ledger Http');
      key = await createKey(rt, owner, ws);
      await post(ws.id, { amount: 100, reason: 'purchase', reference: 'evt_l1', metadata: { plan: 'starter' } });
      for (let i = 1; i <= 4; i++) await post(ws.id, { amount: -i, reason: 'call', reference: `call:l${i}` });
      await post(ws.id, { amount: 3, reason: 'refund', reference: 'call:l4' });
    });

    const ledger = (query: string, token: string) => rt.app!.inject({ method: 'GET', url: `/api/credits/ledger${query}`, headers: bearer(token) });

    test('pages through the history newest first', async () => {
      const seen: Array<{ reason: string; amount: number; balance_after: number; reference: string | null }> = [];
      let before = '';
      for (let page = 0; page < 10; page++) {
        const res = await ledger(`?limit=4${before}`, key.fullKey);
        assert.equal(res.statusCode, 200, res.body);
        const body = res.json();
        assert.equal(body.success, true);
        assert.ok(body.entries.length <= 4);
        seen.push(...body.entries);
        if (body.next_before === null) break;
        before = `&before=${body.next_before}`;
      }
      assert.deepEqual(
        seen.map((e) => [e.reason, e.amount, e.balance_after]),
        [
          ['refund', 3, 93],
          ['call', -4, 90],
          ['call', -3, 94],
          ['call', -2, 97],
          ['call', -1, 99],
          ['purchase', 100, 100],
        ],
      );
      const purchase = (await ledger('?reason=purchase', key.fullKey)).json();
      assert.equal(purchase.entries.length, 1);
      assert.deepEqual(purchase.entries[0].metadata, { plan: 'starter' });
      assert.equal(purchase.entries[0].reference, 'evt_l1');
      assert.equal(purchase.next_before, null);
    });

    test('members read it, other workspaces do not; a foreign cursor is 400', async () => {
      const mine = await ledger(`?accountId=${ws.id}&limit=1`, owner.accessToken);
      assert.equal(mine.statusCode, 200, mine.body);
      const outsider = await signUp(rt, uniqueEmail('ledger-outsider'));
      const foreign = await ledger(`?accountId=${ws.id}`, outsider.accessToken);
      assert.equal(foreign.statusCode, 404);
      assert.equal(foreign.json().entries, undefined);

      const otherWs = await createWorkspace(rt, outsider, 'Outsider Ledger');
      await post(otherWs.id, { amount: 1, reason: 'grant' });
      const otherEntry = (await ledger(`?accountId=${otherWs.id}`, outsider.accessToken)).json().entries[0];
      const cursor = await ledger(`?before=${otherEntry.id}`, key.fullKey);
      assert.equal(cursor.statusCode, 400);
      assert.equal(cursor.json().details[0].field, 'before');
      assert.equal((await ledger('?reason=bonus', key.fullKey)).statusCode, 400);
    });
  });
});
