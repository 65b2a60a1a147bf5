import { sql, type Kysely, type Selectable } from 'kysely';
import type { Tables } from '../../platform/db/tables.ts';
import type { CreditTables } from './tables.ts';
import { olderThanCursor } from '../../platform/db/keyset.ts';

/**
 * Every SQL statement of the credits module. Each one names the workspace, so
 * a wrong id can never reach another tenant's rows. `db` is the pool or a
 * transaction handle; the writes below are only ever called with a handle.
 */
type Db = Kysely<Tables>;

export type LedgerRow = Selectable<CreditTables['credit_ledger']>;
export type BalanceRow = Selectable<CreditTables['credit_balances']>;

const BALANCE_COLUMNS = [
  'id',
  'account_id',
  'credits',
  'total_purchased',
  'total_used',
  'auto_reload_enabled',
  'auto_reload_threshold',
  'auto_reload_amount_minor',
  'created_at',
  'updated_at',
] as const;

const LEDGER_COLUMNS = ['id', 'account_id', 'amount', 'reason', 'reference', 'metadata', 'balance_after', 'created_by', 'created_at'] as const;

/**
 * Creates the workspace's all-zero balance row if it has none. Selecting from
 * accounts makes an unknown workspace insert nothing (instead of failing on
 * the foreign key), which the caller then sees as a missing balance.
 */
export async function ensureBalance(db: Db, accountId: string): Promise<void> {
  await db
    .insertInto('credit_balances')
    .columns(['account_id'])
    .expression((eb) => eb.selectFrom('accounts').select('id').where('id', '=', accountId))
    .onConflict((oc) => oc.column('account_id').doNothing())
    .execute();
}

export async function findBalance(db: Db, accountId: string): Promise<BalanceRow | undefined> {
  return db.selectFrom('credit_balances').select(BALANCE_COLUMNS).where('account_id', '=', accountId).executeTakeFirst();
}

/**
 * The balance row, locked until the transaction ends: every posting to one
 * workspace takes this lock first, so concurrent debits are checked one after
 * the other against the balance the previous one left.
 */
export async function lockBalance(db: Db, accountId: string): Promise<BalanceRow | undefined> {
  return db.selectFrom('credit_balances').select(BALANCE_COLUMNS).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
}

export async function findByReference(db: Db, accountId: string, reason: string, reference: string): Promise<LedgerRow | undefined> {
  return db
    .selectFrom('credit_ledger')
    .select(LEDGER_COLUMNS)
    .where('account_id', '=', accountId)
    .where('reason', '=', reason)
    .where('reference', '=', reference)
    .executeTakeFirst();
}

export interface NewEntry {
  accountId: string;
  amount: string;
  reason: string;
  reference: string | null;
  metadata: Record<string, unknown>;
  balanceAfter: string;
  createdBy: string | null;
}

/**
 * Undefined when the reference was taken after all. Callers hold the balance
 * lock, which already orders postings with one reference; the partial unique
 * index is the backstop that makes a duplicate impossible, not an error.
 */
export async function insertEntry(db: Db, entry: NewEntry): Promise<LedgerRow | undefined> {
  return db
    .insertInto('credit_ledger')
    .values({
      account_id: entry.accountId,
      amount: entry.amount,
      reason: entry.reason,
      reference: entry.reference,
      metadata: JSON.stringify(entry.metadata),
      balance_after: entry.balanceAfter,
      created_by: entry.createdBy,
    })
    .onConflict((oc) => oc.columns(['account_id', 'reason', 'reference']).where('reference', 'is not', null).doNothing())
    .returning(LEDGER_COLUMNS)
    .executeTakeFirst();
}

/** Writes the totals the service computed from the locked row plus one ledger amount. */
export async function updateTotals(db: Db, accountId: string, totals: { credits: string; totalPurchased: string; totalUsed: string }): Promise<void> {
  await db
    .updateTable('credit_balances')
    .set({ credits: totals.credits, total_purchased: totals.totalPurchased, total_used: totals.totalUsed, updated_at: sql`now()` })
    .where('account_id', '=', accountId)
    .execute();
}

export async function updateAutoReload(
  db: Db,
  accountId: string,
  settings: { enabled: boolean; threshold: string; amountMinor: number },
): Promise<BalanceRow> {
  return db
    .updateTable('credit_balances')
    .set({
      auto_reload_enabled: settings.enabled,
      auto_reload_threshold: settings.threshold,
      auto_reload_amount_minor: settings.amountMinor,
      updated_at: sql`now()`,
    })
    .where('account_id', '=', accountId)
    .returning(BALANCE_COLUMNS)
    .executeTakeFirstOrThrow();
}

/**
 * Newest first, `limit` rows strictly older than the entry `before`. The
 * cursor is compared in SQL on (created_at, id): timestamps keep microseconds
 * there, which a JavaScript Date would lose, and the id breaks ties.
 */
export async function listEntries(db: Db, accountId: string, options: { limit: number; before?: string; reason?: string }): Promise<LedgerRow[]> {
  let query = db.selectFrom('credit_ledger as l').select(LEDGER_COLUMNS.map((c) => `l.${c}` as const)).where('l.account_id', '=', accountId);
  if (options.reason !== undefined) query = query.where('l.reason', '=', options.reason);
  if (options.before !== undefined) {
    query = query.where(olderThanCursor('l', { table: 'credit_ledger', scopeColumn: 'account_id', scopeId: accountId, id: options.before }));
  }
  return query.orderBy('l.created_at', 'desc').orderBy('l.id', 'desc').limit(options.limit).execute();
}

/** Sums straight from the ledger; tests compare them with the maintained balance row. */
export async function ledgerSum(db: Db, accountId: string): Promise<string> {
  const row = await db
    .selectFrom('credit_ledger')
    .select(sql<string>`coalesce(sum(amount), 0)::numeric(20, 6)`.as('total'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow();
  return row.total;
}
