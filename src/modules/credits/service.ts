import { perContext, type AppContext } from '../../platform/context.ts';
import type { Tx } from '../../platform/db/database.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { accountsService } from '../accounts/service.ts';
import * as store from './store.ts';
import { isUuid } from '../../platform/ids.ts';
import { isCursorOf } from '../../platform/db/keyset.ts';

/**
 * The closed list of ledger reasons (also a check constraint in
 * migrations/0011_credits.sql), with the sign each may carry and the total of
 * the §2.10 record it counts towards:
 *
 * - `credits` is the sum of every ledger amount.
 * - `total_purchased` sums the credits paid for: purchase, subscription and
 *   auto_reload (positive) and reversal (negative: a payment refunded or
 *   disputed at the processor takes its credits back out).
 * - `total_used` sums what was consumed: the negated amounts of call,
 *   kb_storage and phone_number, minus refund (credits given back for usage
 *   that should not have been charged, e.g. a failed call).
 * - grant (free or promotional credits) and adjustment (an operator's
 *   correction, either sign) change `credits` only.
 *
 * So credits = total_purchased − total_used + grants + adjustments, always.
 * Adding a reason means a migration that widens the check constraint.
 */
export const CREDIT_REASONS = {
  purchase: { sign: 'credit', total: 'purchased' },
  subscription: { sign: 'credit', total: 'purchased' },
  auto_reload: { sign: 'credit', total: 'purchased' },
  reversal: { sign: 'debit', total: 'purchased' },
  grant: { sign: 'credit', total: null },
  refund: { sign: 'credit', total: 'used' },
  call: { sign: 'debit', total: 'used' },
  kb_storage: { sign: 'debit', total: 'used' },
  phone_number: { sign: 'debit', total: 'used' },
  adjustment: { sign: 'either', total: null },
} as const satisfies Record<string, { sign: 'credit' | 'debit' | 'either'; total: 'purchased' | 'used' | null }>;

export type CreditReason = keyof typeof CREDIT_REASONS;
export const CREDIT_REASON_NAMES = Object.keys(CREDIT_REASONS) as CreditReason[];

/** §2.10 credits record; every number is a JSON number. */
export interface CreditsRecord {
  id: string;
  account_id: string;
  credits: number;
  total_purchased: number;
  total_used: number;
  auto_reload_enabled: boolean;
  /** Reload when credits fall below this many. */
  auto_reload_threshold: number;
  /** What one reload charges, in US dollars (stored as integer cents). */
  auto_reload_amount_usd: number;
}

export interface LedgerEntry {
  id: string;
  account_id: string;
  amount: number;
  reason: CreditReason;
  reference: string | null;
  metadata: Record<string, unknown>;
  /** The workspace's credits right after this entry. */
  balance_after: number;
  created_by: string | null;
  created_at: string;
}

export interface PostInput {
  accountId: string;
  /**
   * Positive credits, negative debits; at most 6 decimal places. A decimal
   * string is taken exactly; a number is rounded to 6 places first (so binary
   * float noise such as 0.1 + 0.2 does not reach the ledger).
   */
  amount: number | string;
  reason: CreditReason;
  /** What caused it (`kb_file:<id>`, a processor event id, ...); repeating one for the same workspace and reason is a no-op. */
  reference?: string;
  metadata?: Record<string, unknown>;
  /** The user who caused it; omit for system postings (webhooks, jobs). */
  createdBy?: string | null;
  /** Let this debit take the balance below zero (usage that already happened, e.g. a call that ran long). */
  allowNegative?: boolean;
}

/** The posted entry; `duplicate` is true when the reference had been posted before and nothing changed. */
export type PostResult = LedgerEntry & { duplicate: boolean };

export interface AutoReloadSettings {
  enabled: boolean;
  threshold: number | string;
  /** US cents per reload (money in minor units). */
  amountMinor: number;
}

const MAX_REFERENCE_LENGTH = 500;

// ---- exact decimal arithmetic: amounts are integers of millionths (numeric(20, 6)) ----

const SCALE = 6;
const UNIT = 10n ** BigInt(SCALE);
/** numeric(20, 6) leaves 14 digits before the point. */
const INPUT_DECIMAL = /^(-)?(\d{1,14})(?:\.(\d{1,6}))?$/;
const STORED_DECIMAL = /^(-)?(\d+)(?:\.(\d+))?$/;

function toMicros(sign: string | undefined, whole: string, fraction = ''): bigint {
  const value = BigInt(whole) * UNIT + BigInt(fraction.padEnd(SCALE, '0').slice(0, SCALE) || '0');
  return sign ? -value : value;
}

/** A caller's amount, or undefined when it is not a decimal the ledger can hold exactly. */
export function parseAmount(value: number | string): bigint | undefined {
  if (typeof value === 'number' && !Number.isFinite(value)) return undefined;
  const text = typeof value === 'number' ? value.toFixed(SCALE) : value.trim();
  const match = INPUT_DECIMAL.exec(text);
  return match ? toMicros(match[1], match[2]!, match[3]) : undefined;
}

/** A numeric column as both engines return it (a decimal string). */
function fromColumn(value: string): bigint {
  const match = STORED_DECIMAL.exec(value.trim());
  if (!match) throw new Error(`unexpected numeric value from the database: ${value}`);
  return toMicros(match[1], match[2]!, match[3]);
}

function toColumn(micros: bigint): string {
  const negative = micros < 0n;
  const abs = negative ? -micros : micros;
  return `${negative ? '-' : ''}${abs / UNIT}.${(abs % UNIT).toString().padStart(SCALE, '0')}`;
}

const toNumber = (micros: bigint): number => Number(toColumn(micros));

// ---- rendering ----

function record(row: store.BalanceRow): CreditsRecord {
  return {
    id: row.id,
    account_id: row.account_id,
    credits: toNumber(fromColumn(row.credits)),
    total_purchased: toNumber(fromColumn(row.total_purchased)),
    total_used: toNumber(fromColumn(row.total_used)),
    auto_reload_enabled: row.auto_reload_enabled,
    auto_reload_threshold: toNumber(fromColumn(row.auto_reload_threshold)),
    auto_reload_amount_usd: Number(row.auto_reload_amount_minor) / 100,
  };
}

function entry(row: store.LedgerRow): LedgerEntry {
  return {
    id: row.id,
    account_id: row.account_id,
    amount: toNumber(fromColumn(row.amount)),
    reason: row.reason as CreditReason,
    reference: row.reference,
    metadata: row.metadata,
    balance_after: toNumber(fromColumn(row.balance_after)),
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
  };
}

function invalid(field: string, message: string): AppError {
  return new AppError('validation_failed', `Invalid credit posting: ${field} ${message}`, [{ field, message }]);
}

export class CreditsService {
  constructor(private readonly ctx: AppContext) {}

  /**
   * The one way credits change. Runs inside the caller's transaction, so the
   * posting commits or rolls back with the work it pays for (a call record,
   * a KB file, a processed webhook).
   *
   * Takes the workspace's balance row lock first: postings to one workspace
   * run one at a time, a debit is checked against the balance the previous
   * posting left (no overspending under concurrency), and a repeated
   * reference finds the first posting (committed by then) and returns it
   * unchanged with `duplicate: true`, whatever amount it was given this time.
   *
   * A debit that would leave the balance below zero throws 402
   * insufficient_credits unless `allowNegative`.
   */
  async post(trx: Tx, input: PostInput): Promise<PostResult> {
    const rule = (CREDIT_REASONS as Record<string, (typeof CREDIT_REASONS)[CreditReason] | undefined>)[input.reason];
    if (!rule) throw invalid('reason', `must be one of ${CREDIT_REASON_NAMES.join(', ')}`);
    const amount = parseAmount(input.amount);
    if (amount === undefined) throw invalid('amount', 'must be a decimal with at most 14 digits before and 6 after the point');
    if (amount === 0n) throw invalid('amount', 'must not be zero');
    if (rule.sign === 'credit' && amount < 0n) throw invalid('amount', `must be positive for reason ${input.reason}`);
    if (rule.sign === 'debit' && amount > 0n) throw invalid('amount', `must be negative for reason ${input.reason}`);
    const reference = input.reference ?? null;
    if (reference !== null && (reference.length === 0 || reference.length > MAX_REFERENCE_LENGTH)) {
      throw invalid('reference', `must be 1 to ${MAX_REFERENCE_LENGTH} characters`);
    }
    if (!isUuid(input.accountId)) throw new AppError('not_found', 'Workspace not found');

    await store.ensureBalance(trx, input.accountId);
    const balance = await store.lockBalance(trx, input.accountId);
    if (!balance) throw new AppError('not_found', 'Workspace not found');

    if (reference !== null) {
      const existing = await store.findByReference(trx, input.accountId, input.reason, reference);
      if (existing) return { ...entry(existing), duplicate: true };
    }

    const credits = fromColumn(balance.credits);
    const after = credits + amount;
    if (amount < 0n && after < 0n && !input.allowNegative) {
      throw new AppError(
        'insufficient_credits',
        `Insufficient credits: this needs ${toNumber(-amount)} and the workspace has ${toNumber(credits)}; buy credits or enable auto-reload`,
      );
    }

    const row = await store.insertEntry(trx, {
      accountId: input.accountId,
      amount: toColumn(amount),
      reason: input.reason,
      reference,
      metadata: input.metadata ?? {},
      balanceAfter: toColumn(after),
      createdBy: input.createdBy ?? null,
    });
    if (!row) {
      // Only reachable if something posted this reference without the balance lock.
      const existing = await store.findByReference(trx, input.accountId, input.reason, reference!);
      if (!existing) throw new Error('credit posting conflicted but the conflicting row is not visible');
      return { ...entry(existing), duplicate: true };
    }

    let purchased = fromColumn(balance.total_purchased);
    let used = fromColumn(balance.total_used);
    if (rule.total === 'purchased') purchased += amount;
    if (rule.total === 'used') used -= amount;
    await store.updateTotals(trx, input.accountId, { credits: toColumn(after), totalPurchased: toColumn(purchased), totalUsed: toColumn(used) });
    return { ...entry(row), duplicate: false };
  }

  /**
   * The §2.10 record of a workspace. One with no postings yet gets its
   * all-zero record (created on this first read so it has a stable id), never
   * a 404. The caller has checked access.
   */
  async balance(accountId: string): Promise<CreditsRecord> {
    const existing = await store.findBalance(this.ctx.db.kysely, accountId);
    if (existing) return record(existing);
    return this.ctx.db.transaction(async (trx) => {
      await store.ensureBalance(trx, accountId);
      const row = await store.findBalance(trx, accountId);
      if (!row) throw new AppError('not_found', 'Workspace not found');
      return record(row);
    });
  }

  /** For billing: stores the auto-reload settings shown in the record; the reload itself posts `auto_reload`. */
  async setAutoReload(trx: Tx, accountId: string, settings: AutoReloadSettings): Promise<CreditsRecord> {
    const threshold = parseAmount(settings.threshold);
    if (threshold === undefined || threshold < 0n) throw invalid('auto_reload_threshold', 'must be a non-negative decimal with at most 6 decimal places');
    if (!Number.isSafeInteger(settings.amountMinor) || settings.amountMinor < 0) throw invalid('auto_reload_amount', 'must be a non-negative integer of cents');
    if (!isUuid(accountId)) throw new AppError('not_found', 'Workspace not found');
    await store.ensureBalance(trx, accountId);
    if (!(await store.lockBalance(trx, accountId))) throw new AppError('not_found', 'Workspace not found');
    return record(await store.updateAutoReload(trx, accountId, { enabled: settings.enabled, threshold: toColumn(threshold), amountMinor: settings.amountMinor }));
  }

  /** GET /api/credits. */
  async read(actor: Actor, input: { accountId?: string }): Promise<CreditsRecord> {
    return this.balance(await this.accountFor(actor, input.accountId));
  }

  /** GET /api/credits/ledger: the workspace's postings, newest first, in pages. */
  async history(
    actor: Actor,
    input: { accountId?: string; limit?: number; before?: string; reason?: CreditReason },
  ): Promise<{ entries: LedgerEntry[]; next_before: string | null }> {
    const accountId = await this.accountFor(actor, input.accountId);
    const limit = input.limit ?? 50;
    const db = this.ctx.db.kysely;
    if (input.before !== undefined && !(await isCursorOf(db, { table: 'credit_ledger', scopeColumn: 'account_id', scopeId: accountId, id: input.before }))) {
      throw new AppError('validation_failed', 'before must be the id of a ledger entry of this workspace (a next_before value)', [
        { field: 'before', message: 'is not a ledger entry of this workspace' },
      ]);
    }
    // One row more than asked tells whether another page exists without a count.
    const rows = await store.listEntries(db, accountId, { limit: limit + 1, before: input.before, reason: input.reason });
    const page = rows.slice(0, limit);
    return { entries: page.map(entry), next_before: rows.length > limit ? page[page.length - 1]!.id : null };
  }

  /**
   * The workspace a credits request is about. An API key means its own
   * workspace (another accountId is 404). A user names one with accountId,
   * or may leave it out when they belong to exactly one workspace; with
   * several (or none) it is a 400 naming accountId, since guessing would show
   * the wrong workspace's balance. Not a member: 404, never the data.
   */
  private async accountFor(actor: Actor, accountId: string | undefined): Promise<string> {
    const accounts = accountsService(this.ctx);
    if (actor.kind === 'user' && accountId === undefined) {
      const mine = await accounts.listForUser(actor.userId);
      if (mine.length === 1) return mine[0]!.id;
      throw new AppError(
        'validation_failed',
        mine.length === 0 ? 'accountId is required: you are not a member of any workspace' : 'accountId is required when you belong to more than one workspace',
        [{ field: 'accountId', message: 'is required' }],
      );
    }
    const { account } = await accounts.access(actor, { accountId });
    return account.id;
  }
}

export const creditsService = perContext((ctx) => new CreditsService(ctx));
